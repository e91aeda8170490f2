"""TPSCallbackHandler on the real LangChain / LangGraph runtimes, checked against the world's ground truth.

Only the chat model is scripted (`ScriptedReActModel`, a real BaseChatModel); the agent
loops, tools, callbacks, middleware and budget mechanisms are the libraries' own. For every
run the captured stop reason, number of steps, five forecasts per step (to 1e-12) and the
horizon of budget stops must equal what the world says should happen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.graph import END, StateGraph
from world_check import check_against_world, new_accumulator, recursion_error_expected, sink_records

from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.agents import (
    classic_react_executor,
    prebuilt_react_agent,
    text_react_graph,
    text_react_inputs,
    tool_calling_agent,
)
from tps_tracer.sim.scripted_model import ScriptedReActModel, search_tool, task_prompt
from tps_tracer.sim.world import AgentWorld, WorldConfig, openai_logprobs, render, tokenize

# Enough faults that every stop reason occurs in 40 tasks (asserted below).
FAULTY = WorldConfig(malformed_rate=0.08, tool_failure_rate=0.04)


@pytest.fixture(scope="module")
def world() -> AgentWorld:
    return AgentWorld(40, seed=3, config=FAULTY)


def messages(task_id: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(task_prompt(task_id))]}


def config(handler: TPSCallbackHandler, task_id: str, **extra: Any) -> dict[str, Any]:
    return {"callbacks": [handler], "metadata": {"tps_trajectory_id": task_id}, **extra}


def run_all(agent: Any, world: AgentWorld, handler: TPSCallbackHandler, inputs=messages, **extra: Any) -> int:
    """Invoke the agent on every task; returns how many runs raised (budget/parse/tool errors do)."""
    raised = 0
    for task in world:
        try:
            agent.invoke(inputs(task.task_id), config=config(handler, task.task_id, **extra))
        except Exception:
            raised += 1
    handler.flush()
    handler.accumulator.close()
    return raised


# ---------------------------------------------------------------- one test per runtime and budget mechanism


def test_langgraph_prebuilt_agent_sorry_budget(world, tmp_path):
    """Even recursion limit 2B: B model calls, then "Sorry, need more steps" (looks clean)."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    run_all(
        prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)]), world, handler, recursion_limit=12
    )
    counts = check_against_world(sink_records(sink), world, lambda t: t.expected(6, repairs=False))
    assert set(counts) == {"clean", "max_steps", "parse_error", "tool_error"}, counts
    assert not handler.errors
    details = {r.metadata.get("stop_detail") for r in sink_records(sink).values() if r.stop_reason == "max_steps"}
    assert details == {"budget message"}


def test_langgraph_prebuilt_agent_recursion_error(world, tmp_path):
    """Odd recursion limit 2B-1: GraphRecursionError at the B-th call, raised on the root run only."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    raised = run_all(
        prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)]), world, handler, recursion_limit=11
    )
    counts = check_against_world(sink_records(sink), world, lambda t: recursion_error_expected(t, 6, repairs=False))
    assert raised == counts["max_steps"] + counts["tool_error"]
    assert {r.metadata["stop_detail"] for r in sink_records(sink).values() if r.stop_reason == "max_steps"} == {
        "GraphRecursionError"
    }


@pytest.mark.parametrize("exit_behavior", ["end", "error"])
@pytest.mark.parametrize("limit", ["model", "tool"])
def test_create_agent_call_limit_middleware(world, tmp_path, exit_behavior, limit):
    """ModelCallLimit(run_limit=5) allows 5 model calls; ToolCallLimit(run_limit=4) blocks the 5th call's tool."""
    middleware = (
        ModelCallLimitMiddleware(run_limit=5, exit_behavior=exit_behavior)
        if limit == "model"
        else ToolCallLimitMiddleware(run_limit=4, exit_behavior=exit_behavior)
    )
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent = tool_calling_agent(ScriptedReActModel(world=world), [search_tool(world)], [middleware])
    run_all(agent, world, handler)
    counts = check_against_world(sink_records(sink), world, lambda t: t.expected(5, repairs=False))
    assert counts["max_steps"] > 5


