"""`tps-tracer export --to mlflow`: late grades and resumed q_z land on the right MLflow traces, once (issue 31).

A real MLflow server (127.0.0.1, SQLite) receives the agent's spans over OTLP; the LangChain
handler captures, and the live exporters send what is known during the run (censored and
excluded runs; clean runs wait for grades that come later). A grading job and the resume
workflow append to the records; `tps-tracer export` runs twice. Read back through MLflow's
client: every name once per trace (the live assessments updated or left alone, never
duplicated), every value equal to the TPS written out from the records.
"""

from __future__ import annotations

import contextlib
import io
import json
import zlib

import httpx
import pytest
from mlflow.tracing.client import TracingClient
from otel_support import agent_for, instrumented
from recipe_support import RecipeRun, expected_score_names, load_recipe
from test_otel_export import expected_tps
from world_check import sink_records

from tps_tracer.cli.main import main
from tps_tracer.online.jsonl_sink import JsonlSink
from tps_tracer.otel.backends import STOP_NAME, mlflow_trace_id
from tps_tracer.otel.trace_links import SpanLink
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.world import AgentWorld, WorldConfig

RULES = ("log", "brier", "beta(2,4)")


@pytest.fixture(autouse=True)
def prompt_client_errors(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")


def export(server, sink, *extra: str) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["export", str(sink), "--to", "mlflow", "--endpoint", server.url, "--json", *extra])
    assert code == 0, buf.getvalue()
    return json.loads(buf.getvalue())


def test_late_grades_and_q_z_exported_to_mlflow_once_each(mlflow_server, tmp_path):
    world = AgentWorld(10, seed=5, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.03))
    r = httpx.post(f"{mlflow_server.url}/api/2.0/mlflow/experiments/create", json={"name": "tps-export"})
    r.raise_for_status()
    sink = tmp_path / "runs.jsonl"
    tps = load_recipe("mlflow", "mlflow_recipe").trace_to_mlflow(
        mlflow_server.url,
        str(r.json()["experiment_id"]),
        sink,
        capture="handler",
        accumulator_options={"bootstrap": 0},
        assessment_options={"retry_initial": 0.2, "retry_max": 1.0},
    )
    run = RecipeRun(tps, sink)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(run.provider, hide_inputs=True):
        run.run(agent, inputs, world)
    assert tps.flush(60)
    run.acc.close()
    live_sent = tps.assessments.status()["sent"]
    # Later: grades for every clean run, q_z for every censored one, appended by other processes.
    late = JsonlSink(sink)
    q_z = {}
    for tid, rec in sink_records(sink).items():
        if rec.stop_reason is StopReason.CLEAN:
            late.resolve(tid, outcome=world.tasks[tid].outcome)
        elif rec.stop_reason is StopReason.MAX_STEPS:
            q_z[tid] = round(0.1 + 0.8 * (zlib.crc32(tid.encode()) % 97) / 97, 4)
            late.resolve(tid, q_z=q_z[tid])
    late.close()
    records = sink_records(sink)
    assert q_z and live_sent > 0

    first = export(mlflow_server, sink)
    assert first["exported"] == len(records) and first["without_trace"]["count"] == 0 and first["complete"]
    # The live assessments of censored / excluded runs were found: updated (q_z now in metadata) or left alone.
    assert first["delivery"]["unchanged"] + first["delivery"]["updated"] > 0
    exact = export(mlflow_server, sink, "--censoring", "exact")
    again = export(mlflow_server, sink)
    assert again["delivery"]["sent"] == again["delivery"]["unchanged"] and again["delivery"]["updated"] == 0

    client = TracingClient(mlflow_server.url)
    for tid, rec in records.items():
        link = SpanLink.from_hex(rec.metadata["otel_trace_id"], rec.metadata["otel_span_id"])
        info = client.get_trace_info(mlflow_trace_id(link))
        names = [a.name for a in info.assessments]
        simple = expected_score_names(rec, RULES)
        want = {STOP_NAME: None, **simple, **{f"{n}.exact": m for n, m in simple.items()}}
        if rec.stop_reason is StopReason.MAX_STEPS or rec.stop_reason is StopReason.CLEAN:
            assert sorted(names) == sorted(want), (tid, names)  # each once: live, then exported three times
        else:
            assert names == [STOP_NAME]
        for a in info.assessments:
            assert a.span_id == link.span_hex
            if a.name == STOP_NAME:
                assert a.value == rec.stop_reason.value
                continue
            predictor, rule = want[a.name]
            if rec.stop_reason is StopReason.CLEAN:
                eta = float(rec.outcome)
            else:
                eta = q_z[tid] if a.name.endswith(".exact") else 0.0
            assert a.value == pytest.approx(expected_tps(rec, predictor, rule, eta), abs=1e-12), (tid, a.name)
    assert exact["exported"] == len(records)
