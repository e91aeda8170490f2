"""Arrow tables (from the JSON reader or Parquet) -> flat trajectory arrays, validated vectorised.

The columns are those of the interchange format (see `schema.py`):

    trajectory_id  string, non-empty            stop_reason  string, a StopReason value
    outcome        0/1 (int, float or bool), null     horizon      int >= number of steps, null
    q_z            number in [0, 1], null               outcome_pending  bool, null
    steps          list<struct<t: int or null, forecasts: struct<name: number or null, ...>>>
    metadata       struct (ignored here)                 any other column: ignored

This path accepts only what the exact per-record path (pydantic, `jsonl.py` + `arrays.py`)
accepts with the same result, and only in the plain form: numbers where numbers belong, one
type per column. Anything else (a non-numeric forecast, a float horizon, a NaN, a value out
of range, an ambiguous null) raises `NotColumnar`, and the caller reads that chunk with the
exact path, which either gives the same arrays or the error message naming line and field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.records.arrays import SKIP_REASONS, STOP_REASONS, PredictorColumn, TrajectoryArrays
from tps_tracer.records.stop_reasons import StopReason

if TYPE_CHECKING:
    import pyarrow as pa

_CLEAN = STOP_REASONS.index(StopReason.CLEAN)


class NotColumnar(Exception):
    """This chunk needs the exact per-record path (the message says why, for debugging)."""


def _column(table: pa.Table | pa.RecordBatch, name: str) -> pa.Array | None:
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


def _numbers(arr: pa.Array | None, n: int, name: str, *, integer: bool = False, boolean: bool = False) -> np.ndarray:
    """A nullable numeric column as float64 with NaN for null; plain types only."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if arr is None or pa.types.is_null(arr.type):
        return np.full(n, np.nan)
    t = arr.type
    ok = pa.types.is_integer(t) or (pa.types.is_floating(t) and not integer) or (pa.types.is_boolean(t) and boolean)
    if not ok:
        raise NotColumnar(f"{name}: type {t}")
    if pa.types.is_floating(t) and pc.any(pc.is_nan(arr)).as_py():
        raise NotColumnar(f"{name}: NaN")
    values = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float64)


# Columns where the exact path rejects a null but accepts an absent key.
NULL_SENSITIVE = ("steps", "metadata", "outcome_pending")