def test_hand_built_text_react_graph_with_repairs(world, tmp_path):
    """The paper's tagged format; malformed outputs get two repair prompts, the third ends the run."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    graph = text_react_graph(ScriptedReActModel(world=world, style="tagged"), [search_tool(world)])
    run_all(graph, world, handler, inputs=lambda tid: text_react_inputs(task_prompt(tid)), recursion_limit=12)
    records = sink_records(sink)
    counts = check_against_world(records, world, lambda t: recursion_error_expected(t, 6, repairs=True))
    assert counts["parse_error"] >= 1
    repaired = [r for r in records.values() if r.metadata.get("parse_repairs")]
    assert any(r.stop_reason != "parse_error" for r in repaired), "some runs recovered after a repair"


def test_classic_agent_executor_text_react(world, tmp_path):
    """AgentExecutor: iteration-limit text is a budget stop; `_Exception` retries are repairs. The
    executor retries malformed output without limit; the world scripts the paper's harness (two
    repairs), a budget the agent does not enforce, so it is given to the handler."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, repair_budget=2)
    executor = classic_react_executor(ScriptedReActModel(world=world, style="react"), [search_tool(world)], 6)
    run_all(executor, world, handler, inputs=lambda tid: {"input": task_prompt(tid)})
    counts = check_against_world(sink_records(sink), world, lambda t: t.expected(6, repairs=True), style="react")
    assert set(counts) == {"clean", "max_steps", "parse_error", "tool_error"}, counts


# ---------------------------------------------------------------- sync, async, streaming, concurrency


def test_async_streaming_runs_concurrently(world, tmp_path):
    """astream with a streaming model, all runs interleaved on one event loop."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent = prebuilt_react_agent(ScriptedReActModel(world=world, streaming=True), [search_tool(world)])

    async def one(task_id: str) -> None:
        try:
            async for _ in agent.astream(messages(task_id), config=config(handler, task_id)):
                pass
        except Exception:
            pass

    async def main() -> None:
        await asyncio.gather(*(one(t.task_id) for t in world))

    asyncio.run(main())
    handler.flush()
    acc.close()
    check_against_world(sink_records(sink), world, lambda t: t.expected(None, repairs=False))


def test_ainvoke_create_agent(world, tmp_path):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent = tool_calling_agent(ScriptedReActModel(world=world), [search_tool(world)])

    async def main() -> None:
        async def one(task_id: str) -> None:
            try:
                await agent.ainvoke(messages(task_id), config=config(handler, task_id))
            except Exception:
                pass

        await asyncio.gather(*(one(t.task_id) for t in world))

    asyncio.run(main())
    handler.flush()
    acc.close()
    check_against_world(sink_records(sink), world, lambda t: t.expected(None, repairs=False))


def test_many_threads_batch(world, tmp_path):
    """`batch` runs on a thread pool: callbacks of different runs arrive on different threads."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent = prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])
    tasks = [t.task_id for t in world]
    agent.batch(
        [messages(t) for t in tasks],
        config=[config(handler, t) for t in tasks],
        return_exceptions=True,
        max_concurrency=16,
    )
    handler.flush()
    acc.close()
    check_against_world(sink_records(sink), world, lambda t: t.expected(None, repairs=False))
    assert handler.n_open == 0


