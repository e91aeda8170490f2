"""One exported name, one meaning; one evaluation span / annotation per run and name (issue 31).

A real accumulator scores hand-written runs, among them one whose verbal confidence is
missing at a step (carried forward by default; unusable under drop-run, token_prob usable) and a
parse_error run that later gets an outcome. The span exporter runs on the real OpenTelemetry SDK; the Phoenix and
MLflow exporters' records are built by their own `items` from the accumulator's own
notifications. Every value is checked against the TPS written out from the forecasts.
"""

from __future__ import annotations

import math

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tps_tracer.online.accumulator import Accumulator
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel import (
    EvaluationEventExporter,
    EvaluationSpanExporter,
    MlflowAssessments,
    PhoenixAnnotations,
    TraceLinks,
)
from tps_tracer.otel.evaluations import EVALUATION_SPAN
from tps_tracer.otel.trace_links import SpanLink

# run id -> (forecasts per step, stop reason, horizon, late outcome, late q_z)
RUNS = {
    "both": ([(0.8, 0.7), (0.9, 0.6), (0.7, 0.9)], "clean", None, 1, None),
    "no-verbal": ([(0.6, 0.55), (None, 0.8)], "clean", None, 0, None),
    "budget": ([(0.4, 0.5), (0.5, 0.45)], "max_steps", 5, 1, 0.3),
    "malformed": ([(0.9, 0.8)], "parse_error", None, 1, None),  # an outcome for an excluded run
}
LINKS = {tid: SpanLink(0x1000 + i, 0x2000 + i) for i, tid in enumerate(RUNS)}


def tps(steps, predictor: int, rule: str, eta: float, horizon: int) -> float:
    """sum_t w_t S(F_t, eta) with linear-front weights over the horizon, written out."""
    total, p = 0.0, 0.5
    for t, step in enumerate(steps, start=1):
        p = p if step[predictor] is None else step[predictor]  # a gap: the last stated forecast
        w = 2 * (horizon - t + 1) / (horizon * (horizon + 1))
        if rule == "log":
            s1, s0 = math.log(p), math.log(1 - p)
        else:  # brier, as a score (higher is better): -(1-p)^2 if Y=1, -p^2 if Y=0
            s1, s0 = -((1 - p) ** 2), -(p**2)
        total += w * (eta * s1 + (1 - eta) * s0)
    return total


def expected(tid: str, name: str) -> float:
    steps, reason, horizon, outcome, _ = RUNS[tid]
    rule, _, other = name.removeprefix("tps.").partition(".")
    eta = float(outcome) if reason == "clean" else 0.0  # simple censoring: eta = 0
    return tps(steps, 1 if other == "token_prob" else 0, rule, eta, horizon or len(steps))


def drive(listeners, missing: str = "carry-forward") -> None:
    acc = Accumulator(predictors=["verbal", "token_prob"], rules=("log", "brier"), bootstrap=10, missing=missing)
    for listener in listeners:
        acc.add_listener(listener)
    for tid, (steps, reason, horizon, _, _) in RUNS.items():
        for verbal, token in steps:
            assert acc.observe(tid, {"verbal": verbal, "token_prob": token})
        link = LINKS[tid]
        assert acc.stop(tid, reason, horizon, metadata={"otel_trace_id": link.trace_hex, "otel_span_id": link.span_hex})
    for tid, (_, _, _, outcome, q_z) in RUNS.items():  # late: a grading job, then the resume workflow
        assert acc.resolve(tid, outcome=outcome)
        if q_z is not None:
            assert acc.resolve(tid, q_z=q_z)
    acc.close()


def test_accumulator_notifies_only_when_a_score_changes():
    seen: list[TrajectoryScore] = []
    drive([seen.append])
    # both / no-verbal: once, when the outcome arrives; budget: at its stop, again when q_z adds the
    # exact mode (not for its outcome, ignored by scoring); malformed: at its stop only.
    assert [s.trajectory_id for s in seen] == ["budget", "malformed", "both", "no-verbal", "budget"]
    assert seen[-1].q_z == pytest.approx(0.3)