def ambiguous_null_rows(table: pa.Table | pa.RecordBatch) -> NDArray[np.int64]:
    """Rows whose null in a null-sensitive column (or in a step's `forecasts`) may be an explicit
    null rather than an absent key: the JSON reader cannot tell, the caller checks the raw line."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    flagged = np.zeros(n, dtype=bool)
    for name in NULL_SENSITIVE:
        col = _column(table, name)
        if col is not None and col.null_count:
            flagged |= np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    steps = _column(table, "steps")
    if steps is not None and (pa.types.is_list(steps.type) or pa.types.is_large_list(steps.type)):
        items = steps.flatten()
        if pa.types.is_struct(items.type) and items.type.get_field_index("forecasts") >= 0:
            fc = items.flatten()[items.type.get_field_index("forecasts")]
            if fc.null_count:
                lengths = np.asarray(pc.fill_null(pc.list_value_length(steps), 0).to_numpy(zero_copy_only=False))
                owner = np.repeat(np.arange(n), lengths)
                flagged[owner[np.asarray(fc.is_null().to_numpy(zero_copy_only=False), dtype=bool)]] = True
    return np.flatnonzero(flagged)


def arrays_from_arrow(table: pa.Table | pa.RecordBatch, from_json: bool = True) -> TrajectoryArrays:
    """Validated flat arrays of an Arrow table of trajectories, or NotColumnar.

    `from_json`: the table comes from the JSON reader and the caller has checked, on the raw lines
    of the `ambiguous_null_rows`, that no record writes `"steps": null`, `"metadata": null`,
    `"forecasts": null` or `"outcome_pending": null` (the reader cannot tell a null from an absent
    key; the exact path rejects the null and accepts the absence), so a null here means absent.
    Otherwise (Parquet) a null in those columns is left to the exact path, and `metadata` may
    be JSON text.
    """
    null_means_absent = from_json
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.schema.names
    if "resolves" in names:
        raise NotColumnar("resolution records")
    n = table.num_rows
    ids_arr = _column(table, "trajectory_id")
    if ids_arr is None or not (pa.types.is_string(ids_arr.type) or pa.types.is_large_string(ids_arr.type)):
        raise NotColumnar("trajectory_id")
    if ids_arr.null_count or (n and pc.min(pc.binary_length(ids_arr)).as_py() < 1):
        raise NotColumnar("trajectory_id: null or empty")
    reason_arr = _column(table, "stop_reason")
    if reason_arr is None or not pa.types.is_string(reason_arr.type):
        raise NotColumnar("stop_reason")
    codes = pc.index_in(reason_arr, value_set=pa.array([r.value for r in STOP_REASONS]))
    if codes.null_count:
        raise NotColumnar("stop_reason: unknown value")
    stop_code = codes.to_numpy(zero_copy_only=False).astype(np.int8)
    clean = stop_code == _CLEAN

    outcome = _numbers(_column(table, "outcome"), n, "outcome", boolean=True)
    if np.any(~np.isnan(outcome) & (outcome != 0.0) & (outcome != 1.0)):
        raise NotColumnar("outcome: not 0/1")
    pending_arr = _column(table, "outcome_pending")
    pending = np.zeros(n, dtype=bool)
    if pending_arr is not None and not pa.types.is_null(pending_arr.type):
        if not pa.types.is_boolean(pending_arr.type) or (pending_arr.null_count and not null_means_absent):
            raise NotColumnar("outcome_pending")
        pending = np.asarray(pc.fill_null(pending_arr, False).to_numpy(zero_copy_only=False), dtype=bool)
    has_outcome = ~np.isnan(outcome)
    if np.any(pending & has_outcome) or np.any(clean & ~has_outcome & ~pending):
        raise NotColumnar("outcome / outcome_pending inconsistent")
    q_z = _numbers(_column(table, "q_z"), n, "q_z")
    if np.any((q_z < 0.0) | (q_z > 1.0)):
        raise NotColumnar("q_z: outside [0, 1]")
    horizon_given = _numbers(_column(table, "horizon"), n, "horizon", integer=True)

    meta = _column(table, "metadata")
    if from_json and meta is not None and not pa.types.is_struct(meta.type):
        raise NotColumnar("metadata: not an object")

    steps = _column(table, "steps")
    lengths = np.zeros(n, dtype=np.int64)
    forecast_cols: list[tuple[str, pa.Array]] = []
    if steps is not None and not (pa.types.is_null(steps.type) and null_means_absent):
        if not (pa.types.is_list(steps.type) or pa.types.is_large_list(steps.type)):
            raise NotColumnar("steps: not a list")
        if steps.null_count and not null_means_absent:
            raise NotColumnar("steps: null")
        lengths = np.asarray(pc.fill_null(pc.list_value_length(steps), 0).to_numpy(zero_copy_only=False), np.int64)
        items = steps.flatten()
        if len(items):
            if not pa.types.is_struct(items.type) or items.null_count:
                raise NotColumnar("steps: items are not objects")
            fields = {items.type.field(i).name: i for i in range(items.type.num_fields)}
            children = items.flatten()
            if "t" in fields:
                t_arr = children[fields["t"]]
                if not (pa.types.is_null(t_arr.type) or pa.types.is_integer(t_arr.type)):
                    raise NotColumnar("steps.t: type")
                if not pa.types.is_null(t_arr.type):
                    t = np.asarray(pc.cast(t_arr, pa.float64()).to_numpy(zero_copy_only=False))
                    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
                    position = np.arange(len(items), dtype=np.float64) - starts + 1.0
                    if np.any(~np.isnan(t) & (t != position)):
                        raise NotColumnar("steps.t: out of order")
            if "forecasts" in fields:
                fc = children[fields["forecasts"]]
                if pa.types.is_null(fc.type) and not null_means_absent:
                    raise NotColumnar("forecasts: null")
                if not pa.types.is_null(fc.type):
                    if not pa.types.is_struct(fc.type) or (fc.null_count and not null_means_absent):
                        raise NotColumnar("forecasts: not an object")
                    forecast_cols = [(fc.type.field(i).name, col) for i, col in enumerate(fc.flatten())]
    horizon = np.where(np.isnan(horizon_given), lengths.astype(np.float64), horizon_given)
    if np.any(~np.isnan(horizon_given) & (horizon_given < 1.0)):
        raise NotColumnar("horizon < 1")
    if np.any(~np.isnan(horizon_given) & (horizon_given < lengths)):
        raise NotColumnar("horizon < number of steps")

    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    n_steps = int(offsets[-1])
    empty = lengths == 0
    owner = np.repeat(np.arange(n), lengths)
    predictors: dict[str, PredictorColumn] = {}
    for name, col in forecast_cols:
        values = _numbers(col, n_steps, f"forecasts.{name}")
        if np.any((values < 0.0) | (values > 1.0)):
            raise NotColumnar(f"forecasts.{name}: outside [0, 1]")
        gap = np.bincount(owner[np.isnan(values)], minlength=n) > 0
        usable = ~gap & ~empty
        counts = {"missing": int(np.sum(gap & ~empty)), "no_steps": int(np.sum(empty))}
        skipped = {k: counts[k] for k in SKIP_REASONS if counts.get(k)}
        predictors[name] = PredictorColumn(name, values, usable, skipped)

    outcome_on_unscored = int(np.sum(~clean & has_outcome))
    outcome = np.where(clean, outcome, np.nan)
    return TrajectoryArrays(
        ids=_strings(ids_arr),
        offsets=offsets,
        horizon=horizon,
        stop_code=stop_code,
        outcome=outcome,
        q_z=q_z,
        predictors=predictors,
        outcome_on_unscored=outcome_on_unscored,
    )


def _strings(arr: Any) -> list[str]:
    return [str(s) for s in arr.to_pylist()]