def test_streamed_chunk_logprobs_used_when_the_final_result_has_none(tmp_path):
    """Some integrations only put logprobs on streamed chunks: the handler assembles them."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    world = AgentWorld(1, seed=0, config=WorldConfig(min_length=1, max_length=1, malformed_rate=0))
    step = world["task-00000"].steps[0]
    r = render("task-00000", step)
    lp = openai_logprobs(r.tokens, r.probs)
    from uuid import uuid4

    from langchain_core.messages import AIMessage

    root, llm = uuid4(), uuid4()
    handler.on_chain_start({}, {}, run_id=root, metadata={"tps_trajectory_id": "t"})
    handler.on_chat_model_start({}, [[]], run_id=llm, parent_run_id=root)
    for entry in lp["content"]:
        handler.on_llm_new_token(entry["token"], run_id=llm, logprobs={"content": [entry]})
    handler.on_llm_end(LLMResult(generations=[[ChatGeneration(message=AIMessage(r.text))]]), run_id=llm)
    handler.on_chain_end({"messages": [AIMessage(r.text)]}, run_id=root)
    acc.close()
    got = sink_records(sink)["t"].steps[0].forecasts
    from tps_tracer.sim.world import expected_forecasts

    for name, value in expected_forecasts(r, step.verbal).items():
        assert math.isclose(got[name], value, abs_tol=1e-12), name


# ---------------------------------------------------------------- nesting, outcomes, user stops


def _supervisor(agent: Any, inner_ids: bool):
    """A LangGraph graph whose single node runs two sub-agents (clean tasks 0 and 1)."""

    def node(state: dict[str, Any]) -> dict[str, Any]:
        for tid in ("task-00000", "task-00001"):
            cfg = {"metadata": {"tps_trajectory_id": f"inner-{tid}"}} if inner_ids else {}
            agent.invoke(messages(tid), config=cfg)
        return {"done": True}

    graph = StateGraph(dict)
    graph.add_node("delegate", node)
    graph.set_entry_point("delegate")
    graph.add_edge("delegate", END)
    return graph.compile()


@pytest.mark.parametrize("inner_ids", [True, False])
def test_nested_agents(tmp_path, inner_ids):
    world = AgentWorld(2, seed=11, config=WorldConfig(malformed_rate=0, tool_failure_rate=0))
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    inner = prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])
    _supervisor(inner, inner_ids).invoke(
        {}, config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "outer"}}
    )
    handler.flush()
    acc.close()
    records = sink_records(sink)
    lengths = [world[t].length for t in ("task-00000", "task-00001")]
    if inner_ids:
        # Each sub-agent is its own trajectory; the wrapper made no model call and is not scored.
        assert {k: len(r.steps) for k, r in records.items()} == {
            "inner-task-00000": lengths[0],
            "inner-task-00001": lengths[1],
        }
        assert handler.health.get("ignored", "runs_without_model_calls") == 1
    else:
        assert list(records) == ["outer"]
        assert len(records["outer"].steps) == sum(lengths)
        assert records["outer"].stop_reason == "clean"


def test_outcomes_from_grader_metadata_and_late_feedback(tmp_path):
    world = AgentWorld(12, seed=2, config=WorldConfig(malformed_rate=0, tool_failure_rate=0))
    truth = {t.task_id: t.outcome for t in world}
    acc, sink = new_accumulator(tmp_path)
    graded: list[str] = []

    def grader(final: Any) -> int | None:
        graded.append(final.text)
        return None  # no verdict now: the outcome arrives later

    handler = TPSCallbackHandler(acc, grader=grader)
    agent = prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])
    ids = list(truth)
    for tid in ids[:6]:  # outcome known up front
        agent.invoke(
            messages(tid),
            config=config(handler, tid) | {"metadata": {"tps_trajectory_id": tid, "tps_outcome": truth[tid]}},
        )
    for tid in ids[6:]:
        agent.invoke(messages(tid), config=config(handler, tid))
    handler.flush()
    assert acc.snapshot()["audit"]["pending_outcome"] == 6
    assert len(graded) == 6 and all("<action>finish[yes]</action>" in g for g in graded)
    for tid in ids[6:]:  # production feedback, long after the runs
        handler.record_outcome(tid, success=bool(truth[tid]))
    handler.flush()
    assert acc.snapshot()["audit"]["pending_outcome"] == 0
    acc.close()
    records = sink_records(sink)
    assert {k: r.outcome for k, r in records.items()} == truth


def test_grader_verdict_is_the_outcome(tmp_path):
    world = AgentWorld(5, seed=4, config=WorldConfig(malformed_rate=0, tool_failure_rate=0))
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, grader=lambda final: "finish[yes]" in final.text)
    agent = prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])
    for t in world:
        agent.invoke(messages(t.task_id), config=config(handler, t.task_id))
    handler.close()
    acc.close()
    assert {r.outcome for r in sink_records(sink).values()} == {1}


def test_hand_written_loop_with_declared_stop(tmp_path):
    """No agent framework: model calls grouped by metadata, the user's own budget declared."""
    world = AgentWorld(1, seed=9, config=WorldConfig(min_length=8, max_length=8, malformed_rate=0))
    model = ScriptedReActModel(world=world)
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    history = [HumanMessage(task_prompt("task-00000"))]
    for _ in range(3):
        history.append(model.invoke(history, config=config(handler, "loop-1")))
    handler.declare_stop("loop-1", "max_steps", horizon=3)
    handler.flush()
    acc.close()
    rec = sink_records(sink)["loop-1"]
    assert (rec.stop_reason, len(rec.steps), rec.horizon) == ("max_steps", 3, 3)


