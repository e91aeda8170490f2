"""The accumulator's sink: a stopped trajectory's record, then the resolution lines that follow it.

The record's shape is the records module's one builder (records/record_shape.py); here is only
what writing adds: a failed write is counted (the score stays in memory, the durable line is
reported lost), and no resolution line is ever written for a record that did not reach the file
(a line resolving an id the file lacks is what made whole files unreadable, issue 29).

`lock` is held from the moment a stop decides its record until the record is written, so a
resolve that sees the record as written waits for that write (Accumulator._close takes it under
the accumulator's lock, then writes outside it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from tps_tracer.health import HealthLedger

MAX_UNWRITTEN = 100_000  # ids of records that failed to write, remembered so no resolution line follows them


class RecordWriter:
    def __init__(self, sink: Any, health: HealthLedger):
        self.sink = sink
        self.health = health
        self.lock = threading.Lock()  # a record's write and the resolutions that depend on it
        self._unwritten: OrderedDict[str, None] = OrderedDict()  # ids whose record failed to write (bounded)

    def write(self, obj: dict[str, Any]) -> bool:
        """Write one line; False (counted, logged once) when it did not reach the sink."""
        if self.sink is None:
            return False
        try:
            self.sink.write(obj)
            return True
        except Exception as exc:  # the score is still in memory; the loss of the durable line is reported
            self.health.count("error", "sink", f"could not write to {getattr(self.sink, 'path', 'the sink')}: {exc}")
            return False

    def write_record(self, tid: str, record: dict[str, Any]) -> None:
        """Write a stopped trajectory's record (the caller holds `lock`)."""
        if not self.write(record):
            self._unwritten[tid] = None
            while len(self._unwritten) > MAX_UNWRITTEN:  # beyond it, a late resolution may be an orphan line
                self._unwritten.popitem(last=False)

    def write_resolution(self, tid: str, fields: dict[str, Any]) -> None:
        """Append a resolution line, unless the record it resolves never reached the file. The value
        is still applied in memory; the line not written is counted."""
        with self.lock:
            if tid in self._unwritten:
                self.health.count(
                    "error",
                    "sink_resolution_of_lost_record",
                    f"{tid!r}: resolution not written to the sink: the record it resolves was not written",
                )
                return
            self.write({"resolves": tid, **fields})

    def close(self) -> None:
        if self.sink is None:
            return
        try:
            self.sink.close()
        except Exception as exc:  # a full disk or a size limit: counted, never raised into the caller
            self.health.count("error", "sink", f"could not close {getattr(self.sink, 'path', 'the sink')}: {exc}")

    def counts(self) -> dict[str, Any] | None:
        """The snapshot's sink section: lines that reached the file, and (a JsonlSink's) the lines that did not."""
        sink = self.sink
        if sink is None:
            return None
        out: dict[str, Any] = {"path": str(sink.path), "lines_written": sink.written}
        for key, attr in (("lines_failed", "failed"), ("reopened", "reopened")):
            if hasattr(sink, attr):
                out[key] = getattr(sink, attr)
        return out
