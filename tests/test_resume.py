"""q_Z from real continuations: censored LangGraph runs resumed from their checkpoints.

Everything runs through real LangGraph graphs and checkpointers (InMemorySaver,
SqliteSaver) over the simulated world, whose q_Z is exact: a censored run whose prefix
saw clues s_1..s_{Z-1} succeeds with probability q_Z = (a + sum s) / (a + b + Z - 1), and
the scripted model and tool play continuation branches from the world's law given the
prefix. The oracle for "how close should q_hat be" is the binomial law itself (scipy).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from scipy.stats import binom

from tps_tracer.cli.demo_cmd import DEMO_WORLD
from tps_tracer.cli.main import main
from tps_tracer.constants import DEMO_SEED
from tps_tracer.evaluation.censoring.continuations import (
    ContinuationLog,
    mc_q_z,
    parse_continuations,
    read_continuations,
)
from tps_tracer.health import HealthLedger
from tps_tracer.langchain.resume import aresume_continuations, branch_thread_id, resume_continuations
from tps_tracer.records import read_trajectories
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.agents import run_campaign
from tps_tracer.sim.scripted_model import ScriptedReActModel, grade_final_state
from tps_tracer.sim.world import (
    AgentWorld,
    WorldConfig,
    continuation_clue,
    continuation_step,
    q_given,
)

# Budget 4 model calls (recursion_limit 8) on tasks of natural length 2..8: about 60% of
# runs are censored, and a branch needs at most 4 more calls, so the same fresh budget
# almost never censors a branch again.
BUDGET = 8
CONFIG = WorldConfig(max_length=8, malformed_rate=0.03, tool_failure_rate=0.02, forecaster="noisy")


def _campaign(tmp: Path, n_tasks: int, seed: int, saver=None, recursion_limit: int = BUDGET):
    world = AgentWorld(n_tasks, seed=seed, config=CONFIG)
    sink = tmp / f"runs-{seed}-{recursion_limit}.jsonl"
    model = ScriptedReActModel(world=world, logprobs=False)  # logprobs only slow the checkpoints down
    agent = run_campaign(
        world,
        sink,
        model=model,
        recursion_limit=recursion_limit,
        q_z_oracle=True,
        checkpointer=saver or InMemorySaver(),
    )
    return world, agent, read_trajectories(sink)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    return _campaign(tmp_path_factory.mktemp("resume"), 48, seed=11)


def _censored(records):
    return [r for r in records if r.stop_reason is StopReason.MAX_STEPS]


def _exact_q_z(world: AgentWorld, rec) -> float:
    """q_Z of a censored prefix from the world: q_t of its last recorded step, P(Y=1 | s_1..s_{Z-1}).

    (Not the record's q_z: the campaign's oracle goes by `TaskScript.expected`, which takes a
    tool failure scripted at the budget's last step as a tool error, while the prebuilt agent
    replaces that step's tool call by its budget message, so the run is censored.)"""
    return world[rec.metadata["task_id"]].steps[len(rec.steps) - 1].q


def _lines(path: Path) -> set[tuple[str, str, str, int | None]]:
    return {(b.source_trajectory_id, b.branch, b.stop_reason.value, b.outcome) for b in read_continuations(path)}


def _binomial_abs_error(q: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    """E mean_i |k_i/n_i - q_i| for k_i ~ Binomial(n_i, q_i), and its standard error over the prefixes."""
    means, variances = [], []
    for qi, ni in zip(q, n, strict=True):
        k = np.arange(ni + 1)
        pmf = binom.pmf(k, ni, qi)
        e1 = float(np.sum(pmf * np.abs(k / ni - qi)))
        means.append(e1)
        variances.append(qi * (1 - qi) / ni - e1**2)  # E e^2 = q(1-q)/n
    return float(np.mean(means)), float(np.sqrt(np.sum(variances)) / len(q))


# ---------------------------------------------------------------- the world's continuation law


def test_world_continuation_law_succeeds_with_the_exact_q():
    """Branches drawn call by call from the world's law succeed with q_given(prefix) (martingale).

    10,000 branches from one prefix; malformed outputs and tool failures end branches
    without an answer and are excluded (they are independent of Y, so no bias)."""
    config = WorldConfig(max_length=8, malformed_rate=0.1, tool_failure_rate=0.1)
    prefix = [1, 0, 1]
    ys = []
    for b in range(10_000):
        thread = f"prefix#branch-{b}"
        seen = list(prefix)
        while True:
            step, outcome = continuation_step(config, 3, thread, seen)
            if step.malformed_before:
                break
            if step.final:
                ys.append(outcome)
                break
            fails, s = continuation_clue(config, 3, thread, seen)
            if fails:
                break
            seen.append(s)
    q = q_given(config, prefix)
    assert q == pytest.approx(4 / 7)
    ys_arr = np.array(ys, dtype=float)
    se = np.sqrt(q * (1 - q) / ys_arr.size)
    assert abs(ys_arr.mean() - q) < 4 * se
    assert 0.5 * 10_000 < ys_arr.size < 0.9 * 10_000  # exclusions happened, at the rates configured


def test_world_q_given_is_the_scripts_q_t():
    world = AgentWorld(30, seed=4, config=CONFIG)
    for task in world:
        evidence = [s.evidence for s in task.steps]
        for step in task.steps:
            assert q_given(CONFIG, evidence[: step.t - 1]) == pytest.approx(step.q, abs=1e-15)


def test_branch_draws_are_seeded_by_the_thread_id():
    a = continuation_step(CONFIG, 1, "run#branch-0", [1, 1])
    assert continuation_step(CONFIG, 1, "run#branch-0", [1, 1]) == a
    draws = {continuation_step(CONFIG, 1, f"run#branch-{m}", [1, 1])[0].token_seed for m in range(20)}
    assert len(draws) == 20


# ---------------------------------------------------------------- the handler records the thread


def test_every_record_carries_its_langgraph_thread_id(campaign):
    records = campaign[2]
    assert records and all(r.metadata.get("thread_id") == r.trajectory_id for r in records)
    assert len(_censored(records)) >= 15


# ---------------------------------------------------------------- convergence to the exact q_Z


def test_resumed_q_hat_converges_to_the_exact_q_z(campaign, tmp_path):
    """M = 4, then the same file extended to M = 16: mean |q_hat - q_Z| is what binomial
    sampling predicts (within 4 standard errors) and halves, like 1/sqrt(M)."""
    world, graph, records = campaign
    censored = _censored(records)
    exact = {r.trajectory_id: _exact_q_z(world, r) for r in censored}
    out = tmp_path / "branches.jsonl"
    errors = {}
    for m in (4, 16):
        summary = resume_continuations(
            graph, records, out, branches=m, grader=grade_final_state, budget=BUDGET, concurrency=2
        )
        assert summary.prefixes == len(censored) and summary.grader_errors == 0 and summary.fork_errors == 0
        assert summary.already_done == (0 if m == 4 else 4 * len(censored))
        assert summary.written == (m if m == 4 else 12) * len(censored)
        mc = mc_q_z(read_continuations(out), min_valid=1)
        assert set(mc.ids) == set(exact)
        q = np.array([exact[i] for i in mc.ids])
        observed = float(np.mean(np.abs(mc.q_hat - q)))
        expected, se = _binomial_abs_error(q, mc.n_valid)
        assert abs(observed - expected) < 4 * se, (m, observed, expected, se)
        errors[m] = observed
    assert errors[16] < errors[4]
    assert 1.3 < errors[4] / errors[16] < 3.2  # sqrt(16 / 4) = 2


def test_censoring_command_reads_the_resumed_branches(campaign, tmp_path, capsys):
    _, graph, records = campaign
    out = tmp_path / "branches.jsonl"
    resume_continuations(graph, records, out, branches=5, grader=grade_final_state, budget=BUDGET)
    mc = mc_q_z(read_continuations(out), min_valid=5)
    sink = tmp_path / "records.jsonl"
    sink.write_text("".join(r.model_dump_json() + "\n" for r in records))
    assert main(["censoring", str(sink), "--continuations", str(out), "--json", "--artificial", "none"]) == 0
    report = json.loads(capsys.readouterr().out)["q_z"]
    assert report["source"] == "monte-carlo continuation"
    assert report["attached"] == len(mc.ids) and report["estimates_not_in_file"] == 0
    assert report["mean_q_hat"] == pytest.approx(float(mc.q_hat.mean()))


# ---------------------------------------------------------------- branches are independent copies


def test_branches_are_independent_copies_of_the_fork(campaign, tmp_path):
    _, graph, records = campaign
    rec = _censored(records)[0]
    source = {"configurable": {"thread_id": rec.metadata["thread_id"]}}
    head_before = graph.get_state(source)
    n_before = len(list(graph.get_state_history(source)))
    out = tmp_path / "branches.jsonl"
    m = 6
    resume_continuations(graph, [rec], out, branches=m, grader=grade_final_state, budget=BUDGET)

    lines = [json.loads(x) for x in out.read_text().splitlines()]
    threads = [x["thread_id"] for x in lines]
    expected = [branch_thread_id(rec.metadata["thread_id"], rec.trajectory_id, k) for k in range(m)]
    assert sorted(threads) == sorted(expected)
    assert len(set(threads)) == m and rec.metadata["thread_id"] not in threads
    fork_id = {x["fork_checkpoint_id"] for x in lines}
    assert len(fork_id) == 1

    # The source thread is untouched.
    assert len(list(graph.get_state_history(source))) == n_before
    assert graph.get_state(source).config == head_before.config

    # Each branch starts from a copy of the fork checkpoint: same messages, own thread.
    fork = graph.get_state({"configurable": {**source["configurable"], "checkpoint_id": fork_id.pop()}})
    prefix_ids = [msg.id for msg in fork.values["messages"]]
    finals = []
    for t in threads:
        first = list(graph.get_state_history({"configurable": {"thread_id": t}}))[-1]
        assert [msg.id for msg in first.values["messages"]] == prefix_ids
        assert first.next == fork.next
        final = graph.get_state({"configurable": {"thread_id": t}}).values["messages"]
        assert [msg.id for msg in final[: len(prefix_ids)]] == prefix_ids
        finals.append(tuple(msg.text for msg in final[len(prefix_ids) :]))
    assert len(set(finals)) > 1  # the branches drew different continuations

    # No shared state: writing into one branch changes neither the others nor the source.
    others = {t: len(graph.get_state({"configurable": {"thread_id": t}}).values["messages"]) for t in threads[1:]}
    graph.update_state({"configurable": {"thread_id": threads[0]}}, {"messages": [HumanMessage("only here")]})
    assert graph.get_state({"configurable": {"thread_id": threads[0]}}).values["messages"][-1].text == "only here"
    for t, n in others.items():
        assert len(graph.get_state({"configurable": {"thread_id": t}}).values["messages"]) == n
    assert graph.get_state(source).config == head_before.config


def test_a_run_cut_by_graph_recursion_error_resumes_its_pending_tool_call(tmp_path):
    """`create_agent` under an odd recursion limit raises GraphRecursionError with the B-th
    model call's tool call pending: the fork is that last checkpoint, and each branch starts
    with the tool's answer (the cut step's model call is not made again)."""
    from langchain.agents import create_agent

    from tps_tracer.langchain.handler import TPSCallbackHandler
    from tps_tracer.online.accumulator import Accumulator
    from tps_tracer.sim.scripted_model import search_tool, task_prompt

    world = AgentWorld(16, seed=5, config=CONFIG)
    model = ScriptedReActModel(world=world, logprobs=False)
    graph = create_agent(model, [search_tool(world, branches=True)], checkpointer=InMemorySaver())
    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(sink=sink, bootstrap=0)
    handler = TPSCallbackHandler(acc)
    for task in world:
        config = {
            "callbacks": [handler],
            "recursion_limit": BUDGET - 1,
            "metadata": {"tps_trajectory_id": task.task_id, "tps_task_id": task.task_id},
            "configurable": {"thread_id": f"thread-{task.task_id}"},
        }
        try:
            graph.invoke({"messages": [HumanMessage(task_prompt(task.task_id))]}, config)
        except Exception:
            pass  # the handler records how the run ended
    handler.close()
    acc.close()
    records = read_trajectories(sink)
    censored = _censored(records)
    assert censored and all(r.metadata["stop_detail"] == "GraphRecursionError" for r in censored)
    assert all(r.metadata["thread_id"] == f"thread-{r.trajectory_id}" for r in records)

    out = tmp_path / "branches.jsonl"
    summary = resume_continuations(graph, records, out, branches=3, grader=grade_final_state, budget=BUDGET)
    assert summary.prefixes == len(censored) and summary.written == 3 * len(censored)
    pending_tools = 0
    for x in map(json.loads, out.read_text().splitlines()):
        history = list(graph.get_state_history({"configurable": {"thread_id": x["source_thread_id"]}}))
        fork = next(h for h in history if h.next)  # the newest checkpoint with work left
        assert fork.config["configurable"]["checkpoint_id"] == x["fork_checkpoint_id"]
        if fork.next != ("tools",):
            # LangGraph raises GraphRecursionError at the step limit even when that step's
            # model call answered, so some "censored" runs end on a finished state: their
            # fork is the checkpoint before that call.
            assert history[0].next == () and fork.next == ("model",)
            continue
        assert history[0] is fork  # cut with the tool call pending: the last checkpoint
        pending_tools += 1
        prefix = fork.values["messages"]
        z = sum(isinstance(msg, AIMessage) for msg in prefix)
        branch = graph.get_state({"configurable": {"thread_id": x["thread_id"]}}).values["messages"]
        if x["stop_reason"] != "tool_error":  # a branch whose first clue failed adds no message
            first_new = branch[len(prefix)]
            assert isinstance(first_new, ToolMessage) and first_new.text.startswith(f"Clue {z}:")
    assert pending_tools >= 3


# ---------------------------------------------------------------- interruption and failures


def test_an_interrupted_resume_continues_where_it_stopped(campaign, tmp_path):
    _, graph, records = campaign
    some = _censored(records)[:6]
    m = 3
    reference = tmp_path / "reference.jsonl"
    resume_continuations(graph, some, reference, branches=m, grader=grade_final_state, budget=BUDGET)
    assert len(_lines(reference)) == 6 * m

    out = tmp_path / "interrupted.jsonl"

    async def interrupt_after(k: int) -> None:
        task = asyncio.create_task(
            aresume_continuations(graph, some, out, branches=m, grader=grade_final_state, budget=BUDGET, concurrency=2)
        )
        while not out.exists() or len(out.read_text().splitlines()) < k:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt_after(5))
    kept = len(out.read_text().splitlines())
    assert 5 <= kept < 6 * m
    with out.open("a") as fh:  # killed in the middle of writing a line
        fh.write('{"source_trajectory_id": "ov')

    health = HealthLedger()
    summary = resume_continuations(graph, some, out, branches=m, grader=grade_final_state, budget=BUDGET, health=health)
    assert health.get("malformed", "continuation_line_truncated") == 1
    assert summary.already_done == kept and summary.written == 6 * m - kept
    # Same branches, same draws (seeded by the thread ids): the file equals the uninterrupted one.
    assert _lines(out) == _lines(reference)
    parse_continuations(out.read_text().splitlines())  # no duplicates, every line valid

    again = resume_continuations(graph, some, out, branches=m, grader=grade_final_state, budget=BUDGET)
    assert again.already_done == 6 * m and again.written == 0


def test_grader_failures_are_counted_not_raised_and_retried_next_time(campaign, tmp_path):
    _, graph, records = campaign
    some = _censored(records)[:5]
    m = 4
    reference = tmp_path / "reference.jsonl"
    resume_continuations(graph, some, reference, branches=m, grader=grade_final_state, budget=BUDGET)
    ref = _lines(reference)
    n_clean = sum(1 for x in ref if x[2] == "clean")

    calls = []

    def flaky(state):
        calls.append(state)
        if len(calls) % 3 == 0:
            raise RuntimeError("judge timed out")
        if len(calls) % 5 == 0:
            return "maybe"  # not 0/1: a failure too
        return grade_final_state(state)

    failing = sum(1 for i in range(1, n_clean + 1) if i % 3 == 0 or i % 5 == 0)
    out = tmp_path / "flaky.jsonl"
    health = HealthLedger()
    summary = resume_continuations(
        graph, some, out, branches=m, grader=flaky, budget=BUDGET, concurrency=1, health=health
    )
    assert len(calls) == n_clean
    assert summary.grader_errors == failing and health.get("error", "resume_grader") == failing
    assert summary.written == 5 * m - failing
    assert _lines(out) <= ref  # what was written is right; the failed branches have no line

    async def judge(state):  # an async grader works too
        return bool(grade_final_state(state))

    retry = resume_continuations(graph, some, out, branches=m, grader=judge, budget=BUDGET)
    assert retry.written == failing and retry.grader_errors == 0
    assert _lines(out) == ref


def test_records_without_thread_or_checkpoint_are_counted_and_skipped(campaign, tmp_path):
    _, graph, records = campaign
    censored = _censored(records)
    no_thread = censored[0].model_copy(update={"metadata": {}})
    unknown = censored[1].model_copy(update={"metadata": {"thread_id": "never-ran"}})
    clean = next(r for r in records if r.stop_reason is StopReason.CLEAN)
    health = HealthLedger()
    summary = resume_continuations(
        graph,
        [no_thread, unknown, clean, censored[2]],
        tmp_path / "b.jsonl",
        branches=2,
        grader=grade_final_state,
        health=health,
    )
    assert summary.censored == 3 and summary.prefixes == 1
    assert summary.without_thread == [no_thread.trajectory_id]
    assert summary.without_checkpoint == [unknown.trajectory_id]
    assert health.get("ignored", "resume_without_thread_id") == 1
    assert health.get("ignored", "resume_without_checkpoint") == 1
    assert {x[0] for x in _lines(tmp_path / "b.jsonl")} == {censored[2].trajectory_id}


def test_bad_arguments_and_a_graph_without_checkpointer_are_clear_errors(campaign, tmp_path):
    _, graph, records = campaign
    with pytest.raises(ValueError, match="branches"):
        resume_continuations(graph, records, tmp_path / "x.jsonl", branches=0, grader=grade_final_state)
    plain = run_campaign(AgentWorld(1, config=CONFIG), tmp_path / "plain.jsonl")
    with pytest.raises(ValueError, match="no checkpointer"):
        resume_continuations(plain, records, tmp_path / "x.jsonl", branches=1, grader=grade_final_state)


def test_a_continuation_file_that_is_not_ours_is_never_overwritten(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"source_trajectory_id": "a", "branch": 0, "stop_reason": "clean"}\n')
    with pytest.raises(ValueError, match="outcome"):
        ContinuationLog(path)
    assert path.read_text().count("\n") == 1


# ---------------------------------------------------------------- a sync-only checkpointer


def test_sqlite_saver_resumes_through_threads(tmp_path):
    sqlite_mod = pytest.importorskip("langgraph.checkpoint.sqlite")
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    saver = sqlite_mod.SqliteSaver(conn)
    _, graph, records = _campaign(tmp_path, 10, seed=2, saver=saver)
    censored = _censored(records)
    assert censored
    out = tmp_path / "branches.jsonl"
    summary = resume_continuations(graph, records, out, branches=3, grader=grade_final_state, budget=BUDGET)
    assert summary.prefixes == len(censored) and summary.written == 3 * len(censored)
    # The branches live in the SQLite file, next to the source runs.
    threads = {row[0] for row in conn.execute("select distinct thread_id from checkpoints")}
    assert {json.loads(x)["thread_id"] for x in out.read_text().splitlines()} <= threads
    conn.close()


# ---------------------------------------------------------------- the demo


def test_demo_reports_q_z_from_resumed_checkpoints(tmp_path, capsys):
    args = ["demo", "--q-z", "resume", "--tasks", "16", "--branches", "4", "--bootstrap", "50"]
    assert main([*args, "--json", "--out", str(tmp_path)]) == 0
    f = json.loads(capsys.readouterr().out)
    r = f["q_z_resume"]
    assert r["branches_per_prefix"] == 4
    # Recompute the reported error from the files the demo wrote and the world it ran.
    world = AgentWorld(16, seed=DEMO_SEED, config=replace(DEMO_WORLD, forecaster="overconfident"))
    records = {x.trajectory_id: x for x in read_trajectories(tmp_path / "overconfident+platt.jsonl")}
    mc = mc_q_z(read_continuations(r["continuations"]), min_valid=2)  # half the branches
    assert r["n_prefixes"] == len(mc.ids) > 0
    err = np.mean([abs(q - _exact_q_z(world, records[i])) for i, q in mc.as_mapping().items()])
    assert r["mean_abs_error"] == pytest.approx(err)
    assert set(r["cen_exact_tps_log"]) >= {"verbal", "verbal+platt"}
    assert r["resume"]["written"] == 4 * r["resume"]["prefixes"]


def test_a_grader_answering_in_words_follows_the_one_outcome_rule(campaign, tmp_path):
    """Resume grades like the handler (`as_outcome`): "true"/"false" are outcomes, not grader failures."""
    _, graph, records = campaign
    some = _censored(records)[:3]
    reference = tmp_path / "reference.jsonl"
    resume_continuations(graph, some, reference, branches=2, grader=grade_final_state, budget=BUDGET)
    out = tmp_path / "words.jsonl"
    summary = resume_continuations(
        graph,
        some,
        out,
        branches=2,
        grader=lambda state: "true" if grade_final_state(state) else "false",
        budget=BUDGET,
    )
    assert summary.grader_errors == 0
    assert _lines(out) == _lines(reference)