def test_one_evaluation_span_per_run_and_the_headline_is_always_verbal():
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    exporter = EvaluationSpanExporter(provider, TraceLinks())
    drive([exporter], missing="drop-run")  # a run whose verbal is not scored
    evaluations = [s for s in spans.get_finished_spans() if s.name == EVALUATION_SPAN]
    by_tid = {s.attributes["tps.trajectory_id"]: s for s in evaluations}
    assert len(evaluations) == len(by_tid) == len(RUNS)
    for tid, span in by_tid.items():
        assert span.parent.span_id == LINKS[tid].span_id and span.context.trace_id == LINKS[tid].trace_id
        assert span.attributes["tps.predictor"] == "verbal"  # never the run's first usable predictor
    assert by_tid["both"].attributes["gen_ai.evaluation.score.value"] == pytest.approx(expected("both", "tps.log"))
    assert by_tid["budget"].attributes["gen_ai.evaluation.score.value"] == pytest.approx(expected("budget", "tps.log"))
    for tid in ("no-verbal", "malformed"):  # no verbal score: no value, rather than token_prob's under its name
        assert "gen_ai.evaluation.score.value" not in by_tid[tid].attributes
    assert by_tid["malformed"].attributes["gen_ai.evaluation.score.label"] == "excluded"


@pytest.mark.parametrize("backend", ["phoenix", "mlflow"])
def test_backend_names_carry_the_predictor_and_each_is_sent_once(backend):
    links = TraceLinks()
    if backend == "phoenix":
        exporter = PhoenixAnnotations("http://127.0.0.1:9", links, client=object())
    else:
        exporter = MlflowAssessments("http://127.0.0.1:9", links, client=object())
    items: list[dict] = []
    try:
        # What the exporter's listener queues for delivery (no backend here: the records themselves).
        drive([lambda score: items.extend(exporter.new_records(score, LINKS[score.trajectory_id]))])
    finally:
        exporter.close(1)
    span_of = {link.span_hex: tid for tid, link in LINKS.items()}
    got: dict[tuple[str, str], object] = {}
    for item in items:
        key = (span_of[item["span_id"]], item["name"])
        assert key not in got, f"sent twice: {key}"
        result = item["result"] if backend == "phoenix" else {"score": item["value"], "label": item["value"]}
        got[key] = result["label"] if item["name"] == "tps.stop_reason" else result["score"]
    stops = {tid: v for (tid, name), v in got.items() if name == "tps.stop_reason"}
    assert stops == {tid: run[1] for tid, run in RUNS.items()}  # once each, also for the excluded run
    scores = {key: v for key, v in got.items() if key[1] != "tps.stop_reason"}
    want_names = {
        "both": {"tps.log", "tps.brier", "tps.log.token_prob", "tps.brier.token_prob"},
        "no-verbal": {"tps.log", "tps.brier", "tps.log.token_prob", "tps.brier.token_prob"},  # gap carried
        "budget": {"tps.log", "tps.brier", "tps.log.token_prob", "tps.brier.token_prob"},
        "malformed": set(),
    }
    assert {tid: {n for (t, n) in scores if t == tid} for tid in RUNS} == want_names
    for (tid, name), value in scores.items():
        assert value == pytest.approx(expected(tid, name), abs=1e-12), (tid, name)


def test_one_evaluation_event_per_run_and_score():
    logs = InMemoryLogExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    drive([EvaluationEventExporter(provider, TraceLinks())])
    keys = []
    for data in logs.get_finished_logs():
        a = data.log_record.attributes
        keys.append((a["tps.trajectory_id"], a.get("tps.predictor"), a.get("tps.rule"), a.get("tps.censoring")))
    assert len(keys) == len(set(keys))  # q_z's second notification re-sent nothing already sent
    budget_modes = {k[3] for k in keys if k[0] == "budget"}
    assert budget_modes == {"simple", "exact"}  # the exact mode arrived with q_z
    exact = [d.log_record.attributes for d in logs.get_finished_logs()]
    exact = [a for a in exact if a["tps.trajectory_id"] == "budget" and a.get("tps.censoring") == "exact"]
    steps = RUNS["budget"][0]
    for a in exact:
        col = 0 if a["tps.predictor"] == "verbal" else 1
        want = tps(steps, col, a["tps.rule"], 0.3, 5)
        assert a["gen_ai.evaluation.score.value"] == pytest.approx(want, abs=1e-12)
    assert [k for k in keys if k[0] == "malformed"] == [("malformed", None, None, None)]
