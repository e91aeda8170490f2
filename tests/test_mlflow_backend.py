"""End to end on a real MLflow tracking server (started here on 127.0.0.1, SQLite store in a temp dir).

A LangGraph agent on the simulated world, instrumented by OpenInference, exports its spans
over OTLP/HTTP to MLflow's /v1/traces endpoint; TPS capture is done by the span processor
(or by the LangChain handler); scores go back as `tps.evaluation` spans in the same traces
and as MLflow assessments on the agent roots. Everything is read back from MLflow with its
client and checked against scores computed independently from the durable JSON Lines record.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from types import SimpleNamespace

import httpx
import pytest
from backends.mlflow_server import MlflowServer
from mlflow.tracing.client import TracingClient
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_support import agent_for, instrumented
from recipe_support import RecipeRun, Subset, expected_score, expected_score_names, load_recipe
from world_check import sink_records

from tps_tracer import Accumulator
from tps_tracer.otel import MlflowAssessments, TPSSpanProcessor
from tps_tracer.otel.backends import STOP_NAME, mlflow_trace_id
from tps_tracer.otel.evaluations import EVALUATION_SPAN
from tps_tracer.otel.trace_links import SpanLink
from tps_tracer.sim.world import AgentWorld, WorldConfig

RULES = ("log", "brier", "beta(2,4)")  # the accumulator's default rules


@pytest.fixture(scope="module")
def world() -> AgentWorld:
    return AgentWorld(16, seed=5, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.03))


@pytest.fixture(autouse=True)
def prompt_client_errors(monkeypatch):
    # The MLflow client retries each request for minutes by default; the exporter does its own retrying.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")


def new_experiment(server: MlflowServer, prefix: str) -> str:
    """Created over MLflow's REST API, independently of the code under test."""
    r = httpx.post(f"{server.url}/api/2.0/mlflow/experiments/create", json={"name": f"{prefix}-{uuid.uuid4().hex[:8]}"})
    r.raise_for_status()
    return str(r.json()["experiment_id"])


class Pipeline(RecipeRun):
    def __init__(self, server: MlflowServer, tmp_path, capture: str, **assessment_options):
        self.experiment_id = new_experiment(server, f"tps-{capture}")
        sink = tmp_path / "runs.jsonl"
        tps = load_recipe("mlflow", "mlflow_recipe").trace_to_mlflow(
            server.url,
            self.experiment_id,
            sink,
            capture=capture,
            accumulator_options={"bootstrap": 20},
            assessment_options={"retry_initial": 0.2, "retry_max": 1.0, **assessment_options},
        )
        super().__init__(tps, sink)
        self.assessments = tps.assessments


def expected_assessments(records) -> int:
    return sum(1 + len(expected_score_names(r, RULES)) for r in records.values())


def root_of(trace):
    roots = [s for s in trace.data.spans if s.parent_id is None]
    assert len(roots) == 1 and roots[0].name == "LangGraph"
    return roots[0]


def check_evaluation_span(trace, record) -> None:
    """The run's `tps.evaluation` span is in its MLflow trace, a child of the agent root."""
    evaluations = [s for s in trace.data.spans if s.name == EVALUATION_SPAN]
    assert len(evaluations) == 1 and evaluations[0].parent_id == root_of(trace).span_id
    assert evaluations[0].attributes["tps.trajectory_id"] == record.trajectory_id
    assert evaluations[0].attributes["tps.stop_reason"] == record.stop_reason.value


