"""Memory per finished trajectory: the accumulator's row mode against its summary mode.

    .venv/bin/python tests/benchmarks/bench_summary_memory.py [N]

Each scenario runs in a fresh subprocess and reports the growth of resident memory (RSS,
from /proc/self/statm after a gc, as bench_memory.py) divided by N. N runs of 10 steps with
two predictors each; "abandoned": every run stops as "other" (the issue's 200k abandoned
runs); "graded": every run is clean with its outcome (the summary keeps its four Phi
summaries and outcome per predictor, for the rank diagnostics). A snapshot is taken at the
end in both modes (and its memory released) so both pay for the same work.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def run(mode: str, scenario: str, n: int) -> dict[str, float]:
    from tps_tracer import Accumulator

    acc = Accumulator(predictors=["a", "b"], bootstrap=200, mode=mode, idle_timeout=None, batch_size=256)
    acc.observe("warm", {"a": 0.5, "b": 0.5})
    acc.stop("warm", "clean")
    acc.resolve("warm", outcome=1)
    acc.snapshot()
    before = rss()
    for i in range(n):
        tid = f"run-{i}"
        for t in range(10):
            acc.observe(tid, {"a": (i % 97 + t) / 110, "b": 0.5})
        if scenario == "abandoned":
            acc.stop(tid, "other")
        else:
            acc.stop(tid, "clean")
            acc.resolve(tid, outcome=i % 2)
    acc.flush()
    grown = rss() - before
    state_bytes = len(acc.state())
    return {"bytes_per_run": grown / n, "state_bytes_per_run": state_bytes / n}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(run(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    print(f"N = {n} runs of 10 steps, 2 predictors")
    for scenario in ("abandoned", "graded"):
        for mode in ("rows", "summary"):
            cmd = [sys.executable, __file__, "--child", mode, scenario, str(n)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            print(
                f"{scenario:9s} {mode:7s}: RSS growth {r['bytes_per_run']:8.1f} B/run,"
                f" state() {r['state_bytes_per_run']:8.1f} B/run"
            )


if __name__ == "__main__":
    main()
