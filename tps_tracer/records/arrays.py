"""Trajectories as flat numpy arrays (values + offsets), and the fast readers' one value check
(`validated_arrays`). A predictor column is NaN where a step has no usable forecast; a gap is never imputed:
it skips that trajectory for that predictor, counted by reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.records.errors import NotFast
from tps_tracer.records.stop_reasons import Role, StopReason
from tps_tracer.scoring import BoolArray, FloatArray, IntArray, StepLayout
from tps_tracer.validity import (
    classify_forecast,
    forecast_outside,
    horizon_outside,
)

if TYPE_CHECKING:  # pydantic (~0.3 s of import): only the exact path
    from tps_tracer.records.schema import TrajectoryRecord


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
        column = _gap_column(name, flat, self.lengths, np.repeat(np.arange(self.n), self.lengths))
        return replace(self, predictors={**self.predictors, name: column})


def _gap_column(name: str, values: FloatArray, lengths: IntArray, owner: IntArray) -> PredictorColumn:
    """A column whose NaN steps skip their trajectory ("missing"), one without steps "no_steps"; `owner`:
    each step's trajectory."""
    empty = lengths == 0
    gap = np.bincount(owner[np.isnan(values)], minlength=len(lengths)) > 0
    counts = {"missing": int(np.sum(gap & ~empty)), "no_steps": int(np.sum(empty))}
    return PredictorColumn(name, values, ~gap & ~empty, {k: v for k, v in counts.items() if v})


def to_arrays(records: Sequence[TrajectoryRecord]) -> TrajectoryArrays:
    """Flatten validated records: a column per predictor name, in first-seen order."""
    names = list(dict.fromkeys(name for rec in records for step in rec.steps for name in step.forecasts))
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
    return _clean_outcomes(
        TrajectoryArrays(
            [r.trajectory_id for r in records],
            offsets,
            np.array([r.effective_horizon for r in records], dtype=np.float64),
            np.array([STOP_REASONS.index(r.stop_reason) for r in records], dtype=np.int8),
            np.array([float(r.outcome) if r.outcome is not None else np.nan for r in records], dtype=np.float64),
            np.array([r.q_z if r.q_z is not None else np.nan for r in records], dtype=np.float64),
            predictor_cols,
        )
    )


def _clean_outcomes(arrays: TrajectoryArrays) -> TrajectoryArrays:
    """Both readers' rule: an outcome is kept on a clean stop only; the others' are counted, not scored."""
    clean = arrays.stop_code == _CLEAN
    arrays.outcome_on_unscored = int(np.sum(~clean & ~np.isnan(arrays.outcome)))
    arrays.outcome = np.where(clean, arrays.outcome, np.nan)
    return arrays


def concat_arrays(parts: Sequence[TrajectoryArrays]) -> TrajectoryArrays:
    """One set of arrays from consecutive chunks, as `to_arrays` gives on all their records at once."""
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
                owner = np.repeat(np.arange(p.n), p.lengths)
                col = _gap_column(name, np.full(int(p.offsets[-1]), np.nan), p.lengths, owner)
            values.append(col.values)
            usable.append(col.usable)
            for k, v in col.skipped.items():
                skipped[k] += v
        predictors[name] = PredictorColumn(
            name, np.concatenate(values), np.concatenate(usable), {k: v for k, v in skipped.items() if v}
        )
    lengths = np.concatenate([p.lengths for p in parts])
    joined = {k: np.concatenate([getattr(p, k) for p in parts]) for k in ("horizon", "stop_code", "outcome", "q_z")}
    return TrajectoryArrays(
        ids=[i for p in parts for i in p.ids],
        offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        predictors=predictors,
        outcome_on_unscored=sum(p.outcome_on_unscored for p in parts),
        **joined,
    )


_CLEAN = STOP_REASONS.index(StopReason.CLEAN)
# A stop reason's code in TrajectoryArrays.stop_code; readers map unknown values to -1.
STOP_CODE: dict[str, int] = {r.value: i for i, r in enumerate(STOP_REASONS)}


