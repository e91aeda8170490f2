"""The durable record of an online run: interchange JSON Lines, append-only, flushed per line.

A trajectory is written once, when it stops. A clean stop whose outcome has not arrived
yet is written with `"outcome_pending": true`; the outcome (or a q_Z) that arrives later is
appended as a resolution line `{"resolves": id, "outcome": 1}`. `tps-tracer report` on the
file applies the resolutions, so it reproduces the accumulator's numbers.

A grade that arrives in another process (a grading job run later, a restarted service) is
appended the same way with `JsonlSink(path).resolve(trajectory_id, outcome=..., q_z=...)`: an
`Accumulator` only resolves the runs it holds in memory.

Lines are flushed to the operating system after every write (not fsync'ed: that would put
a disk round trip on the agent's path). Writes are serialised by a lock, so lines from
many threads never interleave.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from tps_tracer.records.outcome import as_outcome


class JsonlSink:
    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self.written = 0

    def write(self, obj: dict[str, Any]) -> None:
        """Append one JSON object as a line; raises on I/O errors (the caller counts them)."""
        line = json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
            self.written += 1

    def resolve(self, trajectory_id: str, outcome: Any = None, q_z: float | None = None) -> None:
        """Append a resolution line for a trajectory written earlier (by this or another process).

        `outcome` follows the one outcome rule (1/0, True/False, "true"/"false", ...), `q_z` is a
        probability; at least one is needed. Raises ValueError on invalid values (this is a
        grader's call, not the agent's path); an id the file lacks is reported by `tps-tracer
        report` on the file, with the line number.
        """
        if not isinstance(trajectory_id, str) or not trajectory_id:
            raise ValueError(f"trajectory_id must be a non-empty str, got {trajectory_id!r}")
        y = as_outcome(outcome)  # InvalidOutcome is a ValueError naming the value
        if q_z is not None and not (isinstance(q_z, (int, float)) and not isinstance(q_z, bool) and 0.0 <= q_z <= 1.0):
            raise ValueError(f"q_z must be a number in [0, 1], got {q_z!r}")
        if y is None and q_z is None:
            raise ValueError("a resolution needs an outcome or a q_z")
        obj: dict[str, Any] = {"resolves": trajectory_id}
        if y is not None:
            obj["outcome"] = y
        if q_z is not None:
            obj["q_z"] = float(q_z)
        self.write(obj)

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
