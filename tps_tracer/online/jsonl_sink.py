"""The durable record of an online run: interchange JSON Lines, append-only, flushed per line.

A trajectory is written once, when it stops. A clean stop whose outcome has not arrived
yet is written with `"outcome_pending": true`; the outcome (or a q_Z) that arrives later is
appended as a resolution line `{"resolves": id, "outcome": 1}`. `tps-tracer report` on the
file applies the resolutions, so it reproduces the accumulator's numbers.

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

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
