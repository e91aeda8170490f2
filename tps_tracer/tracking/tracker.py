"""The framework-free trajectory core under both adapters: one record per run (`TrajectoryState`), the
rules that turn model calls into steps and a stop (docs/capture.md, "One core"), the capture worker, and
what adapters share."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from tps_tracer import at_exit
from tps_tracer.capture.step_signals import RawStep, SignalExtractor
from tps_tracer.capture.stop_signals import MALFORMED_CALL_EXCEPTIONS
from tps_tracer.capture.verbal_confidence import UNDECLARED, check_scale
from tps_tracer.constants import MAX_HORIZON
from tps_tracer.errors import InputError
from tps_tracer.health import HealthLedger
from tps_tracer.open_runs import OpenRuns, check_timeout, tighter
from tps_tracer.records.record_shape import InvalidOutcome, as_outcome, id_problem
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking.keys import (
    ABANDONED_KEY,
    FRAMEWORK_PREFIXES,
    MAX_KEY_CHARS,
    MAX_USER_KEYS,
    MAX_VALUE_CHARS,
    TASK_ID_KEY,
    VERBAL_SCALE_KEY,
)
from tps_tracer.validity import horizon as valid_horizon

if TYPE_CHECKING:  # the accumulator pulls in the evaluation layer: not on the capture path's import
    from tps_tracer.online.accumulator import Accumulator

logger = logging.getLogger("tps_tracer")

CONTENT_LIMIT = 4000  # characters kept per text when content capture is on
Forecasts = dict[str, float | None]  # one step's {predictor: forecast}


@dataclass(frozen=True)
class StopDecision:  # also a stop fixed during the run (declared by the user, or repairs exhausted)
    reason: StopReason
    horizon: int | None  # set for max_steps only (a fixed stop: the declared horizon)
    detail: str
    abandoned: str | None = None


@dataclass
class TrajectoryState:
    tid: str
    metadata: Mapping[str, Any] = field(default_factory=dict)  # the run's own metadata (user keys)
    n_calls: int = 0  # every model call, malformed and failed ones included (>= the steps fed)
    calls_started: int = 0  # one still in flight when the run ends (cancelled) was made all the same
    failed_calls: int = 0
    parse_repairs: int = 0
    consecutive_malformed: int = 0
    ignored_calls: int = 0
    tool_errors: int = 0
    last_tool_failed: bool = False  # a tool failed after the last model call
    last_call_failed: tuple[StopReason, str] | None = None  # the last model call raised: what it said
    fixed: StopDecision | None = None
    # The last call that returned, held until the next call or the run's end (a parser may reject it).
    pending: RawStep | None = None
    pending_malformed: bool = False
    texts: list[str] = field(default_factory=list)  # step texts, only with capture_content
    capture_lost: str | None = None  # why an event of this run never reached the accumulator
    steps: list[Forecasts] = field(default_factory=list)  # forecasts, appended on the worker
    # Outcome / q_Z recorded before the stop, and those the stop carries (CaptureWorker.resolve).
    outcome: int | None = None
    q_z: float | None = None
    held: bool = False
    stopping: bool = False
    stop_outcome: int | None = None
    stop_q_z: float | None = None

    def decide_call(self, malformed: bool, repair_budget: int | None) -> bool:
        """True when the model call that returned is a step to score."""
        self.n_calls += 1
        self.last_tool_failed = False
        self.last_call_failed = None
        if self.fixed is not None:
            self.ignored_calls += 1
            return False
        if malformed:
            self.consecutive_malformed += 1
            if repair_budget is not None and self.consecutive_malformed > repair_budget:
                self.fixed = StopDecision(StopReason.PARSE_ERROR, None, "repairs exhausted")
            else:
                self.parse_repairs += 1
            return False
        self.consecutive_malformed = 0
        return True

    def declare(self, reason: StopReason, horizon: int | None = None) -> None:
        if self.fixed is None:  # the first fixed stop wins
            self.fixed = StopDecision(reason, horizon, "declared")

    def tool_failed(self, ended_run: bool = True) -> None:
        self.tool_errors += 1
        if ended_run:
            self.last_tool_failed = True


def run_budget(label: Any, default: int | None, tid: str, health: HealthLedger) -> int | None:
    """The run's step budget: its label if valid, else the default (a bad label counted)."""
    if label is None:
        return default
    budget = valid_horizon(label, labels=True)
    if budget is None:
        health.count(
            "rejected",
            "invalid_horizon_label",
            f"{tid!r}: step budget {str(label)[:40]!r} is not a whole number in [1, {MAX_HORIZON}]; "
            "using the calls made",
        )
        return default
    return budget


