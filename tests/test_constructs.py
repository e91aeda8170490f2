"""The two capture routes on LangChain 1.x agents as people build them (issue 46): the differential test.

Each construct of docs/capture.md's table is one real LangChain / LangGraph run (a scripted chat model,
real `create_agent` loops, middlewares, checkpointer, streaming, asyncio) watched at once by the
LangChain handler (a callback) and by OpenInference's LangChainInstrumentor into TPSSpanProcessor on
the real OpenTelemetry SDK. Both records must equal each other (stop reason, horizon, every step's
forecasts, repairs, calls made) and the script (its stop reason, the verbal confidence of each step it
makes, the model calls it lets happen). There is no difference between the routes to name here (a
difference that could not be closed would be named in the table and asserted here as it is).

Then the same comparison on the simulated world's agents (tps_tracer.sim: 40 tasks with malformed
output and failing tools, prebuilt agent, call limits, AgentExecutor, a text ReAct graph, and
OpenLLMetry as the other span source), whose records must also equal the world's ground truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from otel_support import agent_for, instrumented, run_tasks
from pydantic import Field
from world_check import check_against_world, new_accumulator, sink_records

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.sim.world import AgentWorld, WorldConfig

SLOW = 5.0  # seconds a call scripted as slow sleeps: far beyond the harness's 0.3 s wait_for


class ScriptedModel(BaseChatModel):
    """Answers by call number: a float v is a tool call to `lookup` stating confidence v, ("answer", v)
    a final answer, ("struct", v) the ToolStrategy schema's tool call, ("json", v) the schema's JSON as
    the answer (ProviderStrategy), ("raise", msg) a failed call,
    ("slow", v) a tool call that takes SLOW seconds (async). Past the script: tool calls at 0.5."""

    script: list[Any] = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _turn(self) -> Any:
        turn = self.script[self.calls] if self.calls < len(self.script) else 0.5
        self.calls += 1
        return turn

    def _reply(self, turn: Any) -> ChatResult:
        kind, v = turn if isinstance(turn, tuple) else ("tool", turn)
        if kind == "raise":
            raise RuntimeError(v)
        calls = []
        if kind in ("tool", "slow"):
            calls = [{"name": "lookup", "args": {"q": "x"}, "id": f"call-{self.calls}"}]
        elif kind == "struct":
            calls = [{"name": "Answer", "args": {"answer": "Paris"}, "id": f"call-{self.calls}"}]
        text = (
            json.dumps({"answer": "Paris", "confidence": v}) if kind == "json" else f"Paris, I think. Confidence: {v}"
        )
        message = AIMessage(text, tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return self._reply(self._turn())

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        turn = self._turn()
        if isinstance(turn, tuple) and turn[0] == "slow":
            await asyncio.sleep(SLOW)
        return self._reply(turn)


ScriptedModel.model_rebuild()


def _lookup(fail_first: int = 0) -> Any:
    failures = [fail_first]

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        if failures[0] > 0:
            failures[0] -= 1
            raise ConnectionError("lookup service unavailable")
        return "found " + q

    return lookup


@dataclass
class Construct:
    """One row of the table: how to build and drive the run, and the record the script implies."""

    build: Callable[[], tuple[Any, list[ScriptedModel]]]  # (runnable, every model it calls)
    stop: str
    verbals: list[float]  # the verbal confidence of each step, in order
    drive: str = "invoke"  # invoke | stream-<mode> | astream | astream_events | cancel | interrupt
    config: dict[str, Any] = field(default_factory=dict)
    horizon: int | None = None  # max_steps only: the budget that stopped the run, in model calls
    repairs: int = 0
    tool_errors: int = 0
    internal_calls: int = 0  # model calls a middleware makes for itself: counted, never steps


def _agent(script: list[Any], *, middleware: tuple[Any, ...] = (), fail_first: int = 0, **kw: Any) -> Callable[[], Any]:
    def build() -> tuple[Any, list[ScriptedModel]]:
        model = ScriptedModel(script=script)
        return create_agent(model, [_lookup(fail_first)], middleware=list(middleware), **kw), [model]

    return build


def _fallback() -> tuple[Any, list[ScriptedModel]]:
    from langchain.agents.middleware import ModelFallbackMiddleware

    primary = ScriptedModel(script=[("raise", "primary down")] * 10)
    backup = ScriptedModel(script=[0.7, ("answer", 0.9)])
    return create_agent(primary, [_lookup()], middleware=[ModelFallbackMiddleware(backup)]), [primary, backup]


def _state_graph() -> tuple[Any, list[ScriptedModel]]:
    """A hand-written ReAct graph: a model node, LangGraph's ToolNode, tools_condition between them."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    model = ScriptedModel(script=[0.6, 0.7, ("answer", 0.8)])

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([_lookup()]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(), [model]


def _summarized() -> tuple[Any, list[ScriptedModel]]:
    """SummarizationMiddleware past its trigger calls its own model inside the run (the summary)."""
    from langchain.agents.middleware import SummarizationMiddleware

    model = ScriptedModel(script=[0.6, 0.7, ("answer", 0.9)])
    summarizer = ScriptedModel(script=[("answer", 0.5)])
    middleware = SummarizationMiddleware(summarizer, trigger=("messages", 4), keep=("messages", 2))
    return create_agent(model, [_lookup()], middleware=[middleware]), [model]  # the summary call is not the run's


def _human_in_the_loop() -> tuple[Any, list[ScriptedModel]]:
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.checkpoint.memory import InMemorySaver

    model = ScriptedModel(script=[0.6, ("answer", 0.8)])
    middleware = HumanInTheLoopMiddleware(interrupt_on={"lookup": True})
    return create_agent(model, [_lookup()], middleware=[middleware], checkpointer=InMemorySaver()), [model]


def _limits() -> Any:
    from langchain.agents.middleware import (
        ModelCallLimitMiddleware,
        ModelRetryMiddleware,
        ToolCallLimitMiddleware,
        ToolRetryMiddleware,
    )

    return ModelCallLimitMiddleware, ToolCallLimitMiddleware, ModelRetryMiddleware, ToolRetryMiddleware


def _constructs() -> dict[str, Construct]:
    from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
    from pydantic import BaseModel

    class Answer(BaseModel):
        answer: str

    model_limit, tool_limit, model_retry, tool_retry = _limits()
    react = [0.6, 0.7, ("answer", 0.9)]  # two tool calls, then the answer
    endless = [0.5] * 20  # never answers: some budget stops it
    return {
        "create_agent": Construct(_agent(react), "clean", [0.6, 0.7, 0.9]),
        "tool_strategy": Construct(
            _agent([0.6, ("struct", 0.8)], response_format=ToolStrategy(Answer)), "clean", [0.6, 0.8]
        ),
        "provider_strategy": Construct(
            _agent([0.6, ("json", 0.8)], response_format=ProviderStrategy(Answer)), "clean", [0.6, 0.8]
        ),
        "model_call_limit_end": Construct(
            _agent(endless, middleware=(model_limit(run_limit=3, exit_behavior="end"),)),
            "max_steps",
            [0.5] * 3,
            horizon=3,
        ),
        "model_call_limit_error": Construct(
            _agent(endless, middleware=(model_limit(run_limit=3, exit_behavior="error"),)),
            "max_steps",
            [0.5] * 3,
            horizon=3,
        ),
        "tool_call_limit_error": Construct(
            _agent(endless, middleware=(tool_limit(run_limit=2, exit_behavior="error"),)),
            "max_steps",
            [0.5] * 3,
            horizon=3,
        ),
        "tool_call_limit_end": Construct(
            _agent(endless, middleware=(tool_limit(run_limit=2, exit_behavior="end"),)),
            "max_steps",
            [0.5] * 3,
            horizon=3,
        ),
        "recursion_limit": Construct(  # 7 supersteps: model, tools, model, tools, model, tools, model
            _agent(endless), "max_steps", [0.5] * 4, config={"recursion_limit": 7}, horizon=4
        ),
        "model_retry": Construct(
            _agent([("raise", "rate limited"), *react], middleware=(model_retry(max_retries=2, initial_delay=0.0),)),
            "clean",
            [0.6, 0.7, 0.9],
        ),
        "tool_retry": Construct(
            _agent(react, fail_first=1, middleware=(tool_retry(max_retries=2, initial_delay=0.0),)),
            "clean",
            [0.6, 0.7, 0.9],
            tool_errors=1,  # the attempt that failed is counted (metadata), the run is clean
        ),
        "model_fallback": Construct(_fallback, "clean", [0.7, 0.9]),
        # The middleware's own summary call (LangChain marks it lc_internal_call) was a step on both routes.
        "summarization": Construct(_summarized, "clean", [0.6, 0.7, 0.9], internal_calls=1),
        "human_in_the_loop": Construct(_human_in_the_loop, "clean", [0.6, 0.8], drive="interrupt"),
        "stream_values": Construct(_agent(react), "clean", [0.6, 0.7, 0.9], drive="stream-values"),
        "stream_updates": Construct(_agent(react), "clean", [0.6, 0.7, 0.9], drive="stream-updates"),
        "stream_messages": Construct(_agent(react), "clean", [0.6, 0.7, 0.9], drive="stream-messages"),
        "astream": Construct(_agent(react), "clean", [0.6, 0.7, 0.9], drive="astream"),
        "astream_events": Construct(_agent(react), "clean", [0.6, 0.7, 0.9], drive="astream_events"),
        "cancel_first_step": Construct(_agent([("slow", 0.6)]), "timeout", [], drive="cancel"),
        "cancel_later_step": Construct(_agent([0.6, ("slow", 0.7)]), "timeout", [0.6], drive="cancel"),
        "state_graph": Construct(_state_graph, "clean", [0.6, 0.7, 0.8]),
    }


CONSTRUCTS = _constructs()


def _drive(c: Construct, runnable: Any, config: dict[str, Any]) -> None:
    inputs = {"messages": [("user", "What is the capital of France?")]}
    if c.drive == "invoke":
        with contextlib.suppress(Exception):  # a budget stop by exception: the record says so
            runnable.invoke(inputs, config=config)
    elif c.drive.startswith("stream-"):
        for _ in runnable.stream(inputs, config=config, stream_mode=c.drive.removeprefix("stream-")):
            pass
    elif c.drive == "interrupt":
        from langgraph.types import Command

        config = {**config, "configurable": {"thread_id": "hitl-1"}}
        paused = runnable.invoke(inputs, config=config)
        assert "__interrupt__" in paused
        runnable.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config=config)
    else:
        asyncio.run(_adrive(c, runnable, inputs, config))


