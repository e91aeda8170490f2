"""Start-up cost of the command line, against a bare `python -c pass` measured in the same run.

    .venv/bin/python tests/benchmarks/bench_startup.py [--repeat 7]

Prints the median wall time of: python -c pass (the baseline), `tps-tracer --help`,
`tps-tracer gate --help`, `import tps_tracer`, and `tps-tracer report` on a 40-trajectory
file (what a user waits for on a small file: imports plus the work), each with its ratio to
the baseline. Target (issue 17): `--help` under 0.5 s. The machine is shared: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def median_seconds(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
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
            ("import tps_tracer", [py, "-c", "import tps_tracer"]),
            ("tps-tracer --help", [*cli, "--help"]),
            ("tps-tracer gate --help", [*cli, "gate", "--help"]),
            ("tps-tracer report (40 runs)", [*cli, "report", str(small)]),
        ]
        base = None
        print(f"medians of {args.repeat} runs (2 shared cores: compare ratios)")
        for name, cmd in cases:
            t = median_seconds(cmd, args.repeat)
            base = base or t
            target = "   (target < 0.5 s)" if name == "tps-tracer --help" else ""
            print(f"  {name:30s} {t:6.3f} s   {t / base:5.1f}x baseline{target}")


if __name__ == "__main__":
    main()
