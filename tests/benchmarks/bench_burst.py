"""Bursts of concurrent runs through both adapters: wall time, process CPU and peak RSS, beside a
no-op baseline measured in the same run (the lossless-capture issue).

Each case runs in its own subprocess (so peak RSS is the case's own) and checks every record
(burst_support.check_burst_records: one whole clean record per run). Variants are interleaved
and repeated; medians are printed with the ratio to the no-op baseline of the same burst.

    .venv/bin/python tests/benchmarks/bench_burst.py                 # 10,000 and 50,000 runs, 200,000 traces
    .venv/bin/python tests/benchmarks/bench_burst.py --quick         # 2,000 runs, 20,000 traces, 1 round
    .venv/bin/python tests/benchmarks/bench_burst.py --case async:50000 --case threads:50000:64 \
        --tool-turns 0 --logprob-tokens 5 --max-open 1000 --rounds 1 --no-baseline   # the 50k tests' bursts

--tool-turns / --logprob-tokens shape each run (default: one tool call, no logprobs); --max-open
is passed to the TPS handler and span processor; --no-baseline skips the no-op variant (a 50k
burst costs minutes of CPU: measure the baseline once, not every time).
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
tool_turns, logprob_tokens, max_open = {tool_turns}, {logprob_tokens}, {max_open}
kw = {{}} if max_open is None else {{"max_open_traces" if kind == "otel" else "max_open": max_open}}
out = tempfile.mkdtemp()
if kind == "otel":
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    provider = TracerProvider()
    if variant == "tps":
        from tps_tracer import Accumulator
        from tps_tracer.otel import TPSSpanProcessor
        acc = Accumulator(bootstrap=0, sink=out + "/runs.jsonl")
        adapter = TPSSpanProcessor(acc, **kw)
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
        adapter = TPSCallbackHandler(acc, **kw)
    else:
        adapter = BaseCallbackHandler()
    agent = burst_agent(logprob_tokens=logprob_tokens, tool_turns=tool_turns)
    c0 = time.process_time()
    wall = run_async_burst(agent, adapter, n) if kind == "async" else run_thread_burst(agent, adapter, n, threads)
    if variant == "tps":
        adapter.flush()
cpu = time.process_time() - c0
t1 = time.perf_counter()
if variant == "tps":
    acc.close()
    from world_check import sink_records
    check_burst_records(sink_records(out + "/runs.jsonl"), n, 1 if kind == "otel" else tool_turns)
    waits = adapter.feeder.waits
else:
    waits = 0
print(json.dumps({{"wall": wall, "cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "waits": waits}}))
"""


def run_case(kind: str, n: int, threads: int, variant: str, shape: dict[str, int | None]) -> dict[str, float]:
    code = CASE.format(tests=str(TESTS), kind=kind, n=n, threads=threads, variant=variant, **shape)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {n} {variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--case", action="append", default=[], help="kind:n[:threads], kind async, threads or otel")
    ap.add_argument("--tool-turns", type=int, default=1)
    ap.add_argument("--logprob-tokens", type=int, default=0)
    ap.add_argument("--max-open", type=int, default=None)
    ap.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()
    shape = {"tool_turns": args.tool_turns, "logprob_tokens": args.logprob_tokens, "max_open": args.max_open}
    variants = ("tps",) if args.no_baseline else ("noop", "tps")
    if args.case:
        cases = []
        for spec in args.case:
            kind, n, *rest = spec.split(":")
            cases.append((kind, int(n), int(rest[0]) if rest else (64 if kind == "threads" else 1)))
        rounds = args.rounds or 5
    elif args.quick:
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
        results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        for _ in range(rounds):
            for variant in variants:  # interleaved
                results[variant].append(run_case(kind, n, threads, variant, shape))
        med = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in results.items()}
        label = f"{kind} {n:,}" + (f" x{threads}" if kind != "async" else "")
        for variant in variants:
            m = med[variant]
            ratio = f"{m['cpu'] / med['noop']['cpu']:.2f}x" if "noop" in med else "-"
            cols = f"{m['wall']:8.1f} {m['cpu']:8.1f} {m['rss_mb']:7.0f} {m['waits']:7.0f}"
            print(f"{label:<22} {variant:<6} {cols}  {ratio}")
        sys.stdout.flush()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
