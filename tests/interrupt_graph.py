"""Shared by the lifetime tests: a real LangGraph graph that pauses at `interrupt()` for a human."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, StateGraph
from langgraph.types import interrupt
from world_check import sink_records

from tps_tracer.records.schema import TrajectoryRecord


class State(TypedDict):
    answer: str


def approval_graph() -> Any:
    """ask (a model call, then interrupt() for a human's answer) -> finish (a model call), with a
    MemorySaver checkpointer. The scripted model says confidence 0.6, then 0.8, then cycles."""
    model = FakeListChatModel(responses=["<confidence>0.6</confidence> ask", "<confidence>0.8</confidence> done"])

    def ask(state: State, config: RunnableConfig) -> dict[str, str]:
        model.invoke("plan", config=config)
        return {"answer": str(interrupt("approve?"))}

    def finish(state: State, config: RunnableConfig) -> dict[str, str]:
        model.invoke("finish", config=config)
        return {"answer": state["answer"] + "!"}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_node("finish", finish)
    graph.set_entry_point("ask")
    graph.add_edge("ask", "finish")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=InMemorySaver())


def one_resumed_record(sink: Path) -> TrajectoryRecord:
    """The sink's only record, checked as the clean end of an approval_graph run (tps_outcome 1) paused
    once and resumed: LangGraph re-runs the interrupted node on resume, so its model call is made (and
    paid) again: three calls, three steps in order (the scripted model cycles through its answers)."""
    records = sink_records(sink)
    assert len(records) == 1
    rec = next(iter(records.values()))
    assert rec.stop_reason == "clean" and rec.outcome == 1
    assert [s.forecasts["verbal"] for s in rec.steps] == [0.6, 0.8, 0.6]
    assert rec.metadata["llm_calls"] == 3
    return rec
