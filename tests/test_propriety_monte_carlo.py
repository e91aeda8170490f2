"""Strict propriety by Monte Carlo on a success martingale whose q_t is known exactly."""

import numpy as np
import pytest

from tps_tracer.scoring import StepLayout, branch_pairs, mix
from tps_tracer.synthetic import FORECASTERS, World, simulate_runs

RULES = ["log", "brier", "beta(2,4)", "beta(0.5,0.5)"]
SCHEDULES = ["linear-front", "uniform", "exponential-front", "linear-back"]


@pytest.fixture(scope="module")
def runs():
    # Every run completes (no budget, no parse errors): complete-observation TPS (Theorem 1).
    world = World(min_length=4, max_length=8, budget=8, parse_error_rate=0.0)
    return simulate_runs(40_000, seed=11, world=world)


def _distortions(q, rng):
    return {
        "overconfident": FORECASTERS["overconfident"](q, 0.0),
        "underconfident": FORECASTERS["underconfident"](q, 0.0),
        "noisy": FORECASTERS["noisy"](q, rng.normal(0.0, 1.0, q.shape)),
        "shrunk-to-half": 0.5 + 0.8 * (q - 0.5),  # a mild distortion: a hard case
        "lagged": np.r_[q[:1], q[:-1]],  # yesterday's truth (crosses trajectories: still not q_t)
    }


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_truthful_trace_has_highest_expected_tps(runs, rule, schedule):
    layout = StepLayout.from_lengths(np.diff(runs.offsets), runs.horizon)
    y = runs.outcome
    truthful = mix(*branch_pairs(runs.q, layout, rule, schedule), y)
    rng = np.random.default_rng(3)
    for name, f in _distortions(runs.q, rng).items():
        other = mix(*branch_pairs(np.clip(f, 0, 1), layout, rule, schedule), y)
        diff = truthful - other  # paired per trajectory
        mean, se = diff.mean(), diff.std(ddof=1) / np.sqrt(diff.size)
        assert mean > 4 * se, f"{name}: truthful advantage {mean:.3g} not > 4 SE ({se:.3g})"


def test_censored_exact_score_with_true_q_z_is_unbiased_for_complete_tps():
    """Conditional projection: E[TPS_cen,exact(q_Z)] equals E[complete-prefix score] (tower property)."""
    world = World(min_length=12, max_length=12, budget=5, parse_error_rate=0.0)
    runs = simulate_runs(60_000, seed=5, world=world)  # every run censored at Z = 5 of T = 5
    layout = StepLayout.from_lengths(np.diff(runs.offsets), runs.horizon)
    s1, s0 = branch_pairs(runs.q, layout, "log", "linear-front")
    exact = mix(s1, s0, runs.q_z())
    oracle = mix(s1, s0, runs.outcome)  # the prefix scored against the hidden true outcome
    diff = exact - oracle
    assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(diff.size)
    simple = mix(s1, s0, 0.0)
    assert simple.mean() < oracle.mean()  # q_Z ~ 0 is pessimistic here (success mass is not zero)
