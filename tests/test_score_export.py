"""`tps-tracer export`: scores known after the run reach the traces they belong to (issue 31).

Live: a LangGraph agent instrumented by OpenInference sends its spans to a real Phoenix
(127.0.0.1) and the LangChain handler writes records (carrying the trace ids), with no score
exporter at all. Later: a grading job appends grades (`JsonlSink.resolve`), the resume
workflow a q_z per censored run, and one run recorded without OpenTelemetry sits in the same
file. `tps-tracer export` then pushes the scores; everything is read back from Phoenix's API
and checked against the TPS written out from the records. Exporting twice changes nothing.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib

import httpx
import phoenix.client as phoenix_client
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_support import agent_for, instrumented, run_tasks
from recipe_support import HORIZON, expected_score_names
from test_otel_export import expected_tps
from world_check import sink_records

from tps_tracer import Accumulator
from tps_tracer.cli.main import main
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.online.jsonl_sink import JsonlSink
from tps_tracer.otel.evaluations import EVALUATION_SPAN
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.world import AgentWorld, WorldConfig

RULES = ("log", "brier", "beta(2,4)")


@pytest.fixture(scope="module")
def world() -> AgentWorld:
    return AgentWorld(12, seed=5, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.03))


@pytest.fixture(scope="module")
def live(phoenix, world, tmp_path_factory):
    """The agent's traces in Phoenix, its records on disk, grades and q_z appended later."""
    project = f"tps-export-{uuid.uuid4().hex[:8]}"
    sink = tmp_path_factory.mktemp("export") / "runs.jsonl"
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")))
    acc = Accumulator(sink=str(sink), bootstrap=0)
    handler = TPSCallbackHandler(acc)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    tasks = list(world)
    with instrumented(provider, hide_inputs=True):
        run_tasks(agent, inputs, tasks[1:], [handler], metadata={"tps_horizon": HORIZON}, recursion_limit=2 * HORIZON)
    # One run outside any instrumentation: its record names no trace.
    run_tasks(agent, inputs, tasks[:1], [handler], metadata={"tps_horizon": HORIZON}, recursion_limit=2 * HORIZON)
    handler.flush()
    acc.close()
    provider.force_flush()
    # Later, another process: the grading job grades every task, the resume workflow adds q_z.
    late = JsonlSink(sink)
    q_z = {}
    for tid, rec in sink_records(sink).items():
        if rec.stop_reason is StopReason.CLEAN:
            late.resolve(tid, outcome=world.tasks[tid].outcome)
        elif rec.stop_reason is StopReason.MAX_STEPS:
            q_z[tid] = round(0.1 + 0.8 * (zlib.crc32(tid.encode()) % 97) / 97, 4)
            late.resolve(tid, q_z=q_z[tid])
    late.close()
    return project, sink, q_z, tasks[0].task_id


def export(phoenix, sink, *extra: str) -> dict:
    argv = ["export", str(sink), "--to", "phoenix", "--endpoint", phoenix.url, "--json", "--allow-unlinked"]
    out = main_json([*argv, *extra])  # one run was recorded outside any trace: a partial export, allowed
    return out


def main_json(argv: list[str]) -> dict:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    assert code == 0, buf.getvalue()
    return json.loads(buf.getvalue())


def roots_by_tid(client, project: str, records, timeout: float = 120.0) -> dict[str, str]:
    """The agent root span of each linked run, as stored by Phoenix."""
    want = {tid: rec.metadata["otel_span_id"] for tid, rec in records.items() if "otel_span_id" in rec.metadata}
    deadline = time.monotonic() + timeout
    while True:
        try:
            spans = client.spans.get_spans(project_identifier=project, span_ids=list(want.values()), limit=10_000)
        except httpx.HTTPStatusError:
            spans = []
        if len(spans) == len(want) or time.monotonic() > deadline:
            assert {s["context"]["span_id"] for s in spans} == set(want.values())
            return want
        time.sleep(0.5)


