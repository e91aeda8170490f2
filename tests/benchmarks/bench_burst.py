"""Bursts of concurrent runs through both adapters: wall time, process CPU and peak RSS, beside a
no-op baseline measured in the same run (the lossless-capture issue).

Each case runs in its own subprocess (so peak RSS is the case's own) and checks every record
(burst_support.check_burst_records: one whole clean record per run). Variants are interleaved
and repeated; medians are printed with the ratio to the no-op baseline of the same burst.

    .venv/bin/python tests/benchmarks/bench_burst.py                 # 10,000 and 50,000 runs, 200,000 traces
    .venv/bin/python tests/benchmarks/bench_burst.py --quick         # 2,000 runs, 20,000 traces, 1 round
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CASE = r"""
import json, resource, sys, time, tempfile
sys.path.insert(0, {tests!r})
from burst_support import *
kind, n, threads, variant = {kind!r}, {n}, {threads}, {variant!r}
out = tempfile.mkdtemp()
if kind == "otel":
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    provider = TracerProvider()
    if variant == "tps":
        from tps_tracer import Accumulator
        from tps_tracer.otel import TPSSpanProcessor
        acc = Accumulator(bootstrap=0, sink=out + "/runs.jsonl")
        adapter = TPSSpanProcessor(acc)
    else:
        adapter = SpanProcessor()
    provider.add_span_processor(adapter)
    c0 = time.process_time()
    wall = run_trace_burst(provider.get_tracer("app"), n, threads)
    if variant == "tps":
        adapter.force_flush()
else:
    from langchain_core.callbacks import BaseCallbackHandler
    if variant == "tps":
        from tps_tracer import Accumulator
        from tps_tracer.langchain import TPSCallbackHandler
        acc = Accumulator(bootstrap=0, sink=out + "/runs.jsonl")
        adapter = TPSCallbackHandler(acc)
    else:
        adapter = BaseCallbackHandler()
    agent = burst_agent()
    c0 = time.process_time()
    wall = run_async_burst(agent, adapter, n) if kind == "async" else run_thread_burst(agent, adapter, n, threads)
    if variant == "tps":
        adapter.flush()
cpu = time.process_time() - c0
t1 = time.perf_counter()
if variant == "tps":
    acc.close()
    from world_check import sink_records
    check_burst_records(sink_records(out + "/runs.jsonl"), n)
    waits = adapter.feeder.waits
else:
    waits = 0
print(json.dumps({{"wall": wall, "cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "waits": waits}}))
"""


def run_case(kind: str, n: int, threads: int, variant: str) -> dict[str, float]:
    code = CASE.format(tests=str(TESTS), kind=kind, n=n, threads=threads, variant=variant)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {n} {variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    if args.quick:
        cases = [("async", 2_000, 1), ("threads", 2_000, 64), ("otel", 20_000, 1), ("otel", 20_000, 4)]
        rounds = args.rounds or 1
    else:
        cases = [
            ("async", 10_000, 1),
            ("async", 50_000, 1),
            ("threads", 10_000, 64),
            ("threads", 50_000, 64),
            ("otel", 200_000, 1),
            ("otel", 200_000, 4),
        ]
        rounds = args.rounds or 5
    print(f"{'burst':<22} {'variant':<6} {'wall s':>8} {'cpu s':>8} {'rss MB':>7} {'waits':>7}  ratio (cpu) to no-op")
    for kind, n, threads in cases:
        results: dict[str, list[dict[str, float]]] = {"noop": [], "tps": []}
        for _ in range(rounds):
            for variant in ("noop", "tps"):  # interleaved
                results[variant].append(run_case(kind, n, threads, variant))
        med = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in results.items()}
        label = f"{kind} {n:,}" + (f" x{threads}" if kind != "async" else "")
        for variant in ("noop", "tps"):
            m = med[variant]
            ratio = m["cpu"] / med["noop"]["cpu"]
            cols = f"{m['wall']:8.1f} {m['cpu']:8.1f} {m['rss_mb']:7.0f} {m['waits']:7.0f}"
            print(f"{label:<22} {variant:<6} {cols}  {ratio:.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
