"""Test support for the scale path: generated trajectory files and a report comparison to 1e-12."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

REASONS = (
    "clean",
    "clean",
    "clean",
    "max_steps",
    "max_steps",
    "parse_error",
    "tool_error",
    "env_terminated",
    "timeout",
    "other",
)


def trajectory_dicts(
    n: int,
    seed: int = 0,
    predictors: tuple[str, ...] = ("verbal", "token_prob", "entropy"),
    capture_lost: bool = False,
):
    """n records covering every stop reason, missing and absent forecasts, q_z on half the censored runs,
    empty trajectories, horizons beyond the observed steps and outcomes given on non-clean stops.
    capture_lost: also runs tps-tracer lost (off by default: the gate refuses such a sample)."""
    reasons = (*REASONS, "capture_lost") if capture_lost else REASONS
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        reason = reasons[i % len(reasons)] if i < len(reasons) else reasons[int(rng.integers(len(reasons)))]
        z = 0 if i % 97 == 13 else int(rng.integers(1, 9))
        steps = []
        for t in range(z):
            fc: dict[str, Any] = {}
            for j, name in enumerate(predictors):
                u = rng.random()
                if j > 0 and u < 0.03:
                    continue  # absent: the trajectory is skipped for this predictor
                fc[name] = None if (j > 0 and u < 0.06) else float(np.round(rng.random(), 6))
            if rng.random() < 0.1:
                fc = dict(reversed(list(fc.items())))  # key order varies
            step: dict[str, Any] = {"forecasts": fc}
            if rng.random() < 0.8:
                step = {"t": t + 1, **step}
            steps.append(step)
        rec: dict[str, Any] = {"trajectory_id": f"run-{seed}-{i}", "stop_reason": reason, "steps": steps}
        if reason == "clean":
            rec["outcome"] = int(rng.random() < 0.55)
        elif rng.random() < 0.1:
            rec["outcome"] = 1  # ignored and counted
        if rng.random() < 0.5:
            rec["horizon"] = max(z, 1) + int(rng.integers(0, 4))
        if reason != "clean" and rng.random() < 0.5:
            rec["q_z"] = float(np.round(rng.random(), 4))
        if rng.random() < 0.3:
            rec["metadata"] = {"agent": "planner", "task_id": f"task-{i}"}
        out.append(rec)
    return out


def write_jsonl(path: Path, records: list[dict[str, Any]], newline: str = "\n", bom: bool = False) -> Path:
    text = "".join(json.dumps(r) + newline for r in records)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def assert_reports_equal(a: Any, b: Any, where: str = "report", tol: float = 1e-12) -> None:
    """Same structure and strings; every number equal to `tol` (relative above 1, absolute below)."""
    if isinstance(a, dict):
        assert isinstance(b, dict), where
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_reports_equal(a[k], b[k], f"{where}.{k}", tol)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_reports_equal(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, (int, float)):
        assert math.isfinite(a) == math.isfinite(b), f"{where}: {a} != {b}"
        assert abs(a - b) <= tol * max(1.0, abs(a)), f"{where}: {a!r} != {b!r} (diff {a - b:.3g})"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"
