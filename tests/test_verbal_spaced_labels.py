"""Defect D4 end to end: a model that writes `Confidence 70%` (no colon) is read, not missing.

Real parts: langchain's `create_agent` loop (LangGraph) with a real tool, driven by a
scripted chat model (langchain_core's GenericFakeChatModel replays its messages through the
real callback machinery), captured by TPSCallbackHandler into a real JSON Lines sink. The
expected values are the statements' own numbers (70% is 0.7, 17/20 is 0.85); the grammar
itself is tested form by form in tests/verbal_corpus.py (SPACED).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from world_check import new_accumulator, sink_records

from tps_tracer.langchain import TPSCallbackHandler


class ScriptedChat(GenericFakeChatModel):
    """Replays its messages; binding tools changes nothing (the script already calls `lookup`)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self


@tool
def lookup(query: str) -> str:
    """Look a city up."""
    return f"{query}: capital of France"


def run(tmp_path, *texts: str) -> tuple[list[float | None], TPSCallbackHandler, Any]:
    """One create_agent run: the model's first message calls `lookup`, the last answers."""
    call = {"name": "lookup", "args": {"query": "Paris"}, "id": "call-1", "type": "tool_call"}
    script = [AIMessage(texts[0], tool_calls=[call]), *(AIMessage(t) for t in texts[1:])]
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    agent = create_agent(ScriptedChat(messages=iter(script)), [lookup])
    out = agent.invoke(
        {"messages": [HumanMessage("What is the capital of France? End with 'Confidence NN%'.")]},
        config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "d4"}},
    )
    assert out["messages"][-1].content == texts[-1]  # the loop ran the whole script
    acc.close()
    steps = sink_records(sink)["d4"].steps
    return [s.forecasts.get("verbal") for s in steps], handler, acc


def test_a_create_agent_loop_saying_confidence_without_a_colon_records_its_verbal(tmp_path):
    verbals, handler, acc = run(
        tmp_path,
        "I will look it up.\nConfidence 70%",
        "## Answer\nParis\n\n## Confidence\n\n17/20",
    )
    assert verbals == [pytest.approx(0.7), pytest.approx(17 / 20)]
    assert acc.health.get("rejected") == 0 and acc.health.get("malformed") == 0
    assert handler.feeder.extractor.counts["verbal_missing"] == 0
    assert not handler.errors


def test_a_spaced_label_with_a_refused_value_is_counted_under_its_reason_not_missing(tmp_path):
    # `→` is no separator: the statement is refused (malformed), counted, not silently missing;
    # `Confidence 8` (a bare integer after a space) is no statement at all.
    verbals, handler, acc = run(tmp_path, "Looking.\nConfidence \u2192 70%", "Paris.\nConfidence 8")
    assert verbals == [None, None]
    assert acc.health.get("malformed", "confidence") == 1
    assert handler.feeder.extractor.counts["verbal_malformed"] == 1
    assert handler.feeder.extractor.counts["verbal_missing"] == 1