def decide_stop(state: TrajectoryState, observed: tuple[StopReason, str], abandoned: str | None = None) -> StopDecision:
    """The stop (a max_steps horizon counts the calls made and a declared horizon; `finish` adds the budget)."""
    if abandoned is not None:
        return StopDecision(StopReason.CAPTURE_LOST, None, f"abandoned: {abandoned}", abandoned)
    if state.fixed is not None:
        reason, declared_horizon, detail = state.fixed.reason, state.fixed.horizon, state.fixed.detail
    else:
        reason, detail = observed
        declared_horizon = None
        failed = state.last_call_failed
        ended_malformed = state.consecutive_malformed > 0 and failed is None
        if reason is StopReason.CLEAN and failed is not None:
            reason, detail = failed[0], f"last model call failed: {failed[1] or 'error'}"
        elif reason is StopReason.CLEAN and ended_malformed:
            reason, detail = StopReason.PARSE_ERROR, "ended on malformed output"
        elif reason is StopReason.OTHER and ended_malformed and detail in MALFORMED_CALL_EXCEPTIONS:
            reason = StopReason.PARSE_ERROR  # the run raised what its last model call raised (JSONDecodeError)
    horizon = None
    if reason is StopReason.MAX_STEPS:
        horizon = max(valid_horizon(declared_horizon, labels=True) or 0, state.n_calls, 1)
    return StopDecision(reason, horizon, detail)


