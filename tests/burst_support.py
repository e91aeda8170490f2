"""Bursts of concurrent agent runs, for the lossless-capture tests and benchmark.

A real `langchain.agents.create_agent` loop (LangGraph underneath) with a scripted chat model:
each run makes `tool_turns` tool calls (default one), then answers; every model turn states a
confidence and, when asked, carries OpenAI-shaped top-5 logprobs. `step_delay` stands for the
model's latency (asyncio.sleep on the async path, time.sleep on threads). The expected record of
every run is known up front, so a burst can be checked run by run: one record per started run,
every step present, nothing capture_lost.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


def verbal_of(task: int, turn: int) -> float:
    """The confidence the model states at a task's turn (0-based): distinct per run, exact in text."""
    return round(0.05 + ((task * 7 + turn * 3) % 90) / 100, 2)


def _logprobs(n_tokens: int) -> dict[str, Any]:
    content = []
    for i in range(n_tokens):
        top = [{"token": f"t{j}", "logprob": -0.1 * (j + 1) - 0.001 * (i % 7), "bytes": None} for j in range(5)]
        content.append({"token": top[0]["token"], "logprob": top[0]["logprob"], "bytes": None, "top_logprobs": top})
    return {"content": content}


class BurstModel(BaseChatModel):
    """Turns before `tool_turns`: a tool call each; then the answer. The task number is read from
    the first message. tool_turns=0 is the cheapest real loop: one model call, no tool node."""

    step_delay: float = 0.0
    logprob_tokens: int = 0
    tool_turns: int = 1

    @property
    def _llm_type(self) -> str:
        return "burst-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> BurstModel:
        return self

    def _reply(self, messages: list[BaseMessage]) -> ChatResult:
        task = int(str(messages[0].content).split()[-1])
        turn = sum(isinstance(m, AIMessage) for m in messages)
        text = f"step {turn} <confidence>{verbal_of(task, turn)}</confidence>"
        call = {"name": "lookup", "args": {"q": f"task {task}"}, "id": f"c{task}-{turn}"}
        calls = [call] if turn < self.tool_turns else []
        meta = {"logprobs": _logprobs(self.logprob_tokens)} if self.logprob_tokens else {}
        message = AIMessage(text, tool_calls=calls, response_metadata=meta)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.step_delay:
            time.sleep(self.step_delay)
        return self._reply(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.step_delay:
            await asyncio.sleep(self.step_delay)
        return self._reply(messages)


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def burst_agent(step_delay: float = 0.001, logprob_tokens: int = 0, tool_turns: int = 1) -> Any:
    from langchain.agents import create_agent

    model = BurstModel(step_delay=step_delay, logprob_tokens=logprob_tokens, tool_turns=tool_turns)
    return create_agent(model, [lookup])


def _inputs(task: int) -> dict[str, Any]:
    return {"messages": [("user", f"task {task}")]}


def _config(handler: BaseCallbackHandler | Sequence[BaseCallbackHandler], task: int) -> dict[str, Any]:
    callbacks = [handler] if isinstance(handler, BaseCallbackHandler) else list(handler)
    return {"callbacks": callbacks, "metadata": {"tps_trajectory_id": f"b{task}", "tps_outcome": task % 2}}


def run_async_burst(agent: Any, handler: BaseCallbackHandler | Sequence[BaseCallbackHandler], n: int) -> float:
    """n runs started at once on one event loop (as `abatch` / `gather` harnesses do); wall seconds.
    handler: the TPS handler, or a list of callbacks (the user's own beside it)."""

    async def main() -> None:
        await asyncio.gather(*(agent.ainvoke(_inputs(i), config=_config(handler, i)) for i in range(n)))

    start = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - start


def run_thread_burst(agent: Any, handler: BaseCallbackHandler, n: int, threads: int = 64) -> float:
    """n runs on a pool of `threads` threads; wall seconds."""
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: agent.invoke(_inputs(i), config=_config(handler, i)), range(n)))
    return time.perf_counter() - start


def check_burst_records(records: dict[str, Any], n: int, tool_turns: int = 1) -> None:
    """One record per run, clean, every step (tool_turns + 1) with the stated confidences, the outcome attached."""
    assert len(records) == n, f"{n - len(records)} of {n} runs left no record"
    bad = []
    for i in range(n):
        rec = records.get(f"b{i}")
        steps = [s.forecasts.get("verbal") for s in rec.steps] if rec is not None else None
        if rec is None or rec.stop_reason != "clean" or steps != [verbal_of(i, t) for t in range(tool_turns + 1)]:
            bad.append((f"b{i}", None if rec is None else rec.stop_reason, steps))
        elif rec.outcome != i % 2:
            bad.append((f"b{i}", "outcome", rec.outcome))
    assert not bad, f"{len(bad)} runs recorded wrong, e.g. {bad[:3]}"


def expected_log_tps(n: int, tool_turns: int = 1) -> float:
    """The mean log TPS of `verbal` over runs 0..n-1 (linear-front weights T, T-1, .., 1, normalised),
    computed from what the model says, independently of the package: the gate's score when no run is lost."""
    steps = tool_turns + 1
    weights = [(steps - t) / (steps * (steps + 1) / 2) for t in range(steps)]
    total = 0.0
    for i in range(n):
        for t, w in enumerate(weights):
            p = verbal_of(i, t)
            total += w * math.log(p if i % 2 else 1 - p)
    return total / n


def emit_traces(tracer: Any, tasks: range) -> None:
    """One agent trace per task: a root span naming its trajectory, two LLM spans with forecasts."""
    from opentelemetry import trace

    for i in tasks:
        root = tracer.start_span("agent", attributes={"tps.trajectory_id": f"b{i}", "tps.outcome": i % 2})
        ctx = trace.set_span_in_context(root)
        for turn in range(2):
            tracer.start_span(
                "llm", context=ctx, attributes={"tps.forecasts": f'{{"verbal": {verbal_of(i, turn)}}}'}
            ).end()
        root.end()


def run_trace_burst(tracer: Any, n: int, threads: int = 1) -> float:
    """n traces emitted by `threads` threads (tasks split evenly); wall seconds."""
    start = time.perf_counter()
    if threads == 1:
        emit_traces(tracer, range(n))
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda k: emit_traces(tracer, range(k, n, threads)), range(threads)))
    return time.perf_counter() - start