def test_unattached_model_calls_are_counted_not_scored(tmp_path):
    world = AgentWorld(1, seed=9)
    acc, _ = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    ScriptedReActModel(world=world).invoke([HumanMessage(task_prompt("task-00000"))], config={"callbacks": [handler]})
    handler.flush()
    assert handler.health.get("ignored", "unattached_model_call") == 1 and acc.n_finished == 0


# ---------------------------------------------------------------- never break the agent


def test_internal_errors_never_reach_the_agent(tmp_path, caplog, monkeypatch):
    world = AgentWorld(3, seed=1, config=WorldConfig(malformed_rate=0, tool_failure_rate=0))
    agent = prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])
    baseline = [agent.invoke(messages(t.task_id))["messages"][-1].text for t in world]

    acc, _ = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bug in the handler")

    monkeypatch.setattr(handler.tracker, "commit", broken)
    agent = prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])
    with caplog.at_level(logging.WARNING, logger="tps_tracer"):
        observed = [
            agent.invoke(messages(t.task_id), config=config(handler, t.task_id))["messages"][-1].text for t in world
        ]
    assert observed == baseline
    assert handler.errors["on_llm_end"] > 0
    assert sum("tps-tracer error (on_llm_end)" in r.message for r in caplog.records) == 1  # logged once


def test_missing_and_malformed_logprobs_are_counted(tmp_path):
    world = AgentWorld(4, seed=1, config=WorldConfig(malformed_rate=0, tool_failure_rate=0))
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    run_all(prebuilt_react_agent(ScriptedReActModel(world=world, logprobs=False), [search_tool(world)]), world, handler)
    records = sink_records(sink)
    n_steps = sum(len(r.steps) for r in records.values())
    assert handler.feeder.extractor.counts["no_logprobs"] == n_steps
    for r in records.values():
        assert all(s.forecasts["token_prob"] is None and s.forecasts["verbal"] is not None for s in r.steps)

    acc2, _ = new_accumulator(tmp_path, "bad.jsonl")
    handler2 = TPSCallbackHandler(acc2, background=False)
    from uuid import uuid4

    from langchain_core.messages import AIMessage

    root, llm = uuid4(), uuid4()
    handler2.on_chain_start({}, {}, run_id=root)
    handler2.on_chat_model_start({}, [[]], run_id=llm, parent_run_id=root)
    bad = ChatGeneration(
        message=AIMessage("x <confidence>0.7</confidence>"),
        generation_info={"logprobs": {"content": [{"token": "x", "logprob": 3.0}]}},
    )
    handler2.on_llm_end(LLMResult(generations=[[bad]]), run_id=llm)
    handler2.on_chain_end({"messages": []}, run_id=root)
    assert handler2.feeder.extractor.counts["malformed_logprobs"] == 1
    assert not handler2.errors


def test_content_is_captured_only_on_request(tmp_path):
    world = AgentWorld(2, seed=1, config=WorldConfig(malformed_rate=0, tool_failure_rate=0))
    for capture in (False, True):
        acc, sink = new_accumulator(tmp_path, f"c{capture}.jsonl")
        handler = TPSCallbackHandler(acc, capture_content=capture)
        run_all(prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)]), world, handler)
        text = Path(sink).read_text()
        assert ("<think>" in text) is capture


