"""`report --engine ray`: 1 against 2 Ray workers on this machine, next to the single-process report.

    .venv/bin/python tests/benchmarks/bench_ray.py [--trajectories N] [--shards K] [--format jsonl|parquet]

Writes N trajectories x 10 steps (bench_report_scale.write_file) as K shards, then, each in a
fresh subprocess, times (median of --repeat runs, after one warm-up run):

    local        report_from_path (chunked, one process): what `tps-tracer report` runs
    ray-1 / 2    report_from_path_ray on a local Ray with num_cpus=1 / 2 (Ray's start-up excluded,
                 printed apart), with --rules log,brier --weights all --bootstrap 1000

and the peak RSS (VmHWM) of each process: the driver, and the largest Ray worker (reported by
tasks run on every worker process afterwards; workers are reused, so this is the worker that
reduced the blocks). The machine is shared by other jobs: compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def peak_mb() -> float:
    """This process's peak RSS (VmHWM; ru_maxrss would carry over the parent's across fork + exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


OPTS = {"rules": ("log", "brier"), "schedules": "all", "bootstrap": 1000}


def _options():
    import tps_tracer as tt
    from tps_tracer.scoring import parse_schedules

    return tt.ReportOptions(rules=OPTS["rules"], schedules=parse_schedules(OPTS["schedules"]), bootstrap=1000)


def child(engine: str, path: str, repeat: int, num_blocks: int) -> dict[str, float]:
    from tps_tracer.evaluation.chunked import report_from_path

    opts = _options()
    out: dict[str, float] = {}
    if engine == "local":
        run = lambda: report_from_path(path, opts)  # noqa: E731
    else:
        import ray

        from tps_tracer.distributed import init_ray, report_from_path_ray

        t0 = time.perf_counter()
        init_ray(num_cpus=int(engine[-1]))
        out["startup_s"] = time.perf_counter() - t0
        run = lambda: report_from_path_ray(path, opts, num_blocks=num_blocks or None)  # noqa: E731
    run()  # warm-up (imports, worker start)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    out["median_s"] = statistics.median(times)
    out["driver_peak_mb"] = peak_mb()
    if engine != "local":

        @ray.remote(num_cpus=1)
        def peak() -> tuple[int, float]:
            time.sleep(0.2)
            return os.getpid(), peak_mb()

        peaks = dict(ray.get([peak.remote() for _ in range(8)]))
        out["worker_peak_mb"] = max(peaks.values())
        out["workers_seen"] = len(peaks)
        ray.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=200_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--format", choices=["jsonl", "parquet"], default="parquet")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=0, help="Ray Data blocks (0: Ray decides)")
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        engine, path = args.child
        print(json.dumps(child(engine, path, args.repeat, args.shards)))  # --shards carries --blocks here
        return
    from bench_report_scale import write_file

    from tps_tracer.records.convert import jsonl_to_parquet

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "shards"
        d.mkdir()
        per = args.trajectories // args.shards
        for k in range(args.shards):
            src = Path(tmp) / f"{k}.jsonl"
            write_file(src, per, seed=k)
            lines = src.read_text().replace('"run-', f'"s{k}-run-')  # distinct ids across shards
            if args.format == "jsonl":
                (d / f"part-{k}.jsonl").write_text(lines)
            else:
                src.write_text(lines)
                jsonl_to_parquet(src, d / f"part-{k}.parquet")
        print(f"{per * args.shards} trajectories x 10 steps, {args.shards} {args.format} shards; {OPTS}")
        results = {}
        for engine in ("local", "ray-1", "ray-2"):
            cmd = [sys.executable, __file__, "--child", engine, str(d), "--repeat", str(args.repeat)]
            cmd += ["--shards", str(args.blocks)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            results[engine] = r = json.loads(out.stdout.strip().splitlines()[-1])
            extra = ""
            if engine != "local":
                extra = (
                    f", Ray start-up {r['startup_s']:.1f} s, largest worker peak RSS {r['worker_peak_mb']:.0f} MB"
                    f" ({r['workers_seen']} worker processes)"
                )
            print(f"{engine:6s}: median {r['median_s']:.2f} s, driver peak RSS {r['driver_peak_mb']:.0f} MB{extra}")
        print(f"speed-up ray-2 / ray-1: {results['ray-1']['median_s'] / results['ray-2']['median_s']:.2f}x")


if __name__ == "__main__":
    main()
