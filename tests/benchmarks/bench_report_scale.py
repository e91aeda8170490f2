"""`report` at scale: time against a bare json.loads pass in the same run, and peak memory.

    make bench     (or: .venv/bin/python tests/benchmarks/bench_report_scale.py [--trajectories N] [--memory])

Writes N trajectories x 10 steps (two predictors, every stop reason, q_z on half the censored
runs) to a temporary JSON Lines file, then times, as medians of --repeat runs:

    json.loads     a bare `for line in file: json.loads(line)` pass (the baseline)
    read           the columnar reader alone (`iter_chunks`: orjson + numpy, validated flat arrays)
    report         `report_from_path` (chunked, columnar reader, partial states): what the CLI runs
    whole-file     the exact path: read_trajectories -> to_arrays -> build_report (today's reference)

with --rules log,brier --weights all --bootstrap 1000, and prints each figure and its ratio to
json.loads. --memory also runs `tps-tracer report` in a subprocess per size (100k, 400k with 5-15
steps, 1M; one 1.5M-step trajectory) and prints its peak RSS (ru_maxrss of the child).
The machine is shared: compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REASONS = ["clean"] * 6 + ["max_steps"] * 2 + ["parse_error", "tool_error", "timeout"]
OPTIONS = ["--rules", "log,brier", "--weights", "all", "--bootstrap", "1000"]


def write_file(path: Path, n: int, steps: tuple[int, int] = (10, 10), seed: int = 0) -> Path:
    """n trajectories; lengths uniform in [steps[0], steps[1]]. Written in blocks (bounded memory)."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as fh:
        for start in range(0, n, 10_000):
            lines = []
            for i in range(start, min(n, start + 10_000)):
                z = int(rng.integers(steps[0], steps[1] + 1))
                reason = REASONS[int(rng.integers(len(REASONS)))]
                f1, f2 = rng.random(z).round(6), rng.random(z).round(6)
                rec = {
                    "trajectory_id": f"run-{i}",
                    "stop_reason": reason,
                    "outcome": int(rng.random() < 0.5) if reason == "clean" else None,
                    "horizon": z + (2 if reason == "max_steps" else 0),
                    "q_z": round(float(rng.random()), 4) if reason == "max_steps" and rng.random() < 0.5 else None,
                    "steps": [
                        {"t": t + 1, "forecasts": {"verbal": float(f1[t]), "token_prob": float(f2[t])}}
                        for t in range(z)
                    ],
                    "metadata": {"agent": "planner", "task_id": f"task-{i}"},
                }
                lines.append(json.dumps(rec))
            fh.write("\n".join(lines) + "\n")
    return path


def write_long_trajectory(path: Path, steps: int) -> Path:
    rng = np.random.default_rng(1)
    values = rng.random(steps).round(6)
    with path.open("w", encoding="utf-8") as fh:
        fh.write('{"trajectory_id": "long", "stop_reason": "clean", "outcome": 1, "steps": [')
        fh.write(", ".join(f'{{"t": {t + 1}, "forecasts": {{"verbal": {v}}}}}' for t, v in enumerate(values)))
        fh.write("]}\n")
        short = {
            "trajectory_id": "short",
            "stop_reason": "clean",
            "outcome": 0,
            "steps": [{"forecasts": {"verbal": 0.2}}],
        }
        fh.write(json.dumps(short) + "\n")
    return path


def median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def json_pass(path: Path) -> None:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            json.loads(line)


def _read_only(path: Path) -> None:
    from tps_tracer.records.chunks import iter_chunks

    for chunk in iter_chunks(path):
        assert chunk.fast  # the generated file is plain: no chunk may drop to the exact path


def timing(path: Path, repeat: int, whole_file: bool) -> None:
    from tps_tracer.evaluation.chunked import report_from_path
    from tps_tracer.evaluation.report import ReportOptions, build_report
    from tps_tracer.records import read_trajectories, to_arrays
    from tps_tracer.scoring import parse_rules, parse_schedules

    opts = ReportOptions(rules=parse_rules("log,brier"), schedules=parse_schedules("all"), bootstrap=1000)
    size = path.stat().st_size / 1e6
    base = median_time(lambda: json_pass(path), repeat)
    print(f"file {path.name}: {size:.0f} MB; medians of {repeat} runs (2 shared cores: compare ratios)")
    print(f"  json.loads pass          {base:7.2f} s   1.00x")
    tr = median_time(lambda: _read_only(path), repeat)
    print(f"  read (columnar, no score){tr:7.2f} s   {tr / base:5.2f}x json.loads")
    t = median_time(lambda: report_from_path(path, opts), repeat)
    print(f"  report (chunked)         {t:7.2f} s   {t / base:5.2f}x json.loads   (target <= 3x)")
    t0 = median_time(
        lambda: report_from_path(path, ReportOptions(rules=opts.rules, schedules=opts.schedules, bootstrap=0)), repeat
    )
    print(f"  report, --bootstrap 0    {t0:7.2f} s   {t0 / base:5.2f}x json.loads")
    if whole_file:
        tw = median_time(lambda: build_report(to_arrays(read_trajectories(path)), opts), 1)
        print(f"  whole-file (exact) path  {tw:7.2f} s   {tw / base:5.2f}x json.loads   (one run)")


# Peak RSS survives fork and exec on Linux (ru_maxrss starts at the forking process's RSS), so
# the report runs as the grandchild of a fresh, small Python that reports the grandchild's wait4.
_WAIT4 = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
    "_, status, usage = os.wait4(p.pid, 0); print(usage.ru_maxrss, file=sys.stderr); "
    "sys.exit(os.waitstatus_to_exitcode(status))"
)


def peak_rss_mb(args: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of `tps-tracer report ARGS --json` in a fresh process."""
    cli = [sys.executable, "-m", "tps_tracer.cli.main", "report", *args, "--json"]
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _WAIT4, *cli], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return time.perf_counter() - t0, int(out.stderr.strip().splitlines()[-1]) / 1024


def memory(tmp: Path) -> None:
    print("peak RSS of `tps-tracer report FILE --rules log,brier --weights all --bootstrap 1000 --json`")
    cases = [
        ("100k x 10 steps", lambda p: write_file(p, 100_000)),
        ("400k x 5-15 steps", lambda p: write_file(p, 400_000, (5, 15))),
        ("1M x 5-15 steps", lambda p: write_file(p, 1_000_000, (5, 15))),
        ("one 1.5M-step trajectory", lambda p: write_long_trajectory(p, 1_500_000)),
    ]
    for name, make in cases:
        path = make(tmp / "mem.jsonl")
        seconds, rss = peak_rss_mb([str(path), *OPTIONS])
        print(f"  {name:26s} {path.stat().st_size / 1e6:7.0f} MB file   {rss:7.0f} MB peak RSS   {seconds:6.1f} s")
        path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--whole-file", action="store_true", help="also time the exact whole-file path (slow)")
    ap.add_argument("--memory", action="store_true", help="peak RSS for 100k / 400k / 1M / one long trajectory")
    ap.add_argument("--memory-only", action="store_true", help="only the peak RSS figures")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        path = write_file(tmp / "bench.jsonl", args.trajectories) if not args.memory_only else None
        if args.memory_only:
            memory(tmp)
            return
        assert path is not None
        if args.memory:  # first: this process stays small while it spawns the measured ones
            memory(tmp)
        timing(path, args.repeat, args.whole_file)
        path.unlink()
    print(
        f"(this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, "
        f"{os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
