"""Scores exported next to the traces, on the real OpenTelemetry SDK (in-memory and Prometheus readers).

Every exported number is checked against an independent computation from the durable
record (the sink): TPS = sum_t w_t S(F_t, eta), with the paper's linear-front weights
written out, and the metric means against the accumulator's snapshot.
"""

from __future__ import annotations

import math
import re
import socket
import urllib.request

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import agent_for, instrumented, run_tasks
from world_check import new_accumulator, sink_records

from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import EvaluationSpanExporter, TPSMetrics, TPSSpanProcessor
from tps_tracer.otel.evaluations import EVALUATION_EVENT, EVALUATION_SPAN
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring import score as rule_score
from tps_tracer.sim.world import AgentWorld, WorldConfig

RULES = ("log", "brier", "beta(2,4)")


@pytest.fixture(scope="module")
def world() -> AgentWorld:
    return AgentWorld(30, seed=11, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.03))


def linear_front(T: int) -> list[float]:
    """w_t = 2 (T - t + 1) / (T (T + 1)), t = 1..T (the paper's linear front-loaded schedule)."""
    return [2 * (T - t + 1) / (T * (T + 1)) for t in range(1, T + 1)]


def expected_tps(record, predictor: str, rule: str, eta: float) -> float:
    T = record.horizon or len(record.steps)
    w = linear_front(T)
    total = 0.0
    for t, step in enumerate(record.steps):
        p = step.forecasts[predictor]
        s1, s0 = float(rule_score(p, 1, rule)), float(rule_score(p, 0, rule))
        total += w[t] * (eta * s1 + (1 - eta) * s0)
    return total


def _pipeline(tmp_path, capture: str):
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    acc, sink = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc if capture == "spans" else None, capture=capture == "spans")
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = TPSMetrics(meters)
    acc.add_listener(EvaluationSpanExporter(provider, processor.links))
    acc.add_listener(metrics)
    return provider, processor, acc, sink, spans, reader, metrics


