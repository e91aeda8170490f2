"""Paired comparisons of two predictor streams on the same trajectories (e.g. raw vs Platt).

Both statistics are computed on the same Poisson-bootstrap replicates (weights derived from
the trajectory ids, as everywhere else), so Delta / SE is the paired effect size the paper
reports for recalibration: TPS moves by many standard errors while AUROC barely moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tps_tracer.evaluation.bootstrap import (
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    bootstrap_means,
    percentile_ci,
    replicate_weights,
    trajectory_keys,
)
from tps_tracer.evaluation.diagnostics import auroc_failure
from tps_tracer.records.arrays import FloatArray


@dataclass(frozen=True)
class PairedDelta:
    statistic: str
    a: float
    b: float
    delta: float  # b - a
    se: float
    ci_low: float
    ci_high: float
    n: int

    @property
    def z(self) -> float:
        return self.delta / self.se if self.se > 0 else float("nan")

    def as_dict(self) -> dict[str, float | str | int]:
        return {
            "statistic": self.statistic,
            "a": self.a,
            "b": self.b,
            "delta": self.delta,
            "se": self.se,
            "z": self.z,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
        }


def _delta(name: str, a: float, b: float, reps: FloatArray, n: int) -> PairedDelta:
    ok = reps[~np.isnan(reps)]
    se = float(np.std(ok, ddof=1)) if ok.size >= 2 else float("nan")
    lo, hi = percentile_ci(reps[:, None])
    return PairedDelta(name, a, b, b - a, se, float(lo[0]), float(hi[0]), n)


def delta_from_replicates(name: str, a: float, b: float, reps: FloatArray, n: int) -> PairedDelta:
    """b - a with the SE and percentile CI of given replicates of the difference (NaN: left out)."""
    return _delta(name, a, b, reps, n)


def paired_mean_delta(
    a: FloatArray,
    b: FloatArray,
    ids: list[str],
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    statistic: str = "mean",
) -> PairedDelta:
    """mean(b) - mean(a) over per-trajectory scores (NaN: not in that column's sample)."""
    boot = bootstrap_means(np.column_stack([a, b]), trajectory_keys(ids), n_replicates, seed)
    reps = boot.replicates[:, 1] - boot.replicates[:, 0]
    both = int(np.sum(~np.isnan(a) & ~np.isnan(b)))
    return _delta(statistic, float(boot.point[0]), float(boot.point[1]), reps, both)


def weighted_auroc_failure(c: FloatArray, y: FloatArray, w: FloatArray) -> float:
    """AUROC for failures (risk 1 - c) with case weights: sum of w_i w_j over (failure i, success j)
    pairs ranked correctly, ties 1/2, over the total pair weight. Equals `auroc_failure` at w = 1."""
    order = np.argsort(c, kind="stable")
    c, y, w = c[order], y[order], w[order]
    fail_w = np.where(y == 0, w, 0.0)
    succ_w = np.where(y == 1, w, 0.0)
    # Group ties: for each distinct confidence, the failure/success weight at that value.
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    f_g = np.add.reduceat(fail_w, starts)
    s_g = np.add.reduceat(succ_w, starts)
    s_above = s_g[::-1].cumsum()[::-1] - s_g  # success weight strictly more confident
    total = f_g.sum() * s_g.sum()
    if total <= 0:
        return float("nan")
    return float((f_g * (s_above + 0.5 * s_g)).sum() / total)


def paired_auroc_delta(
    a: FloatArray,
    b: FloatArray,
    y: FloatArray,
    ids: list[str],
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> PairedDelta:
    """AUROC(b) - AUROC(a) for trajectory-level confidences with outcomes y (complete runs only)."""
    keep = ~np.isnan(a) & ~np.isnan(b) & ~np.isnan(y)
    a, b, y = a[keep], b[keep], y[keep]
    kept_ids = [i for i, k in zip(ids, keep, strict=True) if k]
    w = replicate_weights(trajectory_keys(kept_ids), np.arange(n_replicates), seed)
    reps = np.array([weighted_auroc_failure(b, y, wr) - weighted_auroc_failure(a, y, wr) for wr in w])
    return _delta("auroc", auroc_failure(a, y), auroc_failure(b, y), reps, int(keep.sum()))
