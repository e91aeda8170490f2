"""Resume defaults that cannot run away, and your own budget around a stream loop (issue 34).

Real loops: LangGraph's prebuilt ReAct agent over a small scripted chat model, written here:
it calls the `lookup` tool until it has seen `finish_after` tool results, then answers
"done" (finish_after=None: it never stops, a stuck agent). Every model call states a
confidence, so the handler records a forecast per step. The records go through the real
accumulator, checkpointer (InMemorySaver) and `tps-tracer report`.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from tests.cli_support import call
from tps_tracer.evaluation.censoring.continuations import DEFAULT_MIN_VALID
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.langchain.resume import resume_continuations
from tps_tracer.langchain.run_reading import StreamBudget
from tps_tracer.online.accumulator import Accumulator
from tps_tracer.records import read_trajectories
from tps_tracer.sim.agents import prebuilt_react_agent

RUNAWAY_GUARD = 60  # model calls per thread after which the model refuses (bounds a runaway branch)


class LoopModel(BaseChatModel):
    """Calls `lookup` until `finish_after` tool results are in the conversation, then answers."""

    finish_after: int | None = None

    @property
    def _llm_type(self) -> str:
        return "test-loop"

    def bind_tools(self, tools: Any, **kwargs: Any) -> LoopModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any):
        seen = sum(isinstance(m, ToolMessage) for m in messages)
        if self.finish_after is not None and seen >= self.finish_after:
            msg = AIMessage(content="The answer is done. Confidence: 80%")
        else:
            call_ = {"name": "lookup", "args": {"q": f"step {seen}"}, "id": f"call-{seen}-{len(messages)}"}
            msg = AIMessage(content="Looking it up. Confidence: 40%", tool_calls=[call_])
        return ChatResult(generations=[ChatGeneration(message=msg)])


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"result for {q}"


class CallCounter(BaseCallbackHandler):
    """Model calls per LangGraph thread; refuses past RUNAWAY_GUARD so a runaway branch ends."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.raise_error = True

    def on_chat_model_start(self, serialized: Any, messages: Any, *, metadata: Any = None, **kw: Any) -> None:
        thread = str((metadata or {}).get("thread_id"))
        with self._lock:
            self.calls[thread] += 1
            n = self.calls[thread]
        if n > RUNAWAY_GUARD:
            raise RuntimeError(f"runaway: {n} model calls on {thread}")


def _censored_run(tmp_path: Path, finish_after: int | None, recursion_limit: int = 13):
    """One run cut by LangGraph's recursion limit (GraphRecursionError; 13 supersteps allow 7 model calls)."""
    agent = prebuilt_react_agent(LoopModel(finish_after=finish_after), [lookup], checkpointer=InMemorySaver())
    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(sink=sink, bootstrap=0)
    handler = TPSCallbackHandler(acc, background=False)
    config = {
        "callbacks": [handler],
        "metadata": {"tps_trajectory_id": "run-1"},
        "configurable": {"thread_id": "thread-1"},
        "recursion_limit": recursion_limit,
    }
    with pytest.raises(Exception, match="Recursion limit"):
        agent.invoke({"messages": [HumanMessage("find it")]}, config=config)
    handler.close()
    acc.close()
    (rec,) = read_trajectories(sink)
    return agent, rec


def test_a_stuck_branch_stops_at_the_original_run_s_step_limit(tmp_path, caplog):
    agent, rec = _censored_run(tmp_path, finish_after=None)
    assert rec.stop_reason.value == "max_steps"
    # The step limit the handler recorded: the model calls the run was allowed (7 under recursion_limit 13).
    assert rec.horizon == len(rec.steps) == rec.metadata["llm_calls"] == 7
    counter = CallCounter()
    summary = resume_continuations(
        agent,
        [rec],
        tmp_path / "cont.jsonl",
        branches=DEFAULT_MIN_VALID,
        grader=lambda s: 1,
        config={"callbacks": [counter]},
    )
    # Every branch is cut as max_steps after exactly the original 7 model calls, counted from the fork
    # (it used to run on under LangGraph's default recursion limit, 10,000 supersteps).
    assert summary.stop_reasons == Counter({"max_steps": DEFAULT_MIN_VALID})
    branch_calls = {t: n for t, n in counter.calls.items() if "#branch-" in t}
    assert len(branch_calls) == DEFAULT_MIN_VALID
    # One call more is started and refused by the budget: horizon + 1 starts, horizon calls made.
    assert set(branch_calls.values()) == {rec.horizon + 1}
    assert "step limit" in summary.as_dict()["branch_budget"]
    # Cut again, every branch is unresolved: the summary says so and how to give more room.
    (warning,) = summary.as_dict()["warnings"]
    assert f"{DEFAULT_MIN_VALID} of {DEFAULT_MIN_VALID} branches hit the step budget again" in warning
    assert "budget=<recursion_limit>" in warning
    assert "_StepCap" not in caplog.text  # the deliberate stop is not logged as a callback error
    lines = [json.loads(x) for x in (tmp_path / "cont.jsonl").read_text().splitlines()]
    assert {x["stop_reason"] for x in lines} == {"max_steps"}


