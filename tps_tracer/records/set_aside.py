"""Lines a JSON Lines reader reads but does not score: counted by kind, the first of each kind named.

An append-only sink can hold two kinds of lines that are not errors in the data a user cares
about, and must not make every command refuse the records around them:

- `duplicate_id`: a trajectory record whose id an earlier line of the file already holds: a
  script re-run into the same sink (the sink appends, see `online/jsonl_sink.py`). The first
  record of each id is kept; later ones are set aside.
- `duplicate_resolution`: a resolution line that belongs to such a set-aside record. A
  resolution belongs to the nearest record of its id above it (the first record when none is
  above it), so a re-run's grades go with the re-run's records and never conflict with the
  first run's.
- `orphan_resolution`: a resolution line for an id no record in the file has (its record was
  lost, e.g. the disk was full when it was due, or a grader named a wrong id). In a directory
  of shards, "the file" is every shard (records/shards.py).
- `empty_shard`: a shard of a directory holding nothing (an empty file, a 0-row Parquet file):
  not lines, but counted here so it is named, never skipped silently (a single empty file, or a
  directory where no shard holds a trajectory, is an error).

The lenient read (the default) counts them here and scores the rest; `strict=True` refuses the
file with each one as a line error, as before. `as_dict()` is what `report --json` shows under
"input"; `log_once` names the first of each kind on the `tps_tracer` logger (stderr in the CLI).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic (~0.3 s of import) only where records are built
    from tps_tracer.records.schema import TrajectoryRecord

logger = logging.getLogger("tps_tracer")

KINDS = ("duplicate_id", "duplicate_resolution", "orphan_resolution", "empty_shard")
_WHAT = {
    "duplicate_id": "record(s) repeating an id of an earlier line (a re-run appended to the file?); first kept",
    "duplicate_resolution": "resolution line(s) of those repeated records",
    "orphan_resolution": "resolution line(s) for an id no record in the file has (its record was never written?)",
    "empty_shard": "shard(s) of the input holding no records (an empty file)",
}


@dataclass
class SetAside:
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)  # kind -> "source line N: ..." of its first line

    def add(self, kind: str, where: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first.setdefault(kind, where)

    def merge(self, other: SetAside | None) -> None:
        if other is None:
            return
        for kind, n in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
            self.first.setdefault(kind, other.first[kind])

    def __bool__(self) -> bool:
        return bool(self.counts)

    def as_dict(self) -> dict[str, Any]:
        return {kind: {"count": self.counts[kind], "first": self.first[kind]} for kind in KINDS if kind in self.counts}

    def lines(self) -> list[str]:
        """One line per kind: the count, what it means, and the first one (for text output)."""
        return [f"{self.counts[k]} {_WHAT[k]}; first: {self.first[k]}" for k in KINDS if k in self.counts]

    def log_once(self, source: str) -> None:
        for line in self.lines():
            logger.warning("%s: set aside (not scored): %s", source, line)


class ReadRecords(list["TrajectoryRecord"]):
    """The records a reader returns (a plain list of `TrajectoryRecord`), with `set_aside`: the lines
    it read but did not score (see the module docstring)."""

    set_aside: SetAside

    def __init__(self, records: Any = (), set_aside: SetAside | None = None):
        super().__init__(records)
        self.set_aside = set_aside if set_aside is not None else SetAside()
