"""Arrow tables of trajectories (Parquet files, Ray blocks) -> `RawColumns` (needs pyarrow: the `parquet` extra).

Only the Arrow *types* are checked here (one plain type per column: strings, integers, floats,
bools, lists of structs); the values are validated by `columnar.validated_arrays`, the same
function the JSON Lines reader uses. See `columnar.py` for the columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tps_tracer.records.columnar import STOP_CODE, RawColumns
from tps_tracer.records.reading import NotFast


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
    values = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float64)


def raw_from_arrow(table: Any, from_json: bool = False) -> RawColumns:
    """The raw columns of an Arrow table or record batch, or NotFast (see `arrays_from_arrow`)."""
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
                    t = np.asarray(pc.cast(t_arr, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
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
