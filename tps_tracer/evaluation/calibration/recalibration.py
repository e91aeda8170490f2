"""Recalibrated streams next to the raw ones, and the paired raw-vs-recalibrated comparison.

`with_platt_streams` adds a cross-fitted Platt column "<predictor>+platt" per predictor (no
trajectory is mapped by a map fitted on its own half). `with_calibrator_streams` adds the
columns of a saved calibrator artifact instead. `auroc_deltas` gives the paired AUROC
change of each (raw, recalibrated) pair on the same Poisson replicates the TPS deltas use,
which is the paper's calibration-invariance finding: TPS moves by many SE, AUROC does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tps_tracer.evaluation.calibration.cross_fit import DEFAULT_PENALTY, CrossFitResult, cross_fit_platt
from tps_tracer.evaluation.calibration.paired import PairedDelta, paired_auroc_delta
from tps_tracer.evaluation.pairs import AGGREGATOR_NAMES, PairTable
from tps_tracer.evaluation.skipped_predictors import PLATT_SUFFIX, check_no_recalibrated_collision
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import WeightSchedule

if TYPE_CHECKING:
    from tps_tracer.evaluation.calibration.calibrator import Calibrator

__all__ = ["PLATT_SUFFIX", "auroc_deltas", "with_calibrator_streams", "with_platt_streams"]


def with_platt_streams(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    schedule: str | WeightSchedule = "linear-front",
    penalty: float = DEFAULT_PENALTY,
) -> tuple[TrajectoryArrays, dict[str, CrossFitResult]]:
    """Arrays with a cross-fitted "<p>+platt" column per predictor, and each predictor's fit."""
    check_no_recalibrated_collision(arrays.predictors, predictors)  # never overwrite a user's column
    fits: dict[str, CrossFitResult] = {}
    for name in predictors:
        fits[name] = cross_fit_platt(arrays, name, schedule, penalty)
        arrays = arrays.with_predictor(name + PLATT_SUFFIX, fits[name].values)
    return arrays, fits


def with_calibrator_streams(
    arrays: TrajectoryArrays, calibrator: Calibrator, predictors: Sequence[str] | None = None
) -> TrajectoryArrays:
    """Arrays with the saved maps applied: one "<p>+platt" column per predictor the calibrator knows."""
    names = [p for p in (predictors or arrays.predictors) if p in calibrator.maps]
    check_no_recalibrated_collision(arrays.predictors, names)  # never overwrite a user's column
    for name in names:
        col = arrays.predictors[name]
        usable_steps = np.repeat(col.usable, arrays.lengths)
        values = np.full_like(col.values, np.nan)
        values[usable_steps] = calibrator.apply(name, col.values[usable_steps])
        arrays = arrays.with_predictor(name + PLATT_SUFFIX, values)
    return arrays


def auroc_deltas(
    table: PairTable,
    pairs: Sequence[tuple[str, str]],
    policy: CensoringPolicy,
    n_replicates: int,
    seed: int,
) -> dict[tuple[str, str], PairedDelta]:
    """AUROC(recalibrated) - AUROC(raw) on the Phi_w summaries of complete trajectories, paired."""
    complete, _ = table.role_masks(policy)
    w = AGGREGATOR_NAMES.index("phi_w")
    out = {}
    for raw, cal in pairs:
        a = np.where(complete, table.predictors[raw].aggregates[:, w], np.nan)
        b = np.where(complete, table.predictors[cal].aggregates[:, w], np.nan)
        out[(raw, cal)] = paired_auroc_delta(a, b, table.outcome, table.ids, max(n_replicates, 2), seed)
    return out