@pytest.mark.parametrize("capture", ["spans", "handler"])
def test_evaluation_spans_and_metrics_match_independent_scores(world, tmp_path, capture):
    provider, processor, acc, sink, exporter, reader, _ = _pipeline(tmp_path, capture)
    handler = TPSCallbackHandler(acc) if capture == "handler" else None
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(provider):
        run_tasks(agent, inputs, world, [handler] if handler else [], metadata={"tps_horizon": 6}, recursion_limit=12)
    flush = handler.flush if handler else processor.force_flush
    record_outcome = handler.record_outcome if handler else processor.record_outcome
    flush()
    # Outcomes arrive late (a grader, user feedback): each clean run's score is exported then.
    clean = [t for t in world if t.expected(6, repairs=False).stop_reason is StopReason.CLEAN]
    for task in clean:
        record_outcome(task.task_id, success=task.outcome)
    flush()
    records = sink_records(sink)
    snapshot = acc.snapshot()
    acc.close()

    finished = exporter.get_finished_spans()
    roots = {s.context.trace_id: s for s in finished if s.parent is None}
    evaluations = [s for s in finished if s.name == EVALUATION_SPAN]
    by_tid = {s.attributes["tps.trajectory_id"]: s for s in evaluations}
    assert len(evaluations) == len(by_tid) == len(world.tasks)  # one per run: scored, censored or excluded
    assert {r.stop_reason for r in records.values()} >= {StopReason.CLEAN, StopReason.MAX_STEPS}
    for tid, span in by_tid.items():
        rec = records[tid]
        root = roots[span.context.trace_id]  # same trace as the agent's spans
        assert span.parent.span_id == root.context.span_id  # child of the agent root
        assert span.instrumentation_scope.name == "tps_tracer"
        assert span.attributes["tps.stop_reason"] == rec.stop_reason.value
        if rec.stop_reason is StopReason.CLEAN:
            outcome = next(t.outcome for t in world if t.task_id == tid)
            assert span.attributes["gen_ai.evaluation.score.label"] == ("success" if outcome else "failure")
            eta = float(outcome)
        elif rec.stop_reason is StopReason.MAX_STEPS:
            assert span.attributes["gen_ai.evaluation.score.label"] == "censored"
            eta = 0.0  # cen-simple
        else:
            assert span.attributes["gen_ai.evaluation.score.label"] == "excluded"
            assert "gen_ai.evaluation.score.value" not in span.attributes
            assert not span.events
            continue
        want = expected_tps(rec, "verbal", "log", eta)
        assert span.attributes["gen_ai.evaluation.score.value"] == pytest.approx(want, abs=1e-12)
        events = [e for e in span.events if e.name == EVALUATION_EVENT]
        modes = 3 if rec.stop_reason is StopReason.CLEAN else 1
        assert len(events) == 5 * len(RULES) * modes
        for e in events:
            a = e.attributes
            want = expected_tps(rec, a["tps.predictor"], a["tps.rule"], a["tps.eta"])
            assert a["gen_ai.evaluation.score.value"] == pytest.approx(want, abs=1e-12)

    # Metrics: the running means are the snapshot's means, for every column it reports.
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for dp in metric.data.data_points:
                    if metric.name == "tps.steps":
                        points[(metric.name, dp.attributes["predictor"], dp.attributes["forecast"])] = dp.value
                        continue
                    key = tuple(dp.attributes.get(k) for k in ("predictor", "rule", "weights", "censoring"))
                    points[
                        (metric.name, key)
                        if metric.name != "tps.trajectories"
                        else (metric.name, dp.attributes["stop_reason"])
                    ] = dp.value
    compared = 0
    no_q_z = snapshot["audit"]["censored_with_q_z"] == 0
    for row in snapshot["scores"]:
        key = (row["predictor"], row["rule"], row["weights"], row["censoring"])
        if no_q_z and row["censoring"] == "exact":  # no run carries q_Z: "exact" would be complete-only renamed
            assert ("tps.score.mean", key) not in points and ("tps.scored", key) not in points
            continue
        if row["n"] and row["predictor"] != "base_rate":  # the reference forecaster is not a captured stream
            assert points[("tps.score.mean", key)] == pytest.approx(row["mean"], abs=1e-12)
            assert points[("tps.scored", key)] == row["n"]
            compared += 1
    assert compared >= 5 * len(RULES) * 2
    for reason, n in snapshot["audit"]["stop_reasons"].items():
        assert points.get(("tps.trajectories", reason), 0) == n
    # Steps without a forecast (scored by the missing-forecast policy), counted from the records.
    names = {p for r in records.values() for st in r.steps for p in st.forecasts}
    gaps = {p: sum(st.forecasts.get(p) is None for r in records.values() for st in r.steps) for p in names}
    n_steps = sum(len(r.steps) for r in records.values())
    for p, n in gaps.items():
        assert points[("tps.steps", p, "missing")] == n and points[("tps.steps", p, "stated")] == n_steps - n
    for tid, span in by_tid.items():
        want = sum(st.forecasts.get("verbal") is None for st in records[tid].steps)
        assert span.attributes["tps.steps_without_forecast"] == want


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prometheus_scrape(tmp_path):
    """The OpenTelemetry Prometheus reader on a real HTTP endpoint: scrape and parse what Prometheus would."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import start_http_server

    from tps_tracer import Accumulator

    reader = PrometheusMetricReader()
    port = _free_port()
    server, _ = start_http_server(port, addr="127.0.0.1")
    meters = MeterProvider(metric_readers=[reader])
    try:
        metrics = TPSMetrics(meters)
        acc = Accumulator(predictors=["verbal"], rules=["log", "brier"], bootstrap=0)
        acc.add_listener(metrics)
        forecasts = {"a": [0.9, 0.8], "b": [0.3], "c": [0.6, 0.6, 0.2]}
        for tid, ps in forecasts.items():
            for p in ps:
                acc.observe(tid, {"verbal": p})
        acc.stop("a", "clean")
        acc.resolve("a", outcome=1)
        acc.stop("b", "clean")
        acc.resolve("b", outcome=0)
        acc.stop("c", "max_steps", horizon=5)
        # Until a censored run carries q_Z there is no exact series (it would be complete-only renamed).
        assert {key[3] for key in metrics.means()} == {"complete-only", "simple"}
        acc.resolve("c", q_z=0.25)  # a late q_Z adds the exact mode without counting the run twice
        assert {key[3] for key in metrics.means()} == {"complete-only", "simple", "exact"}
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
        meters.shutdown()  # unregisters the reader's collector from prometheus_client
    samples = {}
    for line in body.splitlines():
        m = re.match(r"^(tps_\w+)\{(.*)\} (\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            samples[(m.group(1), labels.get("rule"), labels.get("censoring"), labels.get("stop_reason"))] = float(
                m.group(3)
            )
    # Closed forms. a: T=2 weights (2/3, 1/3), y=1; b: T=1, y=0; c: censored at Z=3 of T=5, cen-simple eta=0.
    log_a = 2 / 3 * math.log(0.9) + 1 / 3 * math.log(0.8)
    log_b = math.log(0.7)
    w5 = linear_front(5)
    log_c = w5[0] * math.log(0.4) + w5[1] * math.log(0.4) + w5[2] * math.log(0.8)
    assert samples[("tps_score_mean", "log", "complete-only", None)] == pytest.approx((log_a + log_b) / 2, abs=1e-9)
    assert samples[("tps_score_mean", "log", "simple", None)] == pytest.approx((log_a + log_b + log_c) / 3, abs=1e-9)
    brier_simple = (-(2 / 3 * 0.01 + 1 / 3 * 0.04) - 0.09 - (w5[0] * 0.36 + w5[1] * 0.36 + w5[2] * 0.04)) / 3
    assert samples[("tps_score_mean", "brier", "simple", None)] == pytest.approx(brier_simple, abs=1e-9)
    assert samples[("tps_scored_total", "log", "simple", None)] == 3
    log_c1 = w5[0] * math.log(0.6) + w5[1] * math.log(0.6) + w5[2] * math.log(0.2)
    exact = (log_a + log_b + 0.25 * log_c1 + 0.75 * log_c) / 3
    assert samples[("tps_score_mean", "log", "exact", None)] == pytest.approx(exact, abs=1e-9)
    assert samples[("tps_scored_total", "log", "exact", None)] == 3
    assert samples[("tps_trajectories_total", None, None, "clean")] == 2
    assert samples[("tps_trajectories_total", None, None, "max_steps")] == 1
    steps = {}
    for m in re.finditer(r"^tps_steps_total\{(.*)\} (\S+)$", body, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        steps[(labels["predictor"], labels["forecast"])] = float(m.group(2))
    assert steps == {("verbal", "stated"): 6, ("verbal", "missing"): 0}


def test_scores_given_up_waiting_for_their_root_span_are_counted_and_shown(monkeypatch, caplog):
    """A score waits for its run's root span; past the bound the oldest are given up: counted in the
    processor's (its accumulator's) health ledger, logged once, and in a backend's status()."""
    from tps_tracer import Accumulator
    from tps_tracer.otel import PhoenixAnnotations, trace_links

    monkeypatch.setattr(trace_links, "MAX_LINKS", 2)
    acc = Accumulator(bootstrap=0)
    processor = TPSSpanProcessor(acc, background=False)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    acc.add_listener(EvaluationSpanExporter(provider, processor.links))
    for tid in ("a", "b", "c"):  # no root span seen for any of them yet
        assert acc.finished(tid, [{"verbal": 0.8}, {"verbal": 0.6}], "clean", outcome=1)
    assert processor.links.expired == 1 and processor.links.n_waiting == 2
    assert acc.snapshot()["online"]["health"]["dropped"] == {"score_link_wait": 1}
    assert sum("score_link_wait" in r.getMessage() for r in caplog.records) == 1
    for i, tid in enumerate(("a", "b", "c")):
        processor.links.add(tid, trace_links.SpanLink(i + 1, i + 1))
    got = sorted(s.attributes["tps.trajectory_id"] for s in spans.get_finished_spans() if s.name == EVALUATION_SPAN)
    assert got == ["b", "c"]  # "a"'s score was given up: no span, and not a late one either
    annotations = PhoenixAnnotations("http://127.0.0.1:9", processor.links, client=object())
    try:
        assert annotations.status()["link_wait_expired"] == 1
    finally:
        annotations.close(1)
        processor.shutdown()