def test_a_branch_that_can_finish_within_the_limit_finishes_clean(tmp_path):
    agent, rec = _censored_run(tmp_path, finish_after=8)  # cut after 7 calls; a branch needs 2 more
    summary = resume_continuations(
        agent, [rec], tmp_path / "cont.jsonl", branches=DEFAULT_MIN_VALID, grader=lambda s: 1
    )
    assert summary.stop_reasons == Counter({"clean": DEFAULT_MIN_VALID})
    assert summary.grader_errors == 0


def test_fewer_branches_than_min_valid_warn_with_the_fix(tmp_path, capsys):
    agent, rec = _censored_run(tmp_path, finish_after=7)
    with pytest.warns(UserWarning, match=r"branches=4 is below the 5 valid branches .* use branches >= 10"):
        summary = resume_continuations(agent, [rec], tmp_path / "a.jsonl", branches=4, grader=lambda s: 1)
    assert summary.as_dict()["warnings"] and "--min-valid 4" in summary.as_dict()["warnings"][0]
    # ... and `tps-tracer censoring` on those branches says why nothing was attached (the file also
    # needs complete runs, which the toolkit's other checks use: six hand-written ones).
    records = tmp_path / "with_complete.jsonl"
    clean = [
        {
            "trajectory_id": f"c{i}",
            "stop_reason": "clean",
            "outcome": i % 2,
            "steps": [{"t": 1, "forecasts": {"verbal": 0.6}}],
        }
        for i in range(6)
    ]
    records.write_text((tmp_path / "runs.jsonl").read_text() + "".join(json.dumps(x) + "\n" for x in clean))
    code, out, err = call(["censoring", str(records), "--continuations", str(tmp_path / "a.jsonl")], capsys)
    assert code == 0, err
    assert "dropped_fewer_than_min_valid: 1" in out
    assert "NOTE: 1 censored prefixes have fewer than 5 valid (clean) branches" in " ".join(out.split())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # enough branches: no warning at all
        summary = resume_continuations(agent, [rec], tmp_path / "b.jsonl", branches=5, grader=lambda s: 1)
    assert summary.as_dict()["warnings"] == []


def test_one_grader_works_for_the_handler_and_for_resume(tmp_path):
    """The handler's grader reads the final message; resume hands it the same, by its annotation
    or, unannotated, after it fails on the state (counted). A state grader still gets the state."""
    agent, rec = _censored_run(tmp_path, finish_after=7)

    def by_message(final: AIMessage) -> bool:
        return "done" in final.content

    def by_state(state: dict) -> int:
        return int("done" in state["messages"][-1].content)

    def unannotated(final):
        return "done" in final.content  # AttributeError on a dict: retried with the message

    for i, (grader, given_message) in enumerate(((by_message, 0), (by_state, 0), (unannotated, DEFAULT_MIN_VALID))):
        out = tmp_path / f"g{i}.jsonl"
        summary = resume_continuations(agent, [rec], out, branches=DEFAULT_MIN_VALID, grader=grader)
        d = summary.as_dict()
        assert (d["written"], d["grader_errors"], d["grader_given_message"]) == (DEFAULT_MIN_VALID, 0, given_message)
        assert {json.loads(x)["outcome"] for x in out.read_text().splitlines()} == {1}

    # The same grader in the handler: the clean run's outcome is its verdict on the final message.
    acc = Accumulator(sink=tmp_path / "h.jsonl", bootstrap=0)
    handler = TPSCallbackHandler(acc, background=False, grader=by_message)
    graph = prebuilt_react_agent(LoopModel(finish_after=2), [lookup])
    graph.invoke(
        {"messages": [HumanMessage("x")]}, config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "h"}}
    )
    handler.close()
    acc.close()
    (h,) = read_trajectories(tmp_path / "h.jsonl")
    assert (h.stop_reason.value, h.outcome) == ("clean", 1)


def test_every_grader_failure_is_counted_and_shown(tmp_path):
    agent, rec = _censored_run(tmp_path, finish_after=7)

    def broken(final: AIMessage) -> bool:
        raise RuntimeError("judge unavailable")

    summary = resume_continuations(agent, [rec], tmp_path / "c.jsonl", branches=DEFAULT_MIN_VALID, grader=broken)
    d = summary.as_dict()
    assert (d["written"], d["grader_errors"]) == (0, DEFAULT_MIN_VALID)
    assert "judge unavailable" in d["grader_error_example"]


# ---------------------------------------------------------------- your own budget around stream()


