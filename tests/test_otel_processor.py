"""TPSSpanProcessor on hand-made spans on the real OpenTelemetry SDK: ordering, its own attributes,
evaluation spans, malformed attributes, root matching, threads. The real instrumentors on real
LangChain runtimes, against the LangChain handler, are tests/test_constructs.py."""

from __future__ import annotations

import json
import math
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from tps_tracer import Accumulator
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.records.stop_reasons import StopReason

# ---------------------------------------------------------------- hand-made spans on the real SDK


def _provider(**kw) -> tuple[TracerProvider, TPSSpanProcessor, Accumulator]:
    acc = Accumulator(bootstrap=0)
    processor = TPSSpanProcessor(acc, background=False, **kw)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider, processor, acc


def test_out_of_order_spans_and_own_attributes():
    """A root that ends before its LLM spans, LLM spans that end in reverse order, tps.* attributes."""
    provider, processor, acc = _provider()
    tracer = provider.get_tracer("app")
    sink: list = []
    acc.add_listener(sink.append)
    root = tracer.start_span(
        "agent", attributes={"tps.trajectory_id": "run-1", "tps.stop_reason": "max_steps", "tps.horizon": 9}
    )
    from opentelemetry import trace

    ctx = trace.set_span_in_context(root)
    first = tracer.start_span("llm", context=ctx, attributes={"tps.forecasts": json.dumps({"verbal": 0.2})})
    time.sleep(0.001)
    second = tracer.start_span("llm", context=ctx, attributes={"tps.forecasts": json.dumps({"verbal": 0.7})})
    root.end()  # before its children
    assert processor.n_open == 1 and not sink
    second.end()
    first.end()  # the last open span of the trace: now the trajectory is finished
    assert processor.n_open == 0
    (score,) = sink
    assert score.trajectory_id == "run-1" and score.stop_reason is StopReason.MAX_STEPS
    assert (score.n_steps, score.horizon) == (2, 9)
    # Steps in start order: verbal 0.2 then 0.7. Log rule, linear-front over T=9: w_t = 2(T-t+1)/(T(T+1)).
    w = [2 * (9 - t + 1) / (9 * 10) for t in (1, 2)]
    s0 = w[0] * math.log(0.8) + w[1] * math.log(0.3)
    assert score.primary("verbal", "log", "linear-front").value == pytest.approx(s0, abs=1e-12)


def test_evaluation_spans_are_skipped_and_memory_is_bounded():
    clock = [0.0]
    provider, processor, acc = _provider(max_open_traces=3, idle_timeout=10.0, clock=lambda: clock[0])
    tracer = provider.get_tracer("app")
    own = provider.get_tracer("tps_tracer")
    own.start_span("tps.evaluation").end()
    assert processor.n_open == 0 and not any(processor.health.snapshot().values())
    from opentelemetry import trace

    roots = [tracer.start_span(f"agent-{i}", attributes={"tps.trajectory_id": f"r{i}"}) for i in range(5)]
    for r in roots:
        tracer.start_span(
            "llm", context=trace.set_span_in_context(r), attributes={"tps.forecasts": '{"verbal": 0.5}'}
        ).end()
    # More open traces than max_open_traces: none is cut short (the two oldest used to be evicted).
    assert processor.n_open == 5 and processor.health.get("abandoned") == 0
    # Idle traces: no span event for idle_timeout seconds (their last one was at clock 0).
    assert processor.sweep(now=9.0) == 0
    assert processor.sweep(now=10.0) == 5
    assert processor.n_open == 0
    snap = acc.snapshot()
    assert snap["online"]["finished"] == 5
    assert snap["audit"]["stop_reasons"]["capture_lost"] == 5
    assert processor.health.get("abandoned", "idle") == 5
    for r in roots:  # their late ends are counted, not turned into trajectories
        r.end()
    assert processor.health.get("dropped", "abandoned_run_event") == 5
    assert processor.health.get("ignored", "late_spans") == 0