def annotations_on(client, project, span_ids, at_least: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        got = client.spans.get_span_annotations(span_ids=span_ids, project_identifier=project, limit=10_000)
        if len(got) >= at_least or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_export_after_the_fact_to_phoenix_is_complete_counted_and_idempotent(phoenix, world, live):
    project, sink, q_z, unlinked = live
    records = sink_records(sink)  # the grades and q_z applied
    assert set(records) == set(world.tasks)
    client = phoenix_client.Client(base_url=phoenix.url)
    roots = roots_by_tid(client, project, records)
    assert unlinked not in roots and len(roots) == len(records) - 1

    first = export(phoenix, sink, "--censoring", "exact")  # the resumed q_z: exact censoring
    assert first["without_trace"] == {"count": 1, "ids": [unlinked]}
    assert first["pending_outcome"]["count"] == 0 and first["complete"]
    assert first["exported"] == len(roots)
    simple = export(phoenix, sink)  # the grades under the default names
    assert simple["exported"] == len(roots)

    names = {}  # (span id, name) -> (predictor, rule, eta)
    for tid, span in roots.items():
        rec = records[tid]
        eta = {StopReason.CLEAN: rec.outcome, StopReason.MAX_STEPS: q_z.get(tid)}.get(rec.stop_reason)
        for name, (predictor, rule) in expected_score_names(rec, RULES).items():
            names[(span, name)] = (predictor, rule, rec.outcome if rec.stop_reason is StopReason.CLEAN else 0.0)
            names[(span, f"{name}.exact")] = (predictor, rule, eta)
        names[(span, "tps.stop_reason")] = None
    assert any(rec.stop_reason is StopReason.MAX_STEPS for rec in records.values())
    got = annotations_on(client, project, list(roots.values()), len(names))
    assert len(got) == len(names)  # one per run and name
    span_tid = {span: tid for tid, span in roots.items()}
    for ann in got:
        key = (ann["span_id"], ann["name"])
        assert key in names, key
        rec = records[span_tid[ann["span_id"]]]
        if names[key] is None:
            assert ann["result"]["label"] == rec.stop_reason.value
            continue
        predictor, rule, eta = names[key]
        assert ann["metadata"]["predictor"] == predictor
        assert ann["result"]["score"] == pytest.approx(expected_tps(rec, predictor, rule, float(eta)), abs=1e-12)

    again = export(phoenix, sink)  # re-export: replaced in place, nothing added
    assert again["exported"] == len(roots)
    time.sleep(2.0)
    assert len(annotations_on(client, project, list(roots.values()), len(names))) == len(names)


def test_export_to_otlp_writes_one_evaluation_span_per_run_even_twice(phoenix, world, live):
    project, sink, _, unlinked = live
    records = sink_records(sink)
    client = phoenix_client.Client(base_url=phoenix.url)
    roots = roots_by_tid(client, project, records)
    argv = ["export", str(sink), "--to", "otlp", "--endpoint", phoenix.url, "--json", "--allow-unlinked"]
    argv += ["--resource", f"openinference.project.name={project}"]
    for _ in range(2):  # the same scores twice: the same span ids, stored once
        out = main_json(argv)
        assert out["exported"] == len(roots) and out["without_trace"]["ids"] == [unlinked] and out["complete"]
    deadline = time.monotonic() + 60
    while True:
        evaluations = client.spans.get_spans(project_identifier=project, name=EVALUATION_SPAN, limit=10_000)
        if len(evaluations) >= len(roots) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(2.0)
    evaluations = client.spans.get_spans(project_identifier=project, name=EVALUATION_SPAN, limit=10_000)
    by_tid = {e["attributes"]["tps.trajectory_id"]: e for e in evaluations}
    assert len(evaluations) == len(by_tid) == len(roots)
    for tid, ev in by_tid.items():
        rec = records[tid]
        assert ev["parent_id"] == roots[tid]
        assert ev["context"]["trace_id"] == rec.metadata["otel_trace_id"]
        assert ev["attributes"]["tps.predictor"] == "verbal"
        if rec.stop_reason is StopReason.CLEAN and "tps.log" in expected_score_names(rec, RULES):
            want = expected_tps(rec, "verbal", "log", float(rec.outcome))
            assert ev["attributes"]["gen_ai.evaluation.score.value"] == pytest.approx(want, abs=1e-12)
