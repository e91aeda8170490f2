"""Scoring throughput: vectorised branch pairs vs a straightforward per-trajectory Python loop.

    make bench        (or: .venv/bin/python tests/benchmarks/bench_scoring.py [--trajectories N])

Scores N trajectories of 10 steps (default 1,000,000 = 10M steps) with log and brier under
all four schedules, complete-only and cen-simple, and prints steps/second next to a plain
Python loop measured in the same run on a subsample. Medians of repeated runs; the machine
is shared, so the ratio is the figure to compare across runs.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time

import numpy as np

from tps_tracer.scoring import StepLayout, get_rule, mix

RULES = ("log", "brier")
SCHEDULES = ("linear-front", "uniform", "exponential-front", "linear-back")
STEPS = 10


def make_data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    values = rng.random(n * STEPS)
    outcome = (rng.random(n) < 0.5).astype(np.float64)
    censored = rng.random(n) < 0.3
    return values, outcome, censored


def vectorised_one(values, outcome, censored, rule_name="log", schedule="linear-front"):
    """One rule x schedule from scratch (fresh layout: the weights are recomputed too)."""
    n = outcome.size
    layout = StepLayout.from_lengths(np.full(n, STEPS))
    b1, b0 = get_rule(rule_name).branches(values)
    s1, s0 = layout.weighted_sum(b1, schedule), layout.weighted_sum(b0, schedule)
    complete = mix(s1[~censored], s0[~censored], outcome[~censored])
    simple = mix(s1, s0, np.where(censored, 0.0, outcome))
    return complete.mean(), simple.mean()


def vectorised_sweep(values, outcome, censored, rules=RULES):
    """rules x all schedules x {complete-only, simple}, sharing branches across schedules (as `report` does)."""
    n = outcome.size
    layout = StepLayout.from_lengths(np.full(n, STEPS))
    eta_simple = np.where(censored, 0.0, outcome)
    out = {}
    for rule_name in rules:
        b1, b0 = get_rule(rule_name).branches(values)
        for schedule in SCHEDULES:
            s1, s0 = layout.weighted_sum(b1, schedule), layout.weighted_sum(b0, schedule)
            out[(rule_name, schedule)] = (
                mix(s1[~censored], s0[~censored], outcome[~censored]).mean(),
                mix(s1, s0, eta_simple).mean(),
            )
    return out


def _w(t: int, T: int, schedule: str) -> float:
    if schedule == "linear-front":
        return 2 * (T - t + 1) / (T * (T + 1))
    if schedule == "uniform":
        return 1 / T
    if schedule == "exponential-front":
        return 2.0 ** -(t - 1) / (2 * (1 - 2.0**-T))
    return 2 * t / (T * (T + 1))


def _s(p: float, y: int, rule: str) -> float:
    if rule == "log":
        p = min(max(p, 1e-6), 1 - 1e-6)
        return math.log(p) if y else math.log(1 - p)
    return -((p - y) ** 2)


def python_loop(values, outcome, censored, rule="log", schedule="linear-front"):
    """The straightforward implementation: one trajectory at a time, one step at a time."""
    vals = values.tolist()
    complete_scores, simple_scores = [], []
    for i in range(outcome.size):
        s1 = s0 = 0.0
        for t in range(1, STEPS + 1):
            f = vals[i * STEPS + t - 1]
            w = _w(t, STEPS, schedule)
            s1 += w * _s(f, 1, rule)
            s0 += w * _s(f, 0, rule)
        if censored[i]:
            simple_scores.append(s0)
        else:
            y = outcome[i]
            score = y * s1 + (1 - y) * s0
            complete_scores.append(score)
            simple_scores.append(score)
    return sum(complete_scores) / len(complete_scores), sum(simple_scores) / len(simple_scores)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=1_000_000)
    ap.add_argument("--loop-trajectories", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    values, outcome, censored = make_data(args.trajectories)
    n_steps = values.size
    lv, lo, lc = (
        values[: args.loop_trajectories * STEPS],
        outcome[: args.loop_trajectories],
        censored[: args.loop_trajectories],
    )
    # Same numbers from both implementations before timing anything.
    ref = python_loop(lv, lo, lc)
    got = vectorised_one(lv, lo, lc)
    assert np.allclose(ref, got, rtol=1e-12), (ref, got)

    t_loop = median_time(lambda: python_loop(lv, lo, lc), max(1, args.repeats // 2))
    loop_rate = lv.size / t_loop
    t_one = median_time(lambda: vectorised_one(values, outcome, censored), args.repeats)
    one_rate = n_steps / t_one
    t_sweep = median_time(lambda: vectorised_sweep(values, outcome, censored), max(1, args.repeats // 2))
    combos = len(RULES) * len(SCHEDULES)
    sweep_rate = n_steps * combos / t_sweep
    t_log = median_time(lambda: vectorised_sweep(values, outcome, censored, ("log",)), max(1, args.repeats // 2))
    log_rate = n_steps * len(SCHEDULES) / t_log
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"data: {args.trajectories:,} trajectories x {STEPS} steps = {n_steps:,} steps (30% censored)")
    print(f"python loop (log, linear-front, complete + simple), {args.loop_trajectories:,} trajectories:")
    print(f"  {loop_rate / 1e6:8.3f} M steps/s   (median {t_loop:.3f} s)")
    print("vectorised, one rule x schedule from scratch (log, linear-front, complete + simple):")
    print(f"  {one_rate / 1e6:8.1f} M steps/s   (median {t_one:.3f} s)   {one_rate / loop_rate:7.0f}x the loop")
    print(f"vectorised sweep, {len(RULES)} rules x {len(SCHEDULES)} schedules x 2 censoring modes:")
    print(
        f"  {sweep_rate / 1e6:8.1f} M steps/s per rule x schedule   (median {t_sweep:.3f} s for all {combos})"
        f"   {sweep_rate / loop_rate:7.0f}x the loop"
    )
    print(f"vectorised, log x {len(SCHEDULES)} schedules x 2 censoring modes (branches shared across schedules):")
    print(f"  {log_rate / 1e6:8.1f} M steps/s per rule x schedule   (median {t_log:.3f} s)")
    print(f"peak RSS: {peak_mb:.0f} MB (flat float64 arrays; no per-step Python objects in the scoring path)")
    print(
        f"targets: >= 50x the loop [{'met' if one_rate / loop_rate >= 50 else 'MISSED'}], "
        f">= 30 M steps/s for log per rule x schedule: amortised [{'met' if log_rate >= 30e6 else 'MISSED'}], "
        f"single schedule from scratch [{'met' if one_rate >= 30e6 else 'MISSED'}]"
    )


if __name__ == "__main__":
    main()
