"""`TPSCallbackHandler`: one line attaches TPS capture to a LangChain / LangGraph agent.

    acc = Accumulator(sink="runs.jsonl")
    handler = TPSCallbackHandler(acc)
    agent.invoke({"messages": [...]}, config={"callbacks": [handler],
                                              "metadata": {"tps_trajectory_id": "task-17"}})
    handler.record_outcome("task-17", success=True)      # whenever the grade is known
    handler.flush(); acc.snapshot()

This file only translates LangChain's callbacks into the trajectory core's calls
(`tps_tracer.tracking`: steps, repairs, stop precedence, the horizon rule and outcomes
are decided there, the same for the OpenTelemetry span processor). What is LangChain's:

- the trajectory is the root run of an invocation (its id: the run's `tps_trajectory_id`
  metadata, else the root run id). A nested chain whose metadata names a different id (a
  sub-agent invoked with its own id) is a trajectory of its own; without one, the nested
  agent's model calls are steps of the enclosing trajectory. Model calls outside any run,
  grouped only by `tps_trajectory_id` metadata (a hand-written loop), form a trajectory
  that `declare_stop(...)` ends.
- a model call's output is decided when the next call starts or the run ends, because a
  parser may reject it in between: an AI message with only invalid tool calls, an
  OutputParserException raised by a parser run, AgentExecutor's `_Exception` retry, or
  create_agent rejecting it (a structured-output error, ToolStrategy's retry, a retry
  middleware calling the model again in the same model node) make it malformed (a repair).
- the run's end is read by `stop_detection.py` (budget exceptions and canned budget
  texts -> max_steps, parser failures -> parse_error, tool failures -> tool_error).
- streamed chunks' logprobs are collected and used when the final result carries fewer
  tokens (none, or only the last chunk's, as LangGraph's v3 stream events do).

Not `run_inline`: langchain-core skips `on_llm_start` for every non-inline handler when
an inline one is attached to an async run of a completion model (langchain issue 39633),
so an inline handler would change what the user's other callbacks receive. Cost on the
agent's path: bookkeeping under one lock; extraction and scoring run on the capture
worker. Every callback is guarded: an internal error is counted (health: error), logged
once, and never raised into the agent. Only numbers are recorded unless
`capture_content=True`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import ToolMessage
from langchain_core.outputs import LLMResult

from tps_tracer import at_exit
from tps_tracer.capture.step_signals import RawStep, SignalExtractor
from tps_tracer.capture.stop_signals import (
    NOT_TOOL_FAILURES,
    classify_failed_call,
    is_agent_model_node,
    node_rejected_answer,
)
from tps_tracer.langchain.otel_context import current_span_ids, instrumentor_span_ids
from tps_tracer.langchain.stop_detection import (
    classify_error,
    classify_output,
    exception_names,
    final_message,
    is_parse_failure,
)
from tps_tracer.langchain.stream_budget import (
    StreamBudget,
    budget_trajectory_id,
    check_max_steps,
    closed_by_caller,
)
from tps_tracer.open_runs import DEFAULT_PAUSE_TIMEOUT, OpenRuns, is_interrupt
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking.adapter import TrackedAdapter, never_raises
from tps_tracer.tracking.keys import (
    HORIZON_KEY,
    INTERNAL_CALL_KEY,
    OUTCOME_KEY,
    PARSE_RETRY_TOOL,
    RUN_ID_KEY,
    TASK_ID_KEY,
    TRAJECTORY_ID_KEY,
)
from tps_tracer.tracking.tracker import TrajectoryTracker
from tps_tracer.tracking.trajectory import TrajectoryState
from tps_tracer.tracking.worker import DEFAULT_MAX_BLOCK, DEFAULT_MAX_QUEUE_SIZE, Calibration

if TYPE_CHECKING:  # the accumulator pulls in the evaluation layer: not on the capture path's import
    from tps_tracer.online.accumulator import Accumulator

__all__ = ["HORIZON_KEY", "OUTCOME_KEY", "TASK_ID_KEY", "TRAJECTORY_ID_KEY", "TPSCallbackHandler"]

DEFAULT_MAX_OPEN = 10_000  # open runs above which the handler warns (once) that runs may be leaking
DEFAULT_IDLE_TIMEOUT = 3600.0  # seconds without any callback before a run is finished as capture_lost
logger = logging.getLogger("tps_tracer")
_STREAM_ENTRY_LIMIT = 100_000  # streamed logprob entries kept per model call


@dataclass
class _Run:
    """A trajectory's LangChain side: its run ids and the model output awaiting its verdict."""

    state: TrajectoryState
    root: UUID | None
    run_ids: list[UUID] = field(default_factory=list)
    pending_node: UUID | None = None  # the create_agent model node the held output's call ran in
    model_nodes: set[UUID] = field(default_factory=set)  # create_agent model node runs in progress
    last_seen: float = 0.0  # the clock at its last callback (the idle rule)
    interrupted: bool = False  # a node raised LangGraph's interrupt: the root's end is a pause
    ended: bool = False  # finished (once: an idle sweep may race the run's own end)
    trace_ids: dict[str, str] | None = None  # the OpenTelemetry span current at the run's start
    instrumentor_checked: bool = False  # the instrumentor's own span for the root was looked up