def test_budget_stop_horizon_from_metadata(tmp_path):
    """A budget label larger than the budget that stopped the run (recursion_limit 8: 4 model calls) is
    not the horizon (issue 46: it was, 20, as if the run had had 20 steps)."""
    world = AgentWorld(
        1, seed=5, config=WorldConfig(min_length=12, max_length=12, malformed_rate=0, tool_failure_rate=0)
    )
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent = prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])
    cfg = {"callbacks": [handler], "metadata": {"tps_trajectory_id": "t", "tps_horizon": 20}, "recursion_limit": 8}
    agent.invoke(messages("task-00000"), config=cfg)
    handler.flush()
    acc.close()
    rec = sink_records(sink)["t"]
    assert (rec.stop_reason, len(rec.steps), rec.horizon) == (StopReason.MAX_STEPS, 4, 4)


# ---------------------------------------------------------------- the real OpenAI loading path


def test_chat_openai_against_a_local_endpoint(world, tmp_path):
    from fake_openai import fake_openai_server
    from langchain_openai import ChatOpenAI

    served = ScriptedReActModel(world=world)
    with fake_openai_server(served) as base_url:
        model = ChatOpenAI(model="sim", base_url=base_url, api_key="test", logprobs=True, top_logprobs=5, max_retries=0)
        acc, sink = new_accumulator(tmp_path)
        handler = TPSCallbackHandler(acc)
        run_all(prebuilt_react_agent(model, [search_tool(world)]), world, handler)
    counts = check_against_world(sink_records(sink), world, lambda t: t.expected(None, repairs=False))
    assert counts["parse_error"] >= 1  # invalid JSON arguments became invalid_tool_calls


def test_native_tool_calls_leave_token_signals_as_counted_gaps_and_every_run_scored(world, tmp_path):
    """Issue 47 item 3: a step that is only a tool call carries `{"content": null}` logprobs (OpenAI gives
    none for the arguments). They were logged as malformed, and each such step removed its run from
    token_prob / entropy_conf. Now the step is a counted gap, carried forward: every run is scored."""
    from fake_openai import fake_openai_server
    from langchain_openai import ChatOpenAI

    from tps_tracer.evaluation.report import build_report
    from tps_tracer.evaluation.report_options import ReportOptions
    from tps_tracer.records import read_trajectories, to_arrays

    served = ScriptedReActModel(world=world)
    with fake_openai_server(served, native_tool_calls=True) as base_url:
        model = ChatOpenAI(model="sim", base_url=base_url, api_key="test", logprobs=True, top_logprobs=5, max_retries=0)
        acc, sink = new_accumulator(tmp_path)
        handler = TPSCallbackHandler(acc)
        run_all(prebuilt_react_agent(model, [search_tool(world)]), world, handler)
    assert not handler.health.category("malformed").get("logprobs")
    graded = tmp_path / "graded.jsonl"  # a grading job: each clean run gets the world's outcome
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    for rec in lines:
        if rec["stop_reason"] == "clean":
            rec["outcome"], rec["outcome_pending"] = world[rec["trajectory_id"]].outcome, False
    graded.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    records = read_trajectories(graded)
    steps = [s for r in records for s in r.steps]
    gaps = sum(s.forecasts.get("token_prob") is None for s in steps)
    assert gaps > 0 and any(s.forecasts.get("token_prob") is not None for s in steps)
    report = build_report(to_arrays(records), ReportOptions(rules=["log"], bootstrap=0))
    working = report["audit"]["working_sample"]
    for name in ("token_prob", "entropy_conf"):
        (row,) = [r for r in report["scores"] if r["predictor"] == name and r["censoring"] == "simple"]
        assert row["n"] == working  # no run dropped for its tool-call steps
        block = report["missing_forecasts"]["predictors"][name]
        assert block["missing_steps"] > 0 and block["runs_affected"] > 0


def test_tokenizer_round_trips():
    text = render("task-00001", AgentWorld(1, seed=0)["task-00000"].steps[0]).text
    assert "".join(tokenize(text)) == text


