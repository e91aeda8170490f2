"""A run's `tps.evaluation` span sent live and again by `tps-tracer export --to otlp` is one span (issue 31).

A LangGraph agent instrumented by OpenInference runs on the real OpenTelemetry SDK; the span
processor captures it, and the live `EvaluationSpanExporter` sends each run's evaluation span
once its score is known (late grades for clean runs, a late q_Z for budget stops). Later the
records file is exported again, twice, by the code `export --to otlp` runs, on another
process's provider (its own random id generator). A store keyed by span id (Phoenix ignores a
span id it holds) must see no new span: every exported span has the id of the live one.
"""

from __future__ import annotations

import zlib

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import agent_for, instrumented, run_tasks

from tps_tracer import Accumulator
from tps_tracer.otel import EvaluationSpanExporter, TPSSpanProcessor
from tps_tracer.otel.backends import export_records
from tps_tracer.otel.evaluations import EVALUATION_SPAN
from tps_tracer.otel.trace_links import TraceLinks
from tps_tracer.records.jsonl import read_trajectories
from tps_tracer.sim.world import AgentWorld, WorldConfig

HORIZON = 6


def evaluation_spans(exporter: InMemorySpanExporter) -> dict[tuple[int, int], str]:
    """(trace id, span id) -> trajectory id of every evaluation span sent."""
    return {
        (s.context.trace_id, s.context.span_id): s.attributes["tps.trajectory_id"]
        for s in exporter.get_finished_spans()
        if s.name == EVALUATION_SPAN
    }


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("span-ids")
    world = AgentWorld(12, seed=11, config=WorldConfig(malformed_rate=0.08, tool_failure_rate=0.04))
    sent = InMemorySpanExporter()
    provider = TracerProvider()
    acc = Accumulator(sink=str(tmp / "runs.jsonl"), bootstrap=0)
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(sent))
    acc.add_listener(EvaluationSpanExporter(provider, processor.links))
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(provider, hide_inputs=True):
        run_tasks(agent, inputs, world, [], metadata={"tps_horizon": HORIZON}, recursion_limit=2 * HORIZON)
    processor.force_flush()
    acc.flush()
    for record in read_trajectories(tmp / "runs.jsonl"):  # the grades and q_z, after the runs
        tid = record.trajectory_id
        if record.stop_reason.value == "clean":
            processor.record_outcome(tid, success=bool(world.tasks[tid].outcome))
        elif record.stop_reason.value == "max_steps":
            processor.record_outcome(tid, q_z=0.1 + 0.8 * (zlib.crc32(tid.encode()) % 97) / 97)
    processor.force_flush()
    acc.close()
    return evaluation_spans(sent), tmp / "runs.jsonl"


def test_exporting_again_sends_the_live_spans_ids(live):
    live_spans, runs = live
    records = read_trajectories(runs)
    reasons = {r.stop_reason.value for r in records}
    assert {"clean", "max_steps"} <= reasons and reasons - {"clean", "max_steps"}
    assert sorted(live_spans.values()) == sorted(r.trajectory_id for r in records)  # one live span per run
    for attempt in range(2):
        later = InMemorySpanExporter()
        provider = TracerProvider()  # another process: its own random ids
        provider.add_span_processor(SimpleSpanProcessor(later))
        summary = export_records(records, EvaluationSpanExporter(provider, TraceLinks()))
        assert len(summary.exported) == len(records) and not summary.pending_outcome
        assert evaluation_spans(later) == live_spans, f"export {attempt + 1} made spans the live export did not"


def test_a_changed_score_is_a_new_span_and_other_spans_keep_random_ids():
    """A late q_Z that gives an exact-censoring exporter its headline is a new span (new id);
    spans of the same provider and scope not sent by the exporter keep the provider's ids."""
    sent = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    acc = Accumulator(bootstrap=0)
    acc.add_listener(EvaluationSpanExporter(provider, TraceLinks(), censoring="exact"))
    link = {"otel_trace_id": f"{7:032x}", "otel_span_id": f"{9:016x}"}
    for p in (0.8, 0.6):
        acc.observe("r", {"verbal": p})
    acc.stop("r", "max_steps", 4, link)  # exact censoring needs q_Z: sent without a score
    acc.resolve("r", q_z=0.5)  # now with one: another span
    acc.resolve("r", q_z=0.5)  # the same again: nothing
    acc.close()
    spans = [s for s in sent.get_finished_spans() if s.name == EVALUATION_SPAN]
    assert [("gen_ai.evaluation.score.value" in s.attributes) for s in spans] == [False, True]
    assert spans[0].context.span_id != spans[1].context.span_id
    tracer = provider.get_tracer("tps_tracer")  # another user of the same provider and scope
    others = set()
    for _ in range(3):
        with tracer.start_as_current_span("other") as span:
            others.add(span.get_span_context().span_id)
    assert len(others) == 3 and not others & {s.context.span_id for s in spans}