def _tool_arguments(calls: Sequence[Any]) -> list[Any] | None:
    args = [c.get("args") for c in calls if isinstance(c, Mapping)]
    return args or None


def _n_entries(logprobs: Any) -> int:
    entries = logprobs.get("content") if isinstance(logprobs, Mapping) else logprobs
    return len(entries) if isinstance(entries, Sequence) and not isinstance(entries, (str, bytes)) else 0


def _llm_output(response: LLMResult) -> tuple[RawStep, bool]:
    """The call's raw output and whether it is malformed (only invalid tool calls)."""
    gens = response.generations[0] if response.generations else []
    if not gens:
        return RawStep(None), True
    gen = gens[0]
    info = gen.generation_info or {}
    logprobs = info.get("logprobs")
    message = getattr(gen, "message", None)
    tool_args: Any = None
    malformed = False
    if message is not None:
        if logprobs is None:
            logprobs = (getattr(message, "response_metadata", None) or {}).get("logprobs")
        tool_calls = getattr(message, "tool_calls", None) or []
        invalid = getattr(message, "invalid_tool_calls", None) or []
        malformed = bool(invalid) and not tool_calls
        tool_args = _tool_arguments(tool_calls)
    text = gen.text if isinstance(gen.text, str) else None
    return RawStep(text, logprobs, tool_args), malformed