def test_more_open_runs_than_max_open_are_all_kept_whole(tmp_path, caplog):
    """max_open used to evict the oldest open run (recorded `other` with 1 of its 2 steps)."""
    from uuid import uuid4

    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False, max_open=2)
    roots = [uuid4() for _ in range(3)]
    for step in range(2):
        for i, root in enumerate(roots):
            if step == 0:
                handler.on_chain_start({}, {}, run_id=root, metadata={"tps_trajectory_id": f"r{i}"})
            llm = uuid4()
            handler.on_chat_model_start({}, [[]], run_id=llm, parent_run_id=root)
            message = ChatGeneration(message=AIMessage(f"<confidence>0.{4 + step}</confidence>"))
            handler.on_llm_end(LLMResult(generations=[[message]]), run_id=llm)
    assert handler.n_open == 3 and not handler.health.category("abandoned")
    for root in roots:
        handler.on_chain_end({"messages": []}, run_id=root)
    acc.close()
    records = sink_records(sink)
    assert sorted(records) == ["r0", "r1", "r2"]
    for rec in records.values():
        assert rec.stop_reason == "clean"
        assert [s.forecasts["verbal"] for s in rec.steps] == [0.4, 0.5]
    assert sum("more than 2 runs open" in r.message for r in caplog.records) == 1  # warned once


@pytest.mark.parametrize(
    ("outputs", "reason"),
    [
        ({"output": "Agent stopped due to iteration limit or time limit."}, StopReason.MAX_STEPS),
        ({"messages": [AIMessage("Sorry, need more steps to process this request.")]}, StopReason.MAX_STEPS),
        ({"messages": [AIMessage("Model call limits exceeded: run limit (5/5)")]}, StopReason.MAX_STEPS),
        (
            {"messages": [AIMessage("'search' tool call limit reached: run limit exceeded (5/4 calls).")]},
            StopReason.MAX_STEPS,
        ),
        ({"messages": [ToolMessage("backend down", tool_call_id="c1", status="error")]}, StopReason.TOOL_ERROR),
        (
            {"messages": [AIMessage("", invalid_tool_calls=[{"name": "s", "args": "{", "id": "1", "error": "bad"}])]},
            StopReason.PARSE_ERROR,
        ),
        # Talking about limits is not hitting one; a handled tool error followed by an answer is clean.
        ({"output": "The agent stopped due to iteration limits in my last job, but here is the answer."}, None),
        ({"messages": [ToolMessage("x", tool_call_id="c1", status="error"), AIMessage("done")]}, None),
    ],
)
def test_stop_detection_on_canned_outputs(outputs, reason):
    from tps_tracer.langchain import classify_output

    assert classify_output(outputs)[0] == reason


def test_live_calibration_adds_calibrated_forecasts(tmp_path):
    world = AgentWorld(3, seed=1, config=WorldConfig(malformed_rate=0, tool_failure_rate=0))
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, calibration={"verbal": lambda p: 0.5 * p + 0.25})
    run_all(prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)]), world, handler)
    for task in world:
        steps = sink_records(sink)[task.task_id].steps
        assert [s.forecasts["verbal+cal"] for s in steps] == pytest.approx(
            [0.5 * s.verbal + 0.25 for s in task.steps[: len(steps)]], abs=1e-15
        )