async def _adrive(c: Construct, runnable: Any, inputs: Any, config: dict[str, Any]) -> None:
    if c.drive == "astream":
        async for _ in runnable.astream(inputs, config=config):
            pass
    elif c.drive == "astream_events":
        async for _ in runnable.astream_events(inputs, config=config, version="v2"):
            pass
    else:  # cancel: the harness bounds the run's time with asyncio.wait_for
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(runnable.ainvoke(inputs, config=config), timeout=0.3)


def _view(record: dict[str, Any]) -> dict[str, Any]:
    """What both routes must agree on."""
    md = record["metadata"]
    return {
        "stop_reason": record["stop_reason"],
        "horizon": record.get("horizon"),
        "forecasts": [s["forecasts"] for s in record["steps"]],
        "repairs": md.get("parse_repairs", 0),
        "llm_calls": md["llm_calls"],
        "tool_errors": md.get("tool_errors", 0),
    }


@pytest.mark.parametrize("name", list(CONSTRUCTS))
def test_both_routes_give_the_record_the_script_implies(tmp_path, name):
    c = CONSTRUCTS[name]
    runnable, models = c.build()
    acc_spans = Accumulator(sink=tmp_path / "spans.jsonl", bootstrap=0)
    processor = TPSSpanProcessor(acc_spans)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    acc_handler = Accumulator(sink=tmp_path / "handler.jsonl", bootstrap=0)
    # horizon= larger than any budget here (issue 46 item 7: it was trusted over the budget that stopped the run)
    handler = TPSCallbackHandler(acc_handler, horizon=50)
    metadata = {"tps_trajectory_id": name, "tps_horizon": 50}
    with instrumented(provider):
        _drive(c, runnable, {"callbacks": [handler], "metadata": metadata, **c.config})
    handler.close()
    processor.force_flush()
    acc_handler.close()  # then the span route's runs still open (a cancelled call's span) are finished
    acc_spans.close()
    provider.shutdown()
    [by_handler] = [json.loads(line) for line in (tmp_path / "handler.jsonl").read_text().splitlines()]
    [by_spans] = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
    assert by_handler["trajectory_id"] == by_spans["trajectory_id"] == name
    handler_view = _view(by_handler)
    assert _view(by_spans) == handler_view
    # The script, independently: the stop, each step's stated confidence, the calls it let happen.
    assert handler_view["stop_reason"] == c.stop, by_handler
    assert [f["verbal"] for f in handler_view["forecasts"]] == c.verbals, by_handler
    assert handler_view["llm_calls"] == sum(m.calls for m in models), by_handler
    assert handler_view["horizon"] == c.horizon
    assert handler_view["repairs"] == c.repairs
    assert handler_view["tool_errors"] == c.tool_errors
    ignored = [h.health.get("ignored", "middleware_model_calls") for h in (handler, processor)]
    assert ignored == [c.internal_calls] * 2
    assert processor.health.get("abandoned") == 0 and handler.health.get("abandoned") == 0


