"""How a trajectory file is read: fast, exact, or whole-file. The one place that decides.

A file (JSON Lines, Parquet, a directory of shards) is read in chunks of whole trajectories
(`chunks.py`). Each chunk goes the first way that takes it:

1. fast: columnar, no Python object per record. A JSON Lines chunk of a megabyte or more goes
   through pyarrow's JSON reader (`jsonl_arrow.py`), else (or when it refuses) orjson + numpy
   (`jsonl_fast.py`); a Parquet batch through its Arrow columns (`arrow_columns.py`). Both end in
   the one value check, `columnar.validated_arrays`. The fast path takes only what the exact path
   reads to the same arrays; anything else (a non-numeric forecast, NaN literals, a float
   horizon, a value out of range, ...) it refuses with `NotFast(reason)`, and the next way is tried.
2. exact: that chunk alone, record by record (pydantic, `jsonl.parse_lines`): the same arrays, or
   an error. A Parquet batch's errors name the row (from 1 in the file) and field.
3. whole-file: the file is read the exact, whole-file way (`jsonl.read_trajectories`), so every
   error message is the one it gives, with its line numbers, and what it sets aside (a repeated id,
   an orphan resolution) is counted there (`set_aside.py`). A JSON Lines chunk goes there when its
   exact read finds an error; a file goes there for resolution lines the chunked path does not
   handle (`resolutions.py`), duplicate ids across chunks, no trajectories, a record beyond the
   size bound (convert), or a file that cannot be read. The raise is
   `NotFast(reason, whole_file=True)`, and the caller's `fast_else_whole_file` runs its exact read.

`NotFast` is the one "not on the fast path" exception of the readers: `reason` says why (for
debugging; never shown as an error), `whole_file` how far back to fall. The cascade is written
once, `first_that_reads`; readers raise, only the functions here (and `fast_else_whole_file`'s
callers) decide what happens next.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from tps_tracer.records.arrays import TrajectoryArrays
    from tps_tracer.records.set_aside import ReadRecords, SetAside

# The readers below are imported where used: they import `NotFast` from here.

T = TypeVar("T")


class NotFast(Exception):
    """Not on the fast path. `whole_file` False: this chunk goes the next way of the cascade (the
    exact per-record read of the chunk); True: the whole file goes the exact whole-file way."""

    def __init__(self, reason: str, *, whole_file: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.whole_file = whole_file


def whole_file(reason: str) -> NotFast:
    """`NotFast` for the whole file (see the module docstring)."""
    return NotFast(reason, whole_file=True)


def first_that_reads(*ways: Callable[[], T]) -> T:
    """The result of the first way that takes the chunk: each way but the last may refuse it with
    `NotFast` (then the next is tried); a whole-file `NotFast` is passed on to the caller."""
    for way in ways[:-1]:
        try:
            return way()
        except NotFast as exc:
            if exc.whole_file:
                raise
    return ways[-1]()


def fast_else_whole_file(fast: Callable[[], T], whole: Callable[[], T]) -> T:
    """`fast()`, or `whole()` (the exact whole-file read) when it raises `NotFast`."""
    try:
        return fast()
    except NotFast:
        pass  # `whole` runs outside the handler: the fast path's frames (and chunks) are freed first
    return whole()


@dataclass
class YieldedPart:
    """What a shard's chunks gave before it fell back to its whole-file read: the ids, outcomes and
    q_z in order (what resolutions change; a few bytes a trajectory), and the bytes read."""

    ids: list[str] = field(default_factory=list)
    outcome: list[Any] = field(default_factory=list)
    q_z: list[Any] = field(default_factory=list)
    end: int = 0

    def add(self, arrays: TrajectoryArrays, end: int) -> None:
        self.ids.extend(arrays.ids)
        self.outcome.append(arrays.outcome)
        self.q_z.append(arrays.q_z)
        self.end = end


def exact_records(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> ReadRecords:
    """The whole-file read of one input, the exact way for its format: JSON Lines through
    `jsonl.read_trajectories`, a Parquet file through `parquet.parquet_file_records` (errors name
    the row, a repeated id is set aside), a directory (or a list of files) through
    `shards.read_shards` (resolution lines apply across its shards). Parquet used to be handed to
    the JSON Lines reader here, so an empty Parquet file (which the fast path sends to this read)
    failed as "not UTF-8 text"."""
    from tps_tracer.records.chunks import is_parquet, source_files
    from tps_tracer.records.errors import RecordError, TrajectoryFileError

    if not isinstance(path, str | os.PathLike) or Path(path).is_dir():
        from tps_tracer.records.shards import input_name, read_shards

        return read_shards(source_files(path), input_name(path))
    if not is_parquet(path):
        from tps_tracer.records.jsonl import read_trajectories

        return read_trajectories(path)
    from tps_tracer.records.parquet import parquet_file_records

    records = parquet_file_records(path)
    if not records:
        raise TrajectoryFileError(str(path), [RecordError(0, "", "the file holds no trajectories")])
    return records


def shard_rest(path: Path, done: YieldedPart) -> tuple[TrajectoryArrays, SetAside, int]:
    """(arrays, set aside, byte offset) of a shard among many that fell back to its whole-file read
    after its first chunks were given: the exact read's trajectories not given yet, and what it set
    aside. The exact read's first trajectories must be the ones given (same ids in order, same
    outcomes and q_z: a whole-file read keeps the first of a repeated id); else every trajectory is
    given again, and the caller's duplicate-id check names them (as for repeats across chunks)."""
    from tps_tracer.records.arrays import to_arrays
    from tps_tracer.records.jsonl import read_trajectories

    records = read_trajectories(path)  # raises the error a shard read alone gives
    n = len(done.ids)
    if n:
        head = to_arrays(records[:n])
        if head.ids == done.ids and all(
            np.array_equal(got, np.concatenate(given), equal_nan=True)
            for got, given in ((head.outcome, done.outcome), (head.q_z, done.q_z))
        ):
            return to_arrays(records[n:]), records.set_aside, done.end
    return to_arrays(records), records.set_aside, 0


