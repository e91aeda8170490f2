"""`TPSCallbackHandler`: LangChain's callbacks translated into the trajectory core's calls. A trajectory
is an invocation's root run (id: `tps_trajectory_id`, else the root run id), or model calls outside any run
naming one id (a hand-written loop, ended by `declare_stop`). Not `run_inline`: langchain issue 39633.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import ToolMessage
from langchain_core.outputs import LLMResult

from tps_tracer.capture.step_signals import RawStep, SignalExtractor
from tps_tracer.capture.stop_signals import (
    NOT_TOOL_FAILURES,
    PARSE_EXCEPTIONS,
    classify_failed_call,
    is_agent_model_node,
    node_rejected_answer,
)
from tps_tracer.langchain.run_reading import (
    StreamBudget,
    chunk_logprobs,
    current_span_ids,
    exception_names,
    final_message,
    instrumentor_span_ids,
    llm_output,
    n_entries,
    new_budget,
    observed_stop,
)
from tps_tracer.open_runs import DEFAULT_PAUSE_TIMEOUT, is_interrupt
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking import tracker
from tps_tracer.tracking.keys import (
    HORIZON_KEY,
    INTERNAL_CALL_KEY,
    OUTCOME_KEY,
    PARSE_RETRY_TOOL,
    RUN_ID_KEY,
    TRAJECTORY_ID_KEY,
)
from tps_tracer.tracking.tracker import TrackedAdapter, TrajectoryState, never_raises

if TYPE_CHECKING:  # the accumulator pulls in the evaluation layer: not on the capture path's import
    from tps_tracer.online.accumulator import Accumulator

DEFAULT_MAX_OPEN = 10_000  # open runs above which the handler warns (once) that runs may be leaking
DEFAULT_IDLE_TIMEOUT = 3600.0  # seconds without any callback before a run is finished as capture_lost
_STREAM_ENTRY_LIMIT = 100_000  # streamed logprob entries kept per model call


@dataclass
class _Run:  # a trajectory's LangChain side: its run ids and the model output awaiting its verdict
    state: TrajectoryState
    root: UUID | None
    run_ids: list[UUID] = field(default_factory=list)
    pending_node: UUID | None = None  # the create_agent model node the held output's call ran in
    model_nodes: set[UUID] = field(default_factory=set)  # create_agent model node runs in progress
    last_seen: float = 0.0
    interrupted: bool = False  # a node raised LangGraph's interrupt: the root's end is a pause
    ended: bool = False  # finished (once: an idle sweep may race the run's own end)
    trace_ids: dict[str, str] | None = None  # the OpenTelemetry span current at the run's start
    instrumentor_checked: bool = False


class TPSCallbackHandler(BaseCallbackHandler, TrackedAdapter):
    raise_error = False
    _late_detail = "an event of a run finished early (evicted or closed) was dropped"

    def __init__(
        self,
        accumulator: Accumulator,
        *,
        grader: Callable[[Any], Any] | None = None,
        repair_budget: int | None = None,
        horizon: int | None = None,
        extractor: SignalExtractor | None = None,
        calibration: tracker.Calibration | None = None,
        capture_content: bool = False,
        background: bool = True,
        max_open: int = DEFAULT_MAX_OPEN,
        max_queue_size: int = tracker.DEFAULT_MAX_QUEUE_SIZE,
        trajectory_id_key: str = TRAJECTORY_ID_KEY,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        pause_timeout: float | None = DEFAULT_PAUSE_TIMEOUT,
        max_block: float = tracker.DEFAULT_MAX_BLOCK,
        clock: Callable[[], float] = time.monotonic,
        verbal_scale: str | None = None,
    ):
        """The options are described in docs/capture.md ("LangChain / LangGraph"); the run metadata keys
        `tps_horizon`, `tps_verbal_scale` override `horizon`, `verbal_scale` per run."""
        self._track("langchain", locals())  # the constructor arguments, by name
        self.accumulator = accumulator
        self.max_open = max_open
        self._sweep_every = 1.0 if self.idle_timeout is None else min(1.0, self.idle_timeout / 4)
        self.trajectory_id_key = trajectory_id_key
        self.last_trajectory_id: str | None = None
        self._runs: dict[UUID, _Run] = {}  # every run id of an open trajectory (its root's first)
        self._by_tid: dict[str, _Run] = {}
        self._streamed: dict[UUID, list[Any]] = {}  # logprob entries of streamed chunks, per model call
        self._budgets: dict[str, StreamBudget] = {}  # the caller's own step budgets (`budget(...)`)
        # Runs whose stream was closed without a budget: a declare_stop after the break names the fix.
        self._closed_streams: OrderedDict[str, None] = OrderedDict()

    def declare_stop(self, trajectory_id: str, reason: str | StopReason, horizon: int | None = None) -> None:
        """Fix a trajectory's stop reason; one with no root run (a hand-written loop) is finished now.
        An unknown reason raises ValueError (your code calls this, not the agent)."""
        reason = StopReason(reason)
        try:
            with self._lock:
                run = self._by_tid.get(trajectory_id)
                if run is None and trajectory_id in self._closed_streams:
                    self.health.count(
                        "rejected",
                        "declare_stop_after_stream_closed",
                        f"declare_stop: {trajectory_id!r} already ended when its stream was closed (recorded as "
                        "other); to record your own budget, wrap the loop in `with handler.budget(config, "
                        "max_steps=N) as b:` and break when b.exhausted",
                    )
                    return
                if run is None:
                    self.health.count(
                        "rejected", "declare_stop_unknown", f"declare_stop: no open trajectory {trajectory_id!r}"
                    )
                    return
                self.tracker.commit(run.state)  # the last output came before the declaration
                run.state.declare(reason, horizon)
                finish_now = run.root is None  # a hand-written loop, or a run paused by an interrupt
                if finish_now:
                    self._lifetimes.unpause(run.state.tid, run)
            if finish_now:
                self._end(run, outputs=None, error=None)
        except Exception as exc:
            self._fail("declare_stop", exc)

    @contextmanager
    def budget(self, target: str | MutableMapping[str, Any], max_steps: int) -> Iterator[StreamBudget]:
        """Your own step budget around a `graph.stream(...)` loop: `with handler.budget(config, max_steps=N)
        as b:` and `if b.exhausted: break`; a stream closed inside is recorded max_steps, horizon N (not
        `other`). target: the run config (its trajectory id set when missing) or the trajectory id."""
        budget = new_budget(target, self.trajectory_id_key, max_steps)
        with self._lock:
            self._budgets[budget.trajectory_id] = budget
        try:
            yield budget
        finally:
            with self._lock:  # a run still open (its generator not yet closed) keeps the budget until it ends
                if budget.trajectory_id not in self._by_tid and self._budgets.get(budget.trajectory_id) is budget:
                    del self._budgets[budget.trajectory_id]

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything captured so far has reached the accumulator."""
        return self.feeder.flush(timeout)

    def close(self) -> None:
        """Finish the trajectories still open (abandoned: "closed"), then stop the capture worker."""
        self._finish_open("closed")
        self.feeder.close()

    def _finish_open(self, why: str, timeout: float | None = None) -> int:
        try:
            with self._lock:
                still_open = self._open_runs()
            for run in still_open:
                self._abandon(run, why)
            return len(still_open)
        except Exception as exc:
            self._fail("close", exc)
            return 0

    def _forget_open(self) -> int:
        n = len(self._open_runs())
        for runs in (self._runs, self._by_tid, self._streamed, self._budgets):
            runs.clear()
        self._lifetimes.forget_all()
        return n

    def _open_runs(self) -> list[_Run]:
        """Every open trajectory once, oldest first (under the lock)."""
        return list({id(r): r for r in (*self._runs.values(), *self._by_tid.values())}.values())

    @property
    def n_open(self) -> int:
        """Open trajectories, paused ones included."""
        return len(self._by_tid)

    def _take_idle(self, now: float) -> list[_Run]:
        lifetimes = self._lifetimes
        if lifetimes.idle_timeout is None:
            return []
        return [
            r
            for r in self._open_runs()
            if lifetimes.idle(r.last_seen, now) and (r.root is not None or not lifetimes.is_paused(r.state.tid))
        ]

    def _abandon(self, run: _Run, why: str) -> None:
        self._end(run, outputs=None, error=None, abandoned=why)

    def _trajectory_id(self, metadata: Mapping[str, Any] | None) -> str | None:
        """The id the metadata names; None for none or a blank one."""
        wanted = metadata.get(self.trajectory_id_key) if isinstance(metadata, Mapping) else None
        return str(wanted) if wanted is not None and str(wanted).strip() else None

    def _open(self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None, now: float) -> None:
        """A new chain run joins its parent's trajectory, resumes a paused one, or opens one."""
        parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
        wanted = self._trajectory_id(metadata)
        if parent is not None and (wanted is None or wanted == parent.state.tid):
            self._runs[run_id] = parent
            parent.run_ids.append(run_id)
            parent.last_seen = now
            if is_agent_model_node(metadata):
                parent.model_nodes.add(run_id)
            return
        # A paused run is resumed by the same trajectory id, else (naming none) by the same LangGraph thread.
        thread = metadata.get("thread_id") if isinstance(metadata, Mapping) and wanted is None else None
        paused = self._lifetimes.resume(wanted, thread)
        if paused is not None:
            paused.root, paused.run_ids, paused.last_seen = run_id, [run_id], now
            self._runs[run_id] = paused
            return
        if wanted is None and isinstance(metadata, Mapping) and metadata.get(self.trajectory_id_key) is not None:
            self.health.count("ignored", "empty_trajectory_id")  # "" from an unfilled template is no id
        tid = wanted if wanted is not None else str(run_id)
        run = _Run(self.tracker.open(tid, metadata), run_id, [run_id], last_seen=now, trace_ids=current_span_ids())
        if tid in self._by_tid:
            self.health.count("rejected", "duplicate_trajectory_id", f"{tid!r} is already open; both are tracked")
        self._runs[run_id] = run
        self._by_tid[tid] = run

    def _pause(self, run: _Run, run_id: UUID) -> None:
        """The root of an interrupted run ended: keep the trajectory for its resume."""
        with self._lock:
            if self._root(run_id) is not run:
                return
            for rid in run.run_ids:
                self._runs.pop(rid, None)
                self._streamed.pop(rid, None)
            self.tracker.commit(run.state)  # the output before the interrupt was not rejected by a parser
            run.root, run.run_ids, run.interrupted = None, [], False
            self._lifetimes.pause(run.state.tid, run.state.metadata.get("thread_id"), run, self._clock())

    def _late(self, run_id: UUID | None, child: UUID | None = None) -> bool:
        """Whether `run_id` is of a trajectory finished early (event dropped, counted; a `child` under it
        is remembered as gone too). Takes the lock."""
        if run_id is None or run_id not in self._lifetimes.gone:
            return False
        with self._lock:
            if child is not None:
                self._lifetimes.remember_gone([child], self._clock())
            else:
                self._lifetimes.gone.pop(run_id, None)  # its end: nothing more will come from it
        self._count_late()
        return True

    def _root(self, run_id: UUID) -> _Run | None:
        run = self._runs.get(run_id)
        return run if run is not None and run.root == run_id else None

    @never_raises("on_chain_start")
    def on_chain_start(self, *args: Any, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        if self._late(parent_run_id, child=run_id):
            return
        now = self._clock()
        with self._lock:
            self._open(run_id, parent_run_id, kwargs.get("metadata"), now)
            crowded = len(self._by_tid) > self.max_open
        if crowded:
            self._warn_crowded(
                "tps-tracer: more than %d runs open at once (max_open); none is cut short, but if your "
                "harness never ends its runs, memory grows until they idle out (idle_timeout=%s s)",
                self.max_open,
            )
        if now - self._last_sweep >= self._sweep_every:
            self.sweep(now)

    @never_raises("on_chain_end")
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._root(run_id)
        if run is not None and run.interrupted:
            self._pause(run, run_id)
        elif run is not None:
            self._end(run, outputs=outputs, error=None)
        elif not self._late(run_id):
            inner = self._runs.get(run_id)
            if inner is not None and run_id in inner.model_nodes:
                rejected = node_rejected_answer(outputs)  # ToolStrategy's retry: the node answered with an error
                with self._lock:
                    inner.model_nodes.discard(run_id)
                    if rejected and inner.state.pending is not None and inner.pending_node == run_id:
                        inner.state.pending_malformed = True

    @never_raises("on_chain_error")
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        interrupt = is_interrupt(type(error))
        run = self._root(run_id)
        if run is not None and (interrupt or run.interrupted):
            self._pause(run, run_id)
        elif run is not None:
            self._end(run, outputs=None, error=error)
        elif interrupt or not self._late(run_id):
            with self._lock:
                inner = self._runs.get(run_id)
                if inner is not None and interrupt:
                    inner.interrupted = True
                elif inner is not None:
                    inner.model_nodes.discard(run_id)
                    # A chain rejected the model's output (a parser, create_agent's structured output).
                    parse_failure = isinstance(error, OutputParserException) or type(error).__name__ in PARSE_EXCEPTIONS
                    if parse_failure and inner.state.pending is not None:
                        inner.state.pending_malformed = True

    @never_raises("on_agent_action")
    def on_agent_action(self, action: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if getattr(action, "tool", None) == PARSE_RETRY_TOOL:
            with self._lock:
                run = self._runs.get(run_id)
                if run is not None and run.state.pending is not None:
                    run.state.pending_malformed = True

    def _model_start(self, *args: Any, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        """Both model starts (chat and completion): the call joins its run, or groups a hand-written loop."""
        metadata = kwargs.get("metadata")
        if self._late(parent_run_id, child=run_id):
            return  # a model call of a run finished early: never a new trajectory of its own
        if metadata and INTERNAL_CALL_KEY in metadata:
            self.health.count("ignored", "middleware_model_calls")  # its end finds no run: never a step
            return
        with self._lock:
            run = self._runs.get(parent_run_id) if parent_run_id is not None else None
            if run is None:
                tid = self._trajectory_id(metadata)
                if tid is None:
                    self.health.count("ignored", "unattached_model_call")
                    return
                run = self._by_tid.get(tid)  # a hand-written loop: calls grouped by metadata, ended by declare_stop()
                if run is None:
                    if self.feeder.closed:
                        self.health.count("dropped", "after_close", "the handler is closed")
                        return
                    run = self._by_tid[tid] = _Run(self.tracker.open(tid, metadata), None, trace_ids=current_span_ids())
            if run.state.pending is not None and run.pending_node is not None and run.pending_node == parent_run_id:
                run.state.pending_malformed = True  # a retry middleware called the model again: output discarded
            if not run.instrumentor_checked and run.root is not None:
                run.instrumentor_checked = True  # once per run: its root span exists by its first model call
                run.trace_ids = instrumentor_span_ids(run.root) or run.trace_ids
            self._runs[run_id] = run
            run.run_ids.append(run_id)
            run.state.calls_started += 1
            run.last_seen = self._clock()
            budget = self._budgets.get(run.state.tid)
            if budget is not None:
                budget.calls += 1

    on_chat_model_start = never_raises("on_chat_model_start")(_model_start)
    on_llm_start = never_raises("on_llm_start")(_model_start)

    @never_raises("on_llm_new_token")
    def on_llm_new_token(self, token: Any, *, run_id: UUID, chunk: Any = None, **kwargs: Any) -> None:
        lp = chunk_logprobs(kwargs.get("logprobs"), chunk)
        if lp and run_id in self._runs:
            kept = self._streamed.setdefault(run_id, [])
            if len(kept) < _STREAM_ENTRY_LIMIT:
                kept.extend(lp)

    @never_raises("on_llm_end")
    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        streamed = self._streamed.pop(run_id, None)
        run = self._runs.get(run_id)
        if run is None:
            self._late(run_id)
            return
        raw, malformed = llm_output(response)
        if streamed and len(streamed) > n_entries(raw.logprobs):
            raw = RawStep(raw.text, {"content": streamed}, raw.tool_arguments)
        with self._lock:
            self.tracker.returned(run.state, raw, malformed)
            run.pending_node = parent_run_id if parent_run_id in run.model_nodes else None
            run.last_seen = self._clock()

    @never_raises("on_llm_error")
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._streamed.pop(run_id, None)
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                self.tracker.commit(run.state)
                self.tracker.failed_call(run.state, classify_failed_call(exception_names(error)))
        if run is None:
            self._late(run_id)

    @never_raises("on_tool_start")
    def on_tool_start(self, *args: Any, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        if self._late(parent_run_id, child=run_id):
            return
        with self._lock:
            run = self._runs.get(parent_run_id) if parent_run_id is not None else None
            if run is not None:
                self._runs[run_id] = run
                run.run_ids.append(run_id)
                run.last_seen = self._clock()

    @never_raises("on_tool_end")
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if not self._late(run_id) and isinstance(output, ToolMessage) and output.status == "error":
            with self._lock:
                run = self._runs.get(run_id)
                if run is not None:
                    run.state.tool_failed(ended_run=False)  # handled by the agent: counted, not a stop

    @never_raises("on_tool_error")
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            # A tool cancelled with its run (a timeout, Ctrl-C) did not fail: the run's own error decides.
            if run is not None and type(error).__name__ not in NOT_TOOL_FAILURES:
                run.state.tool_failed()
        if run is None:
            self._late(run_id)

    def _end(self, run: _Run, outputs: Any, error: BaseException | None, abandoned: str | None = None) -> None:
        state = run.state
        with self._lock:
            if run.ended:
                return
            run.ended = True
            self._lifetimes.unpause(state.tid, run)
            if self._by_tid.get(state.tid) is run:
                del self._by_tid[state.tid]
            for rid in run.run_ids:
                self._runs.pop(rid, None)
                self._streamed.pop(rid, None)
            if abandoned is not None:
                self._lifetimes.remember_gone(run.run_ids, self._clock())
            # Read before the commit: the pending output came before the tool that failed.
            tool_failed = state.last_tool_failed
            self.tracker.commit(state)
            budget = self._budgets.pop(state.tid, None)
            if isinstance(error, GeneratorExit) and budget is None:  # the caller stopped reading its stream
                self._closed_streams[state.tid] = None
                while len(self._closed_streams) > 1024:  # only to explain a late declare_stop
                    self._closed_streams.popitem(last=False)
        md = state.metadata
        # The OTel span the record joins, the root run of the invocation that ended it, LangGraph's thread.
        extra: dict[str, Any] = dict(run.trace_ids or {})
        if run.root is not None:
            extra[RUN_ID_KEY] = str(run.root)
        if md.get("thread_id") is not None:
            extra["thread_id"] = str(md["thread_id"])
        observed, stopped_by = observed_stop(outputs, error, tool_failed, budget)
        decision = self.tracker.finish(
            state,
            observed,
            abandoned=abandoned,
            budget_label=md.get(HORIZON_KEY),
            stopped_by=stopped_by,
            outcome_label=md.get(OUTCOME_KEY),
            final_output=final_message(outputs),
            extra=extra,
        )
        if decision is not None:
            self.last_trajectory_id = state.tid
