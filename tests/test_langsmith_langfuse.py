"""Scores as LangSmith feedback and Langfuse scores, on the runs LangChain's tracers made (issue 48).

A real LangGraph agent (the simulated world's scripted chat model) runs with LangChain's
LangSmith tracer, or Langfuse's LangChain CallbackHandler, and TPSCallbackHandler beside it;
the real SDKs talk to a server on 127.0.0.1 (backends/score_platforms.py) that checks every
feedback / score request against the vendor's schema and keeps what it stored. Checked against
an independent computation from the durable records: every run's scores arrive on its own run
(LangSmith: the root run the tracer posted; Langfuse: the trace its handler exported), the exact
TPS to 1e-12, every name once after live delivery and two `tps-tracer export`s (late grades).
Then each failure a user meets: a count and a log line, never an exception into the agent, and
an export that exits 1 saying what was not delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import uuid
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from backends.score_platforms import LANGSMITH_API_KEY, SECRET_KEY, ScorePlatform
from backends.server_process import free_port
from langchain_core.tracers import LangChainTracer
from langfuse import Langfuse
from langfuse.langchain import CallbackHandler
from langsmith import Client
from langsmith import utils as langsmith_utils
from otel_support import agent_for
from recipe_support import HORIZON, expected_score, expected_score_names
from test_otel_export import expected_tps
from urllib3.util.retry import Retry
from world_check import sink_records

from tps_tracer.cli.main import main
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.online.accumulator import Accumulator
from tps_tracer.online.jsonl_sink import JsonlSink
from tps_tracer.otel.backends import STOP_NAME, LangfuseScores, LangSmithFeedback, langfuse_trace_id
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.world import AgentWorld, WorldConfig
from tps_tracer.tracking.keys import RUN_ID_KEY

RULES = ("log", "brier", "beta(2,4)")
PROJECT = "tps-agents"
FAST = {"retry_initial": 0.05, "retry_max": 0.2}


@pytest.fixture(autouse=True)
def sdk_settings(monkeypatch, score_platform):
    monkeypatch.setenv("LANGSMITH_API_KEY", LANGSMITH_API_KEY)
    monkeypatch.setenv("LANGSMITH_PROJECT", PROJECT)
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", score_platform.public_key)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    # The SDK caches the environment it read first (lru_cache): another test in this process may
    # have read it without these settings (the default project "default").
    langsmith_utils.get_env_var.cache_clear()
    langsmith_utils.get_tracer_project.cache_clear()
    yield
    langsmith_utils.get_env_var.cache_clear()
    langsmith_utils.get_tracer_project.cache_clear()


def langsmith_client(server: ScorePlatform) -> Client:
    # No urllib3 retries: the exporter's backoff is what is tested.
    return Client(api_url=server.url, api_key=LANGSMITH_API_KEY, retry_config=Retry(total=0))


def langfuse_client(server: ScorePlatform) -> Langfuse:
    return Langfuse(public_key=server.public_key, secret_key=SECRET_KEY, base_url=server.url)


def run_agent(world: AgentWorld, sink: Path, exporter: Any, tracing: str, server: ScorePlatform) -> TPSCallbackHandler:
    """Every task of the world, traced by the platform's LangChain tracer with the TPS handler beside it;
    grades are not known during the runs (clean runs are scored by `export` later)."""
    acc = Accumulator(bootstrap=0, sink=sink)
    acc.add_listener(exporter)
    tps = TPSCallbackHandler(acc)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    tracer = None
    if tracing == "langsmith":
        tracer = LangChainTracer(project_name=PROJECT, client=langsmith_client(server))
    for i, task in enumerate(world):
        run_id = uuid.uuid4()
        if tracer is None:
            tracer_now: Any = CallbackHandler(
                public_key=server.public_key, trace_context={"trace_id": langfuse_trace_id(run_id)}
            )
        else:
            tracer_now = tracer
        config = {
            "run_id": run_id,
            "callbacks": [tps, tracer_now],  # TPS first: Langfuse's random trace id was missed in this order
            "metadata": {"tps_trajectory_id": task.task_id, "tps_horizon": HORIZON},
            "recursion_limit": 2 * HORIZON,
        }
        with contextlib.suppress(Exception):  # a budget stop raises out of the graph: the run is recorded
            if i % 2:  # every other run async (under ainvoke Langfuse's trace id never reached a record)
                asyncio.run(agent.ainvoke(inputs(task.task_id), config=config))
            else:
                agent.invoke(inputs(task.task_id), config=config)
    tps.flush()
    if tracer is not None:
        tracer.wait_for_futures()
        tracer.client.flush()
    else:
        langfuse_client(server).flush()
    acc.close()
    return tps


def grade_later(world: AgentWorld, sink: Path) -> dict[str, bool]:
    """A grading job appends each clean run's outcome to the records."""
    late = JsonlSink(sink)
    outcomes = {}
    for tid, rec in sink_records(sink).items():
        if rec.stop_reason is StopReason.CLEAN:
            outcomes[tid] = world.tasks[tid].outcome
            late.resolve(tid, outcome=outcomes[tid])
    late.close()
    return outcomes


