"""The durable record of an online run: JSON Lines, append-only, one unbuffered write per line, a path
watched as WatchedFileHandler does; the accumulator writes through a `RecordWriter` (docs/capture.md)."""

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
        self.lock = threading.Lock()  # a RecordWriter over this sink holds it too: one lock a line
        self._file: BinaryIO | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file open now
        self._next_try = 0.0
        self._closed = False
        self.written = 0  # lines that reached the file
        self.failed = 0  # lines that did not (the path could not be opened, the disk was full, ...)
        self.reopened = 0  # times the path was opened again after a rename or deletion
        self.line_ends_added = 0  # times the file's last line lacked its line end on opening (one was added)
        self.open_error: str | None = None  # why the path could not be opened last time, if it could not
        with self.lock:
            self._open()

    def _open_file(self) -> BinaryIO:
        """The path opened for appending, unbuffered (tests wrap it to inject faults)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return self.path.open("ab", buffering=0)

    def _open(self) -> bool:
        """Under the lock: open the path; False (logged once per failure streak) if it cannot be. A path
        that cannot be opened never raises: each line fails until a retry (`retry_interval`) opens it."""
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
        if st.st_size:  # a last line without its line end (an editor, a killed writer) is ended first,
            try:  # so the next record is not glued onto it and both lost; read with a second handle
                with self.path.open("rb") as r:
                    r.seek(-1, os.SEEK_END)
                    ended = r.read(1) == b"\n"
            except OSError:
                ended = True  # unreadable (write-only permissions): nothing to check, nothing changed
            if not ended:
                try:
                    self._write_all(fh, b"\n")
                    self.line_ends_added += 1
                    logger.warning(
                        "tps_tracer sink: the last line of %s had no line end; one was added "
                        "(new records start on their own line)",
                        self.path,
                    )
                except OSError as exc:
                    logger.warning("tps_tracer sink: could not end the last line of %s (%s)", self.path, exc)
        return True

    def _ready(self) -> BinaryIO:
        """Under the lock: the open file, reopened if its path now names another file or none (rotation)."""
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
        """Write the whole line, or none of it: a partial line (disk full) is cut off again."""
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

    def write(self, obj: dict[str, Any]) -> None:
        """Append one JSON object as a line; raises on I/O errors (the caller counts them)."""
        with self.lock:
            self.write_held(obj)

    def write_held(self, obj: dict[str, Any]) -> None:
        """`write` for a caller that holds `lock`."""
        # ensure_ascii (the default): every id that passes `id_problem` reads back as written.
        data = (json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n").encode("ascii")
        try:
            self._write_all(self._ready(), data)
        except BaseException:
            self.failed += 1
            raise
        self.written += 1

    def resolve(self, trajectory_id: str, outcome: Any = None, q_z: float | None = None) -> None:
        """Append a resolution line for a run written earlier, by this or another process (a grading
        job): `outcome` (1/0, True/False, "true"/"false") and/or `q_z`. Invalid values raise."""
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
        with self.lock:
            self._closed = True
            self._close_file()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MAX_UNWRITTEN = 100_000  # ids of records that failed to write, remembered so no resolution line follows them


class RecordWriter:
    """The accumulator's lines: a failed write is counted (the score stays in memory), and no
    resolution line follows a record that did not reach the file (it would make the file
    unreadable). `lock` is held from a stop's decision until its record is written; over a
    JsonlSink it is the sink's own lock, so a line takes one lock."""

    def __init__(self, sink: Any, health: HealthLedger):
        self.sink = sink
        self.health = health
        self._unwritten: OrderedDict[str, None] = OrderedDict()
        self.after_fork(fork=False)

    def after_fork(self, fork: bool = True) -> None:
        """Fresh locks (in a forked child a parent thread may have held one; lines are unbuffered)."""
        sink = self.sink
        if fork and isinstance(sink, JsonlSink):
            sink.lock = threading.Lock()
        own = isinstance(sink, JsonlSink) and type(sink).write is JsonlSink.write
        self.lock = sink.lock if own else threading.Lock()
        self._write: Callable[[dict[str, Any]], None] | None = sink.write_held if own else None

    def write(self, obj: dict[str, Any]) -> bool:
        """The caller holds `lock`."""
        if self.sink is None:
            return False
        try:
            (self._write or self.sink.write)(obj)
            return True
        except Exception as exc:
            self.health.count("error", "sink", f"could not write to {getattr(self.sink, 'path', 'the sink')}: {exc}")
            return False

    def write_record(self, tid: str, record: dict[str, Any]) -> None:
        """The caller holds `lock`."""
        if not self.write(record):
            self._unwritten[tid] = None
            while len(self._unwritten) > MAX_UNWRITTEN:  # beyond it, a late resolution may be an orphan line
                self._unwritten.popitem(last=False)

    def write_resolution(self, tid: str, fields: dict[str, Any]) -> None:
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
        except Exception as exc:  # counted, never raised into the caller
            self.health.count("error", "sink", f"could not close {getattr(self.sink, 'path', 'the sink')}: {exc}")

    def counts(self) -> dict[str, Any] | None:
        """The snapshot's sink section."""
        sink = self.sink
        if sink is None:
            return None
        out: dict[str, Any] = {"path": str(sink.path), "lines_written": sink.written}
        for key, attr in (("lines_failed", "failed"), ("reopened", "reopened")):
            if hasattr(sink, attr):
                out[key] = getattr(sink, attr)
        return out
