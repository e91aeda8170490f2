"""Caller cost of observe / stop / resolve at 1M runs: summary mode beside row mode, same process.

    .venv/bin/python tests/benchmarks/bench_summary_latency.py [--runs 1000000] [--row-runs N]
        [--steps 3] [--bootstrap 0]

One thread runs `--runs` runs (3 steps each, then a clean stop and its outcome) in a tight loop
on a summary-mode accumulator, then the same loop on a row-mode one (`--row-runs`, default the
same; a row costs ~1.5 KB, so 1M rows is ~1.5 GB). For each call: p50 / p99 / p99.9 / max of the
caller thread's CPU time (time.thread_time_ns: what the call itself computed, GIL waits
excluded) and of its wall time (which in summary mode also holds the backpressure waits: the
caller is blocked, using no CPU, while the background queue is full). Issue 28's target: p99.9
of caller CPU <= 100 us at 1M runs. Also printed: how many submits waited, how many jobs ran
where they were submitted (must be 0 here), and that every run was counted (finished == runs).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tps_tracer import Accumulator

CALLS = ("observe", "stop", "resolve")


def run_loop(mode: str, n_runs: int, steps: int, bootstrap: int) -> dict[str, dict[str, np.ndarray]]:
    acc = Accumulator(predictors=["verbal", "token_prob"], bootstrap=bootstrap, mode=mode, idle_timeout=None)
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    n_calls = {"observe": n_runs * steps, "stop": n_runs, "resolve": n_runs}
    own = {k: np.zeros(n, dtype=np.int64) for k, n in n_calls.items()}
    lat = {k: np.zeros(n, dtype=np.int64) for k, n in n_calls.items()}
    o_own, o_lat, s_own, s_lat, r_own, r_lat = (
        own["observe"],
        lat["observe"],
        own["stop"],
        lat["stop"],
        own["resolve"],
        lat["resolve"],
    )
    k = 0
    t_start = time.perf_counter()
    for i in range(n_runs):
        tid = f"s{i}"
        for t in range(steps):
            f = {"verbal": ((i + t) % 97 + 1) / 99, "token_prob": ((i * 7 + t) % 89 + 1) / 91}
            t0, c0 = wall(), cpu()
            acc.observe(tid, f)
            o_own[k], o_lat[k] = cpu() - c0, wall() - t0
            k += 1
        t0, c0 = wall(), cpu()
        acc.stop(tid, "clean")
        s_own[i], s_lat[i] = cpu() - c0, wall() - t0
        t0, c0 = wall(), cpu()
        acc.resolve(tid, outcome=i & 1)
        r_own[i], r_lat[i] = cpu() - c0, wall() - t0
    loop_s = time.perf_counter() - t_start
    background = acc._background
    report = acc.snapshot()
    finished = report["online"]["finished"]
    print(f"{mode} mode, {n_runs:,} runs x {steps} steps, a tight loop ({loop_s:.1f} s):")
    head = f"{'p99':>8} {'p99.9':>8} {'max':>9}"
    print(f"  {'call':<8} {'caller CPU us: p50':>18} {head} | {'wall us: p50':>12} {head}")
    for name in CALLS:
        c, w = own[name] / 1e3, lat[name] / 1e3
        cp = np.percentile(c, [50, 99, 99.9])
        wp = np.percentile(w, [50, 99, 99.9])
        print(
            f"  {name:<8} {cp[0]:18.1f} {cp[1]:8.1f} {cp[2]:8.1f} {c.max():9.1f} |"
            f" {wp[0]:12.1f} {wp[1]:8.1f} {wp[2]:8.1f} {w.max():9.1f}"
        )
    if background is not None:
        print(
            f"  submits that waited (backpressure): {background.waits:,};"
            f" jobs run where submitted: {background.inline_runs}"
        )
    print(f"  finished in the snapshot: {finished:,} (runs: {n_runs:,})")
    if finished != n_runs:
        print("  LOST RUNS", file=sys.stderr)
        sys.exit(1)
    acc.close()
    return {"cpu": own, "wall": lat}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--row-runs", type=int, default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bootstrap", type=int, default=0)
    args = ap.parse_args(argv)
    run_loop("summary", args.runs, args.steps, args.bootstrap)
    print()
    run_loop("rows", args.runs if args.row_runs is None else args.row_runs, args.steps, args.bootstrap)


if __name__ == "__main__":
    main()
