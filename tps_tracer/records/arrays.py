"""Trajectory records -> flat numpy arrays (values + offsets), the form evaluation works on.

Each predictor gets one flat float64 column over all steps of all trajectories, NaN where
the step has no usable forecast. A trajectory is usable for a predictor only if every one
of its steps has a numeric forecast: a gap is never imputed, it skips that trajectory for
that predictor and is counted by reason ("missing", "non_numeric", "no_steps").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.records.stop_reasons import Role, StopReason
from tps_tracer.scoring.branch_pairs import StepLayout
from tps_tracer.validity import classify_forecast

if TYPE_CHECKING:  # pydantic costs ~0.3 s of import; only the exact (record) path needs it
    from tps_tracer.records.schema import TrajectoryRecord

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

STOP_REASONS: tuple[StopReason, ...] = tuple(StopReason)
ROLES: tuple[Role, ...] = tuple(Role)
SKIP_REASONS = ("missing", "non_numeric", "no_steps")


@dataclass
class PredictorColumn:
    name: str
    values: FloatArray  # flat, one per step; NaN where not usable
    usable: BoolArray  # per trajectory
    skipped: dict[str, int] = field(default_factory=dict)  # trajectories skipped, by reason
    # Recalibration and plots read a run's every step: a run has data for them when it has no gap.
    no_data = "no trajectory has a forecast at every step"

    @property
    def stated(self) -> BoolArray:
        return self.usable


@dataclass
class TrajectoryArrays:
    ids: list[str]
    offsets: IntArray
    horizon: FloatArray
    stop_code: NDArray[np.int8]  # index into STOP_REASONS
    outcome: FloatArray  # NaN where unobserved
    q_z: FloatArray  # NaN where not given
    predictors: dict[str, PredictorColumn]
    outcome_on_unscored: int = 0  # non-clean records that carried an outcome (ignored, counted)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> IntArray:
        return np.diff(self.offsets)

    def subset(self, mask: BoolArray, predictor: str) -> tuple[FloatArray, StepLayout]:
        """Flat forecasts and layout of the trajectories selected by `mask` (all must be usable)."""
        col = self.predictors[predictor]
        step_mask = np.repeat(mask, self.lengths)
        layout = StepLayout.from_lengths(self.lengths[mask], self.horizon[mask])
        return col.values[step_mask], layout

    def with_predictor(self, name: str, values: FloatArray) -> TrajectoryArrays:
        """A copy with one more flat column (e.g. a recalibrated stream); NaN steps skip their trajectory."""
        flat = np.asarray(values, dtype=np.float64)
        if flat.shape != (int(self.offsets[-1]),):
            raise InputError(f"{name!r}: expected {int(self.offsets[-1])} step values, got shape {flat.shape}")
        lengths = self.lengths
        owner = np.repeat(np.arange(self.n), lengths)
        has_nan = np.bincount(owner, weights=np.isnan(flat).astype(np.float64), minlength=self.n) > 0
        usable = ~has_nan & (lengths > 0)
        skipped = {k: v for k, v in {"missing": int(has_nan.sum()), "no_steps": int(np.sum(lengths == 0))}.items() if v}
        predictors = {**self.predictors, name: PredictorColumn(name, flat, usable, skipped)}
        return replace(self, predictors=predictors)


def to_arrays(records: Sequence[TrajectoryRecord], predictors: Sequence[str] | None = None) -> TrajectoryArrays:
    """Flatten validated records. `predictors` defaults to every name seen, in first-seen order."""
    if predictors is None:
        seen: dict[str, None] = {}
        for rec in records:
            for step in rec.steps:
                for name in step.forecasts:
                    seen.setdefault(name, None)
        names = list(seen)
    else:
        names = list(predictors)
    n = len(records)
    lengths = np.fromiter((len(r.steps) for r in records), dtype=np.int64, count=n)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    n_steps = int(offsets[-1])
    columns = {name: np.full(n_steps, np.nan) for name in names}
    skip_reason = {name: [""] * n for name in names}
    for i, rec in enumerate(records):
        base = int(offsets[i])
        for j, step in enumerate(rec.steps):
            fc = step.forecasts
            for name in names:
                v = classify_forecast(fc.get(name))
                if isinstance(v, float):
                    columns[name][base + j] = v
                elif not skip_reason[name][i]:
                    skip_reason[name][i] = v  # first reason met wins
    predictor_cols: dict[str, PredictorColumn] = {}
    for name in names:
        reasons = skip_reason[name]
        for empty in np.flatnonzero(lengths == 0).tolist():
            reasons[empty] = "no_steps"
        usable = np.array([not r for r in reasons], dtype=bool)
        counts = {k: reasons.count(k) for k in SKIP_REASONS if k in reasons}
        predictor_cols[name] = PredictorColumn(name, columns[name], usable, counts)
    stop_code = np.array([STOP_REASONS.index(r.stop_reason) for r in records], dtype=np.int8)
    outcome = np.array([float(r.outcome) if r.outcome is not None else np.nan for r in records], dtype=np.float64)
    clean = stop_code == STOP_REASONS.index(StopReason.CLEAN)
    outcome_on_unscored = int(np.sum(~clean & ~np.isnan(outcome)))
    outcome[~clean] = np.nan
    q_z = np.array([r.q_z if r.q_z is not None else np.nan for r in records], dtype=np.float64)
    horizon = np.array([r.effective_horizon for r in records], dtype=np.float64)
    return TrajectoryArrays(
        ids=[r.trajectory_id for r in records],
        offsets=offsets,
        horizon=horizon,
        stop_code=stop_code,
        outcome=outcome,
        q_z=q_z,
        predictors=predictor_cols,
        outcome_on_unscored=outcome_on_unscored,
    )


def concat_arrays(parts: Sequence[TrajectoryArrays]) -> TrajectoryArrays:
    """One set of arrays from consecutive chunks; a predictor a chunk lacks is missing there.

    Gives what `to_arrays` gives on all the records at once (predictors in first-seen order,
    skip counts per reason).
    """
    if not parts:
        raise InputError("no arrays to concatenate")
    if len(parts) == 1:
        return parts[0]
    names = list(dict.fromkeys(name for p in parts for name in p.predictors))
    predictors: dict[str, PredictorColumn] = {}
    for name in names:
        values, usable, skipped = [], [], dict.fromkeys(SKIP_REASONS, 0)
        for p in parts:
            col = p.predictors.get(name)
            if col is None:  # never mentioned in this chunk: every trajectory with steps lacks it
                empty = p.lengths == 0
                col = PredictorColumn(
                    name,
                    np.full(int(p.offsets[-1]), np.nan),
                    np.zeros(p.n, dtype=bool),
                    {"missing": int(np.sum(~empty)), "no_steps": int(np.sum(empty))},
                )
            values.append(col.values)
            usable.append(col.usable)
            for k, v in col.skipped.items():
                skipped[k] += v
        predictors[name] = PredictorColumn(
            name, np.concatenate(values), np.concatenate(usable), {k: v for k, v in skipped.items() if v}
        )
    lengths = np.concatenate([p.lengths for p in parts])
    return TrajectoryArrays(
        ids=[i for p in parts for i in p.ids],
        offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        horizon=np.concatenate([p.horizon for p in parts]),
        stop_code=np.concatenate([p.stop_code for p in parts]),
        outcome=np.concatenate([p.outcome for p in parts]),
        q_z=np.concatenate([p.q_z for p in parts]),
        predictors=predictors,
        outcome_on_unscored=sum(p.outcome_on_unscored for p in parts),
    )