def export(to: str, sink: Path, endpoint: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["export", str(sink), "--to", to, "--endpoint", endpoint, "--json", *extra])
    return code, json.loads(out.getvalue()) if out.getvalue() else {}, err.getvalue()


def check_values(records: dict[str, Any], by_run: dict[str, dict[str, Any]], outcomes: dict[str, bool]) -> int:
    """Every run's names and exact values against the records; returns how many scores were checked."""
    checked = 0
    assert set(by_run) == {rec.metadata[RUN_ID_KEY] for rec in records.values()}
    for rec in records.values():
        got = by_run[rec.metadata[RUN_ID_KEY]]
        want = expected_score_names(rec, RULES)
        assert set(got) == {STOP_NAME, *want}, rec.trajectory_id
        assert got[STOP_NAME] == rec.stop_reason.value
        for name, (predictor, rule) in want.items():
            assert abs(got[name] - expected_score(rec, rule, outcomes, predictor)) <= 1e-12, (rec.trajectory_id, name)
            checked += 1
    return checked


@pytest.fixture
def world() -> AgentWorld:
    return AgentWorld(10, seed=5, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.03))


def test_langsmith_feedback_on_each_root_run_exact_and_updated_not_duplicated(score_platform, world, tmp_path):
    sink = tmp_path / "runs.jsonl"
    live = LangSmithFeedback(langsmith_client(score_platform), project_name=PROJECT, **FAST)
    run_agent(world, sink, live, "langsmith", score_platform)
    assert live.flush(30), live.status()
    records = sink_records(sink)
    # The record keeps the root run id though the trajectory is named by tps_trajectory_id; it is
    # the root run the tracer posted (its own trace), in the tracer's project.
    for rec in records.values():
        run = score_platform.runs[rec.metadata[RUN_ID_KEY]]
        assert run.get("parent_run_id") is None and str(run["trace_id"]) == rec.metadata[RUN_ID_KEY]
        assert rec.trajectory_id != rec.metadata[RUN_ID_KEY]
    live_sent = live.status()["sent"]
    assert live_sent == len(score_platform.feedback) > len(records)  # stop reasons, and censored runs' scores
    outcomes = grade_later(world, sink)
    assert outcomes and len(outcomes) < len(records)

    for _ in ("live scores updated and late grades added", "all again: updates only"):
        code, summary, err = export("langsmith", sink, score_platform.url)
        assert code == 0, err
        assert summary["exported"] == len(records) and summary["complete"]
        assert summary["delivery"]["gave_up"] == 0 and summary["delivery"]["without_run_id"] == 0
    patches = score_platform.requests_to("PATCH", "/feedback/")
    # The second export re-sent everything: each as an update of the same feedback id, none added.
    assert len(patches) == live_sent + len(score_platform.feedback)
    assert score_platform.violations == []

    by_run: dict[str, dict[str, Any]] = defaultdict(dict)
    for fb in score_platform.feedback.values():
        assert fb["session_id"] == score_platform.sessions[PROJECT]
        assert fb["run_id"] not in by_run or fb["key"] not in by_run[fb["run_id"]]
        by_run[fb["run_id"]][fb["key"]] = fb["value"]
        if isinstance(fb["value"], float):
            assert fb["score"] == round(fb["value"], 4)  # the SDK's rounding: the exact TPS is the value
    assert check_values(records, by_run, outcomes) > 0

    # q_Z for the budget stops arrives (the resume workflow): `--censoring exact` adds tps.<rule>.exact.
    late, q_z = JsonlSink(sink), {}
    for tid, rec in records.items():
        if rec.stop_reason is StopReason.MAX_STEPS:
            q_z[tid] = round(0.1 + 0.8 * (zlib.crc32(tid.encode()) % 97) / 97, 4)
            late.resolve(tid, q_z=q_z[tid])
    late.close()
    assert q_z
    code, _, err = export("langsmith", sink, score_platform.url, "--censoring", "exact")
    assert code == 0, err
    exact = {(fb["run_id"], fb["key"]): fb["value"] for fb in score_platform.feedback.values()}
    n_exact = 0
    for tid, rec in records.items():
        eta = {StopReason.CLEAN: outcomes.get(tid), StopReason.MAX_STEPS: q_z.get(tid)}.get(rec.stop_reason)
        for name, (predictor, rule) in expected_score_names(rec, RULES).items():
            got = exact[(rec.metadata[RUN_ID_KEY], name + ".exact")]
            assert abs(got - expected_tps(rec, predictor, rule, float(eta))) <= 1e-12, (tid, name)
            n_exact += 1
    assert n_exact == sum(key.endswith(".exact") for _, key in exact) > 0
    assert score_platform.violations == []


