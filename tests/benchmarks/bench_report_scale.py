"""`report` (and `gate`, Parquet, `convert`) at scale: process CPU time against a bare json.loads pass.

    make bench     (or: .venv/bin/python tests/benchmarks/bench_report_scale.py [--trajectories N] [--repeat R])

Writes N trajectories x 10 steps (two predictors, every stop reason, q_z on half the censored
runs) to a temporary JSON Lines file (and, for the Parquet and gate variants, its Parquet copy and
a second file as the gate's baseline), then runs the variants below in R interleaved rounds (one of
each per round, so a load change on the shared machine hits all of them alike) and prints, per
variant, the median process CPU time (`time.process_time`: every thread of this process, the
reader's included) and its ratio to the json.loads pass of the same round, as min / median / max
over the rounds, next to the issue-33 target:

    json.loads     a bare `for line in file: json.loads(line)` pass (the baseline, 1.00x)
    orjson         the same pass with orjson.loads (anchor: the per-record parser's floor)
    arrow-json     pyarrow.json.read_json over the file's chunks, no conversion (anchor: the columnar
                   parser's floor)
    duckdb         DuckDB read_json + the per-trajectory linear-front weighted mean of both predictors,
                   one thread (anchor: what a SQL engine pays for the point estimates, no bootstrap;
                   `pip install -e '.[bench]'`, skipped with a note when DuckDB is not installed)
    read           the chunked reader alone (`iter_chunks`: pyarrow / orjson + numpy, validated arrays)
    report         `report_from_path` with --rules log,brier --weights all --bootstrap 1000 (the CLI's path)
    report b0      the same with --bootstrap 0
    parquet        `report_from_path` on the Parquet copy, --bootstrap 1000   (--parquet)
    gate+baseline  `gate_paths` with --baseline (a second file of N), --vs-base-rate, ratio to the
                   json.loads pass over both files                                  (--gate)
    convert        `jsonl_to_parquet`                                               (--convert)

--memory also runs `tps-tracer report` in a subprocess per size (100k, 400k with 5-15 steps,
1M; one 1.5M-step trajectory) and prints its peak RSS (ru_maxrss of the child); --small times a
40-run report as a command (wall clock, fresh process, median of R) against `python -c pass`.
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


def json_pass(path: Path) -> None:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            json.loads(line)


def orjson_pass(path: Path) -> None:
    import orjson

    with path.open("rb") as fh:
        for line in fh:
            orjson.loads(line)


def arrow_json_pass(path: Path) -> None:
    import io

    import pyarrow.json as pj

    from tps_tracer.records.reading import DEFAULT_CHUNK_BYTES, byte_chunks

    for _, chunk, _ in byte_chunks(path, DEFAULT_CHUNK_BYTES):
        pj.read_json(io.BytesIO(chunk), read_options=pj.ReadOptions(use_threads=False, block_size=len(chunk) + 1))


def duckdb_pass(path: Path) -> None:
    """The issue's DuckDB anchor: parse every record and reduce each trajectory to its weighted mean
    forecast per predictor (linear-front weights z - t + 1), one thread, so its process CPU compares
    with the single-threaded passes above. The predictor names are this file's."""
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    query = """
        WITH s AS (SELECT trajectory_id, len(steps) AS z, unnest(steps) AS st
                   FROM read_json(?, format = 'newline_delimited'))
        SELECT trajectory_id,
               sum((z - st.t + 1) * st.forecasts.verbal) / sum(z - st.t + 1) AS verbal,
               sum((z - st.t + 1) * st.forecasts.token_prob) / sum(z - st.t + 1) AS token_prob
        FROM s GROUP BY trajectory_id"""
    rows = con.execute(query, [str(path)]).fetchnumpy()
    assert len(rows["trajectory_id"]) > 0
    con.close()


def _read_only(path: Path) -> None:
    from tps_tracer.records.reading import iter_chunks

    for chunk in iter_chunks(path):
        assert chunk.fast  # the generated file is plain: no chunk may drop to the exact path


