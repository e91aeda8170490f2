"""The capture worker: raw model outputs in, forecasts onto the run's record, the finished run into
the accumulator in one call (`Accumulator.finished`), on one background thread off the agent's path.

Bounded with backpressure, never dropping: when the queue holds `max_queue_size` heavy events the
caller sleeps until there is room, because an evaluator that drops runs scores the survivors; only
an event given up after `max_block` seconds is counted (dropped: queue_full) and marks its run
capture_lost. After `close()` events are dropped (after_close). A forked child starts with an empty
queue and no thread. An outcome recorded before the run's record is written lands on it (one line).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tps_tracer.capture.step_signals import RawStep, SignalExtractor
from tps_tracer.errors import InputError
from tps_tracer.health import HealthLedger
from tps_tracer.records.record_shape import InvalidOutcome, as_outcome

if TYPE_CHECKING:  # the accumulator pulls in the evaluation layer: not on the capture path's import
    from tps_tracer.online.accumulator import Accumulator
    from tps_tracer.tracking.tracker import TrajectoryState

# A live calibration map per predictor; its output is recorded as "<predictor>+cal".
Calibration = Mapping[str, Callable[[float], float]]
CALIBRATED_SUFFIX = "+cal"
APPLY = "apply"  # event kind of `handoff()`: (APPLY, fn, arg)
DEFAULT_MAX_QUEUE_SIZE = 16_384  # events: steps and span events waiting for the worker
DEFAULT_MAX_BLOCK = 60.0  # seconds a caller waits for room before its event is given up (marked lost)
_HEAVY = frozenset({"step", APPLY})
# Steps extracted together at most (one numpy pass); small, as the GIL is handed back only between batches.
STEP_BATCH = 4
_NOTHING = object()  # the kinds bounded by the queue (their callers wait for room)


class _StartsOnFirstPut(queue.SimpleQueue[Any]):
    """A forked child's queue until its first event, which starts the child's worker (`handoff`'s put
    checks no thread: the hottest path stays a size check and a put)."""

    def __init__(self, worker: CaptureWorker):
        super().__init__()
        self._worker = worker

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        worker = self._worker
        worker._start()  # puts a plain queue in this one's place, then starts the thread
        if worker._queue is self:  # closed meanwhile: no thread will read it
            super().put(item)
        else:
            worker._queue.put(item)


class CaptureWorker:
    def __init__(
        self,
        accumulator: Accumulator,
        extractor: SignalExtractor | None = None,
        calibration: Calibration | None = None,
        background: bool = True,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        max_block: float = DEFAULT_MAX_BLOCK,
    ):
        if max_queue_size < 1:
            raise InputError(f"max_queue_size must be >= 1, got {max_queue_size}")
        if not max_block >= 0:
            raise InputError(f"max_block must be >= 0 seconds, got {max_block}")
        self.accumulator = accumulator
        self.health = getattr(accumulator, "health", None) or HealthLedger()
        self.extractor = extractor or SignalExtractor(health=self.health)
        self.calibration = dict(calibration or {})
        self.background = background
        self.max_queue_size = max_queue_size
        self.max_block = max_block
        self.waits = 0  # events whose caller waited for room (backpressure), and for how long in all
        self.waited_seconds = 0.0
        # Runs with a step or stop submitted whose record the accumulator has not received yet:
        # an outcome recorded meanwhile lands on the record (one line per run).
        self._open: dict[str, TrajectoryState] = {}
        self._open_lock = threading.Lock()
        self._closed = False
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) is not None and m())

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def errors(self) -> dict[str, int]:
        return self.health.category("error")

    # ------------------------------------------------------------------ submission (any thread)

    def step(self, run: TrajectoryState, raw: RawStep) -> None:
        """Queue a step of `run`; a step given up marks the run lost."""
        if not run.held:  # one dict store, atomic: the lock guards the record's outcome fields only
            run.held = True
            self._open[run.tid] = run
        self._submit(("step", run, raw))

    def stop(
        self,
        run: TrajectoryState,
        reason: str,
        horizon: int | None,
        metadata: Mapping[str, Any],
        outcome: int | None = None,
        grader: Callable[[Any], Any] | None = None,
        output: Any = None,
    ) -> None:
        """Finish a run: the accumulator receives it whole. outcome: known now (a label); grader: run
        on `output` just before the record is written, its verdict (if any) is the outcome."""
        with self._open_lock:
            run.held = run.stopping = True
            run.stop_outcome = outcome
            self._open[run.tid] = run
        self._submit(("stop", run, reason, horizon, metadata, grader, output))

    def resolve(self, trajectory_id: str, outcome: int | None = None, q_z: float | None = None) -> None:
        if (outcome is not None or q_z is not None) and self._merge_into_run(trajectory_id, outcome, q_z):
            return
        self._submit(("resolve", trajectory_id, outcome, q_z))

    def _merge_into_run(self, trajectory_id: str, outcome: int | None, q_z: float | None) -> bool:
        """Put the values on a run the accumulator has not received (one record, no resolution line); a
        value differing from one the queued stop carries stays a resolution after it."""
        with self._open_lock:
            run = self._open.get(trajectory_id)
            if run is None:
                return False
            if run.stopping:
                if (outcome is not None and run.stop_outcome not in (None, outcome)) or (
                    q_z is not None and run.stop_q_z not in (None, q_z)
                ):
                    return False
                run.stop_outcome = run.stop_outcome if outcome is None else outcome
                run.stop_q_z = run.stop_q_z if q_z is None else q_z
                return True
            if (outcome is None or run.outcome in (None, outcome)) and (q_z is None or run.q_z in (None, q_z)):
                run.outcome = run.outcome if outcome is None else outcome
                run.q_z = run.q_z if q_z is None else q_z
                return True
        self.health.count(
            "rejected", "conflicting_resolution", f"{trajectory_id!r}: conflicts with the outcome / q_z already given"
        )
        return True

    def _release(self, run: TrajectoryState) -> None:
        """The run's stop is being applied (or dropped): later outcomes go to the accumulator as resolutions."""
        with self._open_lock:
            if self._open.get(run.tid) is run:
                del self._open[run.tid]

    def call(self, job: Callable[[], Any], where: str = "job") -> None:
        """Run `job()` on the worker, in order with the other events (errors counted under `where`)."""
        self._submit(("call", job, where))

    def handoff(self, on_drop: Callable[[tuple[Any, ...]], None] | None = None) -> Callable[[tuple[Any, ...]], None]:
        """The cheapest way in for per-span work: `put((APPLY, fn, arg))` runs `fn(arg)` on the worker, a
        queue put behind a size check; an event given up is counted and passed to `on_drop`."""
        if not self.background:
            return self._apply_unless_closed
        self._start()
        limit = self.max_queue_size

        def put(event: tuple[Any, ...]) -> None:
            q = self._queue  # read each time: a forked child gets a new queue
            if (q.qsize() < limit or self._wait_for_room()) and not self._closed:
                q.put(event)
            else:
                self._drop(event)
                if on_drop is not None:
                    on_drop(event)

        return put

    def mark(self, event: tuple[Any, ...]) -> None:
        """Queue a small control event past the bound (e.g. the mark of a lost event, in order)."""
        if self._closed:
            return
        if not self.background or threading.current_thread() is self._thread:
            self._apply(event)
        else:
            self._queue.put(event)

    def _apply_unless_closed(self, event: tuple[Any, ...]) -> None:
        if self._closed:
            self._drop(event)
        else:
            self._apply(event)

    def _submit(self, event: tuple[Any, ...]) -> None:
        if self._closed:
            self._drop(event)
            return
        # Events submitted by a job running on the worker are applied at once: queued, they
        # would land behind a flush() barrier submitted meanwhile, and flush() would return early.
        if not self.background or threading.current_thread() is self._thread:
            self._apply(event)
            return
        if self._thread is None:
            self._start()
        if event[0] in _HEAVY and self._queue.qsize() >= self.max_queue_size and not self._wait_for_room():
            self._drop(event)
            return
        self._queue.put(event)

    def _wait_for_room(self) -> bool:
        """Backpressure: sleep until the queue has room; False when closed, gone, or no room for
        `max_block` s. The worker itself never waits (it could not drain its own queue)."""
        if threading.current_thread() is self._thread:
            return True
        if self._thread is None:
            self._start()  # a forked child's first event: its worker starts here
        start = time.monotonic()
        deadline = start + self.max_block
        delay = 0.0001
        try:
            while self._queue.qsize() >= self.max_queue_size:
                thread = self._thread
                if self._closed or thread is None or not thread.is_alive() or time.monotonic() >= deadline:
                    return False
                time.sleep(delay)
                delay = min(2 * delay, 0.005)
            return True
        finally:
            self.waits += 1  # racy across threads: a statistic, not a ledger entry
            self.waited_seconds += time.monotonic() - start

    def _drop(self, event: tuple[Any, ...]) -> None:
        kind = "after_close" if self._closed else "queue_full"
        if event[0] == "stop":
            self._release(event[1])
        elif event[0] == "step":
            event[1].lose(kind)  # the run is recorded capture_lost, never scored with a hole in it
        self.health.count(
            "dropped",
            kind,
            "the capture worker is closed"
            if self._closed
            else f"the capture queue stayed full for {self.max_block} s (is a grader or listener stuck?)",
        )

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._closed:
                if isinstance(self._queue, _StartsOnFirstPut):
                    self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._run, name="tps-tracer-worker", daemon=True)
                self._thread.start()

    def _after_fork_in_child(self) -> None:
        # The thread did not survive the fork and the queued events belong to the parent.
        self._queue = _StartsOnFirstPut(self)
        self._thread = None
        self._start_lock = threading.Lock()
        self._open = {}  # the parent's runs: they are recorded there
        self._open_lock = threading.Lock()

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        q = self._queue
        small = 0
        pending: Any = _NOTHING  # an event taken from the queue while collecting steps, applied next
        while True:
            event, pending = (q.get() if pending is _NOTHING else pending), _NOTHING
            if event is None:
                return
            kind = event[0]
            if kind is APPLY:  # per-span work, the most frequent event: applied here without a dispatch
                try:
                    event[1](event[2])
                except Exception as exc:  # as _apply: never let one bad event stop the worker
                    self._failed(APPLY, exc)
                # Hand the GIL back every 64 span events: an agent thread waking from network I/O
                # then waits for a few events' work, not the interpreter's 5 ms switch interval.
                small += 1
                if not small & 63:
                    time.sleep(0)
                continue
            if kind == "step":
                # The steps queued right behind it share one numpy pass (SignalExtractor.forecasts_batch);
                # events stay in order: the first non-step one is applied after them.
                batch = [event]
                while len(batch) < STEP_BATCH:
                    try:
                        nxt = q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None or nxt[0] != "step":
                        pending = nxt
                        break
                    batch.append(nxt)
                self._apply_steps(batch)
                time.sleep(0)
                continue
            self._apply(event)
            time.sleep(0)  # the GIL handed back after every other event (see the APPLY case above)

    def _apply_steps(self, batch: list[tuple[Any, ...]]) -> None:
        """Step events in order, their signals extracted together (the same forecasts as one by one)."""
        if len(batch) == 1 or type(self.extractor).forecasts is not SignalExtractor.forecasts:
            for event in batch:  # a custom extractor's forecasts() is called as it always was
                self._apply(event)
            return
        raws: list[RawStep] = [raw for _, _, raw in batch]
        try:
            outs = self._forecasts_batch(raws)
        except Exception as exc:
            self.health.count("error", "extraction", f"signal extraction failed ({type(exc).__name__}: {exc})")
            outs = [self._safe_forecasts(raw) for raw in raws]
        for (_, run, _), out in zip(batch, outs, strict=True):
            run.steps.append(out)

    def _forecasts_batch(self, raws: list[RawStep]) -> list[dict[str, float | None]]:
        """`_safe_forecasts` of each step, the extraction of those without forecasts done together."""
        todo = [raw for raw in raws if raw.forecasts is None]
        extracted = iter(
            self.extractor.forecasts_batch([(r.text, r.logprobs, r.tool_arguments, r.verbal_scale) for r in todo])
        )
        outs: list[dict[str, float | None]] = []
        for raw in raws:
            out = next(extracted) if raw.forecasts is None else None
            try:
                outs.append(self._calibrated(dict(raw.forecasts) if out is None else out))  # type: ignore[arg-type]
            except Exception as exc:  # as _safe_forecasts: the step is kept with no forecasts
                self.health.count("error", "extraction", f"signal extraction failed ({type(exc).__name__}: {exc})")
                outs.append({})
        return outs

    def _apply(self, event: tuple[Any, ...]) -> None:
        kind = event[0]
        try:
            if kind is APPLY:
                _, fn, arg = event
                fn(arg)
            elif kind == "step":
                _, run, raw = event
                run.steps.append(self._safe_forecasts(raw))
            elif kind == "stop":
                self._stop(*event[1:])
            elif kind == "resolve":
                _, tid, outcome, q_z = event
                self.accumulator.resolve(tid, outcome=outcome, q_z=q_z)
            elif kind == "call":
                _, job, where = event
                kind = where
                job()
            elif kind == "barrier":
                event[1].set()
        except Exception as exc:  # never let one bad event stop the worker
            self._failed(kind, exc)

    def _failed(self, kind: str, exc: Exception) -> None:
        self.health.count("error", f"worker.{kind}", f"{kind} event failed ({type(exc).__name__}: {exc})")

    def _stop(
        self,
        run: TrajectoryState,
        reason: str,
        horizon: int | None,
        metadata: Mapping[str, Any],
        grader: Callable[[Any], Any] | None,
        output: Any,
    ) -> None:
        self._release(run)  # from here on, a resolve() is queued behind this stop
        tid = run.tid
        verdict = None
        if grader is not None:
            try:
                verdict = self._verdict(tid, grader, output)
            except Exception as exc:  # the grader's failure loses the verdict, never the record
                self.health.count("error", "worker.grade", f"grade event failed ({type(exc).__name__}: {exc})")
        outcome = verdict if verdict is not None else run.stop_outcome
        self.accumulator.finished(
            tid,
            run.steps,
            reason,
            horizon=horizon,
            metadata=metadata,
            q_z=run.stop_q_z,
            outcome=outcome,
            resolved=(run.outcome, run.q_z),
        )
        if verdict is not None and run.stop_outcome not in (None, verdict):
            # The grader's verdict came first, as when it was a resolution; the later one is the
            # accumulator's conflict to count.
            self.accumulator.resolve(tid, outcome=run.stop_outcome)

    def _verdict(self, tid: str, grader: Callable[[Any], Any], output: Any) -> int | None:
        verdict = grader(output)
        try:
            return as_outcome(verdict)
        except InvalidOutcome as exc:
            self.health.count("rejected", "invalid_outcome", f"{tid!r}: the grader's verdict: {exc}")
            return None

    def _safe_forecasts(self, raw: RawStep) -> dict[str, float | None]:
        """The step's forecasts; if extraction fails the step is kept with none (counted): later steps never shift."""
        try:
            return self.forecasts(raw)
        except Exception as exc:
            self.health.count("error", "extraction", f"signal extraction failed ({type(exc).__name__}: {exc})")
            return {}

    def forecasts(self, raw: RawStep) -> dict[str, float | None]:
        if raw.forecasts is not None:
            out = dict(raw.forecasts)  # the accumulator validates them (non-numbers are rejected, counted)
        else:
            out = self.extractor.forecasts(
                raw.text, raw.logprobs, tool_arguments=raw.tool_arguments, verbal_scale=raw.verbal_scale
            )
        return self._calibrated(out)

    def _calibrated(self, out: dict[str, float | None]) -> dict[str, float | None]:
        for name, fn in self.calibration.items():
            p = out.get(name)
            out[name + CALIBRATED_SUFFIX] = float(fn(p)) if isinstance(p, (int, float)) else None
        return out

    # ------------------------------------------------------------------ control

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event submitted so far is applied; False on timeout."""
        thread = self._thread
        if not self.background or thread is None or not thread.is_alive():
            return True
        if threading.current_thread() is thread:
            return True  # a job on the worker asking to flush: everything before it is applied
        done = threading.Event()
        self._queue.put(("barrier", done))
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Apply what was submitted, stop the worker; later events are dropped (counted)."""
        self.flush(timeout)
        self._closed = True
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)
            self._thread = None
