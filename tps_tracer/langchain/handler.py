"""`TPSCallbackHandler`: one line attaches TPS capture to a LangChain / LangGraph agent.

    acc = Accumulator(sink="runs.jsonl")
    handler = TPSCallbackHandler(acc)
    agent.invoke({"messages": [...]}, config={"callbacks": [handler],
                                              "metadata": {"tps_trajectory_id": "task-17"}})
    handler.record_outcome("task-17", success=True)      # whenever the grade is known
    handler.flush(); acc.snapshot()

What it tracks, per trajectory:
- the trajectory is the root run of an invocation (its id: the run's `tps_trajectory_id`
  metadata, else the root run id). A nested chain whose metadata names a different id (a
  sub-agent invoked with its own id) is a trajectory of its own; without one, the nested
  agent's model calls are steps of the enclosing trajectory.
- a step is one LLM call that produced well-formed output. Malformed output (an AI message
  with only invalid tool calls, an OutputParserException raised by a parser run, AgentExecutor's
  `_Exception` retry) is not a step: up to `repair_budget` consecutive malformed calls are
  repairs (counted); one more stops the trajectory as parse_error (the paper's harness: two
  repair attempts per step), and later calls of that run are ignored (counted).
- the stop reason comes from how the root run ends (`stop_detection.py`: budget exceptions
  and canned budget texts -> max_steps, parser failures -> parse_error, tool failures ->
  tool_error), or from `declare_stop(...)`. Budget stops get horizon max(declared budget,
  LLM calls made).

Cost on the agent's path: bookkeeping under one lock and a reference to the LLM result;
signal extraction and accumulator updates run on the `Feeder`'s background thread. Every
callback is guarded: an internal error is counted in `errors`, logged once, and never
raised into the agent (`raise_error = False`). Only numbers are recorded unless
`capture_content=True`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import ToolMessage
from langchain_core.outputs import LLMResult

from tps_tracer.capture.feeder import Calibration, Feeder, RawStep
from tps_tracer.capture.step_signals import SignalExtractor
from tps_tracer.langchain.stop_detection import classify_error, classify_output, final_message
from tps_tracer.online.accumulator import Accumulator
from tps_tracer.records.stop_reasons import StopReason

logger = logging.getLogger("tps_tracer")

TRAJECTORY_ID_KEY = "tps_trajectory_id"
TASK_ID_KEY = "tps_task_id"
HORIZON_KEY = "tps_horizon"  # the step budget of this run, when the runtime's is not visible
OUTCOME_KEY = "tps_outcome"  # a label known up front (benchmark harnesses)
DEFAULT_REPAIR_BUDGET = 2
DEFAULT_MAX_OPEN = 10_000
_CONTENT_LIMIT = 4000
_PARSE_RETRY_TOOL = "_Exception"  # langchain-classic AgentExecutor's handle_parsing_errors action


@dataclass
class _Trajectory:
    tid: str
    root: UUID | None
    metadata: Mapping[str, Any]
    run_ids: list[UUID] = field(default_factory=list)
    pending: RawStep | None = None  # the last LLM output, until we know whether it was parsed
    pending_malformed: bool = False
    n_calls: int = 0  # all model calls, malformed and failed ones included (>= the steps fed)
    consecutive_malformed: int = 0
    repairs: int = 0
    ignored_calls: int = 0
    tool_errors: int = 0
    last_tool_failed: bool = False
    declared: tuple[StopReason, int | None, str] | None = None  # (reason, horizon, detail) fixed early
    texts: list[str] = field(default_factory=list)


def _llm_output(response: LLMResult) -> tuple[RawStep, bool]:
    """The step's raw output and whether it is malformed (only invalid tool calls)."""
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
            logprobs = message.response_metadata.get("logprobs")
        tool_calls = getattr(message, "tool_calls", None) or []
        invalid = getattr(message, "invalid_tool_calls", None) or []
        malformed = bool(invalid) and not tool_calls
        if tool_calls:
            tool_args = tool_calls[0].get("args")
    return RawStep(gen.text, logprobs, tool_args), malformed


