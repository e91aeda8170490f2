"""`TPSSpanProcessor`: OpenTelemetry spans translated into the trajectory core's calls, on the worker. A
trajectory is the spans under a local root (or `root_matcher`'s), or root-level model calls naming one id
(ended by `declare_stop`). A root ended before its children waits ROOT_ENDED_GRACE s (asyncio cancellation).
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from tps_tracer.capture.step_signals import SignalExtractor
from tps_tracer.capture.stop_signals import classify_failed_call
from tps_tracer.errors import InputError
from tps_tracer.open_runs import DEFAULT_PAUSE_TIMEOUT, tighter
from tps_tracer.otel import span_reading as sr
from tps_tracer.otel.span_reading import attrs_of, events_of
from tps_tracer.otel.trace_links import SpanLink, TraceLinks
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking import tracker
from tps_tracer.tracking.keys import HORIZON_KEY, OUTCOME_KEY, PARSE_RETRY_TOOL
from tps_tracer.tracking.tracker import TrackedAdapter, TrajectoryState, never_raises

if TYPE_CHECKING:  # the accumulator pulls in the evaluation layer: not on the capture path's import
    from tps_tracer.online.accumulator import Accumulator

SCOPE_NAME = "tps_tracer"  # the instrumentation scope of our own spans, which the processor skips
_SWEEP_EVERY_SECONDS = 1.0  # while spans flow
ROOT_ENDED_GRACE = 5.0  # seconds a trace whose root ended waits for its children still open


@dataclass
class _Trace:
    open: int = 0
    llm: list[ReadableSpan] = field(default_factory=list)
    failures: list[ReadableSpan] = field(default_factory=list)  # non-LLM spans that ended in error
    root: ReadableSpan | None = None
    # span id of each model call's parent -> that parent once ended (None before): sr.enclosing_malformed
    callers: dict[int, ReadableSpan | None] = field(default_factory=dict)
    last_ended: ReadableSpan | None = None  # the root's output may be on this, its last child
    dropped: int = 0  # spans over max_spans_per_trace
    lost: str | None = None  # why a span event of this trace never reached the worker (then capture_lost)
    generation: int = 0  # agent runs already finished in this trace (root_matcher mode)
    last_seen: float = 0.0
    interrupted: bool = False  # a span recorded LangGraph's interrupt: the run's end is a pause


@dataclass
class _Grouped:  # a trajectory of root-level model calls from several traces, grouped by their id
    state: TrajectoryState
    links: list[SpanLink] = field(default_factory=list)
    last_seen: float = 0.0


class TPSSpanProcessor(SpanProcessor, TrackedAdapter):
    _late_detail = "a span of a trace finished early (idle or shut down) was dropped"

    def __init__(
        self,
        accumulator: Accumulator | None = None,
        *,
        capture: bool = True,
        links: TraceLinks | None = None,
        root_matcher: Callable[[ReadableSpan], bool] | None = None,
        horizon: int | None = None,
        repair_budget: int | None = None,
        extractor: SignalExtractor | None = None,
        calibration: tracker.Calibration | None = None,
        max_open_traces: int = 10_000,
        max_spans_per_trace: int = 10_000,
        idle_timeout: float | None = 600.0,
        pause_timeout: float | None = DEFAULT_PAUSE_TIMEOUT,
        background: bool = True,
        max_queue_size: int = tracker.DEFAULT_MAX_QUEUE_SIZE,
        clock: Callable[[], float] = time.monotonic,
        max_block: float = tracker.DEFAULT_MAX_BLOCK,
        verbal_scale: str | None = None,
    ):
        """capture=False only records root spans (`links`) for exporters, when the handler captures. The
        other options are TPSCallbackHandler's; more than `max_open_traces` only warns."""
        if capture and accumulator is None:
            raise InputError("capture needs an accumulator")
        self.capture = capture
        self.root_matcher = root_matcher
        self.max_open_traces = max_open_traces
        self.max_spans_per_trace = max_spans_per_trace
        if accumulator is None:  # links-only use: a private accumulator, imported only then
            from tps_tracer.online.accumulator import Accumulator

            accumulator = Accumulator(bootstrap=0)
        self.links = links if links is not None else TraceLinks(accumulator.health)
        self._traces: OrderedDict[int, _Trace] = OrderedDict()  # oldest first
        self._grouped: OrderedDict[str, _Grouped] = OrderedDict()  # root-less trajectories, oldest first
        self._track("otel", locals())  # the constructor arguments, by name
        self._handoff = self.feeder.handoff(self._dropped)
        # Bound once: a bound method per span would be one more object for the cyclic GC while it waits.
        self._start_job = self._track_start
        self._end_job = self._track_end

    def declare_stop(self, trajectory_id: str, reason: str | StopReason, horizon: int | None = None) -> None:
        """End a trajectory of root-level model calls grouped by `tps_trajectory_id` (a plain loop), after
        the spans handed off before. An unknown reason raises ValueError."""
        stop = StopReason(reason)
        self.feeder.call(lambda: self._declare(trajectory_id, stop, horizon), "declare_stop")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every finished trajectory has reached the accumulator."""
        return self.feeder.flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Finish the runs still open (abandoned) and stop the worker."""
        self._finish_open("shutdown")
        self.feeder.close(None)

    def _finish_open(self, why: str, timeout: float | None = None) -> int:
        if self.feeder.closed:
            return 0
        self.feeder.flush(timeout)  # the spans handed off so far
        with self._lock:
            leftover = list(self._traces.items())
            self._traces.clear()
            grouped = list(self._grouped.values())
            self._grouped.clear()
            paused = self._lifetimes.paused()
            for state in paused:
                self._lifetimes.unpause(state.tid)
        for run in (*paused, *leftover, *grouped):
            self._abandon(run, why)
        return len(paused) + len(leftover) + len(grouped)

    def _forget_open(self) -> int:
        n = len(self._traces) + len(self._grouped) + self._lifetimes.forget_all()
        self._traces.clear()
        self._grouped.clear()
        return n

    @property
    def n_open(self) -> int:
        """Open traces and trajectories, paused ones included."""
        return len(self._traces) + len(self._grouped) + self._lifetimes.n_paused

    @never_raises("on_start")
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._handoff((tracker.APPLY, self._start_job, span))

    @never_raises("on_end")
    def on_end(self, span: ReadableSpan) -> None:
        self._handoff((tracker.APPLY, self._end_job, span))

    def _dropped(self, event: tuple[Any, ...]) -> None:
        """A span event given up (counted): mark its trace lost, in order."""
        self.feeder.mark((tracker.APPLY, self._mark_lost, event[2].context.trace_id))

    def _mark_lost(self, trace_id: int) -> None:
        with self._lock:
            st = self._traces.get(trace_id)
            if st is None and trace_id not in self._lifetimes.gone:
                st = self._traces[trace_id] = _Trace(last_seen=self._clock())
            if st is not None:
                st.lost = st.lost or "queue_full"

    @never_raises("on_start")
    def _track_start(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if scope is not None and scope.name == SCOPE_NAME:
            return
        trace_id = span.context.trace_id
        now = self._clock()
        with self._lock:
            st = self._traces.get(trace_id)
            overflow = False
            if st is None and trace_id not in self._lifetimes.gone:
                st = self._traces[trace_id] = _Trace()
                overflow = len(self._traces) > self.max_open_traces
            if st is not None:
                st.open += 1
                st.last_seen = now
        if st is None:
            self._count_late()
        elif overflow:
            self._warn_crowded(
                "tps-tracer: more than %d traces open at once (max_open_traces); none is cut short, but "
                "traces that never end stay in memory until they idle out (idle_timeout=%s s)",
                self.max_open_traces,
            )

    @never_raises("on_end")
    def _track_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if scope is not None and scope.name == SCOPE_NAME:
            return
        attributes = attrs_of(span)
        llm = sr.is_llm_span(attributes)
        if llm and sr.is_internal_call(attributes):  # a middleware's own call (a summary): not a step
            self.health.count("ignored", "middleware_model_calls")
            llm = False
        parent = span.parent
        is_root = (parent is None or parent.is_remote) if self.root_matcher is None else bool(self.root_matcher(span))
        # langchain-classic AgentExecutor retries malformed output through an "_Exception" tool run.
        failed = span.status.status_code is StatusCode.ERROR or span.name == PARSE_RETRY_TOOL
        interrupted = not llm and bool(events_of(span)) and sr.interrupted(span)
        finish: _Trace | None = None
        context = span.context
        trace_id = context.trace_id
        now = self._clock()
        with self._lock:
            st = self._traces.get(trace_id)
            if st is None:
                if trace_id in self._lifetimes.gone:
                    if is_root:
                        self._lifetimes.gone.pop(trace_id, None)  # the run's end: nothing more will come from it
                    self._count_late()
                else:
                    self.health.count("ignored", "late_llm_spans" if llm else "late_spans")
                return
            st.open -= 1
            st.last_seen = now
            st.interrupted = st.interrupted or interrupted
            if llm:
                if parent is not None:
                    st.callers.setdefault(parent.span_id, None)
            elif st.callers and context.span_id in st.callers:
                st.callers[context.span_id] = span
            if llm or (failed and not is_root):
                if len(st.llm) + len(st.failures) < self.max_spans_per_trace:
                    (st.llm if llm else st.failures).append(span)
                else:
                    st.dropped += 1
            if is_root:
                st.root = span
            else:
                st.last_ended = span
            if st.root is not None and (st.open <= 0 or self.root_matcher is not None):
                finish = self._detach(trace_id, st)
            elif st.open <= 0 and st.root is None and not st.llm:
                del self._traces[trace_id]  # nothing of an agent run in it
            sweep = now - self._last_sweep >= _SWEEP_EVERY_SECONDS
        if finish is not None:
            self.feeder.call(lambda: self._finish(trace_id, finish), "finish")
        if sweep:
            self.sweep()

    def _detach(self, trace_id: int, st: _Trace) -> _Trace:
        """Under the lock: a finished run out of its trace (kept open in root_matcher mode)."""
        if self.root_matcher is None or st.open <= 0:
            del self._traces[trace_id]
            return st
        done = replace(st, open=0, lost=None, interrupted=False)
        st.llm, st.failures, st.root, st.last_ended, st.callers, st.dropped = [], [], None, None, {}, 0
        st.generation += 1
        return done

    def _take_idle(self, now: float) -> list[Any]:
        """Idle traces and grouped runs; a trace whose root ended after ROOT_ENDED_GRACE s (paused: never)."""
        lifetimes = self._lifetimes
        grace = tighter(ROOT_ENDED_GRACE, lifetimes.idle_timeout) or ROOT_ENDED_GRACE
        idle: list[Any] = []
        for trace_id, st in list(self._traces.items()):
            if lifetimes.idle(st.last_seen, now) or (st.root is not None and now - st.last_seen >= grace):
                idle.append((trace_id, self._traces.pop(trace_id)))
                lifetimes.remember_gone([trace_id], now)
        if lifetimes.idle_timeout is not None:
            idle += [
                self._grouped.pop(tid) for tid, g in list(self._grouped.items()) if lifetimes.idle(g.last_seen, now)
            ]
        return idle

    def _abandon(self, run: Any, why: str) -> None:
        """A run taken out early (idle, paused too long, shut down); a trace without a model call is only
        counted, one whose root ended is finished from it (not abandoned), its unended spans counted."""
        if isinstance(run, _Grouped):
            self.feeder.call(functools.partial(self._end_grouped, run, abandoned=why), "finish")
        elif not isinstance(run, tuple):  # paused
            self.feeder.call(
                functools.partial(self.tracker.finish, run, (StopReason.OTHER, "paused"), abandoned=why), "finish"
            )
        elif run[1].root is None and not run[1].llm:
            self.health.count("abandoned", why)
        else:
            trace_id, st = run
            abandoned = None if st.root is not None and st.lost is None else why
            if abandoned is None and st.open > 0:
                self.health.count("ignored", "unended_spans", n=st.open)
            self.feeder.call(functools.partial(self._finish, trace_id, st, abandoned), "finish")

    def _finish(self, trace_id: int, st: _Trace, abandoned: str | None = None) -> None:
        abandoned = abandoned or st.lost
        root = st.root
        root_attrs = sr.root_attributes(root, st.last_ended)
        steps = sorted(st.llm, key=lambda s: s.start_time or 0)
        tid, metadata, blank = sr.run_identity(root_attrs, steps)
        if blank:
            self.health.count("ignored", "empty_trajectory_id")
        if tid is not None and abandoned is None and root is not None and steps == [root]:
            self._add_to_group(tid, trace_id, root, metadata)  # a root-level model call of a plain loop
            return
        named = tid is not None
        # LangGraph's checkpointer thread, where a paused run resumes: read only when it can matter.
        thread = sr.thread_id_of(root_attrs) if root is not None and (st.interrupted or self.n_paused) else None
        with self._lock:  # a run paused by an interrupt continues here (its steps so far, one record)
            resumed = self._lifetimes.resume(tid, None if named else thread) if self.capture else None
        if resumed is not None:
            tid = resumed.tid
        elif tid is None:
            tid = f"{trace_id:032x}" + (f"-{st.generation}" if st.generation else "")
        if root is not None:
            self.links.add(tid, SpanLink(trace_id, root.context.span_id))
        if not self.capture:
            return
        state = resumed if resumed is not None else self.tracker.open(tid, metadata)
        malformed = sr.parser_failures(steps, st.failures) | sr.enclosing_malformed(steps, st.callers)
        for i, span in enumerate(steps):
            self._model_call(state, span, i in malformed)
        observed: tuple[StopReason, str] = (StopReason.OTHER, "")
        stated_limit = None  # the framework's own step budget, as its spans state it
        if root is not None and abandoned is None:
            failed = root.status.status_code is StatusCode.ERROR
            observed, stated_limit = sr.classify_run(root, root_attrs, failed, steps, st.failures)
            if st.open > 0 and observed[0] is StopReason.TIMEOUT:
                # Cancelled: the model call in flight never ended its span; a call made, as the handler counts it.
                state.calls_started = state.n_calls + st.open
        extra: dict[str, Any] = {"otel_trace_id": f"{trace_id:032x}"}
        if root is not None:
            extra["otel_span_id"] = f"{root.context.span_id:016x}"
        state.tool_errors += sum(1 for f in st.failures if sr.tool_failure(f))
        if st.interrupted and root is not None and abandoned is None:
            with self._lock:  # paused, not ended: kept (never idle) for the trace that resumes it
                paused = self._lifetimes.pause(tid, thread, state, self._clock(), by_id=named)
            if paused:
                return
        if st.dropped:
            extra["dropped_spans"] = st.dropped
        if st.open > 0 and root is not None:
            extra["unended_spans"] = st.open
        self.tracker.finish(
            state,
            observed,
            abandoned=abandoned,
            budget_label=sr.stated(root_attrs, metadata, HORIZON_KEY),
            stopped_by=stated_limit,
            outcome_label=sr.stated(root_attrs, metadata, OUTCOME_KEY) if root is not None else None,
            extra=extra,
        )

    def _model_call(self, state: TrajectoryState, span: ReadableSpan, marked_malformed: bool) -> None:
        if span.status.status_code is StatusCode.ERROR:
            self.tracker.failed_call(state, classify_failed_call(sr.exception_names(events_of(span), attrs_of(span))))
            return
        if state.fixed is not None:  # the stop is fixed: later calls are counted, never read
            state.decide_call(False, self.tracker.repair_budget)
            return
        step = sr.read_llm_step(attrs_of(span))
        self.tracker.model_call(state, step.raw, step.malformed or marked_malformed)

    def _add_to_group(self, tid: str, trace_id: int, span: ReadableSpan, metadata: Mapping[str, Any]) -> None:
        with self._lock:
            g = self._grouped.get(tid)
            if g is None:
                g = self._grouped[tid] = _Grouped(self.tracker.open(tid, metadata))
            g.last_seen = self._clock()
        g.links.append(SpanLink(trace_id, span.context.span_id))
        if self.capture:
            self._model_call(g.state, span, False)

    def _declare(self, tid: str, reason: StopReason, horizon: int | None) -> None:
        with self._lock:
            g = self._grouped.pop(tid, None)
        if g is None:
            self.health.count("rejected", "declare_stop_unknown", f"declare_stop: no open trajectory {tid!r}")
            return
        g.state.declare(reason, horizon)
        self._end_grouped(g)

    def _end_grouped(self, g: _Grouped, abandoned: str | None = None) -> None:
        if g.links:
            self.links.add(g.state.tid, g.links[0])  # the first call's span stands for the run
        if not self.capture:
            return
        first = g.links[0] if g.links else None
        extra = {} if first is None else {"otel_trace_id": f"{first.trace_id:032x}", "otel_traces": len(g.links)}
        self.tracker.finish(
            g.state,
            (StopReason.OTHER, "no stop declared"),
            abandoned=abandoned,
            budget_label=g.state.metadata.get(HORIZON_KEY),
            extra=extra,
        )
