"""Start-up cost of the command line, against a bare `python -c pass` measured in the same run.

    .venv/bin/python tests/benchmarks/bench_startup.py [--repeat 7]

Prints the median child CPU time (user + system, from getrusage: the wall clock of a shared
machine counts other people's work) of: python -c pass (the baseline), `import numpy` (a
floor for anything that computes), `import tps_tracer`, `tps-tracer --help`, `tps-tracer gate
--help`, and `tps-tracer report` on a 40-trajectory file (imports plus the work), each with
its ratio to the baseline. Targets: `--help` under 0.5 s (issue 17), the 40-run report under
0.3 s (issue 33). The cases are interleaved round by round so load drifts hit all alike.

Bytecode: an installed package has its .pyc files (pip compiles them), but a dev shell with
PYTHONDONTWRITEBYTECODE=1 recompiles every tps_tracer module on each command (~0.1 s CPU of the
40-run report). By default the children get a private PYTHONPYCACHEPREFIX (a temporary
directory, so the tree stays clean) and one warm-up run, i.e. what an installed user sees;
--no-bytecode-cache measures the recompiling case.
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
from pathlib import Path


def child_cpu_seconds(cmd: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-bytecode-cache", action="store_true", help="children recompile every module")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as d:
        small = Path(d) / "small.jsonl"
        small.write_text(
            "".join(
                json.dumps(
                    {
                        "trajectory_id": f"r{i}",
                        "stop_reason": "clean",
                        "outcome": i % 2,
                        "steps": [{"forecasts": {"verbal": 0.1 * (i % 9)}}] * 3,
                    }
                )
                + "\n"
                for i in range(40)
            ),
            encoding="utf-8",
        )
        cli = [py, "-m", "tps_tracer.cli.main"]
        cases = [
            ("python -c pass (baseline)", [py, "-c", "pass"]),
            ("import numpy (floor)", [py, "-c", "import numpy"]),
            ("import tps_tracer", [py, "-c", "import tps_tracer"]),
            ("tps-tracer --help", [*cli, "--help"]),
            ("tps-tracer gate --help", [*cli, "gate", "--help"]),
            ("tps-tracer report (40 runs)", [*cli, "report", str(small)]),
        ]
        env = dict(os.environ)
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(d) / "pycache")
            for _, cmd in cases:  # warm-up: writes the bytecode cache
                child_cpu_seconds(cmd, env)
        times: dict[str, list[float]] = {name: [] for name, _ in cases}
        for _ in range(args.repeat):
            for name, cmd in cases:
                times[name].append(child_cpu_seconds(cmd, env))
        targets = {"tps-tracer --help": "   (target < 0.5 s)", "tps-tracer report (40 runs)": "   (target < 0.3 s)"}
        base = statistics.median(times[cases[0][0]])
        cache = "recompiling every module" if args.no_bytecode_cache else "bytecode cached"
        print(f"child CPU, medians of {args.repeat} interleaved runs, {cache}")
        for name, _ in cases:
            t = statistics.median(times[name])
            print(f"  {name:30s} {t:6.3f} s   {t / base:5.1f}x baseline{targets.get(name, '')}")


if __name__ == "__main__":
    main()
