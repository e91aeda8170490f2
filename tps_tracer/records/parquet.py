"""Trajectories as Parquet: one row per trajectory, steps nested (`arrow_schema`, what convert writes; a
non-numeric forecast is written as null). The fast read takes projected Arrow columns; the exact read turns
each row back into JSON Lines text (`row_json`) for `jsonl.parse_lines`, errors naming the row."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tps_tracer.constants import MAX_PREDICTORS
from tps_tracer.records.errors import RecordError, TrajectoryFileError, require_pyarrow
from tps_tracer.records.limits import PREDICTORS_MESSAGE, SetAside, duplicate_message

if TYPE_CHECKING:  # pydantic (~0.3 s of import): only the exact read needs it
    from tps_tracer.records.schema import TrajectoryRecord

TOP_LEVEL = ("trajectory_id", "stop_reason", "outcome", "outcome_pending", "q_z", "horizon")
STEP_FIELDS = ("t", "forecasts")


def arrow_schema(predictors: Sequence[str]) -> Any:
    import pyarrow as pa

    forecasts = pa.struct([pa.field(name, pa.float64()) for name in predictors])
    step = pa.struct([pa.field("t", pa.int64()), pa.field("forecasts", forecasts), pa.field("extra", pa.string())])
    return pa.schema(
        [
            pa.field("trajectory_id", pa.string(), nullable=False),
            pa.field("stop_reason", pa.string(), nullable=False),
            pa.field("outcome", pa.int8()),
            pa.field("outcome_pending", pa.bool_()),
            pa.field("horizon", pa.int64()),
            pa.field("q_z", pa.float64()),
            pa.field("steps", pa.list_(step)),
            pa.field("metadata", pa.string()),
            pa.field("extra", pa.string()),
        ]
    )


def open_parquet(path: str | os.PathLike[str]) -> Any:
    """The ParquetFile, or the error naming the file; too many predictor names refused up front."""
    require_pyarrow(f"reading Parquet ({path})")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise TrajectoryFileError(str(path), [RecordError(0, "", f"cannot read Parquet ({exc})")]) from None
    try:
        count = pf.schema_arrow.field("steps").type.value_type.field("forecasts").type.num_fields
    except (KeyError, AttributeError, TypeError):
        count = 0  # not the plain schema: the readers name what is wrong with it
    if count > MAX_PREDICTORS:
        message = f"field 'steps.forecasts' has {count} fields: {PREDICTORS_MESSAGE}"
        raise TrajectoryFileError(str(path), [RecordError(0, "steps.forecasts", message)])
    return pf


def projection(pf: Any) -> list[str] | None:
    """The column paths the scores need (`metadata` and `extra` are most of the bytes), or None to read all
    (`steps` is not a list of objects)."""
    names = pf.schema_arrow.names
    columns = [c for c in TOP_LEVEL if c in names]
    if "steps" not in names:
        return columns
    leaves = []
    for i in range(len(pf.schema)):
        parts = pf.schema.column(i).path.split(".")
        if parts[0] != "steps":
            continue
        if len(parts) < 4:  # steps: list<scalar> or another shape
            return None
        if parts[3] in STEP_FIELDS:
            leaves.append(".".join(parts[:4]))
    if not leaves:
        return None
    return columns + list(dict.fromkeys(leaves))


def projected_batches(pf: Any, batch_rows: int) -> Iterator[tuple[int, Any, Callable[[], Any]]]:
    """(first row in the file, projected batch, a function reading those rows with every column)"""
    columns = projection(pf)
    row = 0
    for group in range(pf.metadata.num_row_groups):
        start = row
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns):
            offset = row - start

            def whole(group: int = group, offset: int = offset, n: int = batch.num_rows) -> Any:
                return pf.read_row_group(group).slice(offset, n).combine_chunks().to_batches()[0]

            yield row, batch, whole
            row += batch.num_rows


def row_json(row: dict[str, Any]) -> str:
    """A Parquet row back to its JSON Lines text: extras merged back, a null `metadata` / `t` /
    `outcome_pending` absent; a value the schema refuses is written as found, for `parse_lines` to name."""
    meta = row.pop("metadata", None)
    obj: dict[str, Any] = {k: v for k, v in row.items() if not (k == "outcome_pending" and not v)}
    if meta is not None:
        obj["metadata"] = _object_or_text(meta)
    _merge_extra(obj)
    for step in obj.get("steps") or []:
        if isinstance(step, dict):
            if step.get("t") is None:
                step.pop("t", None)
            _merge_extra(step)
    return json.dumps(obj, default=str)


def _object_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            pass  # left as text: the schema check names it
    return value


def _merge_extra(obj: dict[str, Any]) -> None:
    """`obj`'s "extra" (the JSON text of its fields outside the schema) merged back into it."""
    extra = obj.pop("extra", None)
    fields = _object_or_text(extra)
    if isinstance(fields, dict):
        obj.update(fields)
    elif extra is not None:
        obj["extra"] = extra  # not an object: kept as the field it is


def parquet_file_iter(path: str | os.PathLike[str], set_aside: SetAside | None = None) -> Iterator[TrajectoryRecord]:
    """Validated records of one Parquet file, a batch at a time; a row repeating an earlier row's id is
    set aside in `set_aside` (the first kept), as for a repeated JSON Lines record."""
    aside = set_aside if set_aside is not None else SetAside()
    first_row: dict[str, int] = {}
    row = 0
    for batch in open_parquet(path).iter_batches(batch_size=32_768):
        keep = []
        for r in batch.to_pylist():
            row += 1
            tid = r.get("trajectory_id")
            if isinstance(tid, str) and first_row.setdefault(tid, row) != row:  # a repeat: the first row is kept
                aside.add("duplicate_id", f"row {row}: {duplicate_message(tid, f'first seen on row {first_row[tid]}')}")
                continue
            keep.append((row, row_json(r)))
        yield from validated_rows(path, keep)
    aside.log_once(str(path))


def validated_rows(path: str | os.PathLike[str], rows: list[tuple[int, str]]) -> list[TrajectoryRecord]:
    """The records of (row from 1, JSON text) pairs; errors name the row and field."""
    from tps_tracer.records.jsonl import parse_lines

    if not rows:
        return []
    try:
        return parse_lines([line for _, line in rows], str(path), strict=True)
    except TrajectoryFileError as exc:
        errors = [RecordError(rows[e.line - 1][0] if e.line else 0, e.field, e.message) for e in exc.errors]
        raise TrajectoryFileError(f"{path} (Parquet: 'line' is the row, from 1)", errors) from None