def test_malformed_attributes_are_counted_never_raised():
    provider, processor, acc = _provider()
    tracer = provider.get_tracer("app")
    from opentelemetry import trace

    root = tracer.start_span("agent", attributes={"tps.trajectory_id": "bad", "tps.horizon": "many"})
    ctx = trace.set_span_in_context(root)
    tracer.start_span(
        "llm",
        context=ctx,
        attributes={
            "openinference.span.kind": "LLM",
            "output.value": "{not json",
            "llm.output_messages.0.message.content": "no confidence",
        },
    ).end()
    tracer.start_span("llm", context=ctx, attributes={"tps.forecasts": '{"verbal": "high"}'}).end()
    root.set_status(Status(StatusCode.ERROR))
    root.end()
    snap = acc.snapshot()
    assert snap["online"]["finished"] == 1
    assert snap["online"]["rejected"] == {"invalid_forecast": 1}
    assert not processor.errors  # the feeder shares the processor's ledger
    assert snap["audit"]["stop_reasons"]["other"] == 1  # an error without a known exception type


def test_root_matcher_finds_the_agent_inside_a_request_span():
    provider, processor, acc = _provider(root_matcher=lambda span: span.name == "agent")
    tracer = provider.get_tracer("app")
    from opentelemetry import trace

    request = tracer.start_span("POST /ask")
    for i in range(2):  # two agent runs inside one request: two trajectories
        agent = tracer.start_span("agent", context=trace.set_span_in_context(request))
        tracer.start_span(
            "llm",
            context=trace.set_span_in_context(agent),
            attributes={"tps.forecasts": json.dumps({"verbal": 0.1 + i / 2})},
        ).end()
        agent.end()
    request.end()
    trace_hex = f"{request.get_span_context().trace_id:032x}"
    assert set(acc._rows.row_of) == {trace_hex, trace_hex + "-1"}
    assert processor.n_open == 0


def test_spans_handed_off_from_many_threads_all_land_scored():
    """Background mode: on_start / on_end only queue the span; the worker's bookkeeping must
    still group 8 threads x 25 interleaved runs correctly (checked against a closed form)."""
    import threading

    from opentelemetry import trace

    acc = Accumulator(bootstrap=0)
    processor = TPSSpanProcessor(acc)  # background=True: the worker does the bookkeeping
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    sink: list = []
    acc.add_listener(sink.append)
    T = 4

    def forecasts(t: int, k: int) -> list[float]:
        return [round(0.05 + 0.9 * ((7 * t + 3 * k + i) % 10) / 10, 2) for i in range(3)]

    def agent(t: int) -> None:
        for k in range(25):
            root = tracer.start_span(
                "agent", attributes={"tps.trajectory_id": f"t{t}-{k}", "tps.stop_reason": "max_steps", "tps.horizon": T}
            )
            ctx = trace.set_span_in_context(root)
            for p in forecasts(t, k):
                tracer.start_span("chain", context=ctx).end()
                tracer.start_span("llm", context=ctx, attributes={"tps.forecasts": json.dumps({"verbal": p})}).end()
                time.sleep(0)
            root.end()

    threads = [threading.Thread(target=agent, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert processor.force_flush()
    assert len(sink) == 200 and processor.n_open == 0 and not processor.errors
    w = [2 * (T - t + 1) / (T * (T + 1)) for t in range(1, T + 1)]  # linear-front, normalised over T
    for score in sink:
        t, k = (int(x) for x in score.trajectory_id[1:].split("-"))
        # censored: the q_Z ~ 0 branch, over the 3 of T=4 steps taken (weights truncated, not renormalised)
        expected = sum(wi * math.log(1 - p) for wi, p in zip(w[:3], forecasts(t, k), strict=True))
        assert score.stop_reason is StopReason.MAX_STEPS and score.n_steps == 3
        assert score.primary("verbal", "log", "linear-front").value == pytest.approx(expected, abs=1e-12)
    processor.shutdown()
