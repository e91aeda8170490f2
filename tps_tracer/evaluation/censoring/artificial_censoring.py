"""Artificial-censoring validation (paper, Appendix "Artificial-Censoring Validation").

Within each length stratum of the complete trajectories, a share r (a seeded draw in id order) is
cut at Z uniform on 1..T-1 and scored cen-simple (T-normalised weights truncated at Z). Then

    TPS_simple - TPS_complete = prefix-swap + tail-omission
    prefix-swap   =  Y * sum_{t<=Z} w_t [S(F_t, 0) - S(F_t, 1)]      (zero when Y = 0)
    tail-omission = -sum_{t>Z} w_t S(F_t, Y)                          (>= 0: scores are <= 0)

The direct difference runs through the real scoring path, the decomposition step by step from
the closed form: they agree to ~1e-12.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import COMPLETE_ONLY, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.pairs import score_matrix
from tps_tracer.records.arrays import STOP_REASONS, PredictorColumn, TrajectoryArrays
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule, get_rule, get_schedule

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

DEFAULT_RATES = (0.25, 0.5, 0.75)
_CLEAN = STOP_REASONS.index(StopReason.CLEAN)
_MAX_STEPS = STOP_REASONS.index(StopReason.MAX_STEPS)


def censoring_plan(ids: Sequence[str], lengths: IntArray, rate: float, seed: int = 0) -> IntArray:
    """Cut point Z per trajectory (0: left complete). Length-1 trajectories cannot be cut."""
    if not 0.0 <= rate <= 1.0:
        raise InputError(f"censoring rate must be in [0, 1], got {rate}")
    rng = np.random.default_rng([seed, round(rate * 1_000_000)])
    cuts = np.zeros(len(ids), dtype=np.int64)
    for length in np.unique(lengths):
        members = sorted(np.flatnonzero(lengths == length).tolist(), key=lambda i: ids[i])
        k = round(rate * len(members))
        if length < 2 or k == 0:
            continue
        chosen = rng.permutation(len(members))[:k]
        for c in chosen.tolist():
            cuts[members[c]] = rng.integers(1, length)  # Z in 1..T-1
    return cuts


def _censored_copy(arrays: TrajectoryArrays, predictor: str, cuts: IntArray) -> TrajectoryArrays:
    """The same trajectories with those cut at Z > 0 turned into max_steps prefixes (horizon kept)."""
    lengths = arrays.lengths
    keep_len = np.where(cuts > 0, cuts, lengths)
    t = np.arange(int(arrays.offsets[-1])) - np.repeat(arrays.offsets[:-1], lengths) + 1
    keep = t <= np.repeat(keep_len, lengths)
    col = arrays.predictors[predictor]
    censored = cuts > 0
    return replace(
        arrays,
        offsets=np.concatenate(([0], np.cumsum(keep_len))).astype(np.int64),
        stop_code=np.where(censored, _MAX_STEPS, arrays.stop_code).astype(np.int8),
        outcome=np.where(censored, np.nan, arrays.outcome),
        q_z=np.full(arrays.n, np.nan),
        predictors={predictor: PredictorColumn(predictor, col.values[keep], col.usable.copy(), dict(col.skipped))},
    )


def _decomposition(
    f: FloatArray, owner: IntArray, t: FloatArray, horizon: FloatArray, y: FloatArray, cuts: IntArray, n: int,
    rule: ScoreRule, schedule: WeightSchedule,
) -> tuple[FloatArray, FloatArray]:  # fmt: skip
    """(prefix-swap, tail-omission) per trajectory, from the closed form, step by step."""
    b1, b0 = rule.branches(f)
    w = schedule.step_weights(t, horizon[owner])
    z = np.where(cuts > 0, cuts, np.iinfo(np.int64).max)[owner]
    in_prefix = t <= z
    cut = (cuts > 0)[owner]
    y_s = y[owner]
    swap = np.bincount(owner, weights=np.where(in_prefix & cut, y_s * w * (b0 - b1), 0.0), minlength=n)
    tail = np.bincount(owner, weights=np.where(in_prefix, 0.0, -w * (y_s * b1 + (1 - y_s) * b0)), minlength=n)
    return swap.astype(np.float64), tail.astype(np.float64)


def artificial_censoring(
    arrays: TrajectoryArrays,
    predictor: str,
    rules: Sequence[str | ScoreRule] = ("log", "brier", "beta(2,4)"),
    schedules: Sequence[str | WeightSchedule] = ("linear-front", "uniform", "exponential-front", "linear-back"),
    rates: Sequence[float] = DEFAULT_RATES,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per rate x rule x schedule (see the module docstring); means over all complete trajectories."""
    col = arrays.predictors[predictor]
    sample = (arrays.stop_code == _CLEAN) & ~np.isnan(arrays.outcome) & col.usable
    if not sample.any():
        raise InputError(f"no complete trajectory with a usable {predictor!r} stream to censor artificially")
    base = replace(
        arrays,
        ids=[tid for tid, s in zip(arrays.ids, sample, strict=True) if s],
        offsets=np.concatenate(([0], np.cumsum(arrays.lengths[sample]))).astype(np.int64),
        horizon=arrays.horizon[sample],
        stop_code=arrays.stop_code[sample],
        outcome=arrays.outcome[sample],
        q_z=arrays.q_z[sample],
        predictors={
            predictor: PredictorColumn(predictor, arrays.subset(sample, predictor)[0], np.ones(int(sample.sum()), bool))
        },
    )
    rules_ = [get_rule(r) for r in rules]
    scheds = [get_schedule(s) for s in schedules]
    n, lengths, y = base.n, base.lengths, base.outcome
    owner = np.repeat(np.arange(n), lengths)
    t = (np.arange(int(base.offsets[-1])) - np.repeat(base.offsets[:-1], lengths) + 1).astype(np.float64)
    f = base.predictors[predictor].values
    complete = score_matrix(base, [predictor], rules_, scheds, modes=(COMPLETE_ONLY,))
    rows = []
    for rate in rates:
        cuts = censoring_plan(base.ids, lengths, rate, seed)
        censored = cuts > 0
        simple = score_matrix(_censored_copy(base, predictor, cuts), [predictor], rules_, scheds, modes=(SIMPLE,))
        for (key, full), part in zip(zip(complete.keys, complete.columns, strict=True), simple.columns, strict=True):
            rule, sched = get_rule(key.rule), get_schedule(key.weights)
            direct = part - full
            swap, tail = _decomposition(f, owner, t, base.horizon, y, cuts, n, rule, sched)
            rows.append(
                {
                    "predictor": predictor,
                    "rule": key.rule,
                    "weights": key.weights,
                    "rate": rate,
                    "n": n,
                    "n_censored": int(censored.sum()),
                    "tps_complete": float(full.mean()),
                    "delta_mean": float(direct.mean()),
                    "prefix_swap_mean": float(swap.mean()),
                    "tail_omission_mean": float(tail.mean()),
                    "delta_y0": float(direct[y == 0].mean()) if np.any(y == 0) else None,
                    "delta_y1": float(direct[y == 1].mean()) if np.any(y == 1) else None,
                    "max_abs_error": float(np.max(np.abs(direct - (swap + tail)))),
                    "min_tail_omission": float(tail.min()),
                }
            )
    return rows
