"""otel/span_reading.py (attrs_of, events_of): the capture worker reads ended spans through the SDK's own containers.

The SDK's public `attributes` (a mapping proxy whose `get` raises and catches a KeyError per
absent key) and `events` (a new tuple per access) cost microseconds per question, and the
worker asks each span several. These tests pin that the fast views give the same contents,
fall back to the public properties for other span implementations, and that a whole run
through the real SDK and TPSSpanProcessor touches neither public property while writing
the record the spans describe.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import Status, StatusCode
from world_check import new_accumulator, sink_records

from tps_tracer.capture.verbal_confidence import VerbalConfidenceExtractor
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.otel.span_reading import attrs_of, events_of


def _ended_span(**attributes):
    tracer = TracerProvider().get_tracer("t")
    span = tracer.start_span("s", attributes=attributes)
    span.add_event("exception", {"exception.type": "ValueError", "exception.message": "bad"})
    span.add_event("note")
    span.end()
    return span


def test_an_sdk_spans_attributes_and_events_are_read_without_copies():
    span = _ended_span(a=1, b="two")
    attrs = attrs_of(span)
    assert type(attrs) is dict and attrs == {"a": 1, "b": "two"} == dict(span.attributes)
    assert attrs_of(span) is attrs  # the span's own dict, not a copy per call
    events = events_of(span)
    assert [e.name for e in events] == ["exception", "note"] == [e.name for e in span.events]
    assert events[0].attributes["exception.type"] == "ValueError"


def test_other_span_implementations_are_read_through_their_public_properties():
    # A ReadableSpan built directly (as importers of exported traces do): a plain dict, a tuple.
    plain = ReadableSpan(name="r", attributes={"k": "v"}, events=())
    assert dict(attrs_of(plain)) == {"k": "v"}
    assert list(events_of(plain)) == []
    duck = SimpleNamespace(attributes={"x": 2}, events=[SimpleNamespace(name="e")])
    assert attrs_of(duck) == {"x": 2}
    assert [e.name for e in events_of(duck)] == ["e"]
    empty = SimpleNamespace(attributes=None, events=None)
    assert attrs_of(empty) == {} and list(events_of(empty)) == []


@pytest.fixture
def counted_public_reads(monkeypatch):
    """Count every read of ReadableSpan.attributes / .events (the SDK's Span inherits both)."""
    reads = {"attributes": 0, "events": 0}
    for name in reads:
        original = getattr(ReadableSpan, name)

        def counting(self, _name=name, _original=original):
            reads[_name] += 1
            return _original.fget(self)

        monkeypatch.setattr(ReadableSpan, name, property(counting))
    return reads


def test_a_run_through_the_processor_reads_no_public_span_property(tmp_path, counted_public_reads):
    acc, path = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc, background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("agent")
    texts = ["I will search. <confidence>0.8</confidence>", "Done. <confidence>0.3</confidence>"]
    root = tracer.start_span("agent", attributes={"metadata": json.dumps({"tps_trajectory_id": "run-1"})})
    ctx = trace.set_span_in_context(root)
    for i, text in enumerate(texts):
        output = {"generations": [[{"text": text, "generation_info": {}, "type": "ChatGeneration"}]]}
        attrs = {"openinference.span.kind": "LLM", "output.value": json.dumps(output)}
        tracer.start_span("llm", context=ctx, attributes=attrs).end()
        if i == 0:  # a tool that failed (an exception event, status ERROR): counted as a tool error
            tool = tracer.start_span("search", context=ctx, attributes={"openinference.span.kind": "TOOL"})
            tool.record_exception(RuntimeError("down"))
            tool.set_status(Status(StatusCode.ERROR))
            tool.end()
    root.end()
    processor.force_flush()
    acc.close()
    assert counted_public_reads == {"attributes": 0, "events": 0}
    record = sink_records(path)["run-1"]
    reader = VerbalConfidenceExtractor()
    assert [s.forecasts["verbal"] for s in record.steps] == [reader.from_text(t).value for t in texts] == [0.8, 0.3]
    assert record.stop_reason.value == "clean"
    assert record.metadata["tool_errors"] == 1
    assert record.metadata["otel_trace_id"] == f"{root.context.trace_id:032x}"
