"""The accumulator's heavy work (scoring a batch, folding settled rows) on one daemon thread of its own,
so the thread calling stop() or resolve() never does it; backpressure blocks, never loses work."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

DEFAULT_MAX_PENDING_JOBS = 64  # jobs of one batch (64 trajectories) each: ~4k trajectories waiting at most
DEFAULT_LINGER = 1.0
DEFAULT_STALL_TIMEOUT = 30.0  # seconds a full queue may make no progress before the caller does the job


class BackgroundWork:
    """Jobs run in order on a thread started on demand and ended after `linger` idle seconds; a job
    runs on the caller only when waiting could be forever (see submit)."""

    def __init__(
        self,
        name: str,
        max_pending: int = DEFAULT_MAX_PENDING_JOBS,
        linger: float = DEFAULT_LINGER,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ):
        self.name = name
        self.max_pending = max(1, max_pending)
        self.linger = linger
        self.stall_timeout = stall_timeout
        self._jobs: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        lock = threading.Lock()
        self._cv = threading.Condition(lock)  # jobs queued, or all done
        self._room = threading.Condition(lock)  # the queue is down to half
        self._unfinished = 0
        self._thread: threading.Thread | None = None
        self._done = 0  # jobs run to the end (progress, for the stall test)
        self.waits = 0  # submits that blocked because max_pending jobs were waiting (backpressure)
        self.inline_runs = 0  # jobs run where submitted: from the thread itself, or after a stall
        self.failures = 0  # jobs that raised past their own guard

    def submit(self, job: Callable[..., Any], *args: Any) -> bool:
        """Queue job(*args), first waiting (blocked, no CPU) while `max_pending` jobs wait. False when the
        caller must run it: called from the thread itself, or no progress for `stall_timeout` seconds."""
        with self._cv:
            if self._unfinished >= self.max_pending:
                if self.on_worker_thread():
                    self.inline_runs += 1
                    return False
                self.waits += 1
                # Wait down to half full, woken once: each wake costs the waiting thread CPU.
                low = self.max_pending // 2
                while self._unfinished > low:
                    done = self._done
                    self._room.wait(self.stall_timeout)
                    if self._done == done and self._unfinished > low:
                        if self._unfinished < self.max_pending:
                            break  # a place is free after all: queue it
                        self.inline_runs += 1  # stuck: waiting longer could be waiting forever
                        return False
            self._jobs.append((job, args))
            self._unfinished += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            else:
                self._cv.notify_all()  # all: a wait_idle waiter must not take the thread's wake
        return True

    def on_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every job has run (True) or `timeout` passed; on the thread itself, at once."""
        if self.on_worker_thread():
            return self._unfinished == 0
        with self._cv:
            return self._cv.wait_for(lambda: self._unfinished == 0, timeout)

    def run_queued_here(self) -> int:
        """Run every job not started yet on the calling thread (a flush does its work itself)."""
        ran = 0
        while True:
            with self._cv:
                if not self._jobs:
                    return ran
                job, args = self._jobs.popleft()
            self._run_one(job, args)
            ran += 1

    def _run_one(self, job: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Run a job; one that raises past its own guard is counted, and the thread goes on. Waiters
        are woken only when what they wait for is true."""
        try:
            job(*args)
        except BaseException:
            with self._cv:
                self.failures += 1
        finally:
            with self._cv:
                self._unfinished -= 1
                self._done += 1
                if self._unfinished == self.max_pending // 2:
                    self._room.notify_all()
                if self._unfinished == 0:
                    self._cv.notify_all()

    @property
    def unfinished(self) -> int:
        return self._unfinished

    def _run(self) -> None:
        while True:
            with self._cv:
                if not self._jobs:
                    self._cv.wait_for(lambda: bool(self._jobs), self.linger)
                if not self._jobs:  # idle for `linger` seconds: end; the next submit starts a thread
                    self._thread = None
                    return
                job, args = self._jobs.popleft()
            self._run_one(job, args)
