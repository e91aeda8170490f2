"""AUQ-style scalar aggregators Phi(F_1..F_Z), vectorised over flat arrays.

These collapse a trace to one number per trajectory. They feed the scalar diagnostics
(AUROC, AUPRC, AURC, T-ECE, T-Brier) and the scalar-predictor table; they are not inputs
to TPS (paper, Appendix "Predictor Transparency Tables" and Theorem B). `summaries` is the
one definition, used by the scoring kernel (evaluation/rows.py); the phi_* functions are
its columns for callers holding a StepLayout.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from tps_tracer.scoring.branch_pairs import StepLayout
from tps_tracer.scoring.schedules import DEFAULT_SCHEDULE, WeightSchedule

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Averages are rounded to 12 decimals so that traces with equal values give exactly equal
# summaries: floating-point noise must not break ties that rank metrics treat specially.
TIE_DECIMALS = 12

AGGREGATOR_NAMES: tuple[str, ...] = ("phi_last", "phi_avg", "phi_min", "phi_w")


def summaries(values: FloatArray, starts: IntArray, lengths: IntArray, w_phi: FloatArray) -> FloatArray:
    """(4, k): phi_last, phi_avg, phi_min, phi_w of k non-empty segments of a flat array.

    w_phi: per-step weights of Phi_w (the default schedule), the front-weighted normalised summary
    sum_t w_t F_t / sum_t w_t over the observed steps."""
    out = np.empty((len(AGGREGATOR_NAMES), starts.size))
    if starts.size == 0:
        return out
    out[0] = values[starts + lengths - 1]
    out[1] = np.round(np.add.reduceat(values, starts) / lengths, TIE_DECIMALS)
    out[2] = np.minimum.reduceat(values, starts)
    out[3] = np.round(np.add.reduceat(w_phi * values, starts) / np.add.reduceat(w_phi, starts), TIE_DECIMALS)
    return out


def _column(values: FloatArray, layout: StepLayout, k: int, schedule: WeightSchedule = DEFAULT_SCHEDULE) -> FloatArray:
    if layout.n_trajectories == 0:
        return np.zeros(0)
    return summaries(values, layout.starts, layout.lengths, layout.weights(schedule))[k]


def phi_last(values: FloatArray, layout: StepLayout) -> FloatArray:
    return _column(values, layout, 0)


def phi_avg(values: FloatArray, layout: StepLayout) -> FloatArray:
    return _column(values, layout, 1)


def phi_min(values: FloatArray, layout: StepLayout) -> FloatArray:
    return _column(values, layout, 2)


def phi_weighted(values: FloatArray, layout: StepLayout, schedule: WeightSchedule = DEFAULT_SCHEDULE) -> FloatArray:
    return _column(values, layout, 3, schedule)