def check_assessments(info, root_span_id: str, record, outcomes) -> int:
    """Every assessment on the run's trace sits on the agent root and equals the record's score
    (computed independently); each is written once. Returns the number of score assessments."""
    names = sorted(a.name for a in info.assessments)
    meaning = expected_score_names(record, RULES)
    assert names == sorted([STOP_NAME, *meaning]), names  # retries included, nothing written twice
    scores = 0
    for a in info.assessments:
        assert a.span_id == root_span_id
        assert a.source.source_type == "CODE" and a.source.source_id == "tps-tracer"
        assert a.metadata["trajectory_id"] == record.trajectory_id
        assert a.metadata["stop_reason"] == record.stop_reason.value
        if a.name == STOP_NAME:
            assert a.value == record.stop_reason.value
            continue
        predictor, rule = meaning[a.name]  # one name, one predictor
        assert a.value == pytest.approx(expected_score(record, rule, outcomes, predictor), abs=1e-12)
        assert a.metadata["censoring"] == "simple" and a.metadata["predictor"] == predictor
        scores += 1
    return scores


@pytest.mark.parametrize("capture", ["spans", "handler"])
def test_scores_read_back_from_mlflow(mlflow_server, world, tmp_path, capture):
    assert mlflow_server.listening_addresses() and all(a == "0100007F" for a in mlflow_server.listening_addresses())
    pipe = Pipeline(mlflow_server, tmp_path, capture)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    t0 = time.monotonic()
    with instrumented(pipe.provider, hide_inputs=True):
        pipe.run(agent, inputs, world)
    pipe.record_outcomes(world, every_run=True)  # excluded runs graded too: nothing written twice for them
    assert pipe.tps.flush(60)
    print(f"run + export + assessments {time.monotonic() - t0:.1f} s; {pipe.assessments.status()}")
    records = sink_records(pipe.sink)
    assert set(records) == set(world.tasks)
    outcomes = {t.task_id: t.outcome for t in world}
    client = TracingClient(mlflow_server.url)
    scores = 0
    for tid, record in records.items():
        link = pipe.processor.links.get(tid)
        info = client.get_trace_info(mlflow_trace_id(link))
        assert info.experiment_id == pipe.experiment_id
        scores += check_assessments(info, link.span_hex, record, outcomes)
    # Whole traces, spans included, for the shortest runs: MLflow serves a trace's spans slowly
    # (about 8 s for a 48-span run whose LLM spans carry 300-token logprobs: 8.9 MB of JSON).
    for tid in sorted(records, key=lambda t: len(records[t].steps))[:2]:
        link = pipe.processor.links.get(tid)
        trace = client.get_trace(mlflow_trace_id(link))
        assert root_of(trace).span_id == link.span_hex
        check_evaluation_span(trace, records[tid])
    assert scores == sum(len(expected_score_names(r, RULES)) for r in records.values()) > 0
    status = pipe.assessments.status()
    assert status["sent"] == expected_assessments(records)
    assert status["pending"] == 0 and status["failed_attempts"] == 0 and status["gave_up"] == 0
    pipe.acc.close()


