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
from collections import Counter, defaultdict

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


def collector_lines(spans, batch: int = 25, hex_ids: bool = True) -> list[str]:
    """OTLP JSON as the Collector's file exporter writes it (protobuf JSON with hex ids, integer enums);
    hex_ids=False: protobuf's canonical JSON as MessageToDict gives it (ids in base64)."""
    lines = []
    for i in range(0, len(spans), batch):
        obj = MessageToDict(encode_spans(spans[i : i + batch]), use_integers_for_enums=True)
        for span in _spans_of(obj):
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in span and hex_ids:
                    span[key] = base64.b64decode(span[key]).hex()
        lines.append(json.dumps(obj))
    return lines


def _spans_of(obj: dict) -> list[dict]:
    return [span for rs in obj["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


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


def test_base64_ids_as_protobuf_json_writes_them_import_to_the_hex_files_records(captured):
    live, spans, tmp = captured
    lines = collector_lines(spans, hex_ids=False)
    some = _spans_of(json.loads(lines[0]))[0]
    # Independent of the reader: the ids as protobuf wrote them are base64 of the SDK's own ints.
    assert len(some["traceId"]) == 24 and len(some["spanId"]) == 12
    sdk = {s.context.span_id: s.context.trace_id for s in spans}
    span_id = int.from_bytes(base64.b64decode(some["spanId"]), "big")
    assert sdk[span_id] == int.from_bytes(base64.b64decode(some["traceId"]), "big")
    (tmp / "b64.jsonl").write_text("\n".join(lines) + "\n")
    (tmp / "hex.jsonl").write_text("\n".join(collector_lines(spans)) + "\n")
    from_b64 = import_file(tmp / "b64.jsonl", tmp / "from-b64.jsonl")
    from_hex = import_file(tmp / "hex.jsonl", tmp / "from-hex.jsonl")
    assert from_b64 == from_hex and from_b64["per_file"] == {} and from_b64["runs"] == len(live)
    assert (tmp / "from-b64.jsonl").read_bytes() == (tmp / "from-hex.jsonl").read_bytes()
    assert run_records(tmp / "from-b64.jsonl") == live


def test_ids_neither_hex_nor_base64_are_refused_under_a_named_reason(captured):
    _, spans, tmp = captured
    lines = collector_lines(spans, hex_ids=False)
    obj = json.loads(lines[0])
    damaged = _spans_of(obj)[:7]
    good_trace = damaged[0]["traceId"]
    damaged[0]["traceId"] = good_trace.rstrip("=")  # unpadded: 22 characters, neither form
    damaged[1]["traceId"] = "A" * 22 + "=="  # base64 of 16 zero bytes: OpenTelemetry's invalid id
    damaged[2]["traceId"] = "g" * 32  # 32 characters, not hex
    del damaged[3]["traceId"]
    damaged[4]["spanId"] = damaged[4]["spanId"][:-1] + "!"  # outside both alphabets
    damaged[5]["parentSpanId"] = "AAAA-AAAA+A="  # URL-safe and standard alphabets mixed
    damaged[6]["traceId"] = base64.b64decode(damaged[6]["traceId"]).hex()  # hex in a base64 file: read as hex
    lines[0] = json.dumps(obj)
    src = tmp / "bad-ids.jsonl"
    src.write_text("\n".join(lines) + "\n")
    summary = import_file(src, tmp / "bad-ids-records.jsonl")
    want = {"spans_with_invalid_trace_id": 2, "spans_with_zero_trace_id": 1, "spans_without_trace_id": 1}
    assert summary["per_file"] == want
    counted: dict[str, Counter[str]] = defaultdict(Counter)  # trace hex -> reason -> spans
    for k, reason in ((4, "spans_with_invalid_span_id"), (5, "spans_with_invalid_parent_span_id")):
        counted[base64.b64decode(damaged[k]["traceId"]).hex()][reason] += 1
    by_trace = {**summary["unreadable_runs"], **summary["unreadable_traces_without_run"]}
    imported = run_records(tmp / "bad-ids-records.jsonl")
    trace_of_run = {tid: rec["metadata"]["otel_trace_id"] for tid, rec in imported.items()}
    got: dict[str, dict[str, int]] = {}
    for key, counts in by_trace.items():
        got[trace_of_run.get(key, key)] = counts
    assert got == {t: dict(c) for t, c in counted.items()}
    # The hex id in the base64 file was read: its span is in, and no run was lost but the damaged ones'.
    assert damaged[6]["traceId"] in set(trace_of_run.values())
