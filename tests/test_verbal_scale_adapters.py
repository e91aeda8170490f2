"""A declared verbal_scale reaches the extractor from both adapters and per run through metadata.

Real parts: LangChain chat-model calls (langchain_core's GenericFakeChatModel replays scripted
messages through the real callback machinery) in a real LangGraph loop and in a hand-written
loop, and spans from the real OpenTelemetry SDK. The model writes bare integers (`Confidence:
4`, `<confidence>3</confidence>`, a tool call's `"confidence": 2`), which only a declared scale
can read: on 1-10 they are 0.4, 0.3, 0.2; on 1-5, 0.8, 0.6, 0.4; undeclared they are refused.
"""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, StateGraph
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from world_check import new_accumulator, sink_records

from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor

TEXTS = ("Thought: one source.\nConfidence: 4", "Thought: two.\n<confidence>3</confidence>")
ON = {"1-10": [0.4, 0.3, 0.2], "1-5": [0.8, 0.6, 0.4], "percent": [0.04, 0.03, 0.02]}


def script() -> list[AIMessage]:
    call = {"name": "search", "args": {"query": "Paris", "confidence": 2}, "id": "call-1", "type": "tool_call"}
    return [AIMessage(TEXTS[0]), AIMessage(TEXTS[1]), AIMessage("", tool_calls=[call])]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]


def graph(model: GenericFakeChatModel) -> Any:
    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(State)
    g.add_node("model", call_model)
    g.set_entry_point("model")
    g.add_conditional_edges("model", lambda s: END if len(s["messages"]) > 3 else "model")
    return g.compile()


def verbals(sink, tid: str) -> list[float | None]:
    return [s.forecasts.get("verbal") for s in sink_records(sink)[tid].steps]


def test_langgraph_loop_reads_on_the_handlers_scale_and_a_run_overrides_it(tmp_path):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False, verbal_scale="1-10")
    for tid, metadata in (("on-handler", {}), ("on-run", {"tps_verbal_scale": "1-5"})):
        graph(GenericFakeChatModel(messages=iter(script()))).invoke(
            {"messages": [HumanMessage("Where is the Louvre?")]},
            config={"callbacks": [handler], "metadata": {"tps_trajectory_id": tid, **metadata}},
        )
    handler.flush()
    acc.close()
    assert verbals(sink, "on-handler") == pytest.approx(ON["1-10"])
    assert verbals(sink, "on-run") == pytest.approx(ON["1-5"])
    assert handler.health.get("rejected") == 0


def test_without_a_declared_scale_bare_integers_are_refused_and_counted(tmp_path):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    graph(GenericFakeChatModel(messages=iter(script()))).invoke(
        {"messages": [HumanMessage("Where is the Louvre?")]},
        config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "undeclared"}},
    )
    acc.close()
    assert verbals(sink, "undeclared") == [None, None, None]
    assert acc.health.get("rejected", "confidence_undeclared_scale") == 3


def test_an_invalid_run_scale_is_counted_and_reads_as_undeclared_not_as_the_handlers(tmp_path):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False, verbal_scale="percent")
    model = GenericFakeChatModel(messages=iter(script()))
    history: list[AnyMessage] = [HumanMessage("Where is the Louvre?")]
    md = {"tps_trajectory_id": "loop", "tps_verbal_scale": "1 to 10"}
    for _ in range(3):  # a hand-written loop: model calls grouped by metadata
        history.append(model.invoke(history, config={"callbacks": [handler], "metadata": md}))
    handler.declare_stop("loop", "max_steps", horizon=3)
    handler.flush()
    acc.close()
    assert verbals(sink, "loop") == [None, None, None]
    assert acc.health.get("rejected", "invalid_verbal_scale") == 3
    assert acc.health.get("rejected", "confidence_undeclared_scale") == 3


def test_a_bad_scale_or_a_scale_and_an_extractor_are_clear_errors(tmp_path):
    acc, _ = new_accumulator(tmp_path)
    with pytest.raises(ValueError, match="verbal_scale must be one of"):
        TPSCallbackHandler(acc, verbal_scale="0-100")
    with pytest.raises(ValueError, match="verbal_scale must be one of"):
        TPSSpanProcessor(acc, verbal_scale=10)  # type: ignore[arg-type]
    from tps_tracer import SignalExtractor

    with pytest.raises(ValueError, match="not both"):
        TPSCallbackHandler(acc, extractor=SignalExtractor(), verbal_scale="1-5")
    acc.close()


@pytest.mark.parametrize(
    "processor_scale, run_metadata, expected",
    [
        ("1-10", {}, ON["1-10"]),
        ("1-10", {"tps_verbal_scale": "1-5"}, ON["1-5"]),
        (None, {"tps_verbal_scale": "percent"}, ON["percent"]),
        (None, {}, [None, None, None]),
    ],
)
def test_span_processor_reads_on_its_scale_and_the_runs_metadata(tmp_path, processor_scale, run_metadata, expected):
    acc, sink = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc, background=False, verbal_scale=processor_scale)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    attrs: dict[str, Any] = {"tps.trajectory_id": "otel-run", "tps.stop_reason": "max_steps", "tps.horizon": 3}
    if run_metadata:
        attrs["metadata"] = json.dumps(run_metadata)  # OpenInference's run metadata attribute
    root = tracer.start_span("agent", attributes=attrs)
    ctx = trace.set_span_in_context(root)
    args = json.dumps({"query": "Paris", "confidence": 2})
    outputs = [
        {"llm.output_messages.0.message.content": TEXTS[0]},
        {"llm.output_messages.0.message.content": TEXTS[1]},
        {"llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": args},
    ]
    for out in outputs:
        tracer.start_span("llm", context=ctx, attributes={"openinference.span.kind": "LLM", **out}).end()
    root.end()
    processor.force_flush()
    acc.close()
    got = verbals(sink, "otel-run")
    assert got == (expected if None in expected else pytest.approx(expected))