class TPSCallbackHandler(BaseCallbackHandler):
    raise_error = False
    # Called inline in async runs too: no thread hop per event, and events keep their order.
    run_inline = True

    def __init__(
        self,
        accumulator: Accumulator,
        *,
        grader: Callable[[Any], Any] | None = None,
        repair_budget: int = DEFAULT_REPAIR_BUDGET,
        horizon: int | None = None,
        extractor: SignalExtractor | None = None,
        calibration: Calibration | None = None,
        capture_content: bool = False,
        background: bool = True,
        max_open: int = DEFAULT_MAX_OPEN,
        trajectory_id_key: str = TRAJECTORY_ID_KEY,
    ):
        """grader: called (off the agent's path) with the final output of a clean run; its truthy
        or falsy verdict is the outcome (None: no verdict yet). horizon: the step budget of every
        run (a run's `tps_horizon` metadata overrides it). calibration: {predictor: map}, adding
        "<predictor>+cal" forecasts as they are captured. background=False applies everything in
        the callback thread (deterministic, slower)."""
        self.accumulator = accumulator
        self.feeder = Feeder(accumulator, extractor, calibration, background=background)
        self.grader = grader
        self.repair_budget = repair_budget
        self.horizon = horizon
        self.capture_content = capture_content
        self.max_open = max_open
        self.trajectory_id_key = trajectory_id_key
        self.errors: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()  # ignored calls, evictions, unattached model calls
        self.last_trajectory_id: str | None = None
        self._lock = threading.Lock()
        self._runs: dict[UUID, _Trajectory] = {}  # every run id of an open trajectory
        self._roots: OrderedDict[UUID, _Trajectory] = OrderedDict()  # run that ends it -> trajectory
        self._by_tid: dict[str, _Trajectory] = {}
        self._streamed: dict[UUID, list[Any]] = {}  # logprob entries of streamed chunks, per LLM run
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ public API

    def record_outcome(self, trajectory_id: str, success: bool | int | None = None, q_z: float | None = None) -> None:
        """The task's outcome (or a censored run's q_Z), at any time after the run: production feedback."""
        self.feeder.resolve(trajectory_id, None if success is None else int(bool(success)), q_z)

    def declare_stop(self, trajectory_id: str, reason: str | StopReason, horizon: int | None = None) -> None:
        """Fix a trajectory's stop reason (e.g. your own budget or a harness abort).

        Inside a run it takes effect when the run ends; a trajectory with no root run (model
        calls grouped only by metadata, from a hand-written loop) is finished now. An unknown
        reason raises ValueError (this is called from your code, not from the agent's callbacks).
        """
        reason = StopReason(reason)
        try:
            with self._lock:
                traj = self._by_tid.get(trajectory_id)
                if traj is None:
                    self.counts["declare_stop_unknown"] += 1
                    return
                self._commit(traj)  # the last output happened before the declaration: decide it first
                traj.declared = (reason, horizon, "declared")
                finish_now = traj.root is None
            if finish_now:
                self._end(traj, outputs=None, error=None)
        except Exception as exc:
            self._fail("declare_stop", exc)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything captured so far has reached the accumulator."""
        return self.feeder.flush(timeout)

    def close(self) -> None:
        self.feeder.close()

    @property
    def n_open(self) -> int:
        return len(self._by_tid)

    # ------------------------------------------------------------------ bookkeeping

    def _fail(self, where: str, exc: BaseException) -> None:
        self.errors[where] += 1
        if where not in self._warned:
            self._warned.add(where)
            logger.warning(
                "tps-tracer handler error in %s (%s: %s); the agent is unaffected, further errors only counted",
                where,
                type(exc).__name__,
                exc,
            )

    def _open(self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None) -> _Trajectory:
        """The trajectory a new chain run belongs to (a new one for a root or a differently-named sub-run)."""
        parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
        wanted = metadata.get(self.trajectory_id_key) if metadata else None
        if parent is not None and (wanted is None or str(wanted) == parent.tid):
            self._runs[run_id] = parent
            parent.run_ids.append(run_id)
            return parent
        tid = str(wanted) if wanted is not None else str(run_id)
        traj = _Trajectory(tid, run_id, dict(metadata or {}), [run_id])
        if tid in self._by_tid:
            self.counts["duplicate_trajectory_id"] += 1
        self._runs[run_id] = traj
        self._roots[run_id] = traj
        self._by_tid[tid] = traj
        return traj

    def _commit(self, traj: _Trajectory) -> None:
        """Decide the pending LLM output: a step, a repair, or the parse error that stops the run."""
        raw, malformed = traj.pending, traj.pending_malformed
        traj.pending, traj.pending_malformed = None, False
        if raw is None:
            return
        if traj.declared is not None:
            traj.ignored_calls += 1
            return
        if malformed:
            traj.consecutive_malformed += 1
            if traj.consecutive_malformed > self.repair_budget:
                traj.declared = (StopReason.PARSE_ERROR, None, "repairs exhausted")
            else:
                traj.repairs += 1
            return
        traj.consecutive_malformed = 0
        if self.capture_content and raw.text is not None:
            traj.texts.append(raw.text[:_CONTENT_LIMIT])
        self.feeder.step(traj.tid, raw)

    def _mark_malformed(self, run_id: UUID | None) -> None:
        traj = self._runs.get(run_id) if run_id is not None else None
        if traj is not None and traj.pending is not None:
            traj.pending_malformed = True

    # ------------------------------------------------------------------ chain events

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
        try:
            with self._lock:
                self._open(run_id, parent_run_id, metadata)
                overflow = len(self._roots) > self.max_open
            if overflow:
                self._evict_oldest()
        except Exception as exc:
            self._fail("on_chain_start", exc)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            traj = self._roots.get(run_id)
            if traj is not None:
                self._end(traj, outputs=outputs, error=None)
        except Exception as exc:
            self._fail("on_chain_end", exc)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            traj = self._roots.get(run_id)
            if traj is not None:
                self._end(traj, outputs=None, error=error)
            elif isinstance(error, OutputParserException):
                with self._lock:
                    self._mark_malformed(run_id)
        except Exception as exc:
            self._fail("on_chain_error", exc)

    def on_agent_action(self, action: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            if getattr(action, "tool", None) == _PARSE_RETRY_TOOL:
                with self._lock:
                    self._mark_malformed(run_id)
        except Exception as exc:
            self._fail("on_agent_action", exc)

    # ------------------------------------------------------------------ model events

    def _llm_start(self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None) -> None:
        with self._lock:
            traj = self._runs.get(parent_run_id) if parent_run_id is not None else None
            if traj is None:
                wanted = metadata.get(self.trajectory_id_key) if metadata else None
                if wanted is None:
                    self.counts["unattached_model_call"] += 1
                    return
                # A hand-written loop: model calls grouped by metadata, ended by declare_stop().
                traj = self._by_tid.get(str(wanted))
                if traj is None:
                    traj = self._by_tid[str(wanted)] = _Trajectory(str(wanted), None, dict(metadata or {}))
            self._runs[run_id] = traj
            traj.run_ids.append(run_id)

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
        try:
            self._llm_start(run_id, parent_run_id, metadata)
        except Exception as exc:
            self._fail("on_chat_model_start", exc)

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
        try:
            self._llm_start(run_id, parent_run_id, metadata)
        except Exception as exc:
            self._fail("on_llm_start", exc)

    def on_llm_new_token(self, token: Any, *, run_id: UUID, chunk: Any = None, **kwargs: Any) -> None:
        # Streamed chunks carry one logprobs entry each; kept in case the final result lacks them.
        try:
            lp = kwargs.get("logprobs")
            if lp is None and chunk is not None:
                lp = (getattr(chunk, "generation_info", None) or {}).get("logprobs")
            if lp and run_id in self._runs:  # only for model calls of a trajectory we track
                entries = lp.get("content") if isinstance(lp, Mapping) else lp
                if entries:
                    self._streamed.setdefault(run_id, []).extend(entries)
        except Exception as exc:
            self._fail("on_llm_new_token", exc)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            raw, malformed = _llm_output(response)
            streamed = self._streamed.pop(run_id, None)
            if raw.logprobs is None and streamed:
                raw = RawStep(raw.text, {"content": streamed}, raw.tool_arguments)
            with self._lock:
                traj = self._runs.get(run_id)
                if traj is None:
                    return
                self._commit(traj)  # the previous output was not rejected by a parser: decide it
                traj.pending, traj.pending_malformed = raw, malformed
                traj.n_calls += 1
                traj.last_tool_failed = False
        except Exception as exc:
            self._fail("on_llm_end", exc)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            self._streamed.pop(run_id, None)
            with self._lock:
                traj = self._runs.get(run_id)
                if traj is not None:
                    traj.n_calls += 1
                    self.counts["model_call_errors"] += 1
        except Exception as exc:
            self._fail("on_llm_error", exc)

    # ------------------------------------------------------------------ tool events

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            with self._lock:
                traj = self._runs.get(parent_run_id) if parent_run_id is not None else None
                if traj is not None:
                    self._runs[run_id] = traj
                    traj.run_ids.append(run_id)
        except Exception as exc:
            self._fail("on_tool_start", exc)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            if isinstance(output, ToolMessage) and output.status == "error":
                with self._lock:
                    traj = self._runs.get(run_id)
                    if traj is not None:
                        traj.tool_errors += 1  # handled by the agent: counted, not a stop
        except Exception as exc:
            self._fail("on_tool_end", exc)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            with self._lock:
                traj = self._runs.get(run_id)
                if traj is not None:
                    traj.tool_errors += 1
                    traj.last_tool_failed = True
        except Exception as exc:
            self._fail("on_tool_error", exc)

    # ------------------------------------------------------------------ the end of a trajectory

    def _end(self, traj: _Trajectory, outputs: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._by_tid.get(traj.tid) is traj:
                del self._by_tid[traj.tid]
            if traj.root is not None and self._roots.pop(traj.root, None) is None:
                return  # already ended (evicted)
            for rid in traj.run_ids:
                self._runs.pop(rid, None)
            self._commit(traj)
        if traj.n_calls == 0 and error is None and traj.declared is None:
            # A chain that never called a model (a wrapper around sub-agents, a retrieval
            # chain) is not an agent trajectory: counted, not scored.
            self.counts["runs_without_model_calls"] += 1
            return
        reason, horizon, detail = self._stop_reason(traj, outputs, error)
        metadata = self._metadata(traj, detail, outputs)
        self.last_trajectory_id = traj.tid
        self.feeder.stop(traj.tid, reason.value, horizon, metadata)
        if reason is StopReason.CLEAN:
            known = traj.metadata.get(OUTCOME_KEY)
            if known is not None:
                self.feeder.resolve(traj.tid, int(bool(known)))
            elif self.grader is not None:
                self.feeder.grade(traj.tid, self.grader, final_message(outputs))

    def _stop_reason(
        self, traj: _Trajectory, outputs: Any, error: BaseException | None
    ) -> tuple[StopReason, int | None, str]:
        if traj.declared is not None:
            reason, horizon, detail = traj.declared
        elif error is not None:
            reason, detail = classify_error(error, traj.last_tool_failed)
            horizon = None
        else:
            found, detail = classify_output(outputs)
            if found is None and traj.consecutive_malformed:
                found, detail = StopReason.PARSE_ERROR, "ended on malformed output"
            reason, horizon = found or StopReason.CLEAN, None
        if reason is StopReason.MAX_STEPS:
            budget = traj.metadata.get(HORIZON_KEY, self.horizon)
            horizon = max(int(budget or 0), horizon or 0, traj.n_calls)
        return reason, horizon, detail

    def _metadata(self, traj: _Trajectory, detail: str, outputs: Any) -> dict[str, Any]:
        md: dict[str, Any] = {"source": "langchain", "llm_calls": traj.n_calls}
        task = traj.metadata.get(TASK_ID_KEY)
        if task is not None:
            md["task_id"] = str(task)
        if detail:
            md["stop_detail"] = detail
        for key, n in (
            ("parse_repairs", traj.repairs),
            ("tool_errors", traj.tool_errors),
            ("ignored_calls", traj.ignored_calls),
        ):
            if n:
                md[key] = n
        if self.capture_content:
            md["step_texts"] = traj.texts
            last = final_message(outputs)
            text = last if isinstance(last, str) else getattr(last, "text", None)
            if isinstance(text, str):
                md["final_output"] = text[:_CONTENT_LIMIT]
        return md

    def _evict_oldest(self) -> None:
        with self._lock:
            if not self._roots:
                return
            _, traj = next(iter(self._roots.items()))
            self._commit(traj)
            traj.declared = (StopReason.OTHER, None, "evicted: too many open runs")
        self.counts["evicted"] += 1
        self._end(traj, outputs=None, error=None)
