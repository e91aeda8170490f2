"""Steps without a forecast (issue 47 item 3): the proper default cannot be gamed, the estimates can;
batch, chunked states and the accumulator score gaps alike; the simulation of docs/report.md.

The world (tests/missing_forecast_support.py) knows the true success-probability process q_t, so
the expected effect of any omission under carry-forward has a closed form to check the Monte Carlo
against: replacing F_t = q_t by the last statement q_s changes the expected log score of step t by
q_t log(q_s / q_t) + (1 - q_t) log((1 - q_s) / (1 - q_t)) = -KL(q_t || q_s) <= 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from missing_forecast_support import (
    World,
    best_gain,
    mean,
    scores,
    strategies,
    table,
    world,
)
from scale_support import assert_reports_equal

from tps_tracer import Accumulator
from tps_tracer.constants import MISSING_POLICIES
from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.rows import filled_by_policy
from tps_tracer.records import read_trajectories, to_arrays
from tps_tracer.scoring import get_schedule


def _kl_gain(w: World, silent: np.ndarray) -> float:
    """The closed-form expected gain of an omission pattern under carry-forward (module docstring)."""
    q = w.q
    stated = np.where(silent, np.nan, q)
    filled = filled_by_policy(stated, w.first, w.z, "carry-forward")
    weights = get_schedule("linear-front").step_weights(w.t.astype(float), np.repeat(w.z, w.z).astype(float))
    filled = np.clip(filled, 1e-6, 1 - 1e-6)
    per_step = q * np.log(filled / q) + (1 - q) * np.log((1 - filled) / (1 - q))
    return float(np.sum(weights * per_step) / w.z.size)


def test_no_omission_pattern_raises_the_expected_score_under_the_default():
    """Every gaming strategy loses under carry-forward, by what the closed form says; the estimates and
    dropping the run pay for the same omissions."""
    w = world(40_000, seed=3)
    full = scores(w, w.q, "carry-forward")
    for name, silent in strategies(w).items():
        got = scores(w, np.where(silent, np.nan, w.q), "carry-forward")
        diff = got - full  # common random numbers: the same runs, outcomes and signals
        se = np.std(diff, ddof=1) / np.sqrt(diff.size)
        expected = _kl_gain(w, silent)
        assert expected < 0, name
        assert abs(diff.mean() - expected) < 4 * se + 1e-9, name
    gains = {policy: best_gain(w, policy) for policy in MISSING_POLICIES}
    assert gains["carry-forward"][0] < 0
    # the agent that states once and then stays silent when unsure gains under the estimates and drop-run
    unsure = "states once, then silent while |q-0.5|<0.3"
    silent = np.where(strategies(w)[unsure], np.nan, w.q)
    for policy in ("fill-backwards", "skip-renormalise", "drop-run"):
        assert gains[policy][0] > 0.01, policy
    for policy in ("fill-backwards", "drop-run"):  # skip-renormalise pays most for silence on whole runs
        assert mean(scores(w, silent, policy)) > mean(scores(w, w.q, policy)) + 0.01, policy


def test_the_default_report_does_not_reward_silence(tmp_path: Path):
    """Through the file report with its defaults: the agent that goes silent when unsure scores below
    the one that states every step (the old default dropped its gapped runs and ranked it first)."""
    w = world(600, seed=11)
    silent = strategies(w)["states once, then silent while |q-0.5|<0.3"]
    files = {}
    for name, mask in (("honest", np.zeros_like(silent)), ("silent", silent)):
        lines = []
        for i, (start, z) in enumerate(zip(w.first.tolist(), w.z.tolist(), strict=True)):
            steps = [
                {"t": t + 1, "forecasts": {"verbal": None if mask[start + t] else float(w.q[start + t])}}
                for t in range(z)
            ]
            lines.append(
                json.dumps({"trajectory_id": f"r{i}", "stop_reason": "clean", "outcome": int(w.y[i]), "steps": steps})
            )
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("\n".join(lines) + "\n")
    opts = ReportOptions(rules=["log"], bootstrap=0, base_rate=False)
    means = {}
    for name, path in files.items():
        report = report_from_path(path, opts)
        (row,) = [r for r in report["scores"] if r["censoring"] == "complete-only"]
        means[name] = row["mean"]
        assert row["n"] == 600  # every run scored: none dropped for a gap
    assert means["silent"] < means["honest"]
    gaps = report["missing_forecasts"]["predictors"]["verbal"]
    assert gaps["missing_steps"] == int(silent.sum()) and gaps["runs"] == 600
    # the cost of missingness is carry-forward minus skip-renormalise, over the same runs
    skip = report_from_path(
        files["silent"], ReportOptions(rules=["log"], bootstrap=0, base_rate=False, missing="skip-renormalise")
    )
    (skip_row,) = [r for r in skip["scores"] if r["censoring"] == "complete-only"]
    assert skip_row["n"] == 600  # every run states at step 1
    assert gaps["cost"] == pytest.approx(means["silent"] - skip_row["mean"], rel=1e-9)


@pytest.mark.parametrize("policy", list(MISSING_POLICIES))
def test_online_equals_batch_equals_partial_states_with_gaps(tmp_path: Path, policy: str):
    """Gaps, runs that never state a predictor, and a predictor first met late: the accumulator (row and
    summary mode), the chunked reader and the whole-file report give one report per policy."""
    rng = np.random.default_rng(5)
    records = []
    for i in range(160):
        z = int(rng.integers(0 if i % 37 == 0 else 1, 7))
        steps = []
        for t in range(z):
            fc: dict[str, float | None] = {"a": None if rng.random() < 0.3 else float(rng.random())}
            if i >= 40 and i % 3:  # "b" first met at run 40; a third of the later runs never state it
                fc["b"] = None if rng.random() < 0.2 else float(rng.random())
            steps.append({"t": t + 1, "forecasts": fc})
        stop = "max_steps" if i % 5 == 0 else "clean"
        records.append(
            {
                "trajectory_id": f"r{i}",
                "stop_reason": stop,
                "outcome": int(rng.random() < 0.5) if stop == "clean" else None,
                "steps": steps,
            }
        )
    path = tmp_path / "gaps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    opts = ReportOptions(rules=["log", "brier"], bootstrap=50, missing=policy)
    whole = build_report(to_arrays(read_trajectories(path)), opts)
    assert_reports_equal(whole, report_from_path(path, opts, chunk_bytes=2_000))
    for mode in ("rows", "summary"):
        acc = Accumulator(rules=["log", "brier"], bootstrap=50, missing=policy, mode=mode, batch_size=16)
        for r in records:
            for step in r["steps"]:
                acc.observe(r["trajectory_id"], {k: v for k, v in step["forecasts"].items() if v is not None})
            acc.stop(r["trajectory_id"], r["stop_reason"], outcome=r["outcome"])
        snap = acc.snapshot()
        acc.close()
        snap.pop("online")
        assert_reports_equal(whole, snap)


def test_the_simulation_table_holds_its_shape():
    """A small run of the docs table: the default is the only policy without a gain from omission; it is
    biased down under innocent gaps, the estimates less so; it still ranks calibrated above overconfident."""
    rows = table(n=300, reps=120, big=60_000)
    assert rows["carry-forward"]["best_gain"] < 0
    assert all(rows[p]["best_gain"] > 0.01 for p in ("fill-backwards", "skip-renormalise", "drop-run"))
    assert rows["carry-forward"]["bias"] < -0.01
    assert abs(rows["skip-renormalise"]["bias"]) < abs(rows["carry-forward"]["bias"]) / 2
    assert rows["carry-forward"]["ranking"] > 0.85
    assert rows["skip-renormalise"]["false_alarms"] < rows["carry-forward"]["false_alarms"]


def test_runs_that_never_state_are_counted_and_a_predictor_nobody_states_is_not_listed(tmp_path: Path):
    """A run silent at every step is scored (at 0.5 under carry-forward), so the report and the gate
    must say how many there are; a predictor no run states is skipped, not a row of gaps."""
    lines = []
    for i in range(40):
        silent = i % 4 == 0  # 10 runs state nothing; the others skip their 2nd step
        steps = [
            {"t": t + 1, "forecasts": {"verbal": None if silent or t == 1 else 0.7, "token_prob": None}}
            for t in range(3)
        ]
        lines.append(json.dumps({"trajectory_id": f"r{i}", "stop_reason": "clean", "outcome": i % 2, "steps": steps}))
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = report_from_path(path, ReportOptions(rules=["log"], bootstrap=0, base_rate=False))
    block = report["missing_forecasts"]["predictors"]
    assert set(block) == {"verbal"}
    assert {s["predictor"] for s in report["skipped_predictors"]} == {"token_prob"}
    g = block["verbal"]
    assert (g["runs"], g["runs_affected"], g["runs_silent"]) == (40, 40, 10)
    assert (g["missing_steps"], g["steps"]) == (10 * 3 + 30, 120)
