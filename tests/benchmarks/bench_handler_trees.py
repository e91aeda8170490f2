"""The LangChain handler's cost per model call with 300-token top-5 logprobs, split by part and
by thread, for one or more source trees run alternately (issue 28: compare a change with the tree
before it on a shared machine, where only same-run ratios mean anything).

Each round starts one fresh interpreter per tree (in turn, the order reversed every other round)
that measures, in process CPU per model call (step):

- extraction alone over bench_capture_cost's 6 payloads in turn: `parse_logprobs`, the signals of
  already parsed logprobs, `SignalExtractor.forecasts`, `forecasts_batch` of the 6;
- the create_agent loop of bench_capture_cost (scripted model, 6 calls per run) with a no-op
  handler and with TPSCallbackHandler (flushed inside the timed region), alternated 3 times: the
  added CPU of the whole process, of the agent thread (`time.thread_time`) and of the capture
  worker thread (its CPU clock, `time.pthread_getcpuclockid`).

Figures are medians over rounds; `new/old` is the median of per-round ratios.

    .venv/bin/python tests/benchmarks/bench_handler_trees.py --tree old=/tmp/old-tree --tree new=$PWD [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import gc, json, statistics, sys, time
sys.path.insert(0, sys.argv[2])
import numpy as np
import bench_capture_cost as b
from langchain_core.messages import HumanMessage
import tps_tracer
assert tps_tracer.__file__.startswith(sys.argv[1]), tps_tracer.__file__
from tps_tracer import Accumulator
from tps_tracer.capture import SignalExtractor
from tps_tracer.capture.token_logprobs import parse_logprobs
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.sim.agents import tool_calling_agent

rng = np.random.default_rng(0)
lps = [b.chat_logprobs(rng, s) for s in range(b.STEPS)]
texts = ["".join(e["token"] for e in lp["content"]) for lp in lps]
parsed = [parse_logprobs(lp) for lp in lps]
ex = SignalExtractor()
parts = {
    "parse_logprobs": lambda: [parse_logprobs(lp) for lp in lps],
    "signals of parsed logprobs": lambda: [ex.forecasts(t, p) for t, p in zip(texts, parsed)],
    "forecasts": lambda: [ex.forecasts(t, lp) for t, lp in zip(texts, lps)],
    "forecasts_batch (6 steps)": lambda: ex.forecasts_batch([(t, lp, None, None) for t, lp in zip(texts, lps)]),
}
out = {}
for name, fn in parts.items():
    fn()
    gc.collect()
    t0 = time.process_time()
    for _ in range(30):
        fn()
    out[name] = (time.process_time() - t0) / (30 * b.STEPS) * 1e6

agent = tool_calling_agent(b.ScriptedToolModel(outputs=list(zip(texts, lps))), [b.search])
handler = TPSCallbackHandler(Accumulator(bootstrap=0))
noop = b.NoOpHandler()

def worker_cpu():
    thread = handler.tracker.worker._thread
    return 0.0 if thread is None else time.clock_gettime(time.pthread_getcpuclockid(thread.ident))

def loop(tps, tag):
    callbacks = [handler] if tps else [noop]
    gc.collect()
    w0, a0, p0 = worker_cpu(), time.thread_time(), time.process_time()
    for i in range(b.RUNS):
        config = {"callbacks": callbacks, "metadata": {"tps_trajectory_id": f"{tag}-{i}"}}
        agent.invoke({"messages": [HumanMessage("task")]}, config=config)
    if tps:
        handler.flush()
    calls = b.RUNS * b.STEPS / 1e6
    return (time.process_time() - p0) / calls, (time.thread_time() - a0) / calls, (worker_cpu() - w0) / calls

loop(False, "warm-noop"), loop(True, "warm-tps")
added = []
for r in range(3):
    if r % 2:
        tps, base = loop(True, f"{r}t"), loop(False, f"{r}n")
    else:
        base, tps = loop(False, f"{r}n"), loop(True, f"{r}t")
    added.append([t - n for t, n in zip(tps, base)])
handler.close()
for i, name in enumerate(("loop: process CPU added", "loop: agent thread added", "loop: worker thread")):
    out[name] = statistics.median(a[i] for a in added)
print(json.dumps(out))
"""


def one(tree: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, tree, str(HERE)], env=env, capture_output=True, text=True, cwd="/tmp", check=False
    )
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (repeatable)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]
        for name in order:
            rows[name].append(one(str(Path(trees[name]).resolve())))
    names = list(trees)
    first = names[0]
    print(f"us per model call, median of {args.rounds} alternated rounds (300 tokens x top-5 logprobs)")
    print(f"  {'part':<34}" + "".join(f"{n:>10}" for n in names) + "".join(f"{n + '/' + first:>12}" for n in names[1:]))
    for part in rows[first][0]:
        meds = [statistics.median(x[part] for x in rows[n]) for n in names]
        ratios = [
            statistics.median(b[part] / a[part] for a, b in zip(rows[first], rows[n], strict=True)) for n in names[1:]
        ]
        print(f"  {part:<34}" + "".join(f"{m:10.1f}" for m in meds) + "".join(f"{q:12.2f}" for q in ratios))


if __name__ == "__main__":
    main()