def read_jsonl_chunk(chunk: bytes, source: str, resolutions_scanned: bool = False) -> tuple[TrajectoryArrays, bool]:
    """(arrays, read by the fast path) of a chunk of whole JSON Lines (no BOM), or NotFast(whole_file).

    `resolutions_scanned`: its resolution lines were taken out (a remaining mention of "resolves" is
    a trajectory's text, and an escaped key is caught by the readers)."""
    import io

    from tps_tracer.records import jsonl_arrow
    from tps_tracer.records.arrays import to_arrays
    from tps_tracer.records.columnar import validated_arrays
    from tps_tracer.records.errors import TrajectoryFileError
    from tps_tracer.records.jsonl_fast import arrays_from_jsonl

    if not resolutions_scanned and b'"resolves"' in chunk:
        raise whole_file("resolution lines")

    def arrow() -> tuple[TrajectoryArrays, bool]:
        return validated_arrays(jsonl_arrow.raw_from_jsonl_arrow(chunk)), True

    def exact() -> tuple[TrajectoryArrays, bool]:
        from tps_tracer.records.jsonl import parse_lines  # pydantic (~0.3 s): only the exact path

        try:
            text = io.TextIOWrapper(io.BytesIO(chunk), encoding="utf-8")
            # strict: a repeated id or an orphan resolution needs the whole-file read, which sets it
            # aside and counts it (records/set_aside.py)
            return to_arrays(parse_lines(text, source, strict=True)), False
        except (TrajectoryFileError, UnicodeDecodeError):
            raise whole_file(source) from None

    def orjson() -> tuple[TrajectoryArrays, bool]:
        return arrays_from_jsonl(chunk), True

    # pyarrow's parser first for a chunk of a megabyte or more (below it orjson is faster: jsonl_arrow.py)
    fast = [arrow, orjson] if len(chunk) >= jsonl_arrow.MIN_BYTES else [orjson]
    return first_that_reads(*fast, exact)


def read_arrow_batch(
    batch: Any, source: str, first_row: int, whole: Callable[[], Any] | None = None
) -> tuple[TrajectoryArrays, bool]:
    """(arrays, read by the fast path) of an Arrow batch in the Parquet schema, or TrajectoryFileError
    naming the row (from 1 in the file) and field. `whole()`: the batch with every column, for the
    exact read when the fast one refuses a batch of projected columns (parquet_columns.py)."""
    from tps_tracer.records.columnar import arrays_from_arrow

    return first_that_reads(
        lambda: (arrays_from_arrow(batch, from_json=False), True),
        lambda: (_exact_arrow_batch(whole() if whole is not None else batch, source, first_row), False),
    )


def _row_json(row: dict[str, Any]) -> str:
    import json

    meta = row.get("metadata")
    if isinstance(meta, str):
        try:
            row["metadata"] = json.loads(meta)
        except ValueError:
            pass  # left as text: the schema check names it
    if row.get("outcome_pending") is None:
        row.pop("outcome_pending", None)
    return json.dumps(row, default=str)


def _exact_arrow_batch(batch: Any, source: str, first_row: int) -> TrajectoryArrays:
    """The exact per-record path for one batch; errors name the row in the file (from 1)."""
    from tps_tracer.records.arrays import to_arrays
    from tps_tracer.records.jsonl import RecordError, TrajectoryFileError, parse_lines

    lines = (_row_json(r) for r in batch.to_pylist())
    try:
        return to_arrays(parse_lines(lines, source, strict=True))
    except TrajectoryFileError as exc:
        errors = [RecordError(e.line + first_row if e.line else 0, e.field, e.message) for e in exc.errors]
        raise TrajectoryFileError(f"{source} (Parquet: 'line' is the row, from 1)", errors) from None
