"""A world with a known success-probability process, for the missing-forecast policies.

Each run has a prior success probability pi ~ Beta(2, 2) and Z ~ U{3..10} steps; Y ~ Bernoulli(pi).
At step t the agent sees a signal s_t ~ N(+mu, 1) if Y = 1, N(-mu, 1) if not, so the true
prefix-conditioned success probability is q_t = sigmoid(logit pi + 2 mu (s_1 + ... + s_t)) (Bayes;
the paper's q_t). The calibrated agent states q_t, the overconfident one sigmoid(2 logit q_t).
Every run is complete (T = Z) and scored with the log rule and the linear-front schedule through
the package's one kernel (`score_rows`), under each policy of evaluation/rows.py.

`python tests/missing_forecast_support.py` prints the table of docs/report.md ("Steps without a forecast").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import MISSING_POLICIES
from tps_tracer.evaluation.rows import flat_weights, score_rows
from tps_tracer.scoring import get_rule, get_schedule

FloatArray = NDArray[np.float64]
RULE = get_rule("log")
SCHEDULE = get_schedule("linear-front")
MU = 0.6
Z95 = 1.959963984540054


@dataclass
class World:
    z: NDArray[np.int64]  # steps per run
    y: FloatArray  # outcome per run
    q: FloatArray  # flat: true q_t
    t: NDArray[np.int64]  # flat: 1-based step index

    @property
    def first(self) -> NDArray[np.int64]:
        return np.concatenate(([0], np.cumsum(self.z)[:-1]))


def world(n: int, seed: int) -> World:
    rng = np.random.default_rng(seed)
    z = rng.integers(3, 11, n)
    pi = rng.beta(2.0, 2.0, n)
    y = (rng.random(n) < pi).astype(np.float64)
    owner = np.repeat(np.arange(n), z)
    s = rng.normal(np.where(y[owner] == 1.0, MU, -MU), 1.0)
    run_sum = np.cumsum(2.0 * MU * s)
    starts = np.concatenate(([0], np.cumsum(z)[:-1]))
    before = np.repeat(np.concatenate(([0.0], run_sum))[starts], z)  # cumsum up to the run's start
    logit = np.log(pi / (1 - pi))[owner] + run_sum - before
    t = np.arange(owner.size) - np.repeat(starts, z) + 1
    return World(z, y, 1.0 / (1.0 + np.exp(-logit)), t)


def overconfident(q: FloatArray) -> FloatArray:
    return 1.0 / (1.0 + np.exp(-2.0 * np.log(q / (1 - q))))


def scores(w: World, forecasts: FloatArray, policy: str) -> FloatArray:
    """Per-run TPS (log, linear-front) under the policy; NaN for a run the policy does not score."""
    rows = score_rows([forecasts], w.z, flat_weights(w.z, w.z.astype(float), [SCHEDULE]), [RULE], 1, False, policy)
    s1, s0 = rows.pairs[0, :, 0, 0, 0], rows.pairs[0, :, 0, 0, 1]
    return np.where(rows.usable[0], w.y * s1 + (1 - w.y) * s0, np.nan)


def mean(x: FloatArray) -> float:
    return float(np.nanmean(x))


# -- omission patterns: a mask of the steps left silent ------------------------------------------


def mcar(w: World, rate: float, seed: int) -> NDArray[np.bool_]:
    """Innocent: each step silent with probability `rate`, whatever the agent knows."""
    return np.random.default_rng(seed).random(w.q.size) < rate


def strategies(w: World) -> dict[str, NDArray[np.bool_]]:
    """Omissions a gaming agent might try (it knows q_t when it decides)."""
    out: dict[str, NDArray[np.bool_]] = {}
    q1 = np.repeat(w.q[w.first], w.z)
    for d in (0.1, 0.2, 0.3, 0.4):
        out[f"states once, then silent while |q-0.5|<{d}"] = (w.t > 1) & (np.abs(w.q - 0.5) < d)
        out[f"silent on the whole run if |q1-0.5|<{d}"] = np.abs(q1 - 0.5) < d
    for c in (0.2, 0.35, 0.5):
        out[f"silent while q<{c}"] = w.q < c
        out[f"states once, then silent while q<{c}"] = (w.t > 1) & (w.q < c)
    return out


def best_gain(w: World, policy: str) -> tuple[float, str]:
    """The largest mean-score gain over stating every step, among `strategies`, for the calibrated agent."""
    full = mean(scores(w, w.q, policy))
    gains = {name: mean(scores(w, np.where(mask, np.nan, w.q), policy)) - full for name, mask in strategies(w).items()}
    name = max(gains, key=lambda k: gains[k])
    return gains[name], name


# -- repeated samples of N runs -------------------------------------------------------------------


def replicate_means(n: int, reps: int, seed: int, rate: float, policy: str, over: bool = False) -> FloatArray:
    """(reps, 2): the mean and its standard error, per sample of n runs with MCAR gaps at `rate`."""
    w = world(n * reps, seed)
    f = overconfident(w.q) if over else w.q
    x = scores(w, np.where(mcar(w, rate, seed + 1), np.nan, f), policy).reshape(reps, n)
    k = np.sum(~np.isnan(x), axis=1)
    m = np.nanmean(x, axis=1)
    se = np.nanstd(x, axis=1, ddof=1) / np.sqrt(k)
    return np.column_stack([m, se])


def table(n: int = 300, reps: int = 400, big: int = 200_000, rate: float = 0.2, seed: int = 7) -> dict[str, dict]:
    """Per policy: bias and 95% CI coverage of the mean under MCAR gaps at `rate` (truth: the full-data
    mean on `big` runs), P(calibrated ranked above overconfident), the gate's false-alarm rate when only
    the missing rate changes (0.05 -> 0.3, one-sided z-test at 5%), and the best gain from omission."""
    truth_world = world(big, seed)
    truth = mean(scores(truth_world, truth_world.q, "carry-forward"))  # no gap: every policy agrees
    gain_world = world(big // 4, seed + 2)
    out = {}
    for policy in MISSING_POLICIES:
        cal = replicate_means(n, reps, seed + 10, rate, policy)
        over = replicate_means(n, reps, seed + 20, rate, policy, over=True)
        base = replicate_means(n, reps, seed + 30, 0.05, policy)
        cand = replicate_means(n, reps, seed + 40, 0.30, policy)
        z = (cand[:, 0] - base[:, 0]) / np.hypot(cand[:, 1], base[:, 1])
        gain, how = best_gain(gain_world, policy)
        out[policy] = {
            "bias": float(cal[:, 0].mean() - truth),
            "coverage": float(np.mean(np.abs(cal[:, 0] - truth) <= Z95 * cal[:, 1])),
            "ranking": float(np.mean(cal[:, 0] > over[:, 0])),
            "false_alarms": float(np.mean(z < -1.6448536269514722)),
            "best_gain": gain,
            "best_gain_by": how,
        }
    return out


if __name__ == "__main__":
    rows = table()
    print("| policy | bias | 95% CI coverage | calibrated ranked first | gate false alarms | best gain from omission |")
    print("|---|---|---|---|---|---|")
    for policy, r in rows.items():
        print(
            f"| {policy} | {r['bias']:+.4f} | {r['coverage']:.3f} | {r['ranking']:.3f} | {r['false_alarms']:.3f} "
            f"| {r['best_gain']:+.4f} ({r['best_gain_by']}) |"
        )
