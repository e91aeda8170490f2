"""The accumulator's heavy work (scoring a batch, folding settled rows) off the caller's thread.

`BackgroundWork` runs jobs in order on one daemon thread of its own, started on demand and
ended after `linger` idle seconds (an idle accumulator holds no thread), so the thread calling
`stop()` or `resolve()` never does the work. Backpressure, never loss: when `max_pending` jobs
are waiting, `submit` blocks on a condition (no CPU) until the thread has worked the queue down
to half (counted in `waits`). A job runs where `submit` was called only when waiting could be
forever: a submit from the background thread itself (a listener calling stop), or a wait of
`stall_timeout` seconds in which the thread finished nothing (counted in `inline_runs`). A flush
runs the jobs not started yet on its own thread (`run_queued_here`); `wait_idle` (close) waits
for every job. A job that raises past its own guard is counted here, and the thread goes on.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

DEFAULT_MAX_PENDING_JOBS = 64  # jobs of one batch (64 trajectories) each: ~4k trajectories waiting at most
DEFAULT_LINGER = 1.0
DEFAULT_STALL_TIMEOUT = 30.0  # seconds a full queue may make no progress before the caller does the job


class BackgroundWork:
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
        self._cv = threading.Condition(lock)  # jobs queued (the thread waits), all done (wait_idle waits)
        self._room = threading.Condition(lock)  # the queue is down to half (blocked submits wait)
        self._unfinished = 0  # submitted and not yet run to the end
        self._thread: threading.Thread | None = None
        self._done = 0  # jobs run to the end (progress, for the stall test)
        self.waits = 0  # submits that blocked because max_pending jobs were waiting (backpressure)
        self.inline_runs = 0  # jobs run where submitted: from the thread itself, or after a stall
        self.failures = 0  # jobs that raised past their own guard

    def submit(self, job: Callable[..., Any], *args: Any) -> bool:
        """Queue job(*args) for the background thread, first waiting (blocked, no CPU) while
        `max_pending` jobs are waiting. False when the caller must run it itself: called from the
        background thread, or the thread made no progress for `stall_timeout` seconds."""
        with self._cv:
            if self._unfinished >= self.max_pending:
                if self.on_worker_thread():
                    self.inline_runs += 1
                    return False
                self.waits += 1
                # Wait down to half full, not for one free place, and be woken once, not at every
                # job done: each wake costs the waiting thread CPU (~40 us: the futex, taking the
                # GIL back), which at every job landed on nearly every submitting stop of a tight
                # loop, or, woken at each job, summed to milliseconds in one stop.
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
                self._cv.notify_all()  # all: a wait_idle waiter on the same condition must not take the thread's wake
        return True

    def on_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted job has run (True), or timeout seconds passed (False).
        Called from the background thread itself (a listener asking for a snapshot), it returns at
        once: waiting there would wait for itself."""
        if self.on_worker_thread():
            return self._unfinished == 0
        with self._cv:
            return self._cv.wait_for(lambda: self._unfinished == 0, timeout)

    def run_queued_here(self) -> int:
        """Run, on the calling thread, every job not started yet (in order); how many ran. A flush
        uses it so it never waits behind a job in flight for work it can do itself."""
        ran = 0
        while True:
            with self._cv:
                if not self._jobs:
                    return ran
                job, args = self._jobs.popleft()
            try:
                job(*args)
            except BaseException:  # as on the thread: counted, and the flush goes on
                with self._cv:
                    self.failures += 1
            finally:
                ran += 1
                with self._cv:
                    self._job_done()

    def _job_done(self) -> None:
        """Under the lock: a job ran to the end. Waiters are woken only when what they wait for is
        true (see submit), so a blocked caller pays for one wake, not one per job."""
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
            try:
                job(*args)
            except BaseException:  # the job's own guard failed: count it and keep the thread alive
                with self._cv:
                    self.failures += 1
            finally:
                with self._cv:
                    self._job_done()
