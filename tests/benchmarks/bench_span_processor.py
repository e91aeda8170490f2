"""Cost of TPSSpanProcessor on the agent's path (issue target: ~1 us per non-agent span in on_end).

Two measurements on the real OpenTelemetry SDK, medians of repeated rounds:

1. Direct: the processor's on_start + on_end for ready spans of synthetic agent traces
   (a root, N_OTHER plain spans such as chains/retrievers/HTTP, N_LLM OpenInference LLM
   spans whose `output.value` is a 300-token LLMResult with top-5 logprobs). The same loop
   through a no-op SpanProcessor is the baseline; the difference is what the processor adds.
   Decoding the JSON and scoring happen on the feeder worker, timed separately (`flush`).
2. End to end: creating and ending the same spans through a TracerProvider with no
   processor, with a no-op processor, with the TPS processor's agent path only, and with
   all its work (the loop, then the flush that waits for bookkeeping and scoring).

on_start and on_end only put the span on the worker's queue; the bench also times the
worker's per-span bookkeeping (replayed in this thread) and the scoring per LLM span, both
off the agent's path. On the machine this was written on a span's start+end in the SDK
costs ~45 us; the script prints it so the ratio can be checked anywhere.

    .venv/bin/python tests/benchmarks/bench_span_processor.py
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import deque
from typing import Any

import numpy as np
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from tps_tracer import Accumulator
from tps_tracer.otel import TPSSpanProcessor

TOKENS = 300
N_OTHER = 200  # plain spans per trace
N_LLM = 10  # model calls per trace
TRACES = 20  # per round
ROUNDS = 9
ALL_WORK = "SDK + TPS, all work"


def _llm_output(rng: np.random.Generator, step: int) -> str:
    content = []
    for i in range(TOKENS):
        top = np.sort(rng.dirichlet(np.ones(5)))[::-1]
        tok = f"tok{i} " if i != 150 else f"<confidence>0.{step % 9 + 1}</confidence>"
        content.append(
            {
                "token": tok,
                "logprob": math.log(top[0]),
                "top_logprobs": [{"token": f"t{j}", "logprob": math.log(p)} for j, p in enumerate(top)],
            }
        )
    text = "".join(e["token"] for e in content)
    gen = {"text": text, "generation_info": {"logprobs": {"content": content}}}
    return json.dumps({"generations": [[gen]]})


class NoOp(SpanProcessor):
    pass


def _attributes(rng: np.random.Generator) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    other = {"openinference.span.kind": "CHAIN", "input.value": "x" * 200, "output.value": "y" * 200}
    llm = [{"openinference.span.kind": "LLM", "output.value": _llm_output(rng, s)} for s in range(N_LLM)]
    return other, llm


def _make_traces(other: dict[str, Any], llm: list[dict[str, Any]], tag: str) -> list[list[ReadableSpan]]:
    """Ended spans (root first), made by an SDK with no processor."""
    provider = TracerProvider()
    tracer = provider.get_tracer("app")
    traces = []
    for k in range(TRACES):
        root = tracer.start_span("agent", attributes={"metadata": json.dumps({"tps_trajectory_id": f"{tag}{k}"})})
        ctx = trace.set_span_in_context(root)
        spans: list[Any] = []
        for i in range(N_OTHER):
            s = tracer.start_span(f"chain{i}", context=ctx, attributes=other)
            s.end()
            spans.append(s)
        for attrs in llm:
            s = tracer.start_span("ChatModel", context=ctx, attributes=attrs)
            s.end()
            spans.append(s)
        root.end()
        traces.append([root, *spans])
    return traces


def _direct(processor: SpanProcessor, traces: list[list[Any]]) -> tuple[float, float, float]:
    """Seconds per span: (on_start, on_end of a plain span, on_end of an LLM span)."""
    t_start = t_other = t_llm = 0.0
    for spans in traces:
        root, children = spans[0], spans[1:]
        t0 = time.perf_counter()
        for s in spans:
            processor.on_start(s)
        t1 = time.perf_counter()
        for s in children[:N_OTHER]:
            processor.on_end(s)
        t2 = time.perf_counter()
        for s in children[N_OTHER:]:
            processor.on_end(s)
        t3 = time.perf_counter()
        processor.on_end(root)
        t_start += t1 - t0
        t_other += t2 - t1
        t_llm += t3 - t2
    n = len(traces)
    return t_start / (n * (N_OTHER + N_LLM + 1)), t_other / (n * N_OTHER), t_llm / (n * N_LLM)


def _end_to_end(provider: TracerProvider, other: dict[str, Any], llm: list[dict[str, Any]], tag: str) -> float:
    """Seconds per span to start and end spans through the SDK."""
    tracer = provider.get_tracer("app")
    t0 = time.perf_counter()
    for k in range(TRACES):
        root = tracer.start_span("agent", attributes={"metadata": json.dumps({"tps_trajectory_id": f"{tag}{k}"})})
        ctx = trace.set_span_in_context(root)
        for i in range(N_OTHER):
            tracer.start_span(f"chain{i}", context=ctx, attributes=other).end()
        for attrs in llm:
            tracer.start_span("ChatModel", context=ctx, attributes=attrs).end()
        root.end()
    return (time.perf_counter() - t0) / (TRACES * (N_OTHER + N_LLM + 1))


def main() -> None:
    rng = np.random.default_rng(0)
    other, llm = _attributes(rng)
    rounds = [_make_traces(other, llm, f"r{r}-") for r in range(ROUNDS)]  # fresh trajectory ids per round
    acc = Accumulator(bootstrap=0)
    tps = TPSSpanProcessor(acc)
    noop = NoOp()
    # The processor's own cost: the same processor with its hand-off to the worker held, so the
    # worker does not run during the loop (with it running, the loop also pays GIL switches to
    # it). The held span events are then replayed in this thread to time the worker's per-span
    # bookkeeping (finishing trajectories is left out there: its cost is the `flush` figure).
    held: list[Any] = []
    own = TPSSpanProcessor(Accumulator(bootstrap=0))
    own._handoff = held.append  # type: ignore[method-assign]
    own.feeder.call = lambda job, where="job": None  # type: ignore[method-assign]
    bookkeeping: list[float] = []

    direct: dict[str, list[tuple[float, float, float]]] = {
        "no-op processor": [],
        "TPS, worker held": [],
        "TPS processor": [],
    }
    flush: list[float] = []
    for traces in rounds:
        direct["no-op processor"].append(_direct(noop, traces))
        direct["TPS, worker held"].append(_direct(own, traces))
        t0 = time.perf_counter()
        for _, fn, span in held:
            fn(span)
        bookkeeping.append((time.perf_counter() - t0) / len(held))
        held.clear()
        direct["TPS processor"].append(_direct(tps, traces))
        t0 = time.perf_counter()
        tps.force_flush()
        flush.append((time.perf_counter() - t0) / (TRACES * N_LLM))

    providers: dict[str, TracerProvider] = {"SDK, no processor": TracerProvider()}
    providers["SDK + no-op processor"] = TracerProvider()
    providers["SDK + no-op processor"].add_span_processor(NoOp())
    # Agent path only: the hand-off discarded by a C call as cheap as the queue put (holding
    # the spans instead would time the garbage collector walking them).
    path_e2e = TPSSpanProcessor(Accumulator(bootstrap=0))
    path_e2e._handoff = deque(maxlen=0).append  # type: ignore[method-assign]
    providers["SDK + TPS, agent path only"] = TracerProvider()
    providers["SDK + TPS, agent path only"].add_span_processor(path_e2e)
    # All work: the loop plus the flush that waits for the worker's bookkeeping and scoring.
    tps_e2e = TPSSpanProcessor(acc_e2e := Accumulator(bootstrap=0))
    all_work = TracerProvider()
    all_work.add_span_processor(tps_e2e)
    e2e: dict[str, list[float]] = {name: [] for name in [*providers, ALL_WORK]}
    spans_per_round = TRACES * (N_OTHER + N_LLM + 1)
    for r in range(ROUNDS):
        for name, provider in providers.items():
            e2e[name].append(_end_to_end(provider, other, llm, f"e{r}-"))
        t0 = time.perf_counter()
        _end_to_end(all_work, other, llm, f"a{r}-")
        tps_e2e.force_flush()
        e2e[ALL_WORK].append((time.perf_counter() - t0) / spans_per_round)

    def med(rows: list[tuple[float, float, float]], i: int) -> float:
        return statistics.median(r[i] for r in rows)

    print(
        f"{TRACES} traces x ({N_OTHER} plain + {N_LLM} LLM spans with {TOKENS}-token logprobs + root), "
        f"{ROUNDS} rounds (median)"
    )
    print(f"{'direct calls, us/span':<26} {'on_start':>9} {'on_end plain':>13} {'on_end LLM':>11}")
    for name, rows in direct.items():
        print(f"{name:<26} {med(rows, 0) * 1e6:9.2f} {med(rows, 1) * 1e6:13.2f} {med(rows, 2) * 1e6:11.2f}")
    added = [med(direct["TPS, worker held"], i) - med(direct["no-op processor"], i) for i in range(3)]
    print(f"{'own cost (held - no-op)':<26} {added[0] * 1e6:9.2f} {added[1] * 1e6:13.2f} {added[2] * 1e6:11.2f}")
    print(f"  (target ~1 us per plain span in on_end: {added[1] * 1e6:.2f} us)")
    print(
        f"Off the path, worker bookkeeping per span event (start or end): {statistics.median(bookkeeping) * 1e6:.2f} us"
    )
    print(
        f"Off the path, feeder worker per LLM span (JSON decode + extraction + scoring): "
        f"{statistics.median(flush) * 1e6:.0f} us"
    )
    base = statistics.median(e2e["SDK, no processor"])
    print(f"\n{'start+end through the SDK':<26} {'us/span':>9} {'x no processor':>15}")
    for name, xs in e2e.items():
        m = statistics.median(xs)
        print(f"{name:<26} {m * 1e6:9.2f} {m / base:15.2f}")
    print(
        "  (the last row is all CPU the processor costs, scoring the 300-token LLM outputs included,\n"
        "   as if the agent never waited; in a real agent the worker runs while the agent waits on I/O)"
    )
    tps.shutdown()
    tps_e2e.shutdown()
    print(
        f"trajectories captured: {acc.n_finished} + {acc_e2e.n_finished} "
        f"(expected {ROUNDS * TRACES} each), "
        f"processor errors: {dict(tps.errors) or 'none'}, health: {tps.health.snapshot()}"
    )


if __name__ == "__main__":
    main()
