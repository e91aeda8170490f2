"""The gate's error rates and CI coverage, measured on simulated runs whose truth is known (issue 30).

Each simulated run is one task: its success probability theta is drawn from THETAS, the agent
states forecasts p_1..p_T that sharpen from 0.5 toward theta (the candidate of the regression
scenario shrinks them toward 0.5 on the logit scale), the outcome is Y ~ Bernoulli(theta), and the run's
score is the weighted log score sum_t w_t [Y log p_t + (1 - Y) log(1 - p_t)]. Its population
mean is exact: sum over theta of sum_t w_t [theta log p_t + (1 - theta) log(1 - p_t)] / 4. Both
sides run the same tasks (paired by task id) with independent outcomes.

The replicates go through the gate's own code: `compare` pairs and bootstraps the difference
exactly as the vs_baseline check does, `decision` applies the test, and the TPS CI is the
gate's bootstrap of the score column. The README's gate section quotes these figures.
"""

from __future__ import annotations

import numpy as np
import pytest

from tps_tracer.evaluation.bootstrap import bootstrap_means, trajectory_keys
from tps_tracer.evaluation.gate_stats import NON_INFERIORITY, REGRESSION, Side, compare, decision

THETAS = np.array([0.2, 0.4, 0.6, 0.8])
T = 4
W = np.arange(T, 0, -1) / np.arange(T, 0, -1).sum()  # linear-front: early steps weigh more
N_TASKS = 120
REPLICATIONS = 1000  # MC standard error of a 2.5% rate: 0.5 points; of a 95% coverage: 0.7 points
BOOTSTRAP = 500  # bounds the suite's time (~1 min); percentile CIs are stable well before
IDS = [f"task-{i}" for i in range(N_TASKS)]
KEYS = trajectory_keys(IDS)


def forecasts(theta: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """(n, T): from 0.5 at t = 0 toward theta at t = T, optionally scaled on the logit scale."""
    p = 0.5 + (theta[:, None] - 0.5) * (np.arange(1, T + 1) / T)[None, :]
    if scale != 1.0:
        p = 1.0 / (1.0 + np.exp(-scale * np.log(p / (1.0 - p))))
    return p


def expected_score(scale: float = 1.0) -> float:
    p = forecasts(THETAS, scale)
    per_theta = (THETAS[:, None] * np.log(p) + (1 - THETAS[:, None]) * np.log(1 - p)) @ W
    return float(per_theta.mean())


def run_scores(theta: np.ndarray, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    y = (rng.random(theta.size) < theta)[:, None]
    p = forecasts(theta, scale)
    return np.where(y, np.log(p), np.log(1 - p)) @ W


SCALE = 0.5  # the regressed candidate: same ranking, forecasts pulled toward 0.5 (less informative)
MU = expected_score()
MARGIN = MU - expected_score(SCALE)  # the regression's true size is the margin


def simulate(scale: float, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    fail_reg, pass_ni, fail_ni, cover_delta, cover_tps = [], [], [], [], []
    truth = expected_score(scale) - MU
    margin = MARGIN + 0.0
    for r in range(REPLICATIONS):
        theta = rng.choice(THETAS, N_TASKS)  # the tasks, shared by both sides
        cand, base = run_scores(theta, rng, scale), run_scores(theta, rng)
        cmp = compare(Side(cand, IDS, IDS), Side(base, IDS, IDS), BOOTSTRAP, r)
        assert cmp.paired
        reg = decision("vs_baseline", cmp.point, cmp.replicates, -0.0, "", REGRESSION)
        ni = decision("vs_baseline", cmp.point, cmp.replicates, -margin, "", NON_INFERIORITY)
        fail_reg.append(not reg["passed"])
        pass_ni.append(ni["passed"])
        fail_ni.append(not ni["passed"])
        cover_delta.append(reg["ci_low"] <= truth <= reg["ci_high"])
        lo, hi = bootstrap_means(cand[:, None], KEYS, BOOTSTRAP, r).ci()
        cover_tps.append(lo[0] <= expected_score(scale) <= hi[0])
    rates = {"fail_reg": fail_reg, "pass_ni": pass_ni, "fail_ni": fail_ni, "cover_delta": cover_delta}
    return {k: float(np.mean(v)) for k, v in {**rates, "cover_tps": cover_tps}.items()}


@pytest.fixture(scope="module")
def identical():
    return simulate(1.0, seed=2026)


@pytest.fixture(scope="module")
def regressed():
    return simulate(SCALE, seed=2027)


def _mc_se(p: float) -> float:
    return float(np.sqrt(p * (1 - p) / REPLICATIONS))


def test_the_known_truth_is_a_real_regression():
    assert 0.02 < MARGIN < 0.1  # a drop a team would care about, about 2 SEs of the difference at 120 tasks


def test_an_identical_candidate_fails_the_default_test_at_the_documented_rate(identical):
    # Documented: 2.5% (the one-sided level of the 95% CI's upper bound); within 3 MC SEs.
    assert abs(identical["fail_reg"] - 0.025) <= 3 * _mc_se(0.025), identical


def test_a_regression_equal_to_the_margin_passes_non_inferiority_at_most_at_the_nominal_level(regressed):
    assert regressed["pass_ni"] <= 0.025 + 2 * _mc_se(0.025), regressed


@pytest.mark.parametrize("scenario", ["identical", "regressed"])
def test_coverage_of_the_95_percent_cis_of_tps_and_of_the_paired_difference(scenario, request):
    res = request.getfixturevalue(scenario)
    assert 0.93 <= res["cover_tps"] <= 0.97, res
    assert 0.93 <= res["cover_delta"] <= 0.97, res
