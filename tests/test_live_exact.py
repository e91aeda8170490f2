"""A live annotation exporter sends the exact-censoring score when q_Z arrives after the run (issue 31).

A LangGraph agent instrumented by OpenInference sends its spans to a real Phoenix server
(127.0.0.1); the span processor captures the runs and a live `PhoenixAnnotations` set to
censoring=("simple", "exact") listens. Grades and q_Z arrive after the runs, through the
processor. Read back from Phoenix's API: every scored run has `tps.log` and `tps.log.exact`;
on a budget stop the exact one is q_Z s1 + (1 - q_Z) s0 per step, written out from the records.
"""

from __future__ import annotations

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
from test_otel_export import expected_tps

from tps_tracer import Accumulator
from tps_tracer.otel import PhoenixAnnotations, TPSSpanProcessor
from tps_tracer.records.jsonl import read_trajectories
from tps_tracer.sim.world import AgentWorld, WorldConfig

HORIZON = 6


def test_live_annotations_get_the_exact_score_when_q_z_arrives_later(phoenix, tmp_path):
    project = f"tps-exact-{uuid.uuid4().hex[:8]}"
    world = AgentWorld(10, seed=3, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.03))
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    acc = Accumulator(sink=str(tmp_path / "runs.jsonl"), bootstrap=0)
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")))
    annotations = PhoenixAnnotations(phoenix.url, processor.links, censoring=("simple", "exact"))
    acc.add_listener(annotations)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(provider, hide_inputs=True):
        run_tasks(agent, inputs, world, [], metadata={"tps_horizon": HORIZON}, recursion_limit=2 * HORIZON)
    processor.force_flush()
    acc.flush()
    records = {r.trajectory_id: r for r in read_trajectories(tmp_path / "runs.jsonl")}
    q_z = {}
    for tid, record in records.items():  # after the runs: the grading job and the resume workflow
        if record.stop_reason.value == "clean":
            processor.record_outcome(tid, success=bool(world.tasks[tid].outcome))
        elif record.stop_reason.value == "max_steps":
            q_z[tid] = round(0.1 + 0.8 * (zlib.crc32(tid.encode()) % 97) / 97, 4)
            processor.record_outcome(tid, q_z=q_z[tid])
    processor.force_flush()
    acc.close()
    provider.force_flush()
    assert annotations.flush(60)
    annotations.close(1)
    assert q_z and any(r.stop_reason.value == "clean" for r in records.values())

    records = {r.trajectory_id: r for r in read_trajectories(tmp_path / "runs.jsonl")}  # grades applied
    scored = {
        tid: r
        for tid, r in records.items()
        if r.stop_reason.value in ("clean", "max_steps") and all(s.forecasts.get("verbal") is not None for s in r.steps)
    }
    client = phoenix_client.Client(base_url=phoenix.url)
    span_of = {r.metadata["otel_span_id"]: tid for tid, r in scored.items()}
    want = 2 * len(scored)
    deadline = time.monotonic() + 120
    while True:  # Phoenix inserts annotations asynchronously
        try:
            got = client.spans.get_span_annotations(
                span_ids=list(span_of), project_identifier=project, limit=10_000, timeout=60
            )
        except httpx.HTTPStatusError:
            got = []
        values = {(span_of[a["span_id"]], a["name"]): a["result"].get("score") for a in got}
        if sum(name in ("tps.log", "tps.log.exact") for _, name in values) >= want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for tid, record in scored.items():
        eta = float(record.outcome) if record.stop_reason.value == "clean" else q_z[tid]
        simple_eta = eta if record.stop_reason.value == "clean" else 0.0
        assert values[(tid, "tps.log")] == pytest.approx(expected_tps(record, "verbal", "log", simple_eta), abs=1e-9)
        assert values[(tid, "tps.log.exact")] == pytest.approx(expected_tps(record, "verbal", "log", eta), abs=1e-9)
