"""Raw flat columns of trajectory records -> validated `TrajectoryArrays`: the fast paths' one validation.

Two readers produce `RawColumns`: `jsonl_fast.py` (JSON Lines through orjson, the core install) and
`raw_from_arrow` below (Arrow tables: Parquet files, Ray blocks and pyarrow's JSON reader, with the
`parquet` extra). Each checks only what its source can get wrong in its own terms (the *types*: a
string forecast, a float horizon, an explicit null where the schema wants an object); everything
about the *values* is checked here, once, over numpy arrays. The columns are those of the interchange format (see
`schema.py`):

    trajectory_id  string, non-empty            stop_reason  string, a StopReason value
    outcome        0/1 (int, float or bool), null     horizon      int >= number of steps, null
    q_z            number in [0, 1], null               outcome_pending  bool, null
    steps          list of {t: int or null, forecasts: {name: number or null, ...}}

This path accepts only what the exact per-record path (pydantic, `jsonl.py` + `arrays.py`)
accepts with the same result, and only in the plain form: numbers where numbers belong. Anything
else (a non-numeric forecast, a float horizon, a value out of range, steps out of order) raises
`reading.NotFast`, and the chunk is read by the exact path (`reading.py` decides), which either
gives the same arrays or the error message naming line and field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tps_tracer.records.arrays import (
    SKIP_REASONS,
    STOP_REASONS,
    BoolArray,
    FloatArray,
    IntArray,
    PredictorColumn,
    TrajectoryArrays,
)
from tps_tracer.records.reading import NotFast
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.validity import forecast_outside, horizon_below_steps, horizon_outside

_CLEAN = STOP_REASONS.index(StopReason.CLEAN)
# A stop reason's code in TrajectoryArrays.stop_code; readers map unknown values to -1.
STOP_CODE: dict[str, int] = {r.value: i for i, r in enumerate(STOP_REASONS)}


@dataclass
class RawColumns:
    """One batch of records as flat columns, types already checked by the reader, values not yet.

    Per trajectory: `ids`, `stop_code` (-1: not a stop reason), `outcome` / `q_z` / `horizon`
    (float64, NaN = null or absent; the reader refuses a NaN *value*), `outcome_pending` (absent =
    False), `lengths` (number of steps). Per step, flat over all trajectories: `t` (NaN = not
    given; None when no step gives one) and one float64 column per forecast name (NaN = null or
    absent), names in the order the records first mention them (as `to_arrays` lists them).
    """

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
    """Consecutive batches as one; a forecast name a batch never mentions is absent (NaN) there."""
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
    """The flat arrays `to_arrays` would build from these records, or NotFast when the exact
    path would reject a record (or read it differently)."""
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
    if np.any(horizon_below_steps(horizon_given, lengths)):
        raise NotFast("horizon < number of steps")
    horizon = np.where(np.isnan(horizon_given), lengths.astype(np.float64), horizon_given)

    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    n_steps = int(offsets[-1])
    if raw.t is not None:
        starts = np.repeat(offsets[:-1], lengths)
        position = np.arange(n_steps, dtype=np.float64) - starts + 1.0
        if np.any(~np.isnan(raw.t) & (raw.t != position)):
            raise NotFast("steps.t: out of order")

    empty = lengths == 0
    owner = np.repeat(np.arange(n), lengths)
    predictors: dict[str, PredictorColumn] = {}
    for name, values in raw.forecasts.items():
        if np.any(forecast_outside(values)):
            raise NotFast(f"forecasts.{name}: outside [0, 1]")
        gap = np.bincount(owner[np.isnan(values)], minlength=n) > 0
        usable = ~gap & ~empty
        counts = {"missing": int(np.sum(gap & ~empty)), "no_steps": int(np.sum(empty))}
        skipped = {k: counts[k] for k in SKIP_REASONS if counts.get(k)}
        predictors[name] = PredictorColumn(name, values, usable, skipped)

    outcome_on_unscored = int(np.sum(~clean & has_outcome))
    return TrajectoryArrays(
        ids=raw.ids,
        offsets=offsets,
        horizon=horizon,
        stop_code=stop_code,
        outcome=np.where(clean, outcome, np.nan),
        q_z=q_z,
        predictors=predictors,
        outcome_on_unscored=outcome_on_unscored,
    )


def arrays_from_arrow(table: Any, from_json: bool = True) -> TrajectoryArrays:
    """Validated flat arrays of an Arrow table (or record batch) of trajectories, or NotFast.

    `from_json`: a null in `steps`, `metadata`, `outcome_pending` or a step's `forecasts` means the
    key was absent (the caller has checked); otherwise (Parquet) such a null is left to the exact
    path, and `metadata` may be JSON text. Needs pyarrow (the `parquet` extra).
    """
    return validated_arrays(raw_from_arrow(table, from_json=from_json))


# -- Arrow tables (needs pyarrow: the `parquet` extra) ------------------------------------------


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
    """A nullable numeric column as float64 with NaN for null; plain types only, no NaN values."""
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
    return _floats(arr, name)


def _floats(arr: Any, name: str) -> np.ndarray:
    """A numeric Arrow array as float64; NotFast for an integer a double cannot hold (beyond 2**53),
    which Arrow refuses to cast and the exact path reads (and refuses or keeps) as a Python int."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        values = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        raise NotFast(f"{name}: an integer beyond 2**53") from None
    return np.asarray(values, dtype=np.float64)


def raw_from_arrow(table: Any, from_json: bool = False) -> RawColumns:
    """The raw columns of an Arrow table or record batch, or NotFast (see `arrays_from_arrow`). Only the
    Arrow *types* are checked here (one plain type per column); the values by `validated_arrays`."""
    null_means_absent = from_json
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
        if not pa.types.is_boolean(pending_arr.type) or (pending_arr.null_count and not null_means_absent):
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
    if steps is not None and not (pa.types.is_null(steps.type) and null_means_absent):
        if not (pa.types.is_list(steps.type) or pa.types.is_large_list(steps.type)):
            raise NotFast("steps: not a list")
        if steps.null_count and not null_means_absent:
            raise NotFast("steps: null")
        lengths = np.asarray(pc.fill_null(pc.list_value_length(steps), 0).to_numpy(zero_copy_only=False), np.int64)
        items = steps.flatten()
        if len(items):
            if not pa.types.is_struct(items.type) or items.null_count:
                raise NotFast("steps: items are not objects")
            fields = {items.type.field(i).name: i for i in range(items.type.num_fields)}
            children = items.flatten()
            if "t" in fields:
                t_arr = children[fields["t"]]
                if not (pa.types.is_null(t_arr.type) or pa.types.is_integer(t_arr.type)):
                    raise NotFast("steps.t: type")
                if not pa.types.is_null(t_arr.type):
                    t = _floats(t_arr, "steps.t")
            if "forecasts" in fields:
                fc = children[fields["forecasts"]]
                if pa.types.is_null(fc.type) and not null_means_absent:
                    raise NotFast("forecasts: null")
                if not pa.types.is_null(fc.type):
                    if not pa.types.is_struct(fc.type) or (fc.null_count and not null_means_absent):
                        raise NotFast("forecasts: not an object")
                    for i, col in enumerate(fc.flatten()):
                        name = fc.type.field(i).name
                        forecasts[name] = _numbers(col, len(items), f"forecasts.{name}")
    return RawColumns(
        ids=[str(s) for s in ids_arr.to_pylist()],
        stop_code=stop_code,
        outcome=outcome,
        outcome_pending=pending,
        q_z=q_z,
        horizon=horizon,
        lengths=lengths,
        t=t,
        forecasts=forecasts,
    )
