"""Scores as OpenTelemetry log records (`gen_ai.evaluation.result` events), sent over OTLP/HTTP for real.

A simulated LangGraph agent is instrumented by OpenInference; the span processor captures its
runs; `EvaluationEventExporter` emits the scores as log records through the SDK's OTLP/HTTP
log exporter to a receiver on 127.0.0.1, which decodes them with the OTLP protobuf classes.
Every value is checked against TPS = sum_t w_t [eta S(F_t, 1) + (1 - eta) S(F_t, 0)] computed
from the durable record with the linear-front weights written out, and every record's trace id
and span id against the agent root span the SDK exported.
"""

from __future__ import annotations

import http.server
import threading
from typing import ClassVar

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import agent_for, instrumented, run_tasks
from world_check import new_accumulator, sink_records

from tps_tracer.otel import EvaluationEventExporter, TPSSpanProcessor
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring import score as rule_score
from tps_tracer.sim.world import AgentWorld, WorldConfig

PREDICTORS = 5  # verbal, token_prob, entropy_conf, action_token_prob, action_entropy_conf
RULES = ("log", "brier", "beta(2,4)")


class _OtlpReceiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def linear_front(T: int) -> list[float]:
    return [2 * (T - t + 1) / (T * (T + 1)) for t in range(1, T + 1)]


def closed_form_tps(record, predictor: str, rule: str, eta: float) -> float:
    T = record.horizon or len(record.steps)
    w = linear_front(T)
    total = 0.0
    for t, step in enumerate(record.steps):
        p = step.forecasts[predictor]
        total += w[t] * (eta * float(rule_score(p, 1, rule)) + (1 - eta) * float(rule_score(p, 0, rule)))
    return total


def _value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def test_evaluation_events_over_otlp_match_closed_form_tps(tmp_path):
    world = AgentWorld(24, seed=5, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.05))
    _OtlpReceiver.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _OtlpReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/logs"

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    acc, sink = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc, horizon=6)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    loggers = LoggerProvider()
    loggers.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=endpoint)))
    events = EvaluationEventExporter(loggers, processor.links)
    acc.add_listener(events)
    try:
        agent, inputs, _, _ = agent_for("prebuilt", world)
        with instrumented(provider):
            run_tasks(agent, inputs, world, [], recursion_limit=12)
        processor.force_flush()
        for task in world:  # grades arrive late: each clean run's scores are emitted then
            if task.expected(6, repairs=False).stop_reason is StopReason.CLEAN:
                processor.record_outcome(task.task_id, success=task.outcome)
        processor.force_flush()
        assert loggers.force_flush()
    finally:
        loggers.shutdown()
        server.shutdown()
    records = sink_records(sink)
    assert acc.snapshot()["online"]["rejected"] == {}
    acc.close()

    root_of_trace = {s.context.trace_id: s.context.span_id for s in spans.get_finished_spans() if s.parent is None}
    assert len(root_of_trace) == len(world.tasks)

    assert _OtlpReceiver.received and {path for path, _ in _OtlpReceiver.received} == {"/v1/logs"}
    decoded = []
    for _, body in _OtlpReceiver.received:
        request = ExportLogsServiceRequest.FromString(body)
        for rl in request.resource_logs:
            for sl in rl.scope_logs:
                assert sl.scope.name == "tps_tracer"
                decoded.extend(sl.log_records)

    by_trajectory: dict[str, list] = {}
    for rec in decoded:
        attrs = {a.key: _value(a.value) for a in rec.attributes}
        assert rec.event_name == "gen_ai.evaluation.result"
        assert rec.severity_text == "INFO" and rec.time_unix_nano > 0
        by_trajectory.setdefault(attrs["tps.trajectory_id"], []).append((rec, attrs))
    assert set(by_trajectory) == set(records)  # every run: scored, censored or excluded

    checked = {"clean": 0, "max_steps": 0, "excluded": 0}
    for tid, emitted in by_trajectory.items():
        rec = records[tid]
        for log, attrs in emitted:
            trace_id = int.from_bytes(log.trace_id, "big")
            assert int.from_bytes(log.span_id, "big") == root_of_trace[trace_id]  # on the agent root
            assert attrs["gen_ai.evaluation.name"] == "tps"
            assert attrs["tps.stop_reason"] == rec.stop_reason.value
        if rec.stop_reason is StopReason.CLEAN:
            outcome = next(t.outcome for t in world if t.task_id == tid)
            # one record per predictor x rule x censoring mode (complete-only, simple, exact with eta = Y)
            assert len(emitted) == PREDICTORS * len(RULES) * 3
            for _, attrs in emitted:
                assert attrs["gen_ai.evaluation.score.label"] == ("success" if outcome else "failure")
                want = closed_form_tps(rec, attrs["tps.predictor"], attrs["tps.rule"], float(outcome))
                assert attrs["gen_ai.evaluation.score.value"] == pytest.approx(want, abs=1e-12)
                assert attrs["tps.rule"] in attrs["gen_ai.evaluation.explanation"]
            checked["clean"] += 1
        elif rec.stop_reason is StopReason.MAX_STEPS:
            assert len(emitted) == PREDICTORS * len(RULES)  # cen-simple only: no q_z
            for _, attrs in emitted:
                assert attrs["gen_ai.evaluation.score.label"] == "censored"
                want = closed_form_tps(rec, attrs["tps.predictor"], attrs["tps.rule"], 0.0)
                assert attrs["gen_ai.evaluation.score.value"] == pytest.approx(want, abs=1e-12)
            checked["max_steps"] += 1
        else:
            [(_, attrs)] = emitted
            assert attrs["gen_ai.evaluation.score.label"] == "excluded"
            assert "gen_ai.evaluation.score.value" not in attrs
            assert rec.stop_reason.value in attrs["gen_ai.evaluation.explanation"]
            checked["excluded"] += 1
    assert all(checked.values()), checked
    assert events.counts["records"] == len(decoded)