def test_langfuse_scores_on_the_trace_its_handler_made_exact_and_upserted(score_platform, world, tmp_path):
    sink = tmp_path / "runs.jsonl"
    live = LangfuseScores(langfuse_client(score_platform), **FAST)
    run_agent(world, sink, live, "langfuse", score_platform)
    assert live.flush(30), live.status()
    records = sink_records(sink)
    # Seeded from the run id, the trace id is the one Langfuse's handler exported, and can be recomputed.
    assert {langfuse_trace_id(rec.metadata[RUN_ID_KEY]) for rec in records.values()} == score_platform.langfuse_traces
    live_sent = live.status()["sent"]
    outcomes = grade_later(world, sink)

    for _ in ("live scores updated and late grades added", "all again: updates only"):
        code, summary, err = export("langfuse", sink, score_platform.url)
        assert code == 0, err
        assert summary["exported"] == len(records) and summary["complete"]
    posts = score_platform.requests_to("POST", "/api/public/scores")
    sent = sum(len(body) for body in posts)
    assert sent == live_sent + 2 * len(score_platform.scores)  # every export wrote each id again: upserts
    assert len(posts) < sent / 2  # batched: many scores per request
    assert score_platform.violations == []

    trace_to_run = {langfuse_trace_id(rec.metadata[RUN_ID_KEY]): rec.metadata[RUN_ID_KEY] for rec in records.values()}
    by_run: dict[str, dict[str, Any]] = defaultdict(dict)
    for score in score_platform.scores.values():
        by_run[trace_to_run[score["traceId"]]][score["name"]] = score["value"]
        assert score["dataType"] == ("NUMERIC" if score["name"] != STOP_NAME else "CATEGORICAL")
    assert check_values(records, by_run, outcomes) > 0


def client_for(backend: str, server: ScorePlatform, url: str) -> Any:
    if backend == "langsmith":
        client = Client(api_url=url, api_key=LANGSMITH_API_KEY, retry_config=Retry(total=0))
        return LangSmithFeedback(client, project_name=PROJECT, **FAST)
    return LangfuseScores(Langfuse(public_key=server.public_key, secret_key=SECRET_KEY, base_url=url), **FAST)