# ---------------------------------------------------------------- the simulated world, against its ground truth

FAULTY = WorldConfig(malformed_rate=0.08, tool_failure_rate=0.04)


@pytest.fixture(scope="module")
def world() -> AgentWorld:
    return AgentWorld(40, seed=3, config=FAULTY)


def _same(a, b) -> bool:
    return (a.stop_reason, a.horizon, a.outcome, [s.forecasts for s in a.steps]) == (
        b.stop_reason,
        b.horizon,
        b.outcome,
        [s.forecasts for s in b.steps],
    )


@pytest.mark.parametrize(
    ("runtime", "expect"),
    [
        ("prebuilt", lambda t: t.expected(6, repairs=False)),  # recursion limit 12: "Sorry, need more steps"
        ("model-limit", lambda t: t.expected(5, repairs=False)),  # exit_behavior="end": a budget text
        ("tool-limit", lambda t: t.expected(5, repairs=False)),  # exit_behavior="error": an exception
        ("executor", lambda t: t.expected(6, repairs=True)),  # "_Exception" retries and the iteration-limit text
    ],
)
def test_processor_equals_handler_and_ground_truth(world, tmp_path, runtime, expect):
    provider = TracerProvider()
    acc_span, span_sink = new_accumulator(tmp_path, "spans.jsonl")
    # AgentExecutor retries malformed output without limit: the paper's harness budget (the world's
    # script) is one the agent does not enforce, so the adapters are given it.
    budget = 2 if runtime == "executor" else None
    processor = TPSSpanProcessor(acc_span, repair_budget=budget)
    provider.add_span_processor(processor)
    acc_cb, cb_sink = new_accumulator(tmp_path, "handler.jsonl")
    handler = TPSCallbackHandler(acc_cb, repair_budget=budget)
    agent, inputs, config, style = agent_for(runtime, world)
    if runtime == "prebuilt":
        config = {"recursion_limit": 12}
    with instrumented(provider):
        run_tasks(agent, inputs, world, [handler], metadata={"tps_horizon": 6}, **config)
    processor.force_flush()
    handler.flush()
    acc_span.close()
    acc_cb.close()
    from_spans, from_callbacks = sink_records(span_sink), sink_records(cb_sink)
    assert set(from_spans) == set(from_callbacks) == set(world.tasks)
    different = [tid for tid in from_spans if not _same(from_spans[tid], from_callbacks[tid])]
    assert not different, (processor.counts, [(from_spans[t], from_callbacks[t]) for t in different[:2]])
    # The horizon is the budget that stopped the run (the call limits: 5 calls), never the larger tps_horizon.
    counts = check_against_world(from_spans, world, expect, style=style, budget=6 if runtime == "prebuilt" else None)
    assert counts.get("max_steps", 0) >= 5 and counts.get("clean", 0) >= 3, counts
    assert not processor.errors
    for rec in from_spans.values():
        assert rec.metadata["source"] == "otel"
        assert len(rec.metadata["otel_trace_id"]) == 32 and len(rec.metadata["otel_span_id"]) == 16


