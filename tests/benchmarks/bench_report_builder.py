"""The whole-arrays report (`build_report`, the path of `--calibrate`, of files read the exact way,
and of the accumulator's row-mode snapshot) at 100k trajectories: process CPU time.

    PYTHONPATH=TREE .venv/bin/python tests/benchmarks/bench_report_builder.py [--trajectories N]

Reads `bench_report_scale.write_file`'s data once (not timed), then times `build_report` with
--rules log,brier --weights all at --bootstrap 0 and 1000 and prints one JSON line. Run it
alternately against two checkouts (fresh process each) to compare them; the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_report_scale import write_file  # the same data as the report benchmark

from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import read_trajectories, to_arrays
from tps_tracer.scoring import parse_rules, parse_schedules


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        arrays = to_arrays(read_trajectories(write_file(Path(d) / "bench.jsonl", args.trajectories)))
    out = {}
    for b in (0, 1000):
        opts = ReportOptions(rules=parse_rules("log,brier"), schedules=parse_schedules("all"), bootstrap=b)
        t0 = time.process_time()
        build_report(arrays, opts)
        out[f"build_report b{b}"] = round(time.process_time() - t0, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