@dataclass
class RawColumns:
    """One batch of records as flat columns: types checked by its reader, values not yet. NaN is null or
    absent (a reader refuses a NaN value); `stop_code` -1 is not a stop reason; `t` is None when no step
    gives one; forecast names in first-seen order."""

    ids: list[str]
    stop_code: IntArray
    outcome: FloatArray
    outcome_pending: BoolArray
    q_z: FloatArray
    horizon: FloatArray
    lengths: IntArray
    t: FloatArray | None
    forecasts: dict[str, FloatArray]


_PER_RECORD = ("stop_code", "outcome", "outcome_pending", "q_z", "horizon", "lengths")


def concat_raw(parts: Sequence[RawColumns]) -> RawColumns:
    if len(parts) == 1:
        return parts[0]
    names = list(dict.fromkeys(name for p in parts for name in p.forecasts))
    steps = [int(p.lengths.sum()) for p in parts]

    def per_step(get: Any) -> FloatArray:
        columns = [get(p) for p in parts]
        return np.concatenate([c if c is not None else np.full(k, np.nan) for c, k in zip(columns, steps, strict=True)])

    t_given = any(p.t is not None for p in parts)
    joined = {k: np.concatenate([getattr(p, k) for p in parts]) for k in _PER_RECORD}
    return RawColumns(
        ids=[i for p in parts for i in p.ids],
        **joined,
        t=per_step(lambda p: p.t) if t_given else None,
        forecasts={name: per_step(lambda p, name=name: p.forecasts.get(name)) for name in names},
    )


def validated_arrays(raw: RawColumns) -> TrajectoryArrays:
    """The arrays `to_arrays` would build from these records, or NotFast where the exact read differs."""
    n = len(raw.ids)
    if "" in raw.ids:
        raise NotFast("trajectory_id: empty")
    if np.any(raw.stop_code < 0):
        raise NotFast("stop_reason: unknown value")
    stop_code = raw.stop_code.astype(np.int8)
    clean = stop_code == _CLEAN

    outcome = raw.outcome
    has_outcome = ~np.isnan(outcome)
    if np.any(has_outcome & (outcome != 0.0) & (outcome != 1.0)):
        raise NotFast("outcome: not 0/1")
    outcome = outcome + 0.0  # -0.0 (a valid 0) becomes 0.0, as the exact path's int 0 does
    pending = raw.outcome_pending
    if np.any(pending & has_outcome) or np.any(clean & ~has_outcome & ~pending):
        raise NotFast("outcome / outcome_pending inconsistent")
    q_z = raw.q_z
    if np.any((q_z < 0.0) | (q_z > 1.0)):
        raise NotFast("q_z: outside [0, 1]")

    lengths = raw.lengths.astype(np.int64)
    horizon_given = raw.horizon
    if np.any(horizon_outside(horizon_given)):
        raise NotFast("horizon outside [1, MAX_HORIZON]")
    if np.any(horizon_given < lengths):
        raise NotFast("horizon < number of steps")
    horizon = np.where(np.isnan(horizon_given), lengths.astype(np.float64), horizon_given)

    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    n_steps = int(offsets[-1])
    if raw.t is not None:
        starts = np.repeat(offsets[:-1], lengths)
        position = np.arange(n_steps, dtype=np.float64) - starts + 1.0
        if np.any(~np.isnan(raw.t) & (raw.t != position)):
            raise NotFast("steps.t: out of order")

    owner = np.repeat(np.arange(n), lengths)
    predictors: dict[str, PredictorColumn] = {}
    for name, values in raw.forecasts.items():
        if np.any(forecast_outside(values)):
            raise NotFast(f"forecasts.{name}: outside [0, 1]")
        predictors[name] = _gap_column(name, values, lengths, owner)

    return _clean_outcomes(TrajectoryArrays(raw.ids, offsets, horizon, stop_code, outcome, q_z, predictors))


def _column(table: Any, name: str) -> Any:
    import pyarrow as pa

    if name not in table.schema.names:
        return None
    col = table.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = pa.concat_arrays(col.chunks) if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_dictionary(col.type):  # Parquet writers often dictionary-encode strings
        col = col.cast(col.type.value_type)
    if pa.types.is_large_string(col.type):
        col = col.cast(pa.string())
    return col