def user_metadata(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The user's JSON-safe scalars (bounded) and how many were left out; FRAMEWORK_PREFIXES skipped silently."""
    kept: dict[str, Any] = {}
    dropped = 0
    for key, value in metadata.items():
        if isinstance(key, str) and key.startswith(FRAMEWORK_PREFIXES):
            continue
        if (
            len(kept) < MAX_USER_KEYS
            and isinstance(key, str)
            and 0 < len(key) <= MAX_KEY_CHARS
            and id_problem(key) is None
            and _json_scalar(value)
        ):
            kept[key] = value
        else:
            dropped += 1
    return kept, dropped


def _json_scalar(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) < 2**53  # exact as a JSON number in every reader
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and len(value) <= MAX_VALUE_CHARS and id_problem(value or "x") is None


# The capture worker: forecasts extracted off the agent's path, the finished run into the accumulator in
# one call. Backpressure, never dropping (an evaluator that drops runs scores the survivors): only an event
# given up after `max_block` s is counted (queue_full) and marks its run capture_lost.

Calibration = Mapping[str, Callable[[float], float]]
CALIBRATED_SUFFIX = "+cal"
APPLY = "apply"  # event kind of `handoff()`: (APPLY, fn, arg)
DEFAULT_MAX_QUEUE_SIZE = 16_384  # events: steps and span events waiting for the worker
DEFAULT_MAX_BLOCK = 60.0  # seconds a caller waits for room before its event is given up (marked lost)
_HEAVY = frozenset({"step", APPLY})  # the kinds bounded by the queue (their callers wait for room)
STEP_BATCH = 4  # steps extracted in one numpy pass; small, as the GIL is handed back only between batches
_NOTHING = object()


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
        # Runs with a step or stop submitted, not yet in the accumulator: an outcome recorded meanwhile
        # lands on their record (one line per run).
        self._open: dict[str, TrajectoryState] = {}
        self._open_lock = threading.Lock()
        self.closed = False
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) is not None and m())

    def step(self, run: TrajectoryState, raw: RawStep) -> None:
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
        """The accumulator receives the run whole; `grader(output)`, run just before, overrides `outcome`."""
        # No lock: a merge reading `stopping` set finds `stop_outcome` already written (GIL order), one
        # reading it unset writes `outcome`, which the stop reads too; the dict store is atomic.
        run.stop_outcome = outcome
        run.held = run.stopping = True
        self._open[run.tid] = run
        self._submit(("stop", run, reason, horizon, metadata, grader, output))

    def resolve(self, trajectory_id: str, outcome: int | None = None, q_z: float | None = None) -> None:
        """Values for a run not yet in the accumulator go on its record (one line); a value differing from
        the queued stop's stays a resolution after it; otherwise a resolution."""
        with self._open_lock:
            run = self._open.get(trajectory_id) if outcome is not None or q_z is not None else None
            stopping = run is not None and run.stopping
            if run is not None:
                outcome_field, q_z_field = ("stop_outcome", "stop_q_z") if stopping else ("outcome", "q_z")
                known, known_q_z = getattr(run, outcome_field), getattr(run, q_z_field)
                if (outcome is None or known in (None, outcome)) and (q_z is None or known_q_z in (None, q_z)):
                    setattr(run, outcome_field, known if outcome is None else outcome)
                    setattr(run, q_z_field, known_q_z if q_z is None else q_z)
                    return
        if run is not None and not stopping:
            self.health.count(
                "rejected",
                "conflicting_resolution",
                f"{trajectory_id!r}: conflicts with the outcome / q_z already given",
            )
            return
        self._submit(("resolve", trajectory_id, outcome, q_z))

    def _release(self, run: TrajectoryState) -> None:
        """The stop is applied (or dropped): later outcomes go to the accumulator as resolutions."""
        if self._open.get(run.tid) is run:
            self._open.pop(run.tid, None)
        # A merge that found the run before the pop holds the lock: wait for it, then its values are on the run.
        if self._open_lock.locked():
            with self._open_lock:
                pass

    def call(self, job: Callable[[], Any], where: str = "job") -> None:
        """`job()` on the worker, in order with the other events (errors counted under `where`)."""
        self._submit(("call", job, where))

    def handoff(self, on_drop: Callable[[tuple[Any, ...]], None] | None = None) -> Callable[[tuple[Any, ...]], None]:
        """The cheapest way in for per-span work: `put((APPLY, fn, arg))` runs `fn(arg)` on the worker; an
        event given up is counted and passed to `on_drop`."""
        if not self.background:
            return self._submit
        self._start()
        limit = self.max_queue_size

        def put(event: tuple[Any, ...]) -> None:
            if self._thread is None:  # a forked child's first event starts its worker
                self._start()
            q = self._queue  # read each time: a forked child gets a new queue
            if (q.qsize() < limit or self._wait_for_room()) and not self.closed:
                q.put(event)
            else:
                self._drop(event)
                if on_drop is not None:
                    on_drop(event)

        return put

    def mark(self, event: tuple[Any, ...]) -> None:
        """A small control event past the bound (e.g. the mark of a lost event, in order)."""
        if self.closed:
            return
        if not self.background or threading.current_thread() is self._thread:
            self._apply(event)
        else:
            self._queue.put(event)

    def _submit(self, event: tuple[Any, ...]) -> None:
        if self.closed:
            self._drop(event)
            return
        # From a job on the worker: at once, else they would land behind a flush() barrier submitted meanwhile.
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
        """Backpressure: sleep until the queue has room; False when closed, gone, or full for `max_block` s.
        The worker itself never waits (it could not drain its own queue)."""
        if threading.current_thread() is self._thread:
            return True
        start = time.monotonic()
        deadline = start + self.max_block
        delay = 0.0001
        try:
            while self._queue.qsize() >= self.max_queue_size:
                thread = self._thread
                if self.closed or thread is None or not thread.is_alive() or time.monotonic() >= deadline:
                    return False
                time.sleep(delay)
                delay = min(2 * delay, 0.005)
            return True
        finally:
            self.waits += 1  # racy across threads: a statistic, not a ledger entry
            self.waited_seconds += time.monotonic() - start

    def _drop(self, event: tuple[Any, ...]) -> None:
        kind = "after_close" if self.closed else "queue_full"
        if event[0] == "stop":
            self._release(event[1])
        elif event[0] == "step" and event[1].capture_lost is None:
            event[1].capture_lost = kind  # the run is recorded capture_lost, never scored with a hole in it
        self.health.count(
            "dropped",
            kind,
            "the capture worker is closed"
            if self.closed
            else f"the capture queue stayed full for {self.max_block} s (is a grader or listener stuck?)",
        )

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self.closed:
                self._thread = threading.Thread(target=self._run, name="tps-tracer-worker", daemon=True)
                self._thread.start()

    def _after_fork_in_child(self) -> None:
        # The thread did not survive the fork and the queued events belong to the parent.
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._start_lock = threading.Lock()
        self._open = {}  # the parent's runs: they are recorded there
        self._open_lock = threading.Lock()

    def _run(self) -> None:
        q = self._queue
        small = 0
        pending: Any = _NOTHING  # an event taken from the queue while collecting steps, applied next
        while True:
            event, pending = (q.get() if pending is _NOTHING else pending), _NOTHING
            if event is None:
                return
            kind = event[0]
            if kind is APPLY:  # per-span work, the most frequent event: no dispatch
                try:
                    event[1](event[2])
                except Exception as exc:  # as _apply: never let one bad event stop the worker
                    self._failed(APPLY, exc)
                # The GIL handed back every 64: an agent thread waking from I/O waits not the 5 ms switch interval.
                small += 1
                if not small & 63:
                    time.sleep(0)
                continue
            if kind == "step":
                # The steps queued right behind it share one numpy pass; the first non-step event goes after them.
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
        """Step events in order, extracted together (the same forecasts as one by one)."""
        if len(batch) == 1 or type(self.extractor).forecasts is not SignalExtractor.forecasts:
            for event in batch:  # a custom extractor's forecasts() is called as it always was
                self._apply(event)
            return
        todo = [(r.text, r.logprobs, r.tool_arguments, r.verbal_scale) for _, _, r in batch if r.forecasts is None]
        try:
            extracted = iter(self.extractor.forecasts_batch(todo))
        except Exception as exc:  # then extracted one by one
            self._count_extraction(exc)
            extracted = None
        for _, run, raw in batch:
            out = next(extracted) if extracted is not None and raw.forecasts is None else None
            run.steps.append(self.forecasts(raw, out))

    def _apply(self, event: tuple[Any, ...]) -> None:
        kind = event[0]
        try:
            if kind is APPLY:
                event[1](event[2])
            elif kind == "step":
                event[1].steps.append(self.forecasts(event[2]))
            elif kind == "stop":
                self._stop(*event[1:])
            elif kind == "resolve":
                self.accumulator.resolve(event[1], outcome=event[2], q_z=event[3])
            elif kind == "call":
                kind = event[2]  # errors counted under the job's `where`
                event[1]()
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
                verdict = as_outcome(grader(output))
            except InvalidOutcome as exc:
                self.health.count("rejected", "invalid_outcome", f"{tid!r}: the grader's verdict: {exc}")
            except Exception as exc:  # the grader's failure loses the verdict, never the record
                self._failed("grade", exc)
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
            # The verdict came first, as when it was a resolution; the accumulator counts the conflict.
            self.accumulator.resolve(tid, outcome=run.stop_outcome)

    def forecasts(self, raw: RawStep, extracted: Forecasts | None = None) -> Forecasts:
        """A step's forecasts, calibrated; one whose extraction fails is kept with none (counted): later
        steps never shift."""
        try:
            if extracted is not None:
                out = extracted
            elif raw.forecasts is not None:
                out = dict(raw.forecasts)  # the accumulator validates them (non-numbers are rejected, counted)
            else:
                out = self.extractor.forecasts(
                    raw.text, raw.logprobs, tool_arguments=raw.tool_arguments, verbal_scale=raw.verbal_scale
                )
            for name, fn in self.calibration.items():
                p = out.get(name)
                out[name + CALIBRATED_SUFFIX] = float(fn(p)) if isinstance(p, (int, float)) else None
            return out
        except Exception as exc:
            self._count_extraction(exc)
            return {}

    def _count_extraction(self, exc: Exception) -> None:
        self.health.count("error", "extraction", f"signal extraction failed ({type(exc).__name__}: {exc})")

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event submitted so far is applied; False on timeout."""
        thread = self._thread
        # A job on the worker asking to flush: everything before it is applied.
        if not self.background or thread is None or not thread.is_alive() or threading.current_thread() is thread:
            return True
        done = threading.Event()
        self._queue.put(("barrier", done))
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Apply what was submitted, stop the worker; later events are dropped (counted)."""
        self.flush(timeout)
        self.closed = True
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)
            self._thread = None


