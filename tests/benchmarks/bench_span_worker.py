"""Where the span processor's CPU goes: on the emitting thread, on the capture worker, or inline.

The loop of bench_capture_cost.py's OpenTelemetry part (the real SDK, OpenInference spans: an
agent root, 6 LLM spans without logprobs and 5 TOOL spans per trace, 8 traces per round), run
through a no-op processor and TPSSpanProcessor in three ways, interleaved round by round:

- inline: background=False, everything on the emitting thread;
- worker: the default, span events handed to the capture worker;
- worker, held: the worker is kept waiting until the round's spans are all emitted, so it
  never runs beside the emitting thread (a slowdown caused by running beside it would vanish).

Per model call, medians over rounds: process CPU added over the no-op, the emitting thread's
CPU added, the worker thread's own CPU (time.thread_time, read by a job run on the worker),
voluntary / involuntary context switches of each thread (getrusage RUSAGE_THREAD: a GIL
hand-off per event would show here), and cyclic GC collections per 100 calls.

    PYTHONPATH=$PWD .venv/bin/python tests/benchmarks/bench_span_worker.py [--rounds 9]
        [--switch-interval 0.005] [--no-gc]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import sys
import threading
import time
from typing import Any

from bench_capture_cost import STEPS, _llm_attributes
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from tps_tracer import Accumulator
from tps_tracer.otel import TPSSpanProcessor

RUNS = 8
TEXT = "".join(f"tok{i} " if i != 150 else "<confidence>0.7</confidence>" for i in range(300))
TOOL = {"openinference.span.kind": "TOOL", "tool.name": "search", "output.value": "clue"}
MODES = ("no-op", "inline", "worker", "worker, held")


def _thread_usage() -> tuple[float, int, int]:
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return time.thread_time(), ru.ru_nvcsw, ru.ru_nivcsw


def _on_worker(processor: TPSSpanProcessor) -> tuple[float, int, int]:
    """The worker thread's own CPU and context switches so far (read there, by a queued job)."""
    box: list[tuple[float, int, int]] = []
    processor.feeder.call(lambda: box.append(_thread_usage()), "bench")
    processor.force_flush()
    return box[0]


def one_round(mode: str, provider: TracerProvider, processor: TPSSpanProcessor | None, tag: str, gcs: list[int]):
    tracer = provider.get_tracer("bench")
    llm = _llm_attributes(TEXT, None)
    gc.collect()
    on_worker = processor is not None and mode.startswith("worker")
    w0 = _on_worker(processor) if on_worker else None
    gc_before = sum(gcs)
    a0 = _thread_usage()
    t0 = time.process_time()
    held = threading.Event()
    if mode == "worker, held":
        processor.feeder.call(held.wait, "bench")
    for i in range(RUNS):
        meta = json.dumps({"tps_trajectory_id": f"{tag}-{i}"})
        root = tracer.start_span("agent", attributes={"openinference.span.kind": "CHAIN", "metadata": meta})
        ctx = trace.set_span_in_context(root)
        for s in range(STEPS):
            tracer.start_span("ChatModel", context=ctx, attributes=llm).end()
            if s < STEPS - 1:
                tracer.start_span("search", context=ctx, attributes=TOOL).end()
        root.end()
    a1 = _thread_usage()
    held.set()
    if processor is not None:
        processor.force_flush()
    total = time.process_time() - t0
    n = RUNS * STEPS
    out = {
        "process": total / n,
        "emitting thread": (a1[0] - a0[0]) / n,
        "emitting csw vol": (a1[1] - a0[1]) / n,
        "emitting csw invol": (a1[2] - a0[2]) / n,
        "gc per 100 calls": 100 * (sum(gcs) - gc_before) / n,
    }
    if w0 is not None:
        w1 = _on_worker(processor)
        out["worker thread"] = (w1[0] - w0[0]) / n
        out["worker csw vol"] = (w1[1] - w0[1]) / n
        out["worker csw invol"] = (w1[2] - w0[2]) / n
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval (s)")
    ap.add_argument("--no-gc", action="store_true", help="the cyclic GC off (gc.disable) for the whole run")
    args = ap.parse_args(argv)
    if args.rounds < 5:
        ap.error("--rounds must be >= 5 (medians of at least 5 interleaved runs)")
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    gcs = [0]

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gcs[0] += 1

    gc.callbacks.append(count)
    setups: dict[str, tuple[TracerProvider, TPSSpanProcessor | None]] = {}
    for mode in MODES:
        provider = TracerProvider()
        processor = None if mode == "no-op" else TPSSpanProcessor(Accumulator(bootstrap=0), background=mode != "inline")
        provider.add_span_processor(processor if processor is not None else SpanProcessor())
        setups[mode] = (provider, processor)
    if args.no_gc:
        gc.disable()
    rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for r in range(args.rounds + 1):  # round 0 warms up, not kept
        for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
            provider, processor = setups[mode]
            got = one_round(mode, provider, processor, f"r{r}", gcs)
            if r:
                rows[mode].append(got)
    print(
        f"TPSSpanProcessor, no logprobs, per model call, median of {args.rounds} interleaved rounds "
        f"(switch interval {sys.getswitchinterval() * 1e3:g} ms, GC {'off' if args.no_gc else 'on'})"
    )
    noop = [row["process"] for row in rows["no-op"]]
    header = f"  {'mode':<14} {'process':>8} {'added':>7} {'emitting+':>9} {'worker':>7}"
    print(header + "  csw vol/invol (emit; worker)  gc/100")
    for mode in MODES:
        xs = rows[mode]

        def med(key: str, xs: list[dict[str, float]] = xs) -> float:
            return statistics.median(x.get(key, float("nan")) for x in xs)

        added = statistics.median(x["process"] - b for x, b in zip(xs, noop, strict=True))
        emitting = statistics.median(x["emitting thread"] - b for x, b in zip(xs, noop, strict=True))
        print(
            f"  {mode:<14} {med('process') * 1e6:8.1f} {added * 1e6:7.1f} {emitting * 1e6:9.1f}"
            f" {med('worker thread') * 1e6:7.1f}  {med('emitting csw vol'):.2f}/{med('emitting csw invol'):.2f};"
            f" {med('worker csw vol'):.2f}/{med('worker csw invol'):.2f}"
            f"{'':9}{med('gc per 100 calls'):6.1f}"
        )
    for _, processor in setups.values():
        if processor is not None:
            processor.shutdown()


if __name__ == "__main__":
    main()