def _numbers(arr: Any, n: int, name: str, *, integer: bool = False, boolean: bool = False) -> np.ndarray:
    """A nullable numeric column as float64, NaN for null; NotFast for another type or a NaN value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if arr is None or pa.types.is_null(arr.type):
        return np.full(n, np.nan)
    t = arr.type
    ok = pa.types.is_integer(t) or (pa.types.is_floating(t) and not integer) or (pa.types.is_boolean(t) and boolean)
    if not ok:
        raise NotFast(f"{name}: type {t}")
    if pa.types.is_floating(t) and pc.any(pc.is_nan(arr)).as_py():
        raise NotFast(f"{name}: NaN")
    try:  # Arrow refuses to cast an integer beyond 2**53: the exact path decides
        values = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        raise NotFast(f"{name}: an integer beyond 2**53") from None
    return np.asarray(values, dtype=np.float64)


def raw_from_arrow(table: Any, from_json: bool = False) -> RawColumns:
    """The raw columns of an Arrow table or batch (one plain type per column), or NotFast. `from_json`: a
    null `steps`, `metadata`, `outcome_pending` or `forecasts` means absent (else the exact path decides)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "resolves" in table.schema.names:
        raise NotFast("resolution records")
    n = table.num_rows
    ids_arr = _column(table, "trajectory_id")
    if ids_arr is None or not pa.types.is_string(ids_arr.type) or ids_arr.null_count:
        raise NotFast("trajectory_id: not a string")
    reason_arr = _column(table, "stop_reason")
    if reason_arr is None or not pa.types.is_string(reason_arr.type):
        raise NotFast("stop_reason")
    codes = pc.index_in(reason_arr, value_set=pa.array(list(STOP_CODE)))  # STOP_CODE's order: codes
    stop_code = np.asarray(pc.fill_null(codes, -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    outcome = _numbers(_column(table, "outcome"), n, "outcome", boolean=True)
    pending_arr = _column(table, "outcome_pending")
    pending = np.zeros(n, dtype=bool)
    if pending_arr is not None and not pa.types.is_null(pending_arr.type):
        if not pa.types.is_boolean(pending_arr.type) or (pending_arr.null_count and not from_json):
            raise NotFast("outcome_pending")
        pending = np.asarray(pc.fill_null(pending_arr, False).to_numpy(zero_copy_only=False), dtype=bool)
    q_z = _numbers(_column(table, "q_z"), n, "q_z")
    horizon = _numbers(_column(table, "horizon"), n, "horizon", integer=True)

    meta = _column(table, "metadata")
    if from_json and meta is not None and not pa.types.is_struct(meta.type):
        raise NotFast("metadata: not an object")

    steps = _column(table, "steps")
    lengths = np.zeros(n, dtype=np.int64)
    t: np.ndarray | None = None
    forecasts: dict[str, np.ndarray] = {}
    if steps is not None and not (pa.types.is_null(steps.type) and from_json):
        if not (pa.types.is_list(steps.type) or pa.types.is_large_list(steps.type)):
            raise NotFast("steps: not a list")
        if steps.null_count and not from_json:
            raise NotFast("steps: null")
        lengths = np.asarray(pc.fill_null(pc.list_value_length(steps), 0).to_numpy(zero_copy_only=False), np.int64)
        items = steps.flatten()
        if len(items):
            if not pa.types.is_struct(items.type) or items.null_count:
                raise NotFast("steps: items are not objects")
            fields = {items.type.field(i).name: i for i in range(items.type.num_fields)}
            children = items.flatten()
            if "t" in fields:  # all null (also a null-typed column): NaN, as when no step gives one
                t = _numbers(children[fields["t"]], len(items), "steps.t", integer=True)
            if "forecasts" in fields:
                fc = children[fields["forecasts"]]
                if pa.types.is_null(fc.type) and not from_json:
                    raise NotFast("forecasts: null")
                if not pa.types.is_null(fc.type):
                    if not pa.types.is_struct(fc.type) or (fc.null_count and not from_json):
                        raise NotFast("forecasts: not an object")
                    for i, col in enumerate(fc.flatten()):
                        name = fc.type.field(i).name
                        forecasts[name] = _numbers(col, len(items), f"forecasts.{name}")
    ids = [str(s) for s in ids_arr.to_pylist()]
    return RawColumns(ids, stop_code, outcome, pending, q_z, horizon, lengths, t, forecasts)
