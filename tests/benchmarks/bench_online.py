"""Online path costs: accumulator events, memory per finished trajectory, signal extraction.

    make bench        (or: .venv/bin/python tests/benchmarks/bench_online.py)

Every figure is printed next to a baseline measured in the same run (the machine is
shared and noisy: medians of repeats, and the ratio is what to compare across runs):

- observe: one step with 5 predictors, vs a no-op method call with the same arguments;
- stop: a 10-step trajectory, 5 predictors x 3 rules x 4 schedules, vs the same no-op;
- memory per finished trajectory awaiting its outcome, for 10- and 100-step trajectories;
- signal extraction for a 300-token completion with top-5 logprobs, vs a pure-Python loop
  computing the same five numbers.
Targets (issue 4): observe <= 5 us, stop <= 100 us, <= 2 KB per trajectory, extraction <= 300 us.
"""

from __future__ import annotations

import math
import statistics
import time
import tracemalloc

import numpy as np

from tps_tracer.capture import SignalExtractor
from tps_tracer.online import Accumulator

PREDICTORS = ("verbal", "token_prob", "entropy_conf", "action_token_prob", "action_entropy_conf")
RULES = ("log", "brier", "beta(2,4)")
SCHEDULES = ("linear-front", "uniform", "exponential-front", "linear-back")
REPEATS = 7


class NoOp:
    def observe(self, trajectory_id, forecasts):
        return True

    def stop(self, trajectory_id, reason, horizon=None):
        return True


def per_call_us(fn, n):
    """Median over REPEATS of the mean cost of n calls, in microseconds."""
    times = []
    for r in range(REPEATS):
        t0 = time.perf_counter()
        fn(r, n)
        times.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(times)


def forecasts(rng, n):
    return [dict(zip(PREDICTORS, map(float, rng.random(5)), strict=True)) for _ in range(n)]


def bench_observe(n=20_000):
    steps = forecasts(np.random.default_rng(0), n)

    def run(target_factory):
        def go(r, n):
            target = target_factory()
            obs = target.observe
            for i in range(n):
                obs(f"t{i // 10}", steps[i])

        return go

    acc_us = per_call_us(run(lambda: Accumulator(predictors=PREDICTORS, rules=RULES, weights=SCHEDULES)), n)
    base_us = per_call_us(run(NoOp), n)
    return acc_us, base_us


def bench_stop(n=2_000):
    steps = forecasts(np.random.default_rng(1), 10)

    def setup(target):
        for i in range(n):
            for s in steps:
                target.observe(f"t{i}", s)
        return target

    def timed(factory):
        times = []
        for _ in range(REPEATS):
            target = setup(factory())
            stop = target.stop
            t0 = time.perf_counter()
            for i in range(n):
                stop(f"t{i}", "clean")
            times.append((time.perf_counter() - t0) / n * 1e6)
        return statistics.median(times)

    return timed(lambda: Accumulator(predictors=PREDICTORS, rules=RULES, weights=SCHEDULES)), timed(NoOp)


def bench_memory(n=20_000, length=10):
    step = dict.fromkeys(PREDICTORS, 0.5)
    acc = Accumulator(predictors=PREDICTORS, rules=RULES, weights=SCHEDULES)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        tid = f"task-{i:08d}"
        for _ in range(length):
            acc.observe(tid, step)
        acc.stop(tid, "clean")  # outcome pending: the state a graded-later run waits in
    acc.flush()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n, acc._rows.nbytes() / n


def completion_fixture(n_tokens=300, k=5, seed=2):
    rng = np.random.default_rng(seed)
    words = [
        "<think>",
        "the",
        " answer",
        " is",
        " near",
        "</think>",
        "<action>",
        "search",
        "[",
        "Paris",
        "]",
        "</action>",
    ]
    content = []
    for i in range(n_tokens - 1):
        tok = words[i % len(words)] if i < n_tokens - 20 else f" w{i}"
        cands = np.sort(rng.dirichlet(np.ones(k + 2))[:k])[::-1]
        content.append(
            {
                "token": tok,
                "logprob": float(np.log(cands[0])),
                "bytes": list(tok.encode()),
                "top_logprobs": [
                    {"token": f"c{j}", "logprob": float(np.log(c)), "bytes": [99]} for j, c in enumerate(cands)
                ],
            }
        )
    tail = "<confidence>0.8</confidence>"
    content.append(
        {"token": tail, "logprob": -0.1, "bytes": list(tail.encode()), "top_logprobs": content[0]["top_logprobs"]}
    )
    return {"content": content}


def reference_loop(text, logprobs, k=5):
    """The same five numbers, computed token by token in plain Python."""
    content = logprobs["content"]
    joined, offsets = "", []
    for e in content:
        offsets.append(len(joined))
        joined += e["token"]
    probs, confs = [], []
    for e in content:
        probs.append(math.exp(e["logprob"]))
        ps = [math.exp(c["logprob"]) for c in e["top_logprobs"][:k]]
        total = sum(ps)
        confs.append(1 - (-sum(p / total * math.log(p / total) for p in ps if p > 0)) / math.log(k))
    a = joined.rfind("<action>") + len("<action>")
    b = joined.find("</action>", a)
    span = [i for i, o in enumerate(offsets) if o < b and o + len(content[i]["token"]) > a]
    c0 = text.rfind("<confidence>") + len("<confidence>")
    verbal = float(text[c0 : text.find("</confidence>", c0)])
    return {
        "verbal": verbal,
        "token_prob": sum(probs) / len(probs),
        "entropy_conf": sum(confs) / len(confs),
        "action_token_prob": sum(probs[i] for i in span) / len(span),
        "action_entropy_conf": sum(confs[i] for i in span) / len(span),
    }


def bench_signals(n=300):
    logprobs = completion_fixture()
    text = "".join(e["token"] for e in logprobs["content"])
    ex = SignalExtractor()
    fast, ref = ex.forecasts(text, logprobs), reference_loop(text, logprobs)
    for key, value in ref.items():
        assert math.isclose(fast[key], value, abs_tol=1e-12), (key, fast[key], value)
    # Alternate the two in every repeat so that load changes on the shared machine hit both.
    fast, ref = [], []
    for _ in range(15):
        for out, fn in ((fast, ex.forecasts), (ref, reference_loop)):
            t0 = time.perf_counter()
            for _ in range(n // 10):
                fn(text, logprobs)
            out.append((time.perf_counter() - t0) / (n // 10) * 1e6)
    return statistics.median(fast), statistics.median(ref)


def main() -> None:
    acc_us, base_us = bench_observe()
    print(f"observe (5 predictors):            {acc_us:7.2f} us/step   no-op call {base_us:5.2f} us   (target <= 5 us)")
    stop_us, base_us = bench_stop()
    print(
        f"stop (10 steps, 5 x 3 rules x 4):  {stop_us:7.2f} us/traj   no-op call {base_us:5.2f} us   (target <= 100 us)"
    )
    for length in (10, 100):
        traced, arrays = bench_memory(length=length)
        print(
            f"memory per finished trajectory, {length:3d} steps: {traced:6.0f} B traced "
            f"({arrays:.0f} B in arrays incl. growth slack)   (target <= 2048 B)"
        )
    fast_us, ref_us = bench_signals()
    print(
        f"signals (300 tokens, top-5):       {fast_us:7.1f} us/step   pure-Python loop {ref_us:6.1f} us   "
        f"ratio {ref_us / fast_us:.2f}x   (target <= 300 us)"
    )


if __name__ == "__main__":
    main()