def _orjson_only(fn) -> None:  # type: ignore[no-untyped-def]
    """fn() with no chunk taken by pyarrow's JSON reader: what the second fast path is worth."""
    from tps_tracer.records import jsonl_fast

    shipped = jsonl_fast.MIN_BYTES
    jsonl_fast.MIN_BYTES = 1 << 62
    try:
        fn()
    finally:
        jsonl_fast.MIN_BYTES = shipped


def cpu_time(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


# name -> (target as a ratio to json.loads, or None for an anchor / no target)
TARGETS = {
    "json.loads": None,
    "orjson": None,
    "arrow-json": None,
    "duckdb": None,
    "read": None,
    "report": 1.5,
    "report b0": 1.0,
    "parquet": 0.5,
    "gate+baseline": 2.0,
    "convert": 1.5,
}


def variants(path: Path, tmp: Path, args: argparse.Namespace) -> dict[str, tuple[object, bool]]:
    """name -> (callable, whether its baseline is json.loads over both files)."""
    from tps_tracer.evaluation.chunked import report_from_path
    from tps_tracer.evaluation.report_options import ReportOptions
    from tps_tracer.scoring import parse_rules, parse_schedules

    rules, schedules = parse_rules("log,brier"), parse_schedules("all")
    b1000 = ReportOptions(rules=rules, schedules=schedules, bootstrap=1000)
    b0 = ReportOptions(rules=rules, schedules=schedules, bootstrap=0)
    out: dict[str, tuple[object, bool]] = {
        "json.loads": (lambda: json_pass(path), False),
        "orjson": (lambda: orjson_pass(path), False),
        "arrow-json": (lambda: arrow_json_pass(path), False),
        "read": (lambda: _read_only(path), False),
        "report": (lambda: report_from_path(path, b1000), False),
        "report b0": (lambda: report_from_path(path, b0), False),
    }
    try:
        import duckdb  # noqa: F401
    except ImportError:
        print("(duckdb anchor skipped: DuckDB is not installed; pip install -e '.[bench]')", file=sys.stderr)
    else:
        items = list(out.items())  # the anchor next to the other parsers' passes
        out = {**dict(items[:3]), "duckdb": (lambda: duckdb_pass(path), False), **dict(items[3:])}
    if args.fast_paths:
        out["read orjson"] = (lambda: _orjson_only(lambda: _read_only(path)), False)
        out["report b0 orjson"] = (lambda: _orjson_only(lambda: report_from_path(path, b0)), False)
    if args.parquet or args.convert:
        from tps_tracer.records.convert import jsonl_to_parquet

        pq_path = tmp / "bench.parquet"
        jsonl_to_parquet(path, pq_path)
        if args.parquet:
            out["parquet"] = (lambda: report_from_path(pq_path, b1000), False)
        if args.convert:
            out["convert"] = (lambda: jsonl_to_parquet(path, tmp / "convert.parquet"), False)
    if args.gate:
        from tps_tracer.evaluation.gate import GateCriteria, gate_paths

        base = write_file(tmp / "baseline.jsonl", args.trajectories, seed=1)
        crit = GateCriteria(vs_base_rate=True, bootstrap=1000)
        out["gate+baseline"] = (lambda: gate_paths([str(path)], crit, str(base)), True)
    return out


def timing(path: Path, tmp: Path, args: argparse.Namespace) -> None:
    runs = variants(path, tmp, args)
    base_path = tmp / "baseline.jsonl"
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for k in range(args.repeat):
        base = cpu_time(lambda: json_pass(path))
        both = base + cpu_time(lambda: json_pass(base_path)) if args.gate else base
        for name, (fn, over_both) in runs.items():
            t = base if name == "json.loads" else cpu_time(fn)  # type: ignore[arg-type]
            seconds[name].append(t)
            ratios[name].append(t / (both if over_both else base))
        # One line per round as it ends (to stderr): a long run cut short still leaves its rounds.
        done = "  ".join(f"{name} {seconds[name][-1]:.2f}s {ratios[name][-1]:.2f}x" for name in runs)
        print(f"round {k + 1}: {done}", file=sys.stderr, flush=True)
    size = path.stat().st_size / 1e6
    print(
        f"{args.trajectories} trajectories x 10 steps, {size:.0f} MB JSON Lines; process CPU time, "
        f"{args.repeat} interleaved rounds; ratio to the json.loads pass of the same round (gate: over both files)"
    )
    print(f"  {'variant':14s} {'median s':>9s}   {'min':>6s} {'median':>6s} {'max':>6s}   target")
    for name, r in ratios.items():
        target = TARGETS.get(name)
        mark = "" if target is None else f"<= {target}x " + ("met" if statistics.median(r) <= target else "NOT met")
        print(
            f"  {name:14s} {statistics.median(seconds[name]):9.2f}   {min(r):5.2f}x {statistics.median(r):5.2f}x "
            f"{max(r):5.2f}x   {mark}"
        )


def small_report(tmp: Path, repeat: int) -> None:
    """A 40-run report as a command, wall clock of a fresh process (what a user waits for)."""
    path = write_file(tmp / "small.jsonl", 40)
    cmd = [sys.executable, "-m", "tps_tracer.cli.main", "report", str(path), *OPTIONS]
    walls, bare = [], []
    for _ in range(repeat):
        for sink, argv in ((walls, cmd), (bare, [sys.executable, "-c", "pass"])):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            sink.append(time.perf_counter() - t0)
    print(
        f"  40-run report (wall, fresh process): median {statistics.median(walls):.2f} s "
        f"(min {min(walls):.2f}, max {max(walls):.2f}); `python -c pass` {statistics.median(bare):.2f} s; "
        "target <= 0.3 s"
    )


# Peak RSS survives fork and exec on Linux (ru_maxrss starts at the forking process's RSS), so
# the report runs as the grandchild of a fresh, small Python that reports the grandchild's wait4.
_WAIT4 = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
    "_, status, usage = os.wait4(p.pid, 0); print(usage.ru_maxrss, file=sys.stderr); "
    "sys.exit(os.waitstatus_to_exitcode(status))"
)