@pytest.mark.parametrize("backend", ["langsmith", "langfuse"])
@pytest.mark.parametrize("failure", [401, 429, 503, "unreachable"])
def test_failures_are_counted_logged_and_make_export_exit_1(score_platform, tmp_path, caplog, backend, failure):
    world = AgentWorld(3, seed=7)
    sink = tmp_path / "runs.jsonl"
    if failure == "unreachable":
        url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    else:
        url = score_platform.url
        score_platform.fail = failure
    live = client_for(backend, score_platform, url)
    caplog.set_level(logging.WARNING, logger="tps_tracer")
    run_agent(world, sink, live, backend, score_platform)  # raises nothing into the agent
    assert not live.flush(1.0)
    status = live.status()
    assert status["sent"] == 0 and status["pending"] > 0 and status["failed_attempts"] >= 1
    assert status["last_error"]
    assert any(f"{live.backend} writes failed" in r.getMessage() for r in caplog.records)
    if failure != "unreachable":
        score_platform.fail = None  # the outage ends: everything kept is delivered, retried with backoff
        assert live.flush(30), live.status()
        assert live.status()["sent"] == status["pending"]
        score_platform.fail = failure
    live.close(1.0)

    grade_later(world, sink)
    code, summary, err = export(backend, sink, url, "--timeout", "2")
    assert code == 1
    assert not summary["complete"] and summary["delivery"]["pending"] > 0
    assert "delivery incomplete" in err and "runs sent to" in err and str(summary["delivery"]["pending"]) in err


def test_refused_scores_and_runs_without_a_run_id_are_counted_and_logged(score_platform, caplog):
    score_platform.refuse = {"tps.brier"}
    live = LangfuseScores(langfuse_client(score_platform), **FAST)
    acc = Accumulator(bootstrap=0)
    acc.add_listener(live)
    caplog.set_level(logging.WARNING, logger="tps_tracer")
    acc.observe("a", {"verbal": 0.7})
    acc.stop("a", "clean", metadata={RUN_ID_KEY: str(uuid.uuid4())}, outcome=1)
    acc.observe("b", {"verbal": 0.6})
    acc.stop("b", "clean", outcome=1)  # a hand-written loop: no LangChain root run to attach to
    acc.close()
    assert live.flush(10)
    status = live.status()
    # stop reason, log, beta(2,4) taken; brier refused for good (not retried); run b counted
    assert (status["sent"], status["gave_up"], status["without_run_id"]) == (3, 1, 1)
    assert status["last_error"] == "score tps.brier rejected"
    assert sorted(s["name"] for s in score_platform.scores.values()) == ["tps.beta(2,4)", "tps.log", "tps.stop_reason"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("Langfuse refused 1 records" in m for m in messages)
    assert any("no LangChain run id" in m and "'b'" in m for m in messages)


@pytest.mark.parametrize("backend", ["langfuse", "langsmith"])
def test_export_without_api_keys_is_bad_input(score_platform, tmp_path, monkeypatch, backend):
    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(bootstrap=0, sink=sink)
    acc.observe("a", {"verbal": 0.7})
    acc.stop("a", "clean", metadata={RUN_ID_KEY: str(uuid.uuid4())}, outcome=1)
    acc.close()
    if backend == "langfuse":
        monkeypatch.delenv("LANGFUSE_SECRET_KEY")
        code, _, err = export("langfuse", sink, score_platform.url)
        assert code == 2 and "LANGFUSE_SECRET_KEY" in err
    else:  # the hosted service (no --endpoint), where a write without a key is refused
        monkeypatch.delenv("LANGSMITH_API_KEY")
        langsmith_utils.get_env_var.cache_clear()
        out, err_io = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err_io):
            code = main(["export", str(sink), "--to", "langsmith", "--json"])
        assert code == 2 and "LANGSMITH_API_KEY" in err_io.getvalue()
    assert score_platform.received == []
