"""q_Z from resumed checkpoints: accuracy against the exact q_Z and the cost per branch.

    .venv/bin/python tests/benchmarks/bench_resume.py [--tasks 200] [--concurrency 4]

Runs the simulated world (200 tasks, budget 4 model calls, no logprobs) through
LangGraph's prebuilt agent with an InMemorySaver, then resumes every censored run with
M = 4, 16 and 64 branches (each call extends the same continuation file). For each M it
prints mean |q_hat - q_Z| over the prefixes next to what binomial sampling with the same
numbers of valid branches predicts (the best any M-branch estimate can do: the figure
should halve each time M quadruples), and the wall time per branch (call time / branches
run) with the mean latency of one branch. Timings on this shared machine are noisy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from langgraph.checkpoint.memory import InMemorySaver
from scipy.stats import binom

from tps_tracer.evaluation.censoring.continuations import mc_q_z, read_continuations
from tps_tracer.langchain.resume import resume_continuations
from tps_tracer.records import read_trajectories
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.agents import run_campaign
from tps_tracer.sim.scripted_model import ScriptedReActModel, grade_final_state
from tps_tracer.sim.world import AgentWorld, WorldConfig

BUDGET = 8  # recursion_limit: 4 model calls
CONFIG = WorldConfig(max_length=8, malformed_rate=0.03, tool_failure_rate=0.02, forecaster="noisy")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=4)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    world = AgentWorld(args.tasks, seed=11, config=CONFIG)
    model = ScriptedReActModel(world=world, logprobs=False)
    agent = run_campaign(world, tmp / "runs.jsonl", model=model, recursion_limit=BUDGET, checkpointer=InMemorySaver())
    records = read_trajectories(tmp / "runs.jsonl")
    # q_Z of a prefix: the world's q_t at its last recorded step, P(Y=1 | s_1..s_{Z-1}).
    exact = {
        r.trajectory_id: world[r.metadata["task_id"]].steps[len(r.steps) - 1].q
        for r in records
        if r.stop_reason is StopReason.MAX_STEPS
    }
    out = tmp / "branches.jsonl"
    print(f"{len(exact)} censored runs of {len(records)}; branches resumed with concurrency {args.concurrency}")
    print(f"{'M':>4} {'prefixes':>8} {'mean|q_hat-q_Z|':>16} {'binomial':>9} {'s/branch':>9} {'latency':>8}  stops")
    for m in (4, 16, 64):
        kw = {"grader": grade_final_state, "budget": BUDGET, "concurrency": args.concurrency}
        s = resume_continuations(agent, records, out, branches=m, **kw).as_dict()
        mc = mc_q_z(read_continuations(out), min_valid=1)
        q = np.array([exact[i] for i in mc.ids])
        err = float(np.mean(np.abs(mc.q_hat - q)))
        expected = float(
            np.mean(
                [
                    np.sum(binom.pmf(np.arange(n + 1), n, qi) * np.abs(np.arange(n + 1) / n - qi))
                    for qi, n in zip(q, mc.n_valid, strict=True)
                ]
            )
        )
        print(
            f"{m:>4} {len(mc.ids):>8} {err:>16.4f} {expected:>9.4f} {s['wall_seconds_per_branch']:>9.4f} "
            f"{s['seconds_per_branch']:>8.4f}  {s['stop_reasons']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