def test_text_react_graph_parser_failures_and_recursion_error(world, tmp_path):
    """Parser spans that raise are repairs; GraphRecursionError on the root span is max_steps."""
    provider = TracerProvider()
    acc, sink = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    agent, inputs, config, _ = agent_for("text-graph", world)
    from world_check import recursion_error_expected

    with instrumented(provider):
        run_tasks(agent, inputs, world, [], metadata={"tps_horizon": 6}, **config)
    processor.force_flush()
    acc.close()
    records = sink_records(sink)
    counts = check_against_world(records, world, lambda t: recursion_error_expected(t, 6, repairs=True), budget=6)
    assert counts["max_steps"] >= 5
    assert any(r.metadata.get("parse_repairs") for r in records.values())


def test_openllmetry_instrumentor_as_the_span_source(world, tmp_path):
    """Traceloop's GenAI-semconv spans (`gen_ai.output.messages`, no logprobs): verbal confidence and stops."""
    provider = TracerProvider()
    acc, sink = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    acc_cb, cb_sink = new_accumulator(tmp_path, "handler.jsonl")
    handler = TPSCallbackHandler(acc_cb)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(provider, source="openllmetry"):
        run_tasks(agent, inputs, world, [handler], metadata={"tps_horizon": 6}, recursion_limit=12)
    processor.force_flush()
    handler.flush()
    acc.close()
    acc_cb.close()
    spans, callbacks = sink_records(sink), sink_records(cb_sink)
    assert set(spans) == set(callbacks) == set(world.tasks)
    n_steps = 0
    for tid, rec in spans.items():
        other = callbacks[tid]
        assert (rec.stop_reason, rec.horizon, len(rec.steps)) == (other.stop_reason, other.horizon, len(other.steps))
        for a, b in zip(rec.steps, other.steps, strict=True):
            assert a.forecasts["verbal"] == b.forecasts["verbal"]  # read from the GenAI output messages
            assert a.forecasts["token_prob"] is None  # OpenLLMetry does not record logprobs
            n_steps += 1
    assert n_steps > 50
