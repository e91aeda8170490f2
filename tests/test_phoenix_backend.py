"""End to end on a real Arize Phoenix server (started here on 127.0.0.1, offline, temp data dir).

A LangGraph agent on the simulated world, instrumented by OpenInference, exports its spans
over OTLP/HTTP; TPS capture is done by the span processor (or by the LangChain handler,
with the processor only linking runs to root spans); scores go back as `tps.evaluation`
spans in the same traces and as Phoenix span annotations on the agent roots. Everything
is read back from Phoenix with its client and checked against scores computed
independently from the durable JSON Lines record.
"""

from __future__ import annotations

import time
import uuid

import httpx
import phoenix.client as phoenix_client
import pytest
from backends.phoenix_server import PhoenixServer
from otel_support import agent_for, instrumented
from recipe_support import RecipeRun, Subset, expected_score, expected_score_names, load_recipe
from world_check import sink_records

from tps_tracer.otel.evaluations import EVALUATION_SPAN
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.world import AgentWorld, WorldConfig

RULES = ("log", "brier", "beta(2,4)")  # the accumulator's default rules


@pytest.fixture(scope="module")
def world() -> AgentWorld:
    return AgentWorld(16, seed=5, config=WorldConfig(malformed_rate=0.05, tool_failure_rate=0.03))


class Pipeline(RecipeRun):
    def __init__(self, phoenix: PhoenixServer, tmp_path, capture: str):
        self.project = f"tps-{capture}-{uuid.uuid4().hex[:8]}"
        sink = tmp_path / "runs.jsonl"
        tps = load_recipe("phoenix", "phoenix_recipe").trace_to_phoenix(
            phoenix.url,
            self.project,
            sink,
            capture=capture,
            accumulator_options={"bootstrap": 20},
            annotation_options={"retry_initial": 0.2, "retry_max": 1.0},
        )
        super().__init__(tps, sink)
        self.annotations = tps.annotations


def read_back(phoenix: PhoenixServer, project: str, want_evaluations: int, timeout: float = 180.0):
    """Poll Phoenix until it has stored the evaluation spans and their agent roots.

    Ingestion is asynchronous and batch by batch, so an evaluation span can be stored
    before the root it hangs under: wait for both."""
    client = phoenix_client.Client(base_url=phoenix.url)
    deadline = time.monotonic() + timeout
    while True:
        try:
            evaluations = client.spans.get_spans(
                project_identifier=project, name=EVALUATION_SPAN, limit=100_000, timeout=30
            )
        except httpx.HTTPStatusError as exc:  # 404 until the project's first span is stored
            if exc.response.status_code != 404 or time.monotonic() > deadline:
                raise
            evaluations = []
        roots: list = []
        if len(evaluations) >= want_evaluations:
            parents = sorted({e["parent_id"] for e in evaluations})
            roots = client.spans.get_spans(project_identifier=project, span_ids=parents, limit=100_000, timeout=30)
            if len(roots) == len(parents):
                return client, roots, evaluations
        if time.monotonic() > deadline:
            return client, roots, evaluations
        time.sleep(0.5)


