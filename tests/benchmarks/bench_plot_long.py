"""`tps-tracer plot` on a file with one very long trajectory (default 1.5M steps) plus short ones.

    .venv/bin/python tests/benchmarks/bench_plot_long.py [--steps N] [--repeats R]

Prints medians of: reading the file (read_trajectories + to_arrays, the baseline measured in
the same run), the plot command's own work on the arrays (numbers, binning / sampling,
drawing, atomic writes), and the whole command. The step-scores figure draws at most
200 step bins and the traces at most 2000 points each, so the plot's own work no longer
grows with the trajectory's length the way one bar per step did (minutes at 1.5M steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from tps_tracer.cli import plot_cmd
from tps_tracer.cli.main import main
from tps_tracer.records import read_trajectories, to_arrays


def make_file(path: Path, n_long: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with path.open("w") as fh:
        v = np.round(rng.uniform(0.05, 0.95, n_long), 3).tolist()
        steps = ",".join(f'{{"forecasts": {{"verbal": {x}}}}}' for x in v)
        fh.write('{"trajectory_id": "long", "stop_reason": "clean", "outcome": 1, "steps": [' + steps + "]}\n")
        for i in range(60):
            n = int(rng.integers(2, 9))
            rec = {
                "trajectory_id": f"s{i}",
                "stop_reason": "max_steps" if i % 5 == 0 else "clean",
                "steps": [{"forecasts": {"verbal": float(rng.uniform())}} for _ in range(n)],
            }
            if i % 5:
                rec["outcome"] = i % 2
            fh.write(json.dumps(rec) + "\n")


def main_() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_500_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "long.jsonl"
        make_file(src, args.steps)
        read_t, own_t, total_t = [], [], []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            arrays = to_arrays(read_trajectories(src))
            read_t.append(time.perf_counter() - t0)
            # The command with reading replaced by the arrays just read: its own work only.
            with (
                mock.patch.object(plot_cmd, "read_trajectories", lambda _: None),
                mock.patch.object(plot_cmd, "to_arrays", lambda _, a=arrays: a),
            ):
                t0 = time.perf_counter()
                assert main(["plot", str(src), "-o", str(Path(d) / f"own{r}")]) == 0
                own_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert main(["plot", str(src), "-o", str(Path(d) / f"all{r}")]) == 0
            total_t.append(time.perf_counter() - t0)
        read_m, own_m, total_m = (statistics.median(x) for x in (read_t, own_t, total_t))
        mb = src.stat().st_size / 1e6
        print(f"file: {mb:.0f} MB, one trajectory of {args.steps:,} steps + 60 short ones; {args.repeats} repeats")
        print(f"read (read_trajectories + to_arrays), baseline: {read_m:6.2f} s")
        print(f"plot's own work on the arrays:                 {own_m:6.2f} s  ({own_m / read_m:.2f} x reading)")
        print(f"whole `tps-tracer plot` command:               {total_m:6.2f} s")


if __name__ == "__main__":
    main_()