def test_steps_without_a_forecast_are_counted_on_the_metrics_and_the_span():
    """The means include steps scored by the missing-forecast policy: tps.steps says how many, per predictor."""
    from tps_tracer import Accumulator
    from tps_tracer.otel import SpanLink, TraceLinks

    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    links = TraceLinks()
    acc = Accumulator(bootstrap=0)
    acc.add_listener(TPSMetrics(MeterProvider(metric_readers=[reader])))
    acc.add_listener(EvaluationSpanExporter(provider, links))
    runs = {
        "x": [
            {"verbal": 0.7, "token_prob": 0.9},
            {"verbal": None, "token_prob": 0.8},
            {"verbal": 0.6, "token_prob": 0.7},
        ],
        "y": [{"verbal": None, "token_prob": 0.5}],
        "z": [{"token_prob": 0.4}, {"token_prob": 0.6}],  # never names verbal: both steps are its gaps
    }
    for i, (tid, steps) in enumerate(runs.items()):
        links.add(tid, SpanLink(i + 1, i + 1))
        assert acc.finished(tid, steps, "clean", outcome=1)
    acc.close()
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "tps.steps":
                    for dp in metric.data.data_points:
                        points[(dp.attributes["predictor"], dp.attributes["forecast"])] = dp.value
    assert points == {
        ("verbal", "stated"): 2,
        ("verbal", "missing"): 4,
        ("token_prob", "stated"): 6,
        ("token_prob", "missing"): 0,
    }
    got = {
        s.attributes["tps.trajectory_id"]: s.attributes["tps.steps_without_forecast"]
        for s in spans.get_finished_spans()
    }
    assert got == {"x": 1, "y": 1, "z": 2}  # the headline predictor's (verbal)
