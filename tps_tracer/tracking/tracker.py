"""`TrajectoryTracker`: the framework-free core under both adapters.

The LangChain handler and the OpenTelemetry span processor translate their events (callbacks,
spans) into these calls and nothing more:

    tracker = TrajectoryTracker(accumulator, source="langchain", ...)
    state = tracker.open("task-17", run_metadata)
    tracker.model_call(state, raw_step, malformed=False)   # each model call that returned
    tracker.returned(state, raw_step, malformed=False)     # ... or held until a parser had its say
    tracker.failed_call(state, failure)                    # each model call that raised
    tracker.finish(state, observed=(StopReason.CLEAN, ""), budget_label=..., outcome_label=...,
                   final_output=..., extra={...})          # once, when the run's end is seen
    tracker.record_outcome("task-17", success=True)        # any time later

It owns the capture worker (extraction off the agent's path), the repair budget, the
stop-reason precedence and the horizon rule (`trajectory.py`), the outcome rules
(`records/record_shape.py`), and the health ledger shared with the accumulator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tps_tracer.capture.step_signals import RawStep, SignalExtractor
from tps_tracer.capture.verbal_confidence import UNDECLARED, check_scale
from tps_tracer.errors import InputError
from tps_tracer.health import HealthLedger
from tps_tracer.open_runs import OpenRuns, check_timeout, tighter
from tps_tracer.records.record_shape import InvalidOutcome, as_outcome
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking.keys import VERBAL_SCALE_KEY
from tps_tracer.tracking.trajectory import (
    StopDecision,
    TrajectoryState,
    decide_stop,
    record_metadata,
    run_budget,
    whole_number,
)
from tps_tracer.tracking.worker import DEFAULT_MAX_BLOCK, DEFAULT_MAX_QUEUE_SIZE, Calibration, CaptureWorker

if TYPE_CHECKING:  # the accumulator pulls in the evaluation layer: not on the capture path's import
    from tps_tracer.online.accumulator import Accumulator

logger = logging.getLogger("tps_tracer")

CONTENT_LIMIT = 4000  # characters kept per text when content capture is on


class TrajectoryTracker:
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
        # None (the default): parse errors follow the agent's own retries (trajectory.py)
        if repair_budget is not None and (
            not isinstance(repair_budget, int) or isinstance(repair_budget, bool) or repair_budget < 0
        ):
            raise InputError(f"repair_budget must be None or an integer >= 0, got {repair_budget!r}")
        if horizon is not None and whole_number(horizon) is None:
            raise InputError(f"horizon must be a whole number >= 1, got {horizon!r}")
        self.accumulator = accumulator
        self.health: HealthLedger = accumulator.health
        self.source = source
        self.repair_budget = repair_budget
        self.horizon = horizon
        self.grader = grader
        self.capture_content = capture_content
        check_scale(verbal_scale)  # a bad scale is the caller's error, raised here
        if verbal_scale is not None:
            if extractor is not None:
                raise InputError("give verbal_scale to the SignalExtractor passed as `extractor`, not both")
            extractor = SignalExtractor(health=self.health, verbal_scale=verbal_scale)
        self.worker = CaptureWorker(
            accumulator,
            extractor,
            calibration,
            background=background,
            max_queue_size=max_queue_size,
            max_block=max_block,
        )
        # The adapter above decides when its runs end; the accumulator drains this worker's queue
        # before it snapshots or closes, so nothing that ended is closed as lost.
        accumulator.leave_lifetimes_to(source, drain=self.worker.flush)

    def lifetimes(self, idle_timeout: float | None, pause_timeout: float | None) -> OpenRuns[Any]:
        """The adapter's lifetime rules. The accumulator's own `idle_timeout` still bounds the runs
        (the tighter of the two applies): it left its idle sweep to the adapter, not the bound."""
        idle = tighter(check_timeout("idle_timeout", idle_timeout), self.accumulator.idle_timeout)
        return OpenRuns(idle, check_timeout("pause_timeout", pause_timeout))

    # ------------------------------------------------------------------ a run's life

    def open(self, tid: str, metadata: Mapping[str, Any] | None = None) -> TrajectoryState:
        return TrajectoryState(tid, dict(metadata) if isinstance(metadata, Mapping) else {})

    def model_call(self, state: TrajectoryState, raw: RawStep, malformed: bool) -> None:
        """A model call that returned: a step (fed to the worker), a repair, or ignored."""
        if state.decide_call(malformed, self.repair_budget):
            if self.capture_content and isinstance(raw.text, str):
                state.texts.append(raw.text[:CONTENT_LIMIT])
            declared = state.metadata.get(VERBAL_SCALE_KEY) if isinstance(state.metadata, Mapping) else None
            if declared is not None:
                raw = replace(raw, verbal_scale=self._run_scale(state.tid, declared))
            self.worker.step(state, raw)

    def returned(self, state: TrajectoryState, raw: RawStep, malformed: bool) -> None:
        """A model call returned that a parser may still reject: held on the run until its next
        call or its end (`commit`); the one held before it is decided now."""
        self.commit(state)
        state.pending, state.pending_malformed = raw, malformed

    def commit(self, state: TrajectoryState) -> None:
        """Decide the held model call: a step, a repair, or the parse error that stops the run."""
        raw = state.pending
        if raw is not None:
            malformed = state.pending_malformed
            state.pending, state.pending_malformed = None, False
            self.model_call(state, raw, malformed)

    def _run_scale(self, tid: str, declared: Any) -> str:
        """The run's `tps_verbal_scale`; an unknown one is counted and reads as undeclared (never
        as the adapter's scale, which the run meant to override)."""
        try:
            return check_scale(declared) or UNDECLARED
        except ValueError as exc:
            self.health.count("rejected", "invalid_verbal_scale", f"{tid!r}: {exc}")
            return UNDECLARED

    def failed_call(self, state: TrajectoryState, failure: tuple[StopReason, str] = (StopReason.OTHER, "")) -> None:
        """A model call that raised; failure: what its exception says (`classify_failed_call`). One
        whose output its client could not parse (parse_error) is malformed output: a repair."""
        if failure[0] is StopReason.PARSE_ERROR:
            self.model_call(state, RawStep(None), malformed=True)
        else:
            state.call_failed(failure)

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
        final_text: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> StopDecision | None:
        """Record the finished trajectory; None when it is not one (no model call was made).

        observed: the adapter's reading of the run's end. budget_label: the run's step
        budget as the run states it (metadata / attribute), validated here: the horizon of a
        stop the user declares. stopped_by: the limit of the budget whose stop `observed` shows
        (None: the calls it allowed), the horizon of that stop (trajectory.py). outcome_label:
        an outcome known up front. final_output: what the grader grades (clean runs only)."""
        if state.capture_lost is not None and abandoned is None:
            abandoned = state.capture_lost  # a step never reached the accumulator: never scored with a hole
        in_flight = state.calls_started - state.n_calls
        if in_flight > 0:  # cancelled mid-call: a failed call, whose own error event arrives late or never
            state.n_calls += in_flight
            state.failed_calls += in_flight
        if state.n_calls == 0 and abandoned is None:
            # A run that never called a model (a wrapper chain, a failing tool node, a web
            # request) is not an agent trajectory: counted, never recorded.
            self.health.count("ignored", "runs_without_model_calls")
            return None
        # A run finished early before its first model call returned is recorded all the same
        # (capture_lost, no steps): every run the evaluator saw start leaves one record.
        decision = decide_stop(state, observed, None, abandoned)
        if decision.reason is StopReason.MAX_STEPS:  # the budgets matter only here
            label = run_budget(budget_label, self.horizon, state.tid, self.health)
            if state.fixed is None:  # the run's own budget stopped it: what it allowed, never the label
                decision = decide_stop(state, observed, run_budget(stopped_by, None, state.tid, self.health), abandoned)
                if label is not None and label != decision.horizon:
                    self.health.count("ignored", "horizon_label_not_the_budget")
            else:
                decision = decide_stop(state, observed, label, abandoned)
        if decision.abandoned is not None:
            self.health.count("abandoned", decision.abandoned)
        md = record_metadata(state, decision, self.source, extra)
        if self.capture_content:
            md["step_texts"] = state.texts
            if final_text is not None:
                md["final_output"] = final_text[:CONTENT_LIMIT]
        # An outcome known now (a label, or the grader's verdict on the worker) goes out with
        # the record: one line, no resolution line after it.
        known = self._label(state.tid, outcome_label) if decision.reason is StopReason.CLEAN else None
        grader = self.grader if decision.reason is StopReason.CLEAN and known is None else None
        self.worker.stop(state, decision.reason.value, decision.horizon, md, known, grader, final_output)
        return decision

    def _label(self, tid: str, label: Any) -> int | None:
        try:
            return as_outcome(label)
        except InvalidOutcome as exc:
            self.health.count("rejected", "invalid_outcome_label", f"{tid!r}: outcome label: {exc}")
            return None

    # ------------------------------------------------------------------ after the run

    def record_outcome(self, trajectory_id: str, success: Any = None, q_z: float | None = None) -> None:
        """The task's outcome (see `as_outcome`) and/or a censored run's q_Z, at any time after the run.

        After the accumulator is closed the outcome can be kept nowhere: refused, counted
        (rejected: resolve_after_close) and logged each time, never raised (adapters don't)."""
        if self.accumulator.closed:
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
        self.worker.resolve(trajectory_id, outcome, q_z)

    def flush(self, timeout: float | None = None) -> bool:
        return self.worker.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        self.worker.close(timeout)
