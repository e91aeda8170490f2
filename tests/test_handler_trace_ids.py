"""Records written by the LangChain handler carry the run's OpenTelemetry trace and span ids (issue 31).

Real LangGraph agents on the simulated world, the real OpenTelemetry SDK: with OpenInference
instrumenting LangChain, each record names the agent root span the span processor links the
run to (the same names, `otel_trace_id` / `otel_span_id`); with only an enclosing span of the
application's own, it names that span; with no span current, nothing.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import agent_for, instrumented, run_tasks
from world_check import new_accumulator, sink_records

from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.sim.world import AgentWorld, WorldConfig


@pytest.fixture(scope="module")
def world() -> AgentWorld:
    return AgentWorld(6, seed=3, config=WorldConfig(malformed_rate=0.1, tool_failure_rate=0.05))


def test_records_name_the_agent_root_span_the_processor_links(world, tmp_path):
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    processor = TPSSpanProcessor(None, capture=False)  # links only: capture is the handler's
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    with instrumented(provider):
        run_tasks(agent, inputs, world, [handler], metadata={"tps_horizon": 6}, recursion_limit=12)
    handler.flush()
    acc.close()
    roots = {s.context.trace_id: s for s in spans.get_finished_spans() if s.parent is None}
    records = sink_records(sink)
    assert set(records) == set(world.tasks) and len(roots) == len(records)  # a trace of its own per run
    for tid, rec in records.items():
        link = processor.links.get(tid)
        assert link is not None
        assert rec.metadata["otel_trace_id"] == link.trace_hex and rec.metadata["otel_span_id"] == link.span_hex
        root = roots[int(rec.metadata["otel_trace_id"], 16)]
        assert root.name == "LangGraph" and root.context.span_id == link.span_id


def test_records_name_the_enclosing_span_without_an_instrumentor(world, tmp_path):
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("the-application")
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    for task in world:
        with tracer.start_as_current_span(f"request {task.task_id}"):
            run_tasks(agent, inputs, [task], [handler], metadata={"tps_horizon": 6}, recursion_limit=12)
    handler.flush()
    acc.close()
    requests = {s.name.removeprefix("request "): s for s in spans.get_finished_spans()}
    records = sink_records(sink)
    assert set(records) == set(requests)
    for tid, rec in records.items():
        ctx = requests[tid].context
        assert rec.metadata["otel_trace_id"] == f"{ctx.trace_id:032x}"
        assert rec.metadata["otel_span_id"] == f"{ctx.span_id:016x}"


def test_without_a_current_span_records_carry_no_ids(world, tmp_path):
    import opentelemetry.trace  # loaded, as in most processes (LangSmith imports it), but no span current

    assert not opentelemetry.trace.get_current_span().get_span_context().is_valid
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc)
    agent, inputs, _, _ = agent_for("prebuilt", world)
    run_tasks(agent, inputs, world, [handler], metadata={"tps_horizon": 6}, recursion_limit=12)
    handler.flush()
    acc.close()
    records = sink_records(sink)
    assert set(records) == set(world.tasks)
    for rec in records.values():
        assert "otel_trace_id" not in rec.metadata and "otel_span_id" not in rec.metadata