def peak_rss_mb(args: list[str], command: str = "report") -> tuple[float, float]:
    """(seconds, peak RSS in MB) of `tps-tracer report ARGS --json` (or `tps-tracer COMMAND ARGS`)
    in a fresh process."""
    cli = [sys.executable, "-m", "tps_tracer.cli.main", command, *args, *(["--json"] if command == "report" else [])]
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _WAIT4, *cli], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return time.perf_counter() - t0, int(out.stderr.strip().splitlines()[-1]) / 1024


def memory(tmp: Path) -> None:
    print("peak RSS of `tps-tracer report FILE --rules log,brier --weights all --bootstrap 1000 --json`")
    print("(at 1M also `tps-tracer convert FILE OUT.parquet` and the report on OUT.parquet)")
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
        if name.startswith("1M"):  # the same file converted, and the report on its Parquet copy
            pq_path = tmp / "mem.parquet"
            seconds, rss = peak_rss_mb([str(path), str(pq_path)], "convert")
            print(f"  {'  convert to Parquet':26s} {'':15s} {rss:7.0f} MB peak RSS   {seconds:6.1f} s")
            seconds, rss = peak_rss_mb([str(pq_path), *OPTIONS])
            size = pq_path.stat().st_size / 1e6
            print(f"  {'  report on the Parquet':26s} {size:7.0f} MB file   {rss:7.0f} MB peak RSS   {seconds:6.1f} s")
            pq_path.unlink()
        path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--parquet", action="store_true", help="also the report on the file's Parquet copy")
    ap.add_argument("--gate", action="store_true", help="also the gate with a baseline file of the same size")
    ap.add_argument("--convert", action="store_true", help="also jsonl_to_parquet")
    ap.add_argument("--fast-paths", action="store_true", help="also the read and report with orjson alone")
    ap.add_argument("--small", action="store_true", help="also a 40-run report as a command (wall clock)")
    ap.add_argument("--memory", action="store_true", help="peak RSS for 100k / 400k / 1M / one long trajectory")
    ap.add_argument("--memory-only", action="store_true", help="only the peak RSS figures")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.memory_only or args.memory:  # first: this process stays small while it spawns the measured ones
            memory(tmp)
            if args.memory_only:
                return
        path = write_file(tmp / "bench.jsonl", args.trajectories)
        timing(path, tmp, args)
        if args.small:
            small_report(tmp, args.repeat)
    print(
        f"(this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, "
        f"{os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
