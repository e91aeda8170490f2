"""AUQ-style scalar aggregators Phi(F_1..F_Z), vectorised over flat arrays.

These collapse a trace to one number per trajectory. They feed the scalar diagnostics
(AUROC, AUPRC, AURC, T-ECE, T-Brier) and the scalar-predictor table; they are not inputs
to TPS (paper, Appendix "Predictor Transparency Tables" and Theorem B).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from tps_tracer.scoring.branch_pairs import StepLayout
from tps_tracer.scoring.schedules import DEFAULT_SCHEDULE, WeightSchedule

FloatArray = NDArray[np.float64]

# Averages are rounded to 12 decimals so that traces with equal values give exactly equal
# summaries: floating-point noise must not break ties that rank metrics treat specially.
TIE_DECIMALS = 12


def phi_last(values: FloatArray, layout: StepLayout) -> FloatArray:
    return values[layout.offsets[1:] - 1]


def phi_avg(values: FloatArray, layout: StepLayout) -> FloatArray:
    return np.round(layout.segment_sum(values) / layout.lengths, TIE_DECIMALS)


def phi_min(values: FloatArray, layout: StepLayout) -> FloatArray:
    if layout.n_trajectories == 0:
        return np.zeros(0)
    return np.minimum.reduceat(values, layout.starts)


def phi_weighted(values: FloatArray, layout: StepLayout, schedule: WeightSchedule = DEFAULT_SCHEDULE) -> FloatArray:
    """sum_t w_t F_t / sum_t w_t over the observed steps: the front-weighted normalised summary."""
    w = layout.weights(schedule)
    return np.round(layout.segment_sum(w * values) / layout.segment_sum(w), TIE_DECIMALS)


AGGREGATORS: dict[str, Callable[[FloatArray, StepLayout], FloatArray]] = {
    "phi_last": phi_last,
    "phi_avg": phi_avg,
    "phi_min": phi_min,
    "phi_w": phi_weighted,
}