def wait_for_annotations(client, project: str, span_ids: set[str], at_least: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = client.spans.get_span_annotations(span_ids=list(span_ids), project_identifier=project, limit=10_000)
        if len(got) >= at_least or time.monotonic() > deadline:
            return len(got)
        time.sleep(0.5)


def check_scores(client, project, spans, evaluations, records, world) -> int:
    """Every evaluation span is a child of its agent root, and every score equals the record's; returns #annotated."""
    by_id = {s["context"]["span_id"]: s for s in spans}
    roots = {}
    for ev in evaluations:
        attrs = ev["attributes"]
        tid = attrs["tps.trajectory_id"]
        rec = records[tid]
        root = by_id[ev["parent_id"]]
        assert root["parent_id"] is None and root["name"] == "LangGraph"
        assert root["context"]["trace_id"] == ev["context"]["trace_id"]
        assert attrs["tps.stop_reason"] == rec.stop_reason.value
        roots[root["context"]["span_id"]] = rec
    annotations = client.spans.get_span_annotations(span_ids=list(roots), project_identifier=project, limit=10_000)
    return check_annotations(annotations, roots, world)


def check_annotations(annotations, roots, world) -> int:
    """Each annotation on a root equals its run's record (stop reason label; TPS for each rule); returns #scores."""
    outcomes = {t.task_id: t.outcome for t in world}
    checked = 0
    for ann in annotations:
        rec = roots[ann["span_id"]]
        if ann["name"] == "tps.stop_reason":
            assert ann["result"]["label"] == rec.stop_reason.value
            continue
        predictor, rule = expected_score_names(rec, RULES)[ann["name"]]  # one name, one predictor
        assert ann["metadata"]["predictor"] == predictor
        assert ann["result"]["score"] == pytest.approx(expected_score(rec, rule, outcomes, predictor), abs=1e-12)
        assert ann["annotator_kind"] == "CODE"
        checked += 1
    return checked


@pytest.mark.parametrize("capture", ["spans", "handler"])
def test_scores_read_back_from_phoenix(phoenix, world, tmp_path, capture):
    assert phoenix.listening_addresses() and all(a.endswith("0100007F") for a in phoenix.listening_addresses())
    pipe = Pipeline(phoenix, tmp_path, capture)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    t0 = time.monotonic()
    with instrumented(pipe.provider, hide_inputs=True):
        pipe.run(agent, inputs, world)
    pipe.record_outcomes(world, every_run=True)  # excluded runs graded too: no second evaluation span
    pipe.provider.force_flush()
    assert pipe.annotations.flush(30)
    t1 = time.monotonic()
    records = sink_records(pipe.sink)
    assert set(records) == set(world.tasks)
    client, spans, evaluations = read_back(phoenix, pipe.project, len(records))
    print(f"run+export {t1 - t0:.1f} s, Phoenix ingestion {time.monotonic() - t1:.1f} s")
    got = {e["attributes"]["tps.trajectory_id"] for e in evaluations}
    assert len(evaluations) == len(records), [(t, r.stop_reason.value) for t, r in records.items() if t not in got]
    scored = sum(len(expected_score_names(r, RULES)) for r in records.values())
    deadline = time.monotonic() + 30
    while (n := check_scores(client, pipe.project, spans, evaluations, records, world)) < scored:
        assert time.monotonic() < deadline, (n, scored)
        time.sleep(0.5)
    assert n == scored  # each rule x usable predictor on each scored run's root span, one name each
    status = pipe.annotations.status()
    assert status["pending"] == 0 and status["failed_attempts"] == 0 and status["dropped"] == 0
    pipe.acc.close()


@pytest.mark.load  # a fault campaign: `make test-load`
def test_backend_down_mid_run_then_back(phoenix, world, tmp_path):
    """Phoenix stops mid-run and restarts: annotations are retried and land; the sink has every run."""
    pipe = Pipeline(phoenix, tmp_path, "spans")
    tasks = list(world)
    first, second = Subset(tasks[:8]), Subset(tasks[8:])
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(pipe.provider, hide_inputs=True):
        pipe.run(agent, inputs, first)
        pipe.processor.force_flush()
        pipe.provider.force_flush()
        assert pipe.annotations.flush(30)
        # Phoenix inserts in the background: wait until the first half is stored before the outage.
        # (A clean run's evaluation waits for its outcome, which comes during the outage.)
        before = sum(r.stop_reason is not StopReason.CLEAN for r in sink_records(pipe.sink).values())
        client, _, stored = read_back(phoenix, pipe.project, before)
        assert len(stored) == before
        stored_roots = {e["parent_id"] for e in stored}
        sent = pipe.annotations.status()["sent"]
        assert wait_for_annotations(client, pipe.project, stored_roots, sent) == sent
        phoenix.stop()
        pipe.record_outcomes(first)  # these annotations now fail and are kept for retry
        pipe.run(agent, inputs, second)
        pipe.record_outcomes(second)
        time.sleep(1.0)
        down = pipe.annotations.status()
        phoenix.start()
    assert down["failed_attempts"] >= 1 and down["pending"] > 0 and down["outages"] == 1
    assert "Error" in (down["last_error"] or "")
    assert pipe.annotations.flush(60)
    status = pipe.annotations.status()
    assert status["pending"] == 0 and status["dropped"] == 0 and status["sent"] > down["pending"]
    # The durable record has every run of both halves, and its scores are the exported ones.
    records = sink_records(pipe.sink)
    assert set(records) == set(world.tasks)
    # Every first-half root was stored before the outage; the annotations of its outcomes,
    # queued while Phoenix was down, must all be on those roots now, equal to the record's.
    # (The second half's spans were sent during the outage; the SDK's OTLP exporter gives up
    # on them after its retries, which is why the JSON Lines sink is the durable record.)
    roots = {pipe.processor.links.get(t).span_hex: records[t] for t in first.tasks}
    want = len(roots) + sum(len(expected_score_names(r, RULES)) for r in roots.values())
    assert wait_for_annotations(client, pipe.project, set(roots), want) == want
    annotations = client.spans.get_span_annotations(span_ids=list(roots), project_identifier=pipe.project, limit=10_000)
    assert check_annotations(annotations, roots, world) == want - len(roots)
    pipe.acc.close()