def test_idle_runs_are_recorded_capture_lost_and_their_late_events_dropped(tmp_path):
    """8 concurrent runs; the first 3 get no callback for longer than idle_timeout: each is recorded
    once, capture_lost with the step it made, and its later events never open a new trajectory."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.runnables import RunnableLambda

    now = [0.0]
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, idle_timeout=60, clock=lambda: now[0])
    model = FakeListChatModel(responses=["<confidence>0.6</confidence> thinking"])

    async def main() -> None:
        gate = asyncio.Event()
        arrived: list[asyncio.Event] = []

        async def body(x: Any, config: Any) -> str:
            await model.ainvoke(x, config=config)  # step 1
            arrived[-1].set()
            await gate.wait()
            await model.ainvoke(x, config=config)  # step 2, after the run may have idled out
            return "done"

        chain = RunnableLambda(body)
        tasks = []
        for i in range(8):
            if i == 3:
                now[0] = 61.0  # r0-r2 have been silent for 61 s; the next run's start sweeps them
            arrived.append(asyncio.Event())
            cfg = {"callbacks": [handler], "metadata": {"tps_trajectory_id": f"r{i}", "tps_outcome": 1}}
            tasks.append(asyncio.create_task(chain.ainvoke("q", config=cfg)))
            await asyncio.wait_for(arrived[-1].wait(), 10)
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    handler.close()
    snap = acc.snapshot()
    assert snap["online"]["live"] == 0 and snap["online"]["finished"] == 8 and handler.n_open == 0
    acc.close()
    records = sink_records(sink)
    assert sorted(records) == [f"r{i}" for i in range(8)]
    for i in range(3):
        rec = records[f"r{i}"]
        assert (rec.stop_reason, rec.metadata["tps_abandoned"]) == ("capture_lost", "idle")
        assert [s.forecasts["verbal"] for s in rec.steps] == [0.6]  # the step made before it idled out
    for i in range(3, 8):
        rec = records[f"r{i}"]
        assert rec.stop_reason == "clean" and rec.outcome == 1
        assert [s.forecasts["verbal"] for s in rec.steps] == [0.6, 0.6]
    assert handler.health.get("abandoned", "idle") == 3
    assert handler.health.get("ignored", "runs_without_model_calls") == 0
    # Per idle run: step 2's start and end, and the run's end.
    assert handler.health.get("dropped", "abandoned_run_event") == 9
    assert not handler.errors


def test_close_finishes_the_runs_still_open_as_abandoned(tmp_path):
    """A hand-written loop never declared stopped was left live in the accumulator forever."""
    world = AgentWorld(1, seed=9, config=WorldConfig(min_length=8, max_length=8, malformed_rate=0))
    model = ScriptedReActModel(world=world)
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    history = [HumanMessage(task_prompt("task-00000"))]
    for _ in range(2):
        history.append(model.invoke(history, config=config(handler, "loop-1")))
    handler.close()
    assert acc.n_live == 0 and handler.n_open == 0
    model.invoke(history, config=config(handler, "loop-1"))  # after close: not re-opened
    assert handler.n_open == 0
    acc.close()
    rec = sink_records(sink)["loop-1"]
    assert (rec.stop_reason, rec.metadata["tps_abandoned"], len(rec.steps)) == ("capture_lost", "closed", 2)
    assert handler.health.get("abandoned", "closed") == 1


@pytest.mark.parametrize("named", [True, False])
def test_a_run_paused_by_an_interrupt_for_66_minutes_gives_one_clean_record(tmp_path, named):
    """LangGraph's interrupt() ends the root run; the handler used to record the run there (clean, 1
    step) and its resumed end was rejected as duplicate_stop; with no id, the resume was a second
    trajectory. Now the pause keeps the run open, not idle, and the resume continues it,
    matched by its trajectory id or, without one, by its LangGraph thread."""
    from interrupt_graph import approval_graph, one_resumed_record
    from langgraph.types import Command

    app = approval_graph()

    now = [0.0]
    acc, sink = new_accumulator(tmp_path, clock=lambda: now[0])  # the accumulator's default idle_timeout: 3600 s
    handler = TPSCallbackHandler(acc, clock=lambda: now[0])  # and the handler's
    metadata = {"tps_trajectory_id": "approval", "tps_outcome": 1} if named else {"tps_outcome": 1}
    cfg = {"callbacks": [handler], "configurable": {"thread_id": "t-1"}, "metadata": metadata}
    first = app.invoke({"answer": ""}, config=cfg)
    assert "__interrupt__" in first
    handler.flush()
    assert handler.n_paused == 1 and acc.n_finished == 0
    now[0] = 66 * 60.0  # a human answers after 66 minutes
    assert handler.sweep() == 0 and acc.sweep() == 0  # paused is not idle (an explicit accumulator sweep too)
    assert app.invoke(Command(resume="yes"), config=cfg) == {"answer": "yes!"}
    handler.close()
    acc.close()
    rec = one_resumed_record(sink)
    assert not acc.health.category("rejected") and not handler.health.category("abandoned")
    if named:
        assert rec.trajectory_id == "approval"
