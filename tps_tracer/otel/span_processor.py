"""`TPSSpanProcessor`: TPS capture for any agent that emits OpenTelemetry spans.

    provider = TracerProvider()
    acc = Accumulator(sink="runs.jsonl")
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)                 # next to your exporter's processor
    LangChainInstrumentor().instrument(tracer_provider=provider)   # or any OpenInference /
                                                                   # GenAI-semconv instrumentor
    ...run the agent...
    processor.record_outcome(trajectory_id, success=True)  # whenever the grade is known
    processor.force_flush(); acc.snapshot()

A trajectory is one agent run: by default the spans under a local root span (a span with
no parent in this process); `root_matcher` picks the agent span instead when the agent runs
inside a span of yours (a web request). Its id is the run's `tps_trajectory_id` metadata
(OpenInference `metadata`, Traceloop association properties) or `tps.trajectory_id`
attribute, else the trace id in hex. Its steps are its LLM spans in start order (see
`span_reading.py` for the dialects read); its stop reason comes from the root span's end:
the `tps.stop_reason` attribute, the recorded exception (GraphRecursionError, the call
limit errors, pydantic-ai's UsageLimitExceeded -> max_steps, OutputParserException ->
parse_error, ToolException -> tool_error), or the canned budget texts of runtimes that
return normally; a root that looks clean is still a budget stop when an agent span under
it ended on one (the OpenAI Agents SDK's "Max turns exceeded") or, for smolagents, when the
run ended on the final answer forced by max_steps (`agent_frameworks.py`). The limit the
spans state (request_limit, max_turns, smolagents.max_steps) is the budget that stopped the
run, its horizon, whatever `tps_horizon` the run carries (trajectory.py). Malformed model
output (only invalid tool calls, seen on the LLM span or on the chain span that encloses
it, a parser span that raised, a call create_agent's model node rejected or replaced: see
`capture/stop_signals.py`) is a repair. Steps, repairs, stop precedence, the
horizon rule and outcomes are decided by the trajectory core (`tps_tracer.tracking`), the
same as for the LangChain handler: this file only reads spans.

Without an agent span: a plain loop whose model calls are separate traces (each call its
own root) forms ONE trajectory when the calls carry the same `tps_trajectory_id` (OpenInference
`using_metadata({"tps_trajectory_id": ...})`, or a `tps.trajectory_id` attribute); it stays
open until `declare_stop(trajectory_id, reason)` (or idles out, abandoned). Model calls
without an id are one trajectory each.

Order: on_start counts the open spans of each trace, so when the root ends before some of
its children (async work, spans ended out of order) the trajectory is finished when the
last of them ends, or ROOT_ENDED_GRACE seconds after its last span event (or at shutdown /
acc.close()), from its root: a run cancelled by asyncio leaves OpenInference's model span
open forever, and its root says timeout. Memory: a trace keeps references to its LLM and
failed spans only, at most `max_spans_per_trace`. A trace with no span event for `idle_timeout` seconds is
finished early (abandoned: stop reason capture_lost, counted in the health ledger); its later
spans are dropped and counted, never re-opening it. A run paused by LangGraph's interrupt() (a
GraphInterrupt exception event on a span of its trace) is not idle: it waits, outside the idle
sweep, for a later trace naming its trajectory id or LangGraph thread id, which continues it
(one record); the rules are tps_tracer/open_runs.py's, shared with the LangChain handler.
Active traces are never cut short: more than `max_open_traces` open traces only logs a
warning, since a run cut short biases every score. A full capture queue holds the emitting
thread back (backpressure) instead of dropping spans; a span event given up after `max_block`
seconds marks its trace, which is then recorded as capture_lost, never scored with a hole in it.

Cost on the agent's path: on_start and on_end put the span on the capture worker's queue and
return; the per-trace bookkeeping (under one lock), reading attributes, decoding JSON and
extracting signals all happen on that worker thread, in span order.
`tests/benchmarks/bench_span_processor.py` measures the calls against a no-op processor
and the SDK's own per-span cost. With `background=False` all of it runs in the caller.
Nothing raises into the instrumented application: errors are counted (health: error).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from tps_tracer import at_exit
from tps_tracer.capture.step_signals import SignalExtractor
from tps_tracer.capture.stop_signals import NOT_TOOL_FAILURES, PARSE_EXCEPTIONS, classify_failed_call, short_name
from tps_tracer.errors import InputError
from tps_tracer.open_runs import DEFAULT_PAUSE_TIMEOUT, OpenRuns, is_interrupt, tighter
from tps_tracer.otel import span_reading as sr
from tps_tracer.otel.span_fields import attributes as attrs_of
from tps_tracer.otel.span_fields import events as events_of
from tps_tracer.otel.trace_links import SpanLink, TraceLinks
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking.adapter import TrackedAdapter, never_raises
from tps_tracer.tracking.keys import PARSE_RETRY_TOOL
from tps_tracer.tracking.tracker import TrajectoryTracker
from tps_tracer.tracking.trajectory import TrajectoryState
from tps_tracer.tracking.worker import APPLY, DEFAULT_MAX_BLOCK, DEFAULT_MAX_QUEUE_SIZE, Calibration

if TYPE_CHECKING:  # the accumulator pulls in the evaluation layer: not on the capture path's import
    from tps_tracer.online.accumulator import Accumulator

SCOPE_NAME = "tps_tracer"  # the instrumentation scope of our own spans, which the processor skips
DEFAULT_MAX_OPEN_TRACES = 10_000
DEFAULT_MAX_SPANS_PER_TRACE = 10_000
DEFAULT_IDLE_TIMEOUT = 600.0
logger = logging.getLogger("tps_tracer")
_SWEEP_EVERY_SECONDS = 1.0  # while spans flow (it was every 1024 spans: a quiet service's runs never idled out)
# A trace whose root has ended waits this long (no span event) for its children still open, then is
# finished from its root: asyncio cancellation leaves OpenInference's cancelled model span open forever.
ROOT_ENDED_GRACE = 5.0


@dataclass
class _Trace:
    open: int = 0
    llm: list[ReadableSpan] = field(default_factory=list)
    failures: list[ReadableSpan] = field(default_factory=list)  # non-LLM spans that ended in error
    root: ReadableSpan | None = None
    # span id of each model call's parent -> that parent once ended (None before), see _enclosing_malformed
    callers: dict[int, ReadableSpan | None] = field(default_factory=dict)
    last_ended: ReadableSpan | None = None  # the root's output may be on this, its last child (see _root_attributes)
    dropped: int = 0  # spans over max_spans_per_trace
    lost: str | None = None  # why a span event of this trace never reached the worker (then capture_lost)
    generation: int = 0  # agent runs already finished in this trace (root_matcher mode)
    last_seen: float = 0.0  # the clock at its last span event (idle sweep)
    interrupted: bool = False  # a span recorded LangGraph's interrupt: the run's end is a pause


def _tool_failure(span: ReadableSpan) -> bool:
    """A tool span that ended in error because the tool failed: not the parser's retry tool, and not a
    tool cancelled with its run (asyncio.wait_for's timeout: CancelledError), which did not fail."""
    attributes = attrs_of(span)
    if span.name == PARSE_RETRY_TOOL or not sr.is_tool_span(attributes):
        return False
    return not {short_name(n) for n in sr.exception_names(events_of(span), attributes)} & NOT_TOOL_FAILURES


def _interrupted(span: ReadableSpan) -> bool:
    """Whether the span recorded LangGraph's interrupt (an `exception` event of type GraphInterrupt:
    OpenInference records it on the node's span, whose status stays OK)."""
    return any(
        e.name == "exception" and is_interrupt((e.attributes or {}).get("exception.type")) for e in events_of(span)
    )


@dataclass
class _Grouped:
    """A trajectory of root-level model calls from several traces, grouped by their trajectory id."""

    state: TrajectoryState
    links: list[SpanLink] = field(default_factory=list)
    last_seen: float = 0.0


class TPSSpanProcessor(SpanProcessor, TrackedAdapter):
    def __init__(
        self,
        accumulator: Accumulator | None = None,
        *,
        capture: bool = True,
        links: TraceLinks | None = None,
        root_matcher: Callable[[ReadableSpan], bool] | None = None,
        horizon: int | None = None,
        repair_budget: int | None = None,  # None: the agent's own retries (tracking/trajectory.py)
        extractor: SignalExtractor | None = None,
        calibration: Calibration | None = None,
        max_open_traces: int = DEFAULT_MAX_OPEN_TRACES,
        max_spans_per_trace: int = DEFAULT_MAX_SPANS_PER_TRACE,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        pause_timeout: float | None = DEFAULT_PAUSE_TIMEOUT,
        background: bool = True,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        clock: Callable[[], float] = time.monotonic,
        max_block: float = DEFAULT_MAX_BLOCK,
        verbal_scale: str | None = None,
    ):
        """capture=False only records where each trajectory's root span is (`links`), for exporters
        when the LangChain handler does the capture. horizon: the step budget of every run (a run's
        `tps_horizon` metadata or `tps.horizon` attribute overrides it), the horizon of a max_steps
        you declare; a budget stop the spans show has the horizon of the budget that stopped it.
        verbal_scale: the scale of bare numbers in stated confidences (as TPSCallbackHandler's;
        `tps_verbal_scale` metadata).
        idle_timeout / pause_timeout: as TPSCallbackHandler's (the accumulator's idle_timeout applies too)."""
        if capture and accumulator is None:
            raise InputError("capture needs an accumulator")
        self.accumulator = accumulator
        self.capture = capture
        self.links = links if links is not None else TraceLinks()
        self.root_matcher = root_matcher
        self.max_open_traces = max_open_traces
        self.max_spans_per_trace = max_spans_per_trace
        if accumulator is None:  # links-only use: a private accumulator, imported only then
            from tps_tracer.online.accumulator import Accumulator

            accumulator = Accumulator(bootstrap=0)
        self.tracker = TrajectoryTracker(
            accumulator,
            source="otel",
            repair_budget=repair_budget,
            horizon=horizon,
            extractor=extractor,
            calibration=calibration,
            background=background,
            max_queue_size=max_queue_size,
            max_block=max_block,
            verbal_scale=verbal_scale,
        )
        # The lifetime rules (tps_tracer/open_runs.py): runs paused by LangGraph's interrupt (kept,
        # not idle, until a later trace names their trajectory id or thread, or pause_timeout), the
        # idle test, and the traces finished early (idle, shutdown), whose late spans are dropped
        # and counted, never allowed to open the trace again (that split one run into two records).
        self._lifetimes: OpenRuns[TrajectoryState] = self.tracker.lifetimes(idle_timeout, pause_timeout)
        self.idle_timeout = self._lifetimes.idle_timeout
        self._clock = clock
        self._warned_open = False
        self._lock = threading.Lock()
        self._traces: OrderedDict[int, _Trace] = OrderedDict()  # oldest first
        self._grouped: OrderedDict[str, _Grouped] = OrderedDict()  # root-less trajectories, oldest first
        self._last_sweep = clock()
        # on_start / on_end only hand the span to the worker (one bounded queue put); the
        # bookkeeping below runs there, in order with the scoring work it triggers.
        self._handoff = self.feeder.handoff(self._dropped)
        # Bound once: `self._track_start` in on_start would build a new method object per span, one
        # more container for the cyclic GC to count while the span waits in the queue.
        self._start_job = self._track_start
        self._end_job = self._track_end
        at_exit.register_adapter(self)  # a script that never shuts the provider down still gets its runs
        accumulator.finish_on_close(self._finish_open)  # acc.close() records the runs still in flight

    # ------------------------------------------------------------------ public API

    def declare_stop(self, trajectory_id: str, reason: str | StopReason, horizon: int | None = None) -> None:
        """End a trajectory of root-level model calls grouped by `tps_trajectory_id` (a plain loop).

        Applied on the worker after every span handed off before this call, so the loop's
        last model call is part of it. An unknown reason raises ValueError (your code calls this)."""
        stop = StopReason(reason)
        self.feeder.call(lambda: self._declare(trajectory_id, stop, horizon), "declare_stop")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every finished trajectory has reached the accumulator."""
        return self.feeder.flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Finish the traces and grouped trajectories still open (as abandoned) and stop the worker."""
        self._shut_down("shutdown")

    def _close_at_exit(self, timeout: float) -> int:
        """At interpreter exit (tps_tracer/at_exit.py), unless shut down: as shutdown(), abandoned "exit"."""
        if self.feeder.closed:
            return 0
        if self.tracker.accumulator.closed:  # its runs were recorded by its close(): stops would be refused
            self.feeder.close(timeout)
            return 0
        return self._shut_down(at_exit.ABANDONED_AT_EXIT, timeout)

    def _shut_down(self, why: str, timeout: float | None = None) -> int:
        """shutdown(): how many runs still open were recorded as abandoned (`why`)."""
        n = self._finish_open(why, timeout)
        self.feeder.close(timeout)
        return n

    def _finish_open(self, why: str, timeout: float | None = None) -> int:
        """Queue the end of every run still open, abandoned (`why`); how many."""
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
        self._finish_paused(paused, why)
        for trace_id, st in leftover:
            self._finish_early(trace_id, st, why)
        for g in grouped:
            self.feeder.call(functools.partial(self._end_grouped, g, abandoned=why), "finish")
        return len(paused) + len(leftover) + len(grouped)

    def _forget_at_fork(self) -> None:
        """In a forked child (tps_tracer/at_exit.py): the traces open at the fork are the parent's,
        which finishes them; this copy forgets them (counted), so the child records only its own."""
        self._lock = threading.Lock()  # a parent thread may have held it at the fork
        n = len(self._traces) + len(self._grouped) + self._lifetimes.forget_all()
        self._traces.clear()
        self._grouped.clear()
        if n:
            self.health.count("ignored", "open_at_fork", n=n)

    @property
    def n_open(self) -> int:
        """Open traces and trajectories, paused ones included."""
        return len(self._traces) + len(self._grouped) + self._lifetimes.n_paused

    @property
    def n_paused(self) -> int:
        """Runs paused by LangGraph's interrupt, waiting to be resumed."""
        return self._lifetimes.n_paused

    # ------------------------------------------------------------------ the agent's path

    @never_raises("on_start")
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._handoff((APPLY, self._start_job, span))

    @never_raises("on_end")
    def on_end(self, span: ReadableSpan) -> None:
        self._handoff((APPLY, self._end_job, span))

    def _dropped(self, event: tuple[Any, ...]) -> None:
        """A span event given up (counted by the worker): mark its trace, in order, on the worker."""
        self.feeder.mark((APPLY, self._mark_lost, event[2].context.trace_id))

    def _mark_lost(self, trace_id: int) -> None:
        """On the worker: the trace lost a span event, so its run is recorded as capture_lost."""
        with self._lock:
            st = self._traces.get(trace_id)
            if st is None and not self._lifetimes.is_gone(trace_id):
                st = self._traces[trace_id] = _Trace(last_seen=self._clock())
            if st is not None:
                st.lost = st.lost or "queue_full"

    # ------------------------------------------------------------------ the worker: per-span bookkeeping

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
            if st is None and not self._lifetimes.is_gone(trace_id):
                st = self._traces[trace_id] = _Trace()
                overflow = len(self._traces) > self.max_open_traces and not self._warned_open
            if st is not None:
                st.open += 1
                st.last_seen = now
        if st is None:
            self._late_span()
            return
        if overflow:
            self._warned_open = True
            logger.warning(
                "tps-tracer: more than %d traces open at once (max_open_traces); none is cut short, but "
                "traces that never end stay in memory until they idle out (idle_timeout=%s s)",
                self.max_open_traces,
                self.idle_timeout,
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
        if self.root_matcher is None:
            is_root = parent is None or parent.is_remote
        else:
            is_root = bool(self.root_matcher(span))
        # langchain-classic AgentExecutor retries malformed output through an "_Exception" tool run.
        failed = span.status.status_code is StatusCode.ERROR or span.name == PARSE_RETRY_TOOL
        interrupted = not llm and bool(events_of(span)) and _interrupted(span)
        finish: _Trace | None = None
        context = span.context
        trace_id = context.trace_id
        now = self._clock()
        with self._lock:
            st = self._traces.get(trace_id)
            if st is None:
                if self._lifetimes.is_gone(trace_id):
                    if is_root:
                        self._lifetimes.forget_gone(trace_id)  # the run's end: nothing more will come from it
                    self._late_span()
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

    def _late_span(self) -> None:
        self.health.count(
            "dropped", "abandoned_run_event", "a span of a trace finished early (idle or shut down) was dropped"
        )

    def _detach(self, trace_id: int, st: _Trace) -> _Trace:
        """Under the lock: take a finished run out of its trace (kept open in root_matcher mode)."""
        if self.root_matcher is None or st.open <= 0:
            del self._traces[trace_id]
            return st
        done = _Trace(open=0, llm=st.llm, failures=st.failures, root=st.root, dropped=st.dropped)
        done.generation, done.last_ended, done.callers = st.generation, st.last_ended, st.callers
        st.llm, st.failures, st.root, st.last_ended, st.callers, st.dropped = [], [], None, None, {}, 0
        st.generation += 1
        return done

    # ------------------------------------------------------------------ bounded memory

    def sweep(self, now: float | None = None) -> int:
        """Finish traces and grouped trajectories with no span event for idle_timeout seconds, and
        runs paused by an interrupt for pause_timeout seconds (abandoned: pause_timeout); a trace
        whose root has ended is finished (not abandoned) ROOT_ENDED_GRACE s after its last span event."""
        now = self._clock() if now is None else now
        idle: list[tuple[int, _Trace]] = []
        idle_groups: list[_Grouped] = []
        lifetimes = self._lifetimes  # paused runs are not in _traces: never idle
        grace = tighter(ROOT_ENDED_GRACE, lifetimes.idle_timeout) or ROOT_ENDED_GRACE
        with self._lock:
            self._last_sweep = now
            for trace_id, st in list(self._traces.items()):
                if lifetimes.idle(st.last_seen, now) or (st.root is not None and now - st.last_seen >= grace):
                    idle.append((trace_id, self._traces.pop(trace_id)))
                    lifetimes.remember_gone([trace_id], now)
            if lifetimes.idle_timeout is not None:
                lifetimes.expire(now)
                for tid, g in list(self._grouped.items()):
                    if lifetimes.idle(g.last_seen, now):
                        idle_groups.append(self._grouped.pop(tid))
            expired = lifetimes.expired(now)
        for trace_id, st in idle:
            self._finish_early(trace_id, st, "idle")
        for g in idle_groups:
            self.feeder.call(functools.partial(self._end_grouped, g, abandoned="idle"), "finish")
        self._finish_paused(expired, "pause_timeout")
        return len(idle) + len(idle_groups) + len(expired)

    def _finish_paused(self, paused: list[TrajectoryState], why: str) -> None:
        """Runs paused by an interrupt and never resumed: recorded, abandoned (`why`) like every run cut short."""
        for state in paused:
            self.feeder.call(
                functools.partial(self.tracker.finish, state, (StopReason.OTHER, "paused"), abandoned=why), "finish"
            )

    def _finish_early(self, trace_id: int, st: _Trace, why: str) -> None:
        """A trace taken out before its last span ended: finished if it holds a run, else only counted.

        Without a finished model call there is nothing to record (as for the handler's runs
        evicted before their first call returned), but the loss is counted, never silent. A run
        whose root has ended was seen to end: it is finished from its root, not abandoned, and
        the spans it never ended are counted (`unended_spans`)."""
        if st.root is None and not st.llm:
            self.health.count("abandoned", why)
            return
        abandoned = None if st.root is not None and st.lost is None else why
        if abandoned is None and st.open > 0:
            self.health.count("ignored", "unended_spans", n=st.open)
        self.feeder.call(lambda: self._finish(trace_id, st, abandoned=abandoned), "finish")

    # ------------------------------------------------------------------ the worker: spans -> a trajectory

    @staticmethod
    def _root_attributes(st: _Trace) -> Mapping[str, Any]:
        """The root's attributes, completed by its last child's when the root records no output.

        OpenLLMetry (opentelemetry-instrumentation-langchain 0.62) wraps a LangGraph run in an
        `invoke_agent` span that records only the agent's name; the final state (the run's
        output) and the run metadata are on its child `LangGraph.workflow`, which is the last
        span to end before the root."""
        root, child = st.root, st.last_ended
        attrs = attrs_of(root) if root is not None else {}
        if (
            root is None
            or child is None
            or child.parent is None
            or child.parent.span_id != root.context.span_id
            or sr.has_output(attrs)
        ):
            return attrs
        return {**attrs_of(child), **attrs}

    def _finish(self, trace_id: int, st: _Trace, abandoned: str | None = None) -> None:
        abandoned = abandoned or st.lost
        root = st.root
        root_attrs = self._root_attributes(st)
        metadata = sr.run_metadata(root_attrs)  # decoded once: the id below is read from it
        steps = sorted(st.llm, key=lambda s: s.start_time or 0)
        tid = self._named_id(root_attrs, metadata)
        if tid is None:
            for span in steps:
                span_attrs = attrs_of(span)
                span_metadata = sr.run_metadata(span_attrs)
                tid = self._named_id(span_attrs, span_metadata)
                if tid is not None:
                    metadata = {**span_metadata, **metadata}
                    break
        if tid is None and self._blank_id(root_attrs, steps):
            # An empty id ("" from a template with nothing filled in) is no id: the trace id is used.
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
        malformed = self._parser_failures(steps, st.failures) | self._enclosing_malformed(steps, st)
        for i, span in enumerate(steps):
            self._model_call(state, span, i in malformed)
        tool_failed = self._tool_failed_last(steps, st.failures)
        observed = (StopReason.OTHER, "")
        stated_limit = None  # the framework's own step budget, as its spans state it
        if root is not None and abandoned is None:
            failed = root.status.status_code is StatusCode.ERROR
            last = max(steps, key=lambda s: s.end_time or 0, default=None)
            observed, stated_limit = sr.classify_run(root, root_attrs, failed, tool_failed, st.failures, last)
            if st.open > 0 and observed[0] is StopReason.TIMEOUT:
                # Cancelled (asyncio.wait_for): OpenInference ends every span it started but the model
                # call in flight, whose error langchain-core reports after the root's. A call made, as the
                # handler counts it (tracker.finish), so a run cut in its first call is recorded too.
                state.calls_started = state.n_calls + st.open
        extra: dict[str, Any] = {"otel_trace_id": f"{trace_id:032x}"}
        if root is not None:
            extra["otel_span_id"] = f"{root.context.span_id:016x}"
        state.tool_errors += sum(1 for f in st.failures if _tool_failure(f))
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
            budget_label=sr.horizon_label(root_attrs, metadata),
            stopped_by=stated_limit,
            outcome_label=sr.outcome_label(root_attrs, metadata) if root is not None else None,
            extra=extra,
        )

    @staticmethod
    def _named_id(attributes: Mapping[str, Any], metadata: Mapping[str, Any]) -> str | None:
        """The trajectory id the attributes (and their run metadata) name; None for none, or an empty / blank one."""
        tid = sr.trajectory_id_in(attributes, metadata)
        return tid if tid is not None and tid.strip() else None

    @staticmethod
    def _blank_id(root_attrs: Mapping[str, Any], steps: list[ReadableSpan]) -> bool:
        """Whether the run names a trajectory id that is empty or blank (counted once per run)."""
        return any(sr.trajectory_id_of(attrs) is not None for attrs in (root_attrs, *(attrs_of(s) for s in steps)))

    def _model_call(self, state: TrajectoryState, span: ReadableSpan, marked_malformed: bool) -> None:
        if span.status.status_code is StatusCode.ERROR:
            self.tracker.failed_call(state, classify_failed_call(sr.exception_names(events_of(span), attrs_of(span))))
            return
        if state.fixed is not None:  # the stop is fixed: later calls are counted, never read
            state.decide_call(False, self.tracker.repair_budget)
            return
        step = sr.read_llm_step(attrs_of(span))
        self.tracker.model_call(state, step.raw, step.malformed or marked_malformed)

    # ------------------------------------------------------------------ trajectories without an agent span

    def _add_to_group(self, tid: str, trace_id: int, span: ReadableSpan, metadata: Mapping[str, Any]) -> None:
        """On the worker: one root-level model call of the trajectory `tid` (kept open for declare_stop)."""
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
        state = g.state
        self.tracker.finish(
            state,
            (StopReason.OTHER, "no stop declared"),
            abandoned=abandoned,
            budget_label=sr.horizon_label({}, state.metadata),
            extra=extra,
        )

    @staticmethod
    def _parser_failures(steps: list[ReadableSpan], failures: list[ReadableSpan]) -> set[int]:
        """Indices of model calls whose output a parser then rejected (OutputParserException, "_Exception")."""
        marked: set[int] = set()
        for f in failures:
            names = {short_name(n) for n in sr.exception_names(events_of(f), attrs_of(f))}
            if not names & PARSE_EXCEPTIONS and f.name != PARSE_RETRY_TOOL:
                continue
            # The call it rejected is the last one to end before it did (the parser span, the
            # chain enclosing call + parser, and the "_Exception" retry all point to the same one).
            before = [i for i, s in enumerate(steps) if (s.end_time or 0) <= (f.end_time or 0)]
            if before:
                marked.add(before[-1])
        return marked

    @staticmethod
    def _enclosing_malformed(steps: list[ReadableSpan], st: _Trace) -> set[int]:
        """Indices of model calls whose enclosing span shows their output was malformed or discarded.

        GenAI-semconv LLM spans (OpenLLMetry) record the text and valid tool calls but drop
        LangChain's `invalid_tool_calls`; the chain or graph node around the call records the
        whole AIMessage: a parent holding exactly one model call is read, so its output is that
        call's message. create_agent's model node keeps only its last call (a retry middleware
        discarded the others) and may reject that one too (ToolStrategy's retry; the rules:
        capture/stop_signals.py)."""
        marked: set[int] = set()
        if not st.callers:
            return marked
        # Each step's parent id read once (a plain dict count: a Counter costs ~10 us per run here).
        parents = [s.parent.span_id if s.parent is not None else None for s in steps]
        per_parent: dict[int | None, list[int]] = {}
        for i, pid in enumerate(parents):
            per_parent.setdefault(pid, []).append(i)
        for pid, calls in per_parent.items():
            caller = st.callers.get(pid) if pid is not None else None
            if caller is None:
                continue
            attrs = attrs_of(caller)
            if sr.is_agent_model_node(attrs):
                marked.update(calls[:-1])
                if sr.node_rejected_answer(attrs):
                    marked.add(calls[-1])
            elif len(calls) == 1 and sr.output_is_invalid_tool_calls(attrs):
                marked.add(calls[0])
        return marked

    @staticmethod
    def _tool_failed_last(steps: list[ReadableSpan], failures: list[ReadableSpan]) -> bool:
        """A tool span failed after the last model call (the run then ended on that failure)."""
        last_call = max((s.end_time or 0 for s in steps), default=0)
        return any(_tool_failure(f) and (f.end_time or 0) > last_call for f in failures)
