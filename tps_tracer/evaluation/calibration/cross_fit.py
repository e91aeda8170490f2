"""Cross-fitted Platt recalibration, as the paper's Appendix "Calibration Procedure" specifies.

1. Split: complete trajectories into two halves stratified by Y; within each label they are
   ordered by a stable id and alternated between halves (A, B, A, ...). Steps inherit their
   trajectory's half. Trajectories without an observed outcome (censored, excluded) are
   alternated the same way in a stratum of their own: they never train a map, but each is
   calibrated by the map of the other half.
2. Feature: x_raw = logit(clip(F, 1e-6, 1 - 1e-6)), standardised by the training half's
   step-weighted mean and sd (weights w_t of the TPS schedule), sd floored at 1e-6.
3. Fit p = sigmoid(a + b x) by weighted maximum likelihood with sample weights w_t and an
   L2 penalty lambda on the slope only:  minimise  sum_i w_i * logloss_i + (lambda / 2) b^2
   (scikit-learn's LogisticRegression(C = 1 / lambda) convention; the paper's lambda = 1).
   No class balancing. If b < 0: b = 0, a = logit(weighted in-train success rate).
4. Apply A's map to B and B's to A; clip the result to [1e-6, 1 - 1e-6].
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_PENALTY
from tps_tracer.errors import InputError
from tps_tracer.evaluation.calibration.logistic import fit_logistic, sigmoid
from tps_tracer.records.arrays import STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring.rules import WeightSchedule, get_schedule

FloatArray = NDArray[np.float64]

EPS = 1e-6
SD_FLOOR = 1e-6


def _logit(p: FloatArray) -> FloatArray:
    p = np.clip(p, EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class PlattMap:
    """p = clip(sigmoid(a + b (logit(F) - mu) / sigma)); b = 0 when the fit fell back."""

    a: float
    b: float
    mu: float
    sigma: float
    fallback: bool
    n_steps: int
    n_trajectories: int

    def apply(self, forecasts: FloatArray) -> FloatArray:
        x = (_logit(np.asarray(forecasts, dtype=np.float64)) - self.mu) / self.sigma
        return np.clip(sigmoid(self.a + self.b * x), EPS, 1.0 - EPS)

    def as_dict(self) -> dict[str, float | bool | int]:
        return dataclasses.asdict(self)


def fit_platt(
    forecasts: FloatArray,
    labels: FloatArray,
    weights: FloatArray,
    penalty: float = DEFAULT_PENALTY,
    n_trajectories: int = 0,
) -> PlattMap:
    """Weighted, slope-penalised logistic fit on per-step records (Newton's method, convex)."""
    f = np.asarray(forecasts, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if f.size == 0 or w.sum() <= 0:
        raise InputError("Platt fit needs at least one weighted step")
    x_raw = _logit(f)
    mu = float(np.average(x_raw, weights=w))
    sigma = max(float(math.sqrt(np.average((x_raw - mu) ** 2, weights=w))), SD_FLOOR)
    x = (x_raw - mu) / sigma
    ybar = float(np.average(y, weights=w))
    a0 = float(_logit(np.array([ybar]))[0])
    a, slope = fit_logistic(x[:, None], y, w, penalty, intercept0=a0)
    b = float(slope[0])
    if b < 0.0:
        return PlattMap(a0, 0.0, mu, sigma, True, int(f.size), n_trajectories)
    return PlattMap(a, b, mu, sigma, False, int(f.size), n_trajectories)


def split_halves(ids: list[str], outcome: FloatArray, complete: NDArray[np.bool_]) -> NDArray[np.int8]:
    """0/1 half of each trajectory: stratified by Y (and 'no outcome'), alternating in id order."""
    half = np.zeros(len(ids), dtype=np.int8)
    strata = [complete & (outcome == 1), complete & (outcome == 0), ~complete]
    for mask in strata:
        members = sorted(np.flatnonzero(mask), key=lambda i: ids[i])
        for rank, i in enumerate(members):
            half[i] = rank % 2
    return half


@dataclass
class CrossFitResult:
    predictor: str
    values: FloatArray  # calibrated flat forecasts (NaN where the raw stream is unusable)
    half: NDArray[np.int8]  # per trajectory
    maps: tuple[PlattMap, PlattMap]  # fitted on half 0, on half 1
    raw: FloatArray  # the raw flat stream (for the value-mapping diagnostics)
    step_half: NDArray[np.int8]  # per step

    def diagnostics(self, n_values: int = 3) -> list[dict[str, Any]]:
        """Per-split rows of the paper's "Platt calibration diagnostics" table: slope, fallback, sd-floor,
        where the most frequent raw values map to, and the range of calibrated values this map produced."""
        rows: list[dict[str, Any]] = []
        for h, m in enumerate(self.maps):
            applied = (self.step_half != h) & ~np.isnan(self.values)  # the other half is calibrated by this map
            raw = self.raw[applied]
            uniq, counts = np.unique(raw, return_counts=True)
            common = np.sort(uniq[np.argsort(-counts, kind="stable")[:n_values]])
            mapped = self.values[applied]
            rows.append(
                {
                    "fit_on_half": h,
                    **m.as_dict(),
                    "sd_floor_active": m.sigma <= SD_FLOOR,
                    "applied_to_trajectories": int(np.sum(self.half != h)),
                    "value_map": [[float(v), float(m.apply(np.array([v]))[0])] for v in common],
                    "value_range": [float(mapped.min()), float(mapped.max())] if mapped.size else [None, None],
                }
            )
        return rows


def step_weights(arrays: TrajectoryArrays, schedule: str | WeightSchedule = "linear-front") -> FloatArray:
    """w_t of every step (normalised over each trajectory's horizon T, truncated at its length Z)."""
    lengths = arrays.lengths
    t = (np.arange(arrays.offsets[-1]) - np.repeat(arrays.offsets[:-1], lengths) + 1).astype(np.float64)
    big_t = np.repeat(arrays.horizon, lengths)
    return get_schedule(schedule).step_weights(t, big_t)


def cross_fit_platt(
    arrays: TrajectoryArrays,
    predictor: str,
    schedule: str | WeightSchedule = "linear-front",
    penalty: float = DEFAULT_PENALTY,
    trajectory_weights: FloatArray | None = None,
) -> CrossFitResult:
    """Calibrate one predictor's stream by the two cross-fitted maps (see the module docstring).

    `trajectory_weights` multiply each trajectory's step weights in the fits (a bootstrap
    replicate's Poisson weights: the maps refitted on the resample, refit_bootstrap.py).
    """
    col = arrays.predictors[predictor]
    clean = np.asarray(arrays.stop_code) == STOP_REASONS.index(StopReason.CLEAN)
    complete = clean & ~np.isnan(arrays.outcome) & col.usable
    half = split_halves(arrays.ids, arrays.outcome, complete)
    lengths = arrays.lengths
    step_half = np.repeat(half, lengths)
    step_complete = np.repeat(complete, lengths)
    step_y = np.repeat(np.nan_to_num(arrays.outcome), lengths)
    w = step_weights(arrays, schedule)
    if trajectory_weights is not None:
        w = w * np.repeat(np.asarray(trajectory_weights, dtype=np.float64), lengths)
    maps = []
    for h in (0, 1):
        train = step_complete & (step_half == h)
        if not train.any():
            raise InputError(f"Platt: half {h} has no complete trajectory with a usable {predictor!r} stream")
        n_traj = int((complete & (half == h)).sum())
        maps.append(fit_platt(col.values[train], step_y[train], w[train], penalty, n_traj))
    out = np.full_like(col.values, np.nan)
    usable_steps = np.repeat(col.usable, lengths)
    for h in (0, 1):
        target = usable_steps & (step_half != h)  # trajectories of the other half
        out[target] = maps[h].apply(col.values[target])
    return CrossFitResult(predictor, out, half, (maps[0], maps[1]), col.values, step_half)