def test_score_before_its_trace_waits_then_lands_and_a_missing_trace_is_given_up(mlflow_server, world, tmp_path):
    """Spans held back by the span exporter: the assessments wait for the trace, then land once
    it is stored; a score whose trace never reaches MLflow is given up after the timeout, counted."""
    experiment_id = new_experiment(mlflow_server, "tps-early")
    provider = TracerProvider()
    acc = Accumulator(bootstrap=0, sink=tmp_path / "runs.jsonl")
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    exporter = OTLPSpanExporter(
        endpoint=f"{mlflow_server.url}/v1/traces", headers={"x-mlflow-experiment-id": experiment_id}
    )
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000, max_queue_size=100_000))
    assessments = MlflowAssessments(mlflow_server.url, processor.links, retry_initial=0.1, retry_max=0.5)
    scores = []
    acc.add_listener(assessments)
    acc.add_listener(scores.append)
    tasks = Subset(list(world)[:4])
    agent, inputs, _, _ = agent_for("prebuilt", world)
    wiring = SimpleNamespace(provider=provider, accumulator=acc, processor=processor, handler=None)
    run = RecipeRun(wiring, tmp_path / "runs.jsonl")
    with instrumented(provider, hide_inputs=True):
        run.run(agent, inputs, tasks)
    run.record_outcomes(tasks)
    records = sink_records(tmp_path / "runs.jsonl")
    want = expected_assessments(records)
    assert not assessments.flush(2.0)  # nothing stored in MLflow yet
    early = assessments.status()
    assert early["sent"] == 0 and early["pending"] == want and early["waiting_for_trace"] >= 1
    assert early["failed_attempts"] == 0 and early["outages"] == 0  # not an outage: the backend is up
    provider.force_flush()  # now the traces reach MLflow
    assert assessments.flush(30)
    status = assessments.status()
    assert status["sent"] == want and status["gave_up"] == 0
    client = TracingClient(mlflow_server.url)
    outcomes = {t.task_id: t.outcome for t in world}
    for tid, record in records.items():
        link = processor.links.get(tid)
        check_assessments(client.get_trace_info(mlflow_trace_id(link)), link.span_hex, record, outcomes)
    # A score whose trace never reaches MLflow: given up after not_stored_timeout, and counted.
    orphan = MlflowAssessments(mlflow_server.url, retry_initial=0.1, retry_max=0.5, not_stored_timeout=1.5)
    ghost = SpanLink(int(uuid.uuid4().hex, 16), 1)
    orphan(dataclasses.replace(scores[0], metadata={"otel_trace_id": ghost.trace_hex, "otel_span_id": ghost.span_hex}))
    assert orphan.flush(30)
    lost = orphan.status()
    assert lost["gave_up"] == len(orphan.rows(scores[0])) and lost["sent"] == 0  # rows(): all, sent or not
    assert "RESOURCE_DOES_NOT_EXIST" in lost["last_error"]
    for exporter_ in (assessments, orphan):
        exporter_.close()
    provider.shutdown()
    acc.close()


@pytest.mark.load  # a fault campaign: `make test-load`
def test_mlflow_down_mid_run_then_back(mlflow_server, world, tmp_path):
    """MLflow stops mid-run and restarts: assessments are retried and land; the sink has every run."""
    # Long enough for a trace exported in the SDK's next batch (every 5 s) to be waited for;
    # short enough that the traces lost in the outage are given up within the test.
    pipe = Pipeline(mlflow_server, tmp_path, "spans", not_stored_timeout=30.0)
    tasks = list(world)
    first, second = Subset(tasks[:8]), Subset(tasks[8:])
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(pipe.provider, hide_inputs=True):
        pipe.run(agent, inputs, first)
        assert pipe.tps.flush(60)
        before = pipe.assessments.status()
        assert before["gave_up"] == 0 and before["pending"] == 0
        mlflow_server.stop()
        pipe.record_outcomes(first)  # the first half's roots are stored: these assessments wait for MLflow
        pipe.run(agent, inputs, second)
        pipe.record_outcomes(second)
        time.sleep(1.0)
        down = pipe.assessments.status()
        mlflow_server.start()
    assert down["failed_attempts"] >= 1 and down["pending"] > 0 and down["outages"] == 1
    assert "Connection refused" in (down["last_error"] or ""), down["last_error"]  # the server is down, not erring
    assert pipe.tps.flush(120)
    status = pipe.assessments.status()
    print(f"during the outage {down}; after {status}")
    records = sink_records(pipe.sink)
    assert set(records) == set(world.tasks)  # the durable record has every run of both halves
    # Every assessment was either written or, when its trace was lost with the outage (the SDK's
    # OTLP exporter gives up on spans after its retries), given up and counted: none vanished.
    assert status["pending"] == 0 and status["dropped"] == 0
    assert status["sent"] + status["gave_up"] == expected_assessments(records)
    assert status["sent"] > before["sent"]
    # The first half's traces were stored before the outage: all their assessments landed, equal to the record.
    client = TracingClient(mlflow_server.url)
    outcomes = {t.task_id: t.outcome for t in world}
    for tid in first.tasks:
        record = records[tid]
        link = pipe.processor.links.get(tid)
        check_assessments(client.get_trace_info(mlflow_trace_id(link)), link.span_hex, record, outcomes)
    pipe.acc.close()
