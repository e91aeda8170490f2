"""`tps-tracer import` from Phoenix's own span export gives the records the live capture gave (issue 31).

A LangGraph agent on the simulated world (malformed outputs, tool failures, budget stops),
instrumented by OpenInference on the real OpenTelemetry SDK, is captured live by the span
processor while its spans go to a real Phoenix server (127.0.0.1). The spans are then read
back with Phoenix's own client (`Client().spans.get_spans`, as a user exports a project) and
saved as JSON; importing that file must give the live records, field for field.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid

import httpx
import phoenix.client as phoenix_client
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import agent_for, instrumented, run_tasks
from test_trace_import import run_records

from tps_tracer import Accumulator
from tps_tracer.cli.main import main
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.sim.world import AgentWorld, WorldConfig

HORIZON = 6


def import_file(src, dst, *extra: str) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["import", str(src), "-o", str(dst), "--json", *extra]) == 0
    return json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def exported(phoenix, tmp_path_factory):
    """The live records, the number of spans the agent made, and those spans as Phoenix's client returns them."""
    tmp = tmp_path_factory.mktemp("phoenix-import")
    project = f"tps-import-{uuid.uuid4().hex[:8]}"
    world = AgentWorld(16, seed=7, config=WorldConfig(malformed_rate=0.08, tool_failure_rate=0.04))
    made = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    acc = Accumulator(sink=str(tmp / "live.jsonl"), bootstrap=0)
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(made))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")))
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(provider, hide_inputs=True):  # prompts left out: smaller spans for a real server
        run_tasks(agent, inputs, world, [], metadata={"tps_horizon": HORIZON}, recursion_limit=2 * HORIZON)
    processor.force_flush()
    provider.force_flush()
    acc.close()
    n_spans = len(made.get_finished_spans())
    client = phoenix_client.Client(base_url=phoenix.url)
    deadline = time.monotonic() + 120
    while True:  # Phoenix stores spans asynchronously
        try:
            spans = client.spans.get_spans(project_identifier=project, limit=100_000, timeout=120)
        except httpx.HTTPStatusError:  # the project exists once its first span is stored
            spans = []
        if len(spans) >= n_spans or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    provider.shutdown()
    return run_records(tmp / "live.jsonl"), n_spans, spans, tmp


def test_a_run_imported_from_phoenix_gives_the_live_record(exported):
    live, n_spans, spans, tmp = exported
    reasons = {rec["stop_reason"] for rec in live.values()}
    assert {"clean", "max_steps"} <= reasons and reasons - {"clean", "max_steps"}  # an informative stop too
    assert any(any(s["forecasts"].get("verbal") is not None for s in r["steps"]) for r in live.values())
    assert any(any(s["forecasts"].get("token_prob") is not None for s in r["steps"]) for r in live.values())
    assert len(spans) == n_spans
    src = tmp / "phoenix-spans.json"
    src.write_text(json.dumps(spans, default=str))  # as a user saves get_spans(): datetimes as ISO text
    summary = import_file(src, tmp / "imported.jsonl")
    assert summary["format"] == "phoenix"
    assert summary["runs"] == len(live) and summary["spans"] == n_spans
    assert summary["unreadable_runs"] == {} and summary["per_file"] == {}
    assert run_records(tmp / "imported.jsonl") == live  # every field, trace ids included


def test_phoenix_rest_body_and_json_lines_read_the_same(exported):
    """The REST endpoint's response body and one span per line are the same spans."""
    live, _, spans, tmp = exported
    body = tmp / "body.json"
    body.write_text(json.dumps({"data": spans, "next_cursor": None}, default=str))
    lines = tmp / "lines.jsonl"
    lines.write_text("".join(json.dumps(s, default=str) + "\n" for s in spans))
    for src in (body, lines):
        import_file(src, tmp / "again.jsonl", "--format", "phoenix")
        assert run_records(tmp / "again.jsonl") == live


def test_what_cannot_be_read_from_phoenix_spans_is_counted_on_its_run(exported):
    live, _, spans, tmp = exported
    spans = json.loads(json.dumps(spans, default=str))
    target = next(s for s in spans if s["span_kind"] == "TOOL")
    target["attributes"]["x.nested"] = {"a": 1}  # not an OpenTelemetry attribute value
    broken = {"name": "x", "context": {"trace_id": "zz", "span_id": "0" * 16}}  # no valid trace id
    src = tmp / "damaged.json"
    src.write_text(json.dumps([*spans, broken, 7]))
    summary = import_file(src, tmp / "damaged.jsonl")
    imported = run_records(tmp / "damaged.jsonl")
    assert summary["per_file"] == {"spans_with_invalid_trace_id": 1, "spans_not_objects": 1}
    run = next(t for t, r in imported.items() if r["metadata"]["otel_trace_id"] == target["context"]["trace_id"])
    assert summary["unreadable_runs"] == {run: {"unreadable_attributes": 1}}
    assert imported[run]["metadata"].pop("import_unreadable") == {"unreadable_attributes": 1}
    assert imported == live