class TrajectoryTracker:
    """What adapters call: open, model_call / returned + commit, failed_call, finish."""

    def __init__(
        self,
        accumulator: Accumulator,
        *,
        source: str,
        repair_budget: int | None = None,
        horizon: int | None = None,
        grader: Callable[[Any], Any] | None = None,
        extractor: SignalExtractor | None = None,
        calibration: Calibration | None = None,
        capture_content: bool = False,
        background: bool = True,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        max_block: float = DEFAULT_MAX_BLOCK,
        verbal_scale: str | None = None,
    ):
        if repair_budget is not None and (
            not isinstance(repair_budget, int) or isinstance(repair_budget, bool) or repair_budget < 0
        ):
            raise InputError(f"repair_budget must be None or an integer >= 0, got {repair_budget!r}")
        if horizon is not None and valid_horizon(horizon, labels=True) is None:
            raise InputError(f"horizon must be a whole number >= 1, got {horizon!r}")
        self.accumulator = accumulator
        self.health: HealthLedger = accumulator.health
        self.source = source
        self.repair_budget = repair_budget
        self.horizon = horizon
        self.grader = grader
        self.capture_content = capture_content
        check_scale(verbal_scale)
        if verbal_scale is not None:
            if extractor is not None:
                raise InputError("give verbal_scale to the SignalExtractor passed as `extractor`, not both")
            extractor = SignalExtractor(health=self.health, verbal_scale=verbal_scale)
        self.worker = CaptureWorker(accumulator, extractor, calibration, background, max_queue_size, max_block)
        # The accumulator drains this worker's queue before it snapshots or closes: nothing that ended is lost.
        accumulator.leave_lifetimes_to(source, drain=self.worker.flush)

    def open(self, tid: str, metadata: Mapping[str, Any] | None = None) -> TrajectoryState:
        return TrajectoryState(tid, dict(metadata) if isinstance(metadata, Mapping) else {})

    def model_call(self, state: TrajectoryState, raw: RawStep, malformed: bool) -> None:
        """A returned call: a step (fed to the worker), a repair, or ignored."""
        if state.decide_call(malformed, self.repair_budget):
            if self.capture_content and isinstance(raw.text, str):
                state.texts.append(raw.text[:CONTENT_LIMIT])
            declared = state.metadata.get(VERBAL_SCALE_KEY)
            if declared is not None:  # an unknown one is counted and reads as undeclared (never as the adapter's)
                try:
                    scale = check_scale(declared) or UNDECLARED
                except ValueError as exc:
                    self.health.count("rejected", "invalid_verbal_scale", f"{state.tid!r}: {exc}")
                    scale = UNDECLARED
                raw = replace(raw, verbal_scale=scale)
            self.worker.step(state, raw)

    def returned(self, state: TrajectoryState, raw: RawStep, malformed: bool) -> None:
        """Hold a returned call a parser may still reject, deciding the one held before."""
        self.commit(state)
        state.pending, state.pending_malformed = raw, malformed

    def commit(self, state: TrajectoryState) -> None:
        raw = state.pending
        if raw is not None:
            malformed = state.pending_malformed
            state.pending, state.pending_malformed = None, False
            self.model_call(state, raw, malformed)

    def failed_call(self, state: TrajectoryState, failure: tuple[StopReason, str]) -> None:
        if failure[0] is StopReason.PARSE_ERROR:
            self.model_call(state, RawStep(None), malformed=True)
        else:
            state.n_calls += 1
            state.failed_calls += 1
            state.last_tool_failed = False
            state.last_call_failed = failure

    def finish(
        self,
        state: TrajectoryState,
        observed: tuple[StopReason, str] = (StopReason.CLEAN, ""),
        *,
        abandoned: str | None = None,
        budget_label: Any = None,
        stopped_by: Any = None,
        outcome_label: Any = None,
        final_output: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> StopDecision | None:
        """Record the finished trajectory; None when no model call was made. budget_label: the run's
        stated budget (a declared stop's horizon); stopped_by: the limit whose stop `observed` shows;
        final_output: what the grader reads (its text kept with capture_content)."""
        if state.capture_lost is not None and abandoned is None:
            abandoned = state.capture_lost  # never scored with a hole
        in_flight = state.calls_started - state.n_calls
        if in_flight > 0:  # cancelled mid-call: a failed call whose error arrives late or never
            state.n_calls += in_flight
            state.failed_calls += in_flight
        if state.n_calls == 0 and abandoned is None:
            self.health.count("ignored", "runs_without_model_calls")
            return None
        decision = decide_stop(state, observed, abandoned)
        if decision.reason is StopReason.MAX_STEPS:
            label = run_budget(budget_label, self.horizon, state.tid, self.health)
            # A declared stop's horizon counts the label; the run's own budget, what it allowed (never the label).
            budget = label if state.fixed is not None else run_budget(stopped_by, None, state.tid, self.health)
            decision = replace(decision, horizon=max(budget or 0, decision.horizon or 0))
            if state.fixed is None and label is not None and label != decision.horizon:
                self.health.count("ignored", "horizon_label_not_the_budget")
        # The record's metadata: the user's scalars, then tps-tracer's keys, which win a clash.
        md, dropped = user_metadata(state.metadata)
        if dropped:
            md["tps_metadata_dropped"] = dropped
        md.update(source=self.source, llm_calls=state.n_calls)
        task = state.metadata.get(TASK_ID_KEY)
        task = state.metadata.get("task_id") if task is None else task
        if task is not None:
            md["task_id"] = str(task)
        if decision.detail:
            md["stop_detail"] = decision.detail
        if decision.abandoned is not None:
            md[ABANDONED_KEY] = decision.abandoned
            self.health.count("abandoned", decision.abandoned)
        for key in ("parse_repairs", "failed_calls", "tool_errors", "ignored_calls"):  # the state's, when nonzero
            if getattr(state, key):
                md[key] = getattr(state, key)
        md.update(extra or {})
        if self.capture_content:
            md["step_texts"] = state.texts
            text = final_output if isinstance(final_output, str) else getattr(final_output, "text", None)
            if isinstance(text, str):
                md["final_output"] = text[:CONTENT_LIMIT]
        # An outcome known now goes out with the record: one line.
        known = None
        if decision.reason is StopReason.CLEAN:
            try:
                known = as_outcome(outcome_label)
            except InvalidOutcome as exc:
                self.health.count("rejected", "invalid_outcome_label", f"{state.tid!r}: outcome label: {exc}")
        grader = self.grader if decision.reason is StopReason.CLEAN and known is None else None
        self.worker.stop(state, decision.reason.value, decision.horizon, md, known, grader, final_output)
        return decision


_Method = TypeVar("_Method", bound=Callable[..., None])
TRACKER_OPTIONS = frozenset(inspect.signature(TrajectoryTracker).parameters) - {"accumulator", "source"}


def never_raises(where: str) -> Callable[[_Method], _Method]:
    """Every adapter callback's guard: an error is counted under `where`, never raised into the agent."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def guarded(self: TrackedAdapter, *args: Any, **kwargs: Any) -> None:
            try:
                method(self, *args, **kwargs)
            except Exception as exc:
                self._fail(where, exc)

        return guarded  # type: ignore[return-value]

    return wrap


class TrackedAdapter:
    """What the handler and the span processor share: the tracker, lifetimes (open_runs.py), one lock."""

    tracker: TrajectoryTracker
    _lifetimes: OpenRuns[Any]
    # Each adapter's: finish its open runs abandoned (`why`); forget them (a forked child); take out the
    # runs idle at `now` (under the lock); abandon one.
    _finish_open: Callable[..., int]
    _forget_open: Callable[[], int]
    _take_idle: Callable[[float], list[Any]]
    _abandon: Callable[[Any, str], None]
    _late_detail = "an event of a run finished early was dropped"

    def _track(self, source: str, options: Mapping[str, Any]) -> None:
        """The tracker and lifetimes from the constructor's arguments; the accumulator's idle_timeout too bounds."""
        accumulator, clock = options["accumulator"], options["clock"]
        names = TRACKER_OPTIONS.intersection(options)
        self.tracker = TrajectoryTracker(accumulator, source=source, **{k: options[k] for k in names})
        self.feeder = self.tracker.worker
        # What was rejected, dropped, abandoned, malformed or failed (shared with the accumulator).
        self.health: HealthLedger = self.tracker.health
        idle = tighter(check_timeout("idle_timeout", options["idle_timeout"]), accumulator.idle_timeout)
        self._lifetimes = OpenRuns(idle, check_timeout("pause_timeout", options["pause_timeout"]))
        self.idle_timeout = idle
        self._clock = clock
        self._last_sweep = clock()
        self._warned_open = False
        self._lock = threading.Lock()
        at_exit.register(self, adapter=True)  # a script that never closes still gets its runs recorded
        accumulator.finish_on_close(self._finish_open)  # acc.close() records the runs still in flight

    def sweep(self, now: float | None = None) -> int:
        """Finish, abandoned, the runs idle for idle_timeout s (a paused run is not) or paused for
        pause_timeout s; how many. Called on its own at most every second as events come."""
        now = self._clock() if now is None else now
        lifetimes = self._lifetimes
        with self._lock:
            self._last_sweep = now
            idle = self._take_idle(now)
            lifetimes.expire(now)
            expired = lifetimes.expired(now)
        for run in idle:
            self._abandon(run, "idle")
        for run in expired:
            self._abandon(run, "pause_timeout")
        return len(idle) + len(expired)

    def _warn_crowded(self, message: str, limit: int) -> None:
        if not self._warned_open:
            self._warned_open = True
            logger.warning(message, limit, self.idle_timeout)

    def _count_late(self) -> None:
        self.health.count("dropped", "abandoned_run_event", self._late_detail)

    def _close_at_exit(self, timeout: float) -> int:
        """At interpreter exit, unless closed: the open runs abandoned "exit"."""
        if self.feeder.closed:
            return 0
        # Runs of a closed accumulator were recorded by its close(): their stops would only be refused.
        n = 0 if self.tracker.accumulator.closed else self._finish_open(at_exit.ABANDONED_AT_EXIT, timeout)
        self.feeder.close(timeout)
        return n

    def _forget_at_fork(self) -> None:
        """In a forked child: the runs open at the fork are the parent's (forgotten, counted)."""
        self._lock = threading.Lock()  # a parent thread may have held it at the fork
        n = self._forget_open()
        if n:
            self.health.count("ignored", "open_at_fork", n=n)

    @property
    def n_paused(self) -> int:
        """Runs paused by LangGraph's interrupt, waiting to be resumed."""
        return self._lifetimes.n_paused

    @property
    def errors(self) -> dict[str, int]:
        """Internal errors caught on the agent's path or the worker, by where."""
        return self.health.category("error")

    def record_outcome(self, trajectory_id: str, success: Any = None, q_z: float | None = None) -> None:
        """The outcome (True/False, 1/0, "true"/"false") or a censored run's q_Z, any time after the run;
        after the accumulator's close: counted, logged."""
        if self.tracker.accumulator.closed:
            self.health.count("rejected", "resolve_after_close")
            logger.warning(
                "tps-tracer: record_outcome(%r) after acc.close(): the accumulator and its sink are closed, so "
                "this outcome is not recorded; record outcomes before close(), or append them to the file with "
                "JsonlSink(path).resolve(...)",
                trajectory_id,
            )
            return
        try:
            outcome = as_outcome(success)
        except InvalidOutcome as exc:
            self.health.count("rejected", "invalid_outcome", f"{trajectory_id!r}: record_outcome: {exc}")
            if q_z is None:
                return
            outcome = None
        self.feeder.resolve(trajectory_id, outcome, q_z)

    def _fail(self, where: str, exc: BaseException) -> None:
        self.health.count("error", where, f"{where} ({type(exc).__name__}: {exc}); the agent is unaffected")
