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

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

from tps_tracer.cli.gate_cmd import _criteria, _settings
from tps_tracer.evaluation.bootstrap import bootstrap_means, trajectory_keys
from tps_tracer.evaluation.gate import FALSE_ALARM, NON_INFERIORITY, REGRESSION, compare, decision, evaluate_gate
from tps_tracer.synthetic import World, simulate_runs, to_records

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
        cmp = compare(cand, IDS, base, IDS, BOOTSTRAP, r)
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


# -- The shipped configurations, end to end (issue 47 item 1) ------------------------------------
#
# Every gate configuration that ships (the GitHub workflow's settings file, alone and with a
# baseline, and the README's and docs' example lines) must PASS an unchanged agent and FAIL a
# clearly worse one at the sample size its README names (200 tasks). Each replication runs the real
# gate on records: a candidate and a baseline run the same tasks (the same theta) with fresh
# evidence and outcomes; the worse candidate is the overconfident forecaster of the same runs'
# truthful q_t. `python tests/test_gate_simulation.py REPS` prints the table in docs/gate.md.

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TOML = str(ROOT / "integrations" / "github-actions" / "tps-gate.toml")
SHIPPED = {  # label -> (settings as `tps-tracer gate` reads them, with a baseline?)
    "tps-gate.toml": ({"config": SHIPPED_TOML}, False),
    "tps-gate.toml --baseline": ({"config": SHIPPED_TOML}, True),
    "README: --vs-base-rate --margin 0.05": ({"predictor": "verbal", "vs_base_rate": True, "margin": 0.05}, False),
    "README: --baseline --margin 0.02": ({"margin": 0.02}, True),
    "docs: --baseline --test non-inferiority --margin 0.1": ({"test": NON_INFERIORITY, "margin": 0.1}, True),
}
README_TASKS = 200  # integrations/github-actions/README.md: `tps-tracer demo --tasks 200`
WORLD = World(parse_error_rate=0.01)  # ~5% informative stops, within the shipped max-excluded-share 0.2
VERDICTS = ("pass", "cannot decide", "fail", "unusable")


def shipped_verdicts(label: str, tasks: int, agent: str, reps: int, seed: int = 0) -> dict[str, float]:
    """The share of each verdict over `reps` seeded replications (the candidate: `agent`)."""
    settings, with_baseline = SHIPPED[label]
    crit = _criteria(_settings(argparse.Namespace(**{"config": None, **settings})))
    counts = dict.fromkeys(VERDICTS, 0)
    for r in range(seed, seed + reps):
        theta = np.random.default_rng(r).beta(WORLD.prior_a, WORLD.prior_b, tasks)
        cand = to_records(simulate_runs(tasks, 2 * r + 1, WORLD, theta), [agent], r, names={agent: "verbal"})
        base = None
        if with_baseline:
            base_runs = simulate_runs(tasks, 2 * r + 2, WORLD, theta)
            base = to_records(base_runs, ["truthful"], r, names={"truthful": "verbal"})
        counts[evaluate_gate(cand, crit, base)["verdict"]] += 1
    return {k: v / reps for k, v in counts.items()}


SHIPPED_REPS = 100  # MC standard error of a 5% rate: 2.2 points


@pytest.mark.slow
@pytest.mark.parametrize("label", list(SHIPPED))
def test_every_shipped_config_passes_an_unchanged_agent_and_fails_a_clearly_worse_one(label):
    same = shipped_verdicts(label, README_TASKS, "truthful", SHIPPED_REPS)
    # At most the declared false-alarm bound (5%) of FAILs, within 2 MC SEs, and a PASS otherwise.
    bound = FALSE_ALARM + 2 * float(np.sqrt(FALSE_ALARM * (1 - FALSE_ALARM) / SHIPPED_REPS))
    assert same["fail"] <= bound and same["unusable"] == 0, same
    assert same["pass"] >= 0.9, same
    worse = shipped_verdicts(label, README_TASKS, "overconfident", 30, seed=10_000)
    assert worse["fail"] == 1.0, worse


def _table(reps: int) -> None:
    print("| config | tasks | unchanged: pass | cannot decide | fail | worse: fail |")
    print("|---|---|---|---|---|---|")
    for label in SHIPPED:
        for tasks in (100, 200, 300):
            same = shipped_verdicts(label, tasks, "truthful", reps)
            worse = shipped_verdicts(label, tasks, "overconfident", max(reps // 4, 25), seed=10_000)
            if same["unusable"] == 1.0:
                print(f"| {label} | {tasks} | unusable (min-n) | | | |", flush=True)
                continue
            print(
                f"| {label} | {tasks} | {same['pass']:.3f} | {same['cannot decide']:.3f} | {same['fail']:.3f} "
                f"| {worse['fail']:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    _table(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
