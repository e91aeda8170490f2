"""`gate` at scale: the chunked file path against the gate on validated records, same run.

    .venv/bin/python tests/benchmarks/bench_gate_scale.py [--trajectories 100000] [--baseline]

Writes N trajectories x 10 steps (bench_report_scale's generator), then runs, each in a fresh
process so peak RSS (ru_maxrss of that process) is its own:

    records   read_records(FILE) -> evaluate_gate(records)   (the gate before issue 17's fix)
    chunked   tps-tracer gate FILE                            (gate_paths: fixed-size rows per trajectory)

with --vs-base-rate --bootstrap 2000 (and --baseline: the same file as its own baseline,
which adds the task-id pass). Prints seconds and peak RSS and their ratios.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_report_scale import _WAIT4, write_file

RECORDS = (
    "import sys; from tps_tracer.evaluation.gate import GateCriteria, evaluate_gate; "
    "from tps_tracer.records.reading import read_records; "
    "recs = read_records(sys.argv[1]); base = read_records(sys.argv[2]) if len(sys.argv) > 2 else None; "
    "print(evaluate_gate(recs, GateCriteria(vs_base_rate=True, bootstrap=2000), base)['verdict'])"
)


def measure(cmd: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _WAIT4, *cmd], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(out.stderr)
    return time.perf_counter() - t0, int(out.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=100_000)
    ap.add_argument("--baseline", action="store_true", help="gate the file against itself as baseline")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = write_file(Path(d) / "gate.jsonl", args.trajectories)
        size = path.stat().st_size / 1e6
        extra = [str(path)] if args.baseline else []
        base_flag = ["--baseline", str(path)] if args.baseline else []
        rec_t, rec_rss = measure([sys.executable, "-c", RECORDS, str(path), *extra])
        cli = [sys.executable, "-m", "tps_tracer.cli.main", "gate", str(path), "--vs-base-rate", "--bootstrap", "2000"]
        new_t, new_rss = measure([*cli, *base_flag])
    print(
        f"gate on {args.trajectories} trajectories x 10 steps{' (+ baseline)' if args.baseline else ''} {size:.0f} MB"
    )
    print(f"  records path   {rec_t:7.1f} s   {rec_rss:7.0f} MB peak RSS")
    print(
        f"  chunked path   {new_t:7.1f} s   {new_rss:7.0f} MB peak RSS   ({rec_t / new_t:.1f}x faster, "
        f"{rec_rss / new_rss:.1f}x less memory)"
    )


if __name__ == "__main__":
    main()