class TPSCallbackHandler(BaseCallbackHandler, TrackedAdapter):
    raise_error = False

    def __init__(
        self,
        accumulator: Accumulator,
        *,
        grader: Callable[[Any], Any] | None = None,
        repair_budget: int | None = None,
        horizon: int | None = None,
        extractor: SignalExtractor | None = None,
        calibration: Calibration | None = None,
        capture_content: bool = False,
        background: bool = True,
        max_open: int = DEFAULT_MAX_OPEN,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        trajectory_id_key: str = TRAJECTORY_ID_KEY,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        pause_timeout: float | None = DEFAULT_PAUSE_TIMEOUT,
        max_block: float = DEFAULT_MAX_BLOCK,
        clock: Callable[[], float] = time.monotonic,
        verbal_scale: str | None = None,
    ):
        """grader: called (off the agent's path) with the final output of a clean run; its verdict
        (True/False, 1/0, "true"/"false"; None: no verdict yet) is the outcome. horizon: the step
        budget of every run (a run's `tps_horizon` metadata overrides it), the horizon of a max_steps
        you declare; a budget stop the run shows (recursion_limit, a call-limit middleware) has the
        horizon of the budget that stopped it (tracking/trajectory.py). calibration:
        {predictor: map}, adding "<predictor>+cal" forecasts as they are captured. repair_budget:
        None follows the agent's own retries (a run ending on malformed output is parse_error);
        an integer imposes a harness budget the agent does not enforce (tracking/trajectory.py).
        verbal_scale: the scale of bare numbers in stated confidences ("percent", "0-1", "1-10",
        "1-5"; a run's `tps_verbal_scale` metadata overrides it; None: only numbers that fit one
        scale are read).
        background=False applies everything in the callback thread (deterministic, slower).

        Lifetimes: a run is open from its root's start to its end; a run paused by LangGraph's
        interrupt() stays open (not idle) until it is resumed on the same thread or trajectory
        id, for at most `pause_timeout` seconds (None: forever). A run with no callback for
        `idle_timeout` seconds (None: never; the accumulator's own idle_timeout applies too, the
        tighter wins) is finished as capture_lost. Active runs are never evicted: more than
        `max_open` open runs only logs a warning (a harness that never ends its runs), because a
        run cut short would bias every score. A full capture queue holds the caller back (backpressure) for up to
        `max_block` seconds before giving the step up (its run is then capture_lost)."""
        self.tracker = TrajectoryTracker(
            accumulator,
            source="langchain",
            repair_budget=repair_budget,
            horizon=horizon,
            grader=grader,
            extractor=extractor,
            calibration=calibration,
            capture_content=capture_content,
            background=background,
            max_queue_size=max_queue_size,
            max_block=max_block,
            verbal_scale=verbal_scale,
        )
        # The lifetime rules (tps_tracer/open_runs.py): runs paused by an interrupt (resumed by a new
        # root run naming their trajectory id or LangGraph thread), the idle and pause bounds, and the
        # run ids of trajectories finished early, whose late events are dropped and counted.
        self._lifetimes: OpenRuns[_Run] = self.tracker.lifetimes(idle_timeout, pause_timeout)
        self.accumulator = accumulator
        self.max_open = max_open
        self.idle_timeout = self._lifetimes.idle_timeout
        self._clock = clock
        self._last_sweep = clock()
        self._sweep_every = 1.0 if self.idle_timeout is None else min(1.0, self.idle_timeout / 4)
        self._warned_open = False
        self.trajectory_id_key = trajectory_id_key
        self.last_trajectory_id: str | None = None
        self._lock = threading.Lock()
        self._runs: dict[UUID, _Run] = {}  # every run id of an open trajectory (its root's first)
        self._by_tid: dict[str, _Run] = {}
        self._streamed: dict[UUID, list[Any]] = {}  # logprob entries of streamed chunks, per model call
        # The caller's own step budgets (`budget(...)`), by trajectory id; and the ids of runs
        # whose stream was closed without one (a declare_stop after the break names the fix).
        self._budgets: dict[str, StreamBudget] = {}
        self._closed_streams: OrderedDict[str, None] = OrderedDict()
        at_exit.register_adapter(self)  # a script that never calls close() still gets its runs recorded
        accumulator.finish_on_close(self._finish_open)  # acc.close() records the runs still in flight

    # ------------------------------------------------------------------ public API

    def declare_stop(self, trajectory_id: str, reason: str | StopReason, horizon: int | None = None) -> None:
        """Fix a trajectory's stop reason (e.g. your own budget or a harness abort).

        Inside a run it takes effect when the run ends; a trajectory with no root run (model
        calls grouped only by metadata, from a hand-written loop) is finished now. An unknown
        reason raises ValueError (this is called from your code, not from the agent's callbacks).
        """
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
                self.tracker.commit(run.state)  # the last output happened before the declaration: decide it first
                run.state.declare(reason, horizon)
                finish_now = run.root is None  # a hand-written loop, or a run paused by an interrupt
                if finish_now:
                    self._unpause(run)
            if finish_now:
                self._end(run, outputs=None, error=None)
        except Exception as exc:
            self._fail("declare_stop", exc)

    @contextmanager
    def budget(self, target: str | MutableMapping[str, Any], max_steps: int) -> Iterator[StreamBudget]:
        """Your own step budget around a `graph.stream(...)` loop (langchain/stream_budget.py).

        `with handler.budget(config, max_steps=N) as b:` then `if b.exhausted: break` inside
        the stream loop: a run whose stream you close inside the block is recorded as
        max_steps with horizon N (censored), not `other`. target: the run config (its
        metadata's trajectory id is used, and set when missing) or the trajectory id."""
        budget = StreamBudget(budget_trajectory_id(target, self.trajectory_id_key), check_max_steps(max_steps))
        with self._lock:
            self._budgets[budget.trajectory_id] = budget
        try:
            yield budget
        finally:
            with self._lock:
                run = self._by_tid.get(budget.trajectory_id)
                # A run still open (its generator not yet closed) keeps the budget until it ends.
                if run is None and self._budgets.get(budget.trajectory_id) is budget:
                    del self._budgets[budget.trajectory_id]

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything captured so far has reached the accumulator."""
        return self.tracker.flush(timeout)

    def close(self) -> None:
        """Finish the trajectories still open (abandoned: "closed"), then stop the capture worker."""
        self._finish_open("closed")
        self.tracker.close()

    def _close_at_exit(self, timeout: float) -> int:
        """At interpreter exit (tps_tracer/at_exit.py), unless closed: as close(), abandoned "exit"."""
        if self.tracker.worker.closed:
            return 0
        # Runs of a closed accumulator were recorded by its close(): their stops would only be refused.
        n = 0 if self.accumulator.closed else self._finish_open(at_exit.ABANDONED_AT_EXIT)
        self.tracker.close(timeout)
        return n

    def _finish_open(self, why: str) -> int:
        """Record every trajectory still open as abandoned (`why`); how many."""
        try:
            with self._lock:
                still_open = self._open_runs()
            for run in still_open:
                self._end(run, outputs=None, error=None, abandoned=why)
            return len(still_open)
        except Exception as exc:
            self._fail("close", exc)
            return 0

    def _forget_at_fork(self) -> None:
        """In a forked child (tps_tracer/at_exit.py): the runs open at the fork are the parent's,
        which finishes them; this copy forgets them (counted), so the child records only its own."""
        self._lock = threading.Lock()  # a parent thread may have held it at the fork
        n = len(self._open_runs())
        for runs in (self._runs, self._by_tid, self._streamed, self._budgets):
            runs.clear()
        self._lifetimes.forget_all()
        if n:
            self.health.count("ignored", "open_at_fork", n=n)

    def _open_runs(self) -> list[_Run]:
        """Every open trajectory once, oldest first. Under the lock."""
        return list({id(r): r for r in (*self._runs.values(), *self._by_tid.values())}.values())

    @property
    def n_open(self) -> int:
        """Open trajectories, paused ones included."""
        return len(self._by_tid)

    @property
    def n_paused(self) -> int:
        """Trajectories paused by an interrupt, waiting to be resumed."""
        return self._lifetimes.n_paused

    def sweep(self, now: float | None = None) -> int:
        """Finish as capture_lost the runs with no callback for idle_timeout seconds (abandoned: idle)
        and the runs paused by an interrupt for pause_timeout seconds (abandoned: pause_timeout).

        A paused run is not idle: a resume can still continue it, until pause_timeout. Returns
        how many runs were finished. Called on its own at most every second as runs start."""
        now = self._clock() if now is None else now
        lifetimes = self._lifetimes
        idle: list[_Run] = []
        with self._lock:
            self._last_sweep = now
            if lifetimes.idle_timeout is not None:
                idle = [
                    r
                    for r in self._open_runs()
                    if lifetimes.idle(r.last_seen, now) and (r.root is not None or not lifetimes.is_paused(r.state.tid))
                ]
                lifetimes.expire(now)
            expired = lifetimes.expired(now)
        for run in idle:
            self._end(run, outputs=None, error=None, abandoned="idle")
        for run in expired:
            self._end(run, outputs=None, error=None, abandoned="pause_timeout")
        return len(idle) + len(expired)

    # ------------------------------------------------------------------ bookkeeping

    def _trajectory_id(self, metadata: Mapping[str, Any] | None) -> str | None:
        """The id the run's metadata names; None when it names none, or only an empty / blank one."""
        wanted = metadata.get(self.trajectory_id_key) if isinstance(metadata, Mapping) else None
        if wanted is None:
            return None
        tid = str(wanted)
        return tid if tid.strip() else None

    def _open(self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None, now: float) -> None:
        """The trajectory a new chain run belongs to (a new one for a root or a differently-named
        sub-run, or a paused one that this run resumes). Under the lock."""
        parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
        wanted = self._trajectory_id(metadata)
        if parent is not None and (wanted is None or wanted == parent.state.tid):
            self._runs[run_id] = parent
            parent.run_ids.append(run_id)
            parent.last_seen = now
            if is_agent_model_node(metadata):
                parent.model_nodes.add(run_id)
            return
        paused = self._resumed_by(wanted, metadata)
        if paused is not None:
            paused.root, paused.run_ids, paused.last_seen = run_id, [run_id], now
            self._runs[run_id] = paused
            return
        if wanted is None and isinstance(metadata, Mapping) and metadata.get(self.trajectory_id_key) is not None:
            # An empty id ("" from a template with nothing filled in) is no id: the run keeps its own.
            self.health.count("ignored", "empty_trajectory_id")
        tid = wanted if wanted is not None else str(run_id)
        run = _Run(self.tracker.open(tid, metadata), run_id, [run_id], last_seen=now, trace_ids=current_span_ids())
        if tid in self._by_tid:
            self.health.count("rejected", "duplicate_trajectory_id", f"{tid!r} is already open; both are tracked")
        self._runs[run_id] = run
        self._by_tid[tid] = run

    def _resumed_by(self, wanted: str | None, metadata: Mapping[str, Any] | None) -> _Run | None:
        """The paused run a new root run resumes: same trajectory id, else same LangGraph thread. Under the lock."""
        thread = metadata.get("thread_id") if isinstance(metadata, Mapping) else None
        # A run naming a trajectory id resumes only that trajectory (its thread may hold another).
        return self._lifetimes.resume(wanted, thread if wanted is None else None)

    def _unpause(self, run: _Run) -> None:
        """Under the lock."""
        self._lifetimes.unpause(run.state.tid, run)

    def _pause(self, run: _Run) -> None:
        """The root of an interrupted run ended: keep the trajectory open for its resume. Under the lock."""
        for rid in run.run_ids:
            self._runs.pop(rid, None)
            self._streamed.pop(rid, None)
        self.tracker.commit(run.state)  # the output before the interrupt was not rejected by a parser
        run.root, run.run_ids, run.interrupted = None, [], False
        self._lifetimes.pause(run.state.tid, run.state.metadata.get("thread_id"), run, self._clock())

    def _late(self, run_id: UUID | None, child: UUID | None = None) -> bool:
        """Whether `run_id` belongs to a trajectory finished early (then the event is dropped, counted).

        child: a run starting under it, remembered as gone too (its own events are late as well)."""
        if run_id is None or not self._lifetimes.is_gone(run_id):
            return False
        with self._lock:
            if child is not None:
                self._lifetimes.remember_gone([child], self._clock())
            else:
                self._lifetimes.forget_gone(run_id)  # its end: nothing more will come from it
        self.health.count(
            "dropped", "abandoned_run_event", "an event of a run finished early (evicted or closed) was dropped"
        )
        return True

    def _root(self, run_id: UUID) -> _Run | None:
        """The open trajectory whose root run is `run_id` (its end ends the trajectory)."""
        run = self._runs.get(run_id)
        return run if run is not None and run.root == run_id else None

    def _mark_malformed(self, run_id: UUID | None) -> None:
        run = self._runs.get(run_id) if run_id is not None else None
        if run is not None and run.state.pending is not None:
            run.state.pending_malformed = True

    # ------------------------------------------------------------------ chain events

    @never_raises("on_chain_start")
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._late(parent_run_id, child=run_id):
            return
        now = self._clock()
        with self._lock:
            self._open(run_id, parent_run_id, metadata, now)
            crowded = len(self._by_tid) > self.max_open
        if crowded and not self._warned_open:
            self._warned_open = True
            logger.warning(
                "tps-tracer: more than %d runs open at once (max_open); none is cut short, but if your "
                "harness never ends its runs, memory grows until they idle out (idle_timeout=%s s)",
                self.max_open,
                self.idle_timeout,
            )
        if now - self._last_sweep >= self._sweep_every:
            self.sweep(now)

    @never_raises("on_chain_end")
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._root(run_id)
        if run is not None and run.interrupted:
            with self._lock:
                if self._root(run_id) is run:
                    self._pause(run)
        elif run is not None:
            self._end(run, outputs=outputs, error=None)
        elif self._late(run_id):
            return
        else:
            inner = self._runs.get(run_id)
            if inner is not None and run_id in inner.model_nodes:
                # ToolStrategy's retry: the node answered the model's structured output with an error.
                rejected = node_rejected_answer(outputs)
                with self._lock:
                    inner.model_nodes.discard(run_id)
                    if rejected and inner.state.pending is not None and inner.pending_node == run_id:
                        inner.state.pending_malformed = True

    @never_raises("on_chain_error")
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        interrupt = is_interrupt(type(error))
        run = self._root(run_id)
        if run is not None and (interrupt or run.interrupted):
            with self._lock:
                if self._root(run_id) is run:
                    self._pause(run)
        elif run is not None:
            self._end(run, outputs=None, error=error)
        elif interrupt:
            with self._lock:
                inner = self._runs.get(run_id)
                if inner is not None:
                    inner.interrupted = True
        elif self._late(run_id):
            return
        else:
            with self._lock:
                inner = self._runs.get(run_id)
                if inner is not None:
                    inner.model_nodes.discard(run_id)
                if is_parse_failure(error):
                    self._mark_malformed(run_id)

    @never_raises("on_agent_action")
    def on_agent_action(self, action: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if getattr(action, "tool", None) == PARSE_RETRY_TOOL:
            with self._lock:
                self._mark_malformed(run_id)

    # ------------------------------------------------------------------ model events

    def _llm_start(self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None) -> None:
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
                # A hand-written loop: model calls grouped by metadata, ended by declare_stop().
                run = self._by_tid.get(tid)
                if run is None:
                    if self.tracker.worker.closed:
                        self.health.count("dropped", "after_close", "the handler is closed")
                        return
                    run = self._by_tid[tid] = _Run(self.tracker.open(tid, metadata), None, trace_ids=current_span_ids())
            if run.state.pending is not None and run.pending_node is not None and run.pending_node == parent_run_id:
                run.state.pending_malformed = (
                    True  # a retry middleware called the model again: its output was discarded
                )
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

    @never_raises("on_chat_model_start")
    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._llm_start(run_id, parent_run_id, metadata)

    @never_raises("on_llm_start")
    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._llm_start(run_id, parent_run_id, metadata)

    @never_raises("on_llm_new_token")
    def on_llm_new_token(self, token: Any, *, run_id: UUID, chunk: Any = None, **kwargs: Any) -> None:
        # Streamed chunks carry one logprobs entry each; kept in case the final result lacks them.
        lp = kwargs.get("logprobs")
        if lp is None and chunk is not None:
            lp = (getattr(chunk, "generation_info", None) or {}).get("logprobs")
            if lp is None:
                message = getattr(chunk, "message", None)
                lp = (getattr(message, "response_metadata", None) or {}).get("logprobs")
        if lp and run_id in self._runs:  # only for model calls of a trajectory we track
            entries = lp.get("content") if isinstance(lp, Mapping) else lp
            if isinstance(entries, list) and entries:
                kept = self._streamed.setdefault(run_id, [])
                if len(kept) < _STREAM_ENTRY_LIMIT:
                    kept.extend(entries)

    @never_raises("on_llm_end")
    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        streamed = self._streamed.pop(run_id, None)
        run = self._runs.get(run_id)
        if run is None:
            self._late(run_id)
            return
        raw, malformed = _llm_output(response)
        if streamed and len(streamed) > _n_entries(raw.logprobs):
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

    # ------------------------------------------------------------------ tool events

    @never_raises("on_tool_start")
    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
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
        if self._lifetimes.is_gone(run_id):
            self._late(run_id)
            return
        if isinstance(output, ToolMessage) and output.status == "error":
            with self._lock:
                run = self._runs.get(run_id)
                if run is not None:
                    run.state.tool_failed(ended_run=False)  # handled by the agent: counted, not a stop

    @never_raises("on_tool_error")
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            # A tool cancelled with its run (asyncio.wait_for's timeout, Ctrl-C) did not fail: the
            # run's own error decides (a timeout), not the tool.
            if run is not None and type(error).__name__ not in NOT_TOOL_FAILURES:
                run.state.tool_failed()
        if run is None:
            self._late(run_id)

    # ------------------------------------------------------------------ the end of a trajectory

    def _end(self, run: _Run, outputs: Any, error: BaseException | None, abandoned: str | None = None) -> None:
        state = run.state
        with self._lock:
            if run.ended:
                return
            run.ended = True
            self._unpause(run)
            if self._by_tid.get(state.tid) is run:
                del self._by_tid[state.tid]
            for rid in run.run_ids:
                self._runs.pop(rid, None)
                self._streamed.pop(rid, None)
            if abandoned is not None:
                self._lifetimes.remember_gone(run.run_ids, self._clock())
            # Read before the commit: the pending output was returned before the tool that failed
            # ran, and deciding it now would clear the mark as if a model call had followed.
            tool_failed = state.last_tool_failed
            self.tracker.commit(state)
            budget = self._budgets.pop(state.tid, None)
            if closed_by_caller(error) and budget is None:
                self._closed_streams[state.tid] = None
                while len(self._closed_streams) > 1024:  # only to explain a late declare_stop
                    self._closed_streams.popitem(last=False)
        md = state.metadata
        stopped_by = None
        if budget is not None and closed_by_caller(error):
            # The caller stopped reading under its own budget: administrative censoring.
            observed = (StopReason.MAX_STEPS, budget.detail)
            stopped_by = budget.max_steps
        elif error is not None:
            observed = classify_error(error, tool_failed)
        else:
            found, detail = classify_output(outputs)
            observed = (found or StopReason.CLEAN, detail)
        last = final_message(outputs) if self.tracker.capture_content else None
        text = last if isinstance(last, str) else getattr(last, "text", None)
        thread = md.get("thread_id")  # LangGraph's checkpointer thread: where the run can be resumed
        decision = self.tracker.finish(
            state,
            observed,
            abandoned=abandoned,
            budget_label=md.get(HORIZON_KEY),
            stopped_by=stopped_by,
            outcome_label=md.get(OUTCOME_KEY),
            final_output=final_message(outputs) if self.tracker.grader is not None else None,
            final_text=text if isinstance(text, str) else None,
            extra={
                **(run.trace_ids or {}),
                # the root run of the invocation that ended the run (a resumed run's last one)
                **({} if run.root is None else {RUN_ID_KEY: str(run.root)}),
                **({} if thread is None else {"thread_id": str(thread)}),
            }
            or None,
        )
        if decision is not None:
            self.last_trajectory_id = state.tid
