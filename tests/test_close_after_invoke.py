"""Closing (or snapshotting) the accumulator straight after `agent.invoke()` returns.

The handler hands each step and each stop to its capture worker; when `invoke()` returns, the
last of them may still be queued. A user's own script (a create_agent loop with three tool turns)
called `acc.close()` right after `invoke()` and got its run recorded `capture_lost` with 2 of its 4
steps: the accumulator closed the run while its steps and clean stop were still in the queue, so
nothing had been lost but the record said so. The accumulator now drains its adapters' queues
before it closes or snapshots (`Accumulator.leave_lifetimes_to(..., drain=...)`).

A grader that takes 0.3 s makes the race certain: the clean stop is applied only after it returns.
"""

from __future__ import annotations

import json
import time
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler

TOOL_TURNS = 3
STATED = [0.4, 0.55, 0.7, 0.85]  # the confidence stated at each of the 4 model calls


class ThreeToolTurns(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "three-tool-turns"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ThreeToolTurns:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        text = f"Working. Confidence: {STATED[turn]}"
        calls = [{"name": "search", "args": {"q": str(turn)}, "id": f"call-{turn}"}] if turn < TOOL_TURNS else []
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text, tool_calls=calls))])


@tool
def search(q: str) -> str:
    """Search."""
    return "result " + q


def _slow_grader(output: Any) -> bool:
    time.sleep(0.3)
    return True


def _run(tmp_path, finish):
    acc = Accumulator(sink=tmp_path / "runs.jsonl", bootstrap=0)
    handler = TPSCallbackHandler(acc, grader=_slow_grader)
    agent = create_agent(ThreeToolTurns(), [search])
    agent.invoke({"messages": [("user", "go")]}, {"callbacks": [handler], "metadata": {"tps_trajectory_id": "mine"}})
    result = finish(acc)
    acc.close()
    lines = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    return result, lines, handler


def test_close_right_after_invoke_records_the_run_as_it_ended(tmp_path):
    _, lines, handler = _run(tmp_path, lambda acc: None)
    assert len(lines) == 1
    (record,) = lines
    assert record["trajectory_id"] == "mine"
    assert record["stop_reason"] == "clean" and record["outcome"] == 1
    assert [s["forecasts"]["verbal"] for s in record["steps"]] == STATED
    assert handler.health.get("abandoned") == 0 and handler.health.get("rejected") == 0


def test_snapshot_right_after_invoke_counts_the_run(tmp_path):
    snap, lines, _ = _run(tmp_path, lambda acc: acc.snapshot())
    assert {k: n for k, n in snap["audit"]["stop_reasons"].items() if n} == {"clean": 1}
    assert snap["audit"]["roles"]["lost"] == 0
    assert [s["forecasts"]["verbal"] for s in lines[0]["steps"]] == STATED
