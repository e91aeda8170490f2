"""The durable record of an online run: interchange JSON Lines, append-only, one write per line.

A trajectory is written once, when it stops. A clean stop whose outcome has not arrived
yet is written with `"outcome_pending": true`; the outcome (or a q_Z) that arrives later is
appended as a resolution line `{"resolves": id, "outcome": 1}`. `tps-tracer report` on the
file applies the resolutions, so it reproduces the accumulator's numbers.

A grade that arrives in another process (a grading job run later, a restarted service) is
appended the same way with `JsonlSink(path).resolve(trajectory_id, outcome=..., q_z=...)`: an
`Accumulator` only resolves the runs it holds in memory.

What reaches the file is what the readers read back:

- Each line goes out in one unbuffered write (not fsync'ed: that would put a disk round trip on
  the agent's path). A write that fails part-way (disk full) has its partial line cut off
  again, so the next line starts clean; the failed line raises `OSError` (the accumulator counts
  it). `written` counts the lines that reached the file, `failed` the ones that did not.
- The path is watched as `logging.handlers.WatchedFileHandler` does it: before each line the
  path is stat'ed, and when the file was renamed or deleted (log rotation without
  copytruncate) the path is opened afresh, so no line goes to an unlinked file (`reopened`).
- A path that cannot be opened (a read-only directory, a missing mount) never raises at
  construction: the failure is logged once, each line meanwhile raises `OSError` (counted by
  the accumulator), and opening is retried at most every `retry_interval` seconds.
- A file whose last line lacks its line end (hand-written, or cut by a killed writer) gets one
  before the first new line, logged and counted (`line_ends_added`), so a new record never
  lands on that line and makes both unreadable.
- Re-runs append. A script run again into the same sink adds its records after the first
  run's; the readers keep the first record of an id and set the later ones aside, counted
  (records/limits.py), so the file stays readable. Use one file per run (or per-run ids)
  to score every run.

Writes are serialised by a lock, so lines from many threads never interleave.

The accumulator writes through a `RecordWriter` over its sink (a JsonlSink or any object with
write/close): a failed write is counted (the score stays in memory, the durable line is reported
lost), and no resolution line is ever written for a record that did not reach the file (a line
resolving an id the file lacks makes the whole file unreadable). Its `lock` is held from the
moment a stop decides its record until the record is written, so a resolve that sees the record
as written waits for that write.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from tps_tracer.errors import InputError
from tps_tracer.health import HealthLedger
from tps_tracer.records.record_shape import as_outcome, id_problem
from tps_tracer.validity import probability

logger = logging.getLogger("tps_tracer")

DEFAULT_RETRY_INTERVAL = 1.0  # seconds between attempts to open a path that could not be opened


class JsonlSink:
    def __init__(
        self,
        path: str | os.PathLike[str],
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.path = Path(path)
        self.retry_interval = retry_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._file: BinaryIO | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file open now
        self._next_try = 0.0
        self._closed = False
        self.written = 0  # lines that reached the file
        self.failed = 0  # lines that did not (the path could not be opened, the disk was full, ...)
        self.reopened = 0  # times the path was opened again after a rename or deletion
        self.line_ends_added = 0  # times the file's last line lacked its line end on opening (one was added)
        self.open_error: str | None = None  # why the path could not be opened last time, if it could not
        with self._lock:
            self._open()

    def _after_fork_in_child(self) -> None:
        """A forked child's copy: a fresh lock (a parent thread may have held it at the fork). The
        file is shared and every line one unbuffered write, so nothing of the parent's is pending."""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the file

    def _open_file(self) -> BinaryIO:
        """The path opened for appending, unbuffered (a subclass may wrap it, e.g. to inject faults)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return self.path.open("ab", buffering=0)

    def _open(self) -> bool:
        """Under the lock: open the path; False (logged once per failure streak) if it cannot be."""
        try:
            fh = self._open_file()
            st = os.fstat(fh.fileno())
        except OSError as exc:
            if self.open_error is None:
                logger.warning(
                    "tps_tracer sink: cannot open %s (%s); lines fail until it can be opened", self.path, exc
                )
            self.open_error = f"cannot open {self.path}: {exc.strerror or exc}"
            self._next_try = self._clock() + self.retry_interval
            return False
        if self.open_error is not None:
            logger.warning("tps_tracer sink: %s is open now", self.path)
        self._file, self._identity, self.open_error = fh, (st.st_dev, st.st_ino), None
        if st.st_size and not self._ends_with_newline():
            self._end_last_line(fh)
        return True

    def _ends_with_newline(self) -> bool:
        """Whether the file's last byte is a line end (the appending handle cannot read: a second one does)."""
        try:
            with self.path.open("rb") as r:
                r.seek(-1, os.SEEK_END)
                return r.read(1) == b"\n"
        except OSError:
            return True  # unreadable (write-only permissions): nothing to check, nothing changed

    def _end_last_line(self, fh: BinaryIO) -> None:
        """A file whose last line has no line end (written by `"\\n".join`, an editor, a killed writer)
        would get the next record glued onto that line, and both lines would become one invalid line:
        end it first. A complete record stays readable; a cut one stays the one invalid line the
        readers name, instead of taking the new record with it."""
        try:
            self._write_all(fh, b"\n")
        except OSError as exc:
            logger.warning("tps_tracer sink: could not end the last line of %s (%s)", self.path, exc)
            return
        self.line_ends_added += 1
        logger.warning(
            "tps_tracer sink: the last line of %s had no line end; one was added (new records start on their own line)",
            self.path,
        )

    def _ready(self) -> BinaryIO:
        """Under the lock: the open file, reopened if its path now names another file or none."""
        if self._closed:
            raise InputError(f"the sink {self.path} is closed")
        if self._file is not None:
            try:
                st = os.stat(self.path)
                moved = (st.st_dev, st.st_ino) != self._identity
            except FileNotFoundError:
                moved = True
            if not moved:
                return self._file
            self._close_file()
            self.reopened += 1
        elif self._clock() < self._next_try:
            raise OSError(errno.EAGAIN, f"{self.open_error} (retrying)")
        if not self._open():
            raise OSError(errno.EIO, str(self.open_error))
        assert self._file is not None
        return self._file

    def _close_file(self) -> None:
        fh, self._file, self._identity = self._file, None, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass  # unbuffered: nothing is lost by a failed close

    def _write_all(self, fh: BinaryIO, data: bytes) -> None:
        """Write the whole line, or none of it: a partial line is cut off again."""
        done = 0
        try:
            while done < len(data):
                n = fh.write(data[done:])
                if not n:
                    raise OSError(errno.EIO, "the file accepted no bytes")
                done += n
        except OSError:
            if done:
                try:  # single-writer append: the last `done` bytes of the file are this line's
                    fd = fh.fileno()
                    os.ftruncate(fd, os.fstat(fd).st_size - done)
                except OSError as exc:
                    logger.warning("tps_tracer sink: could not cut a partial line from %s (%s)", self.path, exc)
            raise

    # ------------------------------------------------------------------ lines

    def write(self, obj: dict[str, Any]) -> None:
        """Append one JSON object as a line; raises on I/O errors (the caller counts them)."""
        # ensure_ascii (the default): every id that passes `id_problem` reads back as written.
        data = (json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n").encode("ascii")
        with self._lock:
            try:
                self._write_all(self._ready(), data)
            except BaseException:
                self.failed += 1
                raise
            self.written += 1

    def resolve(self, trajectory_id: str, outcome: Any = None, q_z: float | None = None) -> None:
        """Append a resolution line for a trajectory written earlier (by this or another process).

        `outcome` follows the one outcome rule (1/0, True/False, "true"/"false", ...), `q_z` is a
        probability; at least one is needed. Raises ValueError on invalid values (this is a
        grader's call, not the agent's path); an id the file lacks is set aside and counted by
        the readers (records/limits.py).
        """
        problem = id_problem(trajectory_id)
        if problem is not None:
            raise InputError(problem)
        y = as_outcome(outcome)  # InvalidOutcome is a ValueError naming the value
        if q_z is not None and probability(q_z) is None:
            raise InputError(f"q_z must be a number in [0, 1], got {q_z!r}")
        if y is None and q_z is None:
            raise InputError("a resolution needs an outcome or a q_z")
        obj: dict[str, Any] = {"resolves": trajectory_id}
        if y is not None:
            obj["outcome"] = y
        if q_z is not None:
            obj["q_z"] = float(q_z)
        self.write(obj)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_file()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
