"""What the readers' bounds (records/limits.py) cost on a plain file: `tps-tracer report` before/after.

    python tests/benchmarks/bench_reader_limits.py BASE_ROOT [--n 100000] [--runs 5]

BASE_ROOT is a tree holding the code to compare with (e.g. `git archive main tps_tracer | tar -x -C
/tmp/base`). Both run `report FILE --json --bootstrap 0` (reading dominates; the bootstrap would
hide it) and `report FILE --json` (the default 1,000 replicates), interleaved, in child processes;
the figure is each child's CPU time (user + system, from wait4), median of --runs, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def cpu_of(root: Path, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tps_tracer.cli.main", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{root}: {argv} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from scale_support import trajectory_dicts

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "runs.jsonl"
        with path.open("w") as fh:
            for r in trajectory_dicts(args.n, seed=1):
                fh.write(json.dumps(r) + "\n")
        for extra in (["--bootstrap", "0"], []):
            argv = ["report", str(path), "--json", *extra]
            times: dict[str, list[float]] = {"base": [], "new": []}
            for _ in range(args.runs):
                times["base"].append(cpu_of(args.base, argv))
                times["new"].append(cpu_of(ROOT, argv))
            base, new = statistics.median(times["base"]), statistics.median(times["new"])
            print(
                f"report {args.n} trajectories {' '.join(extra) or '(bootstrap 1000)'}: "
                f"base {base:.2f} s CPU, new {new:.2f} s CPU, ratio {new / base:.3f} "
                f"(medians of {args.runs} interleaved runs)"
            )


if __name__ == "__main__":
    main()
