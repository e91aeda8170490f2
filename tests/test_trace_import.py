"""`tps-tracer import`: an agent run captured live and the same run imported from its OTLP JSON file
give identical records (issue 31).

A LangGraph agent on the simulated world (malformed outputs, tool failures, budget stops),
instrumented by OpenInference on the real OpenTelemetry SDK, is captured live by the span
processor. Its spans are written as the Collector's file exporter writes them: one
ExportTraceServiceRequest per line in OTLP JSON (hex ids, 64-bit integers as strings,
integer enums), made with the OTLP exporter's own protobuf encoder. Importing that file must
give the live records, field for field; damaged parts are counted on the run they belong to.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import agent_for, instrumented, run_tasks

from tps_tracer import Accumulator
from tps_tracer.cli.main import main
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.sim.world import AgentWorld, WorldConfig

HORIZON = 6


def collector_lines(spans, batch: int = 25) -> list[str]:
    """OTLP JSON as the Collector's file exporter writes it (protobuf JSON with hex ids, integer enums)."""
    lines = []
    for i in range(0, len(spans), batch):
        obj = MessageToDict(encode_spans(spans[i : i + batch]), use_integers_for_enums=True)
        for rs in obj["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
        lines.append(json.dumps(obj))
    return lines


def run_records(path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "steps" in rec:
            out[rec["trajectory_id"]] = rec
    return out


def import_file(src, dst) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["import", str(src), "-o", str(dst), "--json"]) == 0
    return json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The live records and the run's spans, as finished by the SDK."""
    tmp = tmp_path_factory.mktemp("import")
    world = AgentWorld(24, seed=7, config=WorldConfig(malformed_rate=0.08, tool_failure_rate=0.04))
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    acc = Accumulator(sink=str(tmp / "live.jsonl"), bootstrap=0)
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(provider):
        run_tasks(agent, inputs, world, [], metadata={"tps_horizon": HORIZON}, recursion_limit=2 * HORIZON)
    processor.force_flush()
    acc.close()
    return run_records(tmp / "live.jsonl"), list(spans.get_finished_spans()), tmp


def test_a_run_imported_from_its_otlp_json_file_gives_the_live_record(captured):
    live, spans, tmp = captured
    reasons = {rec["stop_reason"] for rec in live.values()}
    assert {"clean", "max_steps"} <= reasons and reasons - {"clean", "max_steps"}  # an informative stop too
    assert any(any(s["forecasts"].get("token_prob") is not None for s in r["steps"]) for r in live.values())
    src = tmp / "traces.jsonl"
    src.write_text("\n".join(collector_lines(spans)) + "\n")
    summary = import_file(src, tmp / "imported.jsonl")
    imported = run_records(tmp / "imported.jsonl")
    assert summary["runs"] == len(live) and summary["spans"] == len(spans)
    assert summary["unreadable_runs"] == {} and summary["per_file"] == {}
    assert imported == live  # every field: steps' forecasts, stop reason, horizon, metadata with the trace ids


def test_what_cannot_be_read_is_counted_on_its_run(captured):
    live, spans, tmp = captured
    lines = collector_lines(spans)
    obj = json.loads(lines[0])
    first = obj["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    first["attributes"].append({"key": "x.nested", "value": {"kvlistValue": {"values": []}}})
    damaged_trace = first["traceId"]
    lines[0] = json.dumps(obj)
    src = tmp / "damaged.jsonl"
    src.write_text("\n".join(["{not json", *lines]) + "\n")
    summary = import_file(src, tmp / "damaged-records.jsonl")
    imported = run_records(tmp / "damaged-records.jsonl")
    assert summary["per_file"] == {"lines_not_json": 1}
    damaged = [tid for tid, rec in imported.items() if rec["metadata"]["otel_trace_id"] == damaged_trace]
    assert len(damaged) == 1 and summary["unreadable_runs"] == {damaged[0]: {"unreadable_attributes": 1}}
    assert imported[damaged[0]]["metadata"].pop("import_unreadable") == {"unreadable_attributes": 1}
    assert imported == live  # the unreadable attribute was not one the run's record depends on