def _stream_setup(tmp_path: Path, finish_after: int | None):
    acc = Accumulator(sink=tmp_path / "s.jsonl", bootstrap=0)
    handler = TPSCallbackHandler(acc)
    graph = prebuilt_react_agent(LoopModel(finish_after=finish_after), [lookup])
    return acc, handler, graph


def _records(tmp_path, acc, handler):
    handler.close()
    acc.close()
    return {r.trajectory_id: r for r in read_trajectories(tmp_path / "s.jsonl")}


def test_breaking_a_stream_under_handler_budget_records_max_steps(tmp_path, capsys):
    acc, handler, graph = _stream_setup(tmp_path, finish_after=None)
    config: dict[str, Any] = {"callbacks": [handler], "recursion_limit": 200}
    seen = 0
    with handler.budget(config, max_steps=4) as b:
        for _ in graph.stream({"messages": [HumanMessage("find it")]}, config=config, stream_mode="updates"):
            seen += 1
            if b.exhausted:
                break
    tid = config["metadata"]["tps_trajectory_id"]  # the budget named the run
    rec = _records(tmp_path, acc, handler)[tid]
    assert (rec.stop_reason.value, rec.horizon, len(rec.steps)) == ("max_steps", 4, 4)
    assert b.calls == 4 and seen == 7  # 4 model updates and the 3 tool updates between them

    # Scored as censored: cen-simple scores it as a failure over its 4 steps (linear-front on T=4).
    code, out, err = call(["report", str(tmp_path / "s.jsonl"), "--bootstrap", "0", "--json", "--rules", "log"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["audit"]["roles"]["censored"] == 1 and rep["audit"]["roles"]["excluded"] == 0
    row = next(r for r in rep["scores"] if r["predictor"] == "verbal" and r["censoring"] == "simple")
    expected = sum((4 - t + 1) / 10 * math.log(1 - 0.4) for t in range(1, 5))
    assert row["n"] == 1 and row["mean"] == pytest.approx(expected, abs=1e-12)


def test_a_run_that_ends_on_its_own_inside_the_budget_keeps_its_stop(tmp_path):
    acc, handler, graph = _stream_setup(tmp_path, finish_after=1)
    config: dict[str, Any] = {"callbacks": [handler], "metadata": {"tps_trajectory_id": "short"}}
    with handler.budget("short", max_steps=5) as b:
        for _ in graph.stream({"messages": [HumanMessage("x")]}, config=config):
            if b.exhausted:
                break
    rec = _records(tmp_path, acc, handler)["short"]
    assert (rec.stop_reason.value, len(rec.steps), b.calls) == ("clean", 2, 2)


def test_a_break_without_a_budget_is_other_and_a_late_declare_stop_names_the_fix(tmp_path, caplog):
    acc, handler, graph = _stream_setup(tmp_path, finish_after=None)
    config: dict[str, Any] = {"callbacks": [handler], "metadata": {"tps_trajectory_id": "raw"}, "recursion_limit": 200}
    for n, _ in enumerate(graph.stream({"messages": [HumanMessage("x")]}, config=config), start=1):
        if n == 3:
            break
    handler.flush()
    with caplog.at_level("WARNING", logger="tps_tracer"):
        handler.declare_stop("raw", "max_steps")
    assert handler.health.get("rejected", "declare_stop_after_stream_closed") == 1
    assert "handler.budget(config, max_steps=N)" in caplog.text
    rec = _records(tmp_path, acc, handler)["raw"]
    assert rec.stop_reason.value == "other"  # an unexplained break stays informative (excluded)


def test_budget_arguments_are_checked(tmp_path):
    acc, handler, _ = _stream_setup(tmp_path, finish_after=1)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_steps"), handler.budget("x", max_steps=bad):
            pass
    with pytest.raises(TypeError, match="trajectory id or the run config"), handler.budget(42, max_steps=3):  # type: ignore[arg-type]
        pass
    handler.close()
    acc.close()


def test_breaking_an_async_stream_under_handler_budget_records_max_steps(tmp_path):
    acc, handler, graph = _stream_setup(tmp_path, finish_after=None)
    config: dict[str, Any] = {"callbacks": [handler], "metadata": {"tps_trajectory_id": "a"}, "recursion_limit": 200}

    async def run() -> StreamBudget:
        with handler.budget(config, max_steps=3) as b:
            stream = graph.astream({"messages": [HumanMessage("x")]}, config=config, stream_mode="updates")
            async for _ in stream:
                if b.exhausted:
                    break
            await stream.aclose()  # an async generator is closed here, not by the break itself
        return b

    b = asyncio.run(run())
    rec = _records(tmp_path, acc, handler)["a"]
    assert (rec.stop_reason.value, rec.horizon, len(rec.steps), b.calls) == ("max_steps", 3, 3, 3)
