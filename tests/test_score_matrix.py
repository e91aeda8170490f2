"""The vectorised scorer against a straightforward per-trajectory loop written from the paper."""

import math

import numpy as np
import pytest

from tps_tracer import ReportOptions, StepRecord, TrajectoryRecord, evaluate


def _s(p, y, rule):
    if rule == "log":
        p = min(max(p, 1e-6), 1 - 1e-6)
        return math.log(p) if y == 1 else math.log(1 - p)
    if rule == "brier":
        return -((p - y) ** 2)
    raise AssertionError


def _w(t, T, schedule):
    if schedule == "linear-front":
        return 2 * (T - t + 1) / (T * (T + 1))
    if schedule == "uniform":
        return 1 / T
    if schedule == "exponential-front":
        return 2.0 ** -(t - 1) / (2 * (1 - 2.0**-T))
    return 2 * t / (T * (T + 1))


def _loop_score(rec, predictor, rule, schedule, eta):
    """The paper's sum, a gap (null or non-numeric) scored with the last stated forecast, 0.5 before one."""
    T = rec.effective_horizon
    total, last = 0.0, 0.5
    for t, step in enumerate(rec.steps, start=1):
        f = step.forecasts[predictor]
        last = f if isinstance(f, float) else last
        total += _w(t, T, schedule) * (eta * _s(last, 1, rule) + (1 - eta) * _s(last, 0, rule))
    return total


@pytest.fixture(scope="module")
def mixed_records():
    rng = np.random.default_rng(8)
    recs = []
    for i in range(300):
        kind = rng.choice(["clean", "max_steps", "parse_error", "tool_error"], p=[0.5, 0.3, 0.1, 0.1])
        z = int(rng.integers(1, 9))
        horizon = z if kind == "clean" else int(z + rng.integers(0, 4))
        steps = []
        for t in range(z):
            fc = {"a": float(np.round(rng.random(), 4)), "b": float(np.round(rng.random(), 4))}
            if rng.random() < 0.02:
                fc["b"] = None if rng.random() < 0.5 else "high"
            steps.append(StepRecord(t=t + 1, forecasts=fc))
        q_z = float(np.round(rng.random(), 3)) if kind == "max_steps" and rng.random() < 0.7 else None
        recs.append(
            TrajectoryRecord(
                trajectory_id=f"r{i}",
                stop_reason=kind,
                outcome=int(rng.random() < 0.5) if kind == "clean" else None,
                horizon=horizon,
                q_z=q_z,
                steps=steps,
            )
        )
    return recs


@pytest.mark.parametrize("schedule", ["linear-front", "uniform", "exponential-front", "linear-back"])
def test_vectorised_means_match_the_loop(mixed_records, schedule):
    rep = evaluate(
        mixed_records,
        ReportOptions(rules=["log", "brier"], schedules=[schedule], bootstrap=0, base_rate=False),
    )
    got = {(r["predictor"], r["rule"], r["censoring"]): r for r in rep["scores"]}
    for predictor in ("a", "b"):
        usable = [r for r in mixed_records if r.steps]  # carry-forward scores every run with steps
        for rule in ("log", "brier"):
            modes = {
                "complete-only": [(r, r.outcome) for r in usable if r.stop_reason == "clean"],
                "simple": [
                    (r, r.outcome if r.stop_reason == "clean" else 0.0)
                    for r in usable
                    if r.stop_reason in ("clean", "max_steps")
                ],
                "exact": [
                    (r, r.outcome if r.stop_reason == "clean" else r.q_z)
                    for r in usable
                    if r.stop_reason == "clean" or (r.stop_reason == "max_steps" and r.q_z is not None)
                ],
            }
            for mode, members in modes.items():
                expected = np.mean([_loop_score(r, predictor, rule, schedule, e) for r, e in members])
                row = got[(predictor, rule, mode)]
                assert row["n"] == len(members)
                assert row["mean"] == pytest.approx(expected, rel=1e-12)
            missing = sum(1 for r in usable if r.stop_reason == "max_steps" and r.q_z is None)
            assert got[(predictor, rule, "exact")]["n_missing_q_z"] == missing
    gaps = rep["missing_forecasts"]["predictors"]["b"]
    working = [r for r in mixed_records if r.stop_reason in ("clean", "max_steps") and r.steps]
    n_bad = sum(1 for r in working for s in r.steps if not isinstance(s.forecasts.get("b"), float))
    assert gaps["missing_steps"] == n_bad > 0
