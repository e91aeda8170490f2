"""Trajectories as Parquet: one row per trajectory, steps nested; read by batch, fast or exact.

Schema (what `convert.jsonl_to_parquet` writes and every command reads; columns as in the JSON
Lines format, see `schema.py`):

    trajectory_id    string            not null
    stop_reason      string            a StopReason value
    outcome          int8              0 / 1, null when unobserved
    outcome_pending  bool              true while a clean stop waits for its outcome
    horizon          int64             null: the number of steps
    q_z              double            null when not given
    steps            list<struct<
                       t: int64,                                 null when not given
                       forecasts: struct<NAME: double, ...>,     one field per predictor, null = missing
                       extra: string>>                           other step fields as JSON text, or null
    metadata         string            the metadata object as JSON text
    extra            string            other top-level fields as JSON text, or null

Readers need only the first seven columns; `metadata` may also be a struct, and a predictor
column may be float32 or an integer type. A forecast that is not a number (a string, a bool)
cannot be stored in a double column: it is written as null (then skipped as "missing" rather
than "non_numeric") and counted in the conversion summary. Parquet holds resolved records.

The fast read takes a batch's Arrow columns (`columnar.arrays_from_arrow`) with only the columns
the scores need (`projection`: `metadata` and `extra` are most of the bytes, and never looked at).
The exact read turns each row back into its JSON Lines record (`row_json`) for `jsonl.parse_lines`:
the same checks and messages, the row (from 1 in the file) in place of the line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tps_tracer.records.arrays import TrajectoryArrays, arrays_from_arrow, to_arrays
from tps_tracer.records.errors import RecordError, TrajectoryFileError, require_pyarrow
from tps_tracer.records.limits import ReadRecords, SetAside, check_parquet_predictors, duplicate_message
from tps_tracer.records.reading import first_that_reads

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
    """The `pyarrow.parquet.ParquetFile`, or the error naming the file; too many predictor names are
    refused before a batch builds a column per name."""
    require_pyarrow(f"reading Parquet ({path})")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise TrajectoryFileError(str(path), [RecordError(0, "", f"cannot read Parquet ({exc})")]) from None
    check_parquet_predictors(pf.schema_arrow, str(path))
    return pf


# -- the fast read: projected batches ----------------------------------------------------------


def projection(pf: Any) -> list[str] | None:
    """The column paths to read (top-level names, and `steps.<list>.<element>.<field>` leaves), or
    None to read every column (`steps` is not a list of objects: the converter decides, on everything)."""
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
    """(first row in the file, projected batch, a function reading the same rows with every column)."""
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


def read_arrow_batch(
    batch: Any, source: str, first_row: int, whole: Callable[[], Any] | None = None
) -> tuple[TrajectoryArrays, bool]:
    """(arrays, read by the fast path) of an Arrow batch in the Parquet schema, or TrajectoryFileError
    naming the row (from 1 in the file) and field. `whole()`: the batch with every column, for the
    exact read when the fast one refuses a batch of projected columns."""

    def exact() -> tuple[TrajectoryArrays, bool]:
        rows = (whole() if whole is not None else batch).to_pylist()
        return to_arrays(_validated_rows(source, [(first_row + i, row_json(r)) for i, r in enumerate(rows, 1)])), False

    return first_that_reads(lambda: (arrays_from_arrow(batch, from_json=False), True), exact)


# -- the exact read: rows as JSON Lines records -------------------------------------------------


def row_json(row: dict[str, Any]) -> str:
    """A Parquet row (schema above) back to its JSON Lines record text: the extras merged back, a null
    `metadata` / `t` / `outcome_pending` absent. A value the schema refuses (metadata or extra that is
    not JSON text, a NaN, a timestamp) is written as found, for `parse_lines` to name its row and field."""
    meta = row.pop("metadata", None)
    extra = row.pop("extra", None)
    obj: dict[str, Any] = {k: v for k, v in row.items() if not (k == "outcome_pending" and not v)}
    if meta is not None:
        obj["metadata"] = _object_or_text(meta)
    _merge_extra(obj, extra)
    for step in obj.get("steps") or []:
        if isinstance(step, dict):
            step_extra = step.pop("extra", None)
            if step.get("t") is None:
                step.pop("t", None)
            _merge_extra(step, step_extra)
    return json.dumps(obj, default=str)


def _object_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            pass  # left as text: the schema check names it
    return value


def _merge_extra(obj: dict[str, Any], extra: Any) -> None:
    """The fields of an `extra` column (JSON text of an object) into the record or step."""
    if extra is None:
        return
    fields = _object_or_text(extra)
    if isinstance(fields, dict):
        obj.update(fields)
    else:
        obj["extra"] = extra  # not an object: kept as the field it is


def parquet_file_records(path: str | os.PathLike[str], batch_rows: int = 32_768) -> ReadRecords:
    """Validated records of one Parquet file, with what was set aside (see `parquet_file_iter`)."""
    out = ReadRecords()
    out.extend(parquet_file_iter(path, batch_rows, out.set_aside))
    return out


def parquet_file_iter(
    path: str | os.PathLike[str], batch_rows: int = 32_768, set_aside: SetAside | None = None
) -> Iterator[TrajectoryRecord]:
    """Validated records of one Parquet file, a batch at a time; errors name the row (from 1). A row
    repeating an earlier row's id (two runs appended into one table) is set aside and counted in
    `set_aside`, the first kept, as the JSON Lines reader does with a repeated line
    (records/set_aside.py)."""
    aside = set_aside if set_aside is not None else SetAside()
    first_row: dict[str, int] = {}
    row = 0
    for batch in open_parquet(path).iter_batches(batch_size=batch_rows):
        keep = []
        for r in batch.to_pylist():
            row += 1
            tid = r.get("trajectory_id")
            if isinstance(tid, str) and tid in first_row:
                aside.add("duplicate_id", f"row {row}: {duplicate_message(tid, f'first seen on row {first_row[tid]}')}")
                continue
            if isinstance(tid, str):
                first_row[tid] = row
            keep.append((row, row_json(r)))
        yield from _validated_rows(path, keep)
    aside.log_once(str(path))


def _validated_rows(path: str | os.PathLike[str], rows: list[tuple[int, str]]) -> list[TrajectoryRecord]:
    """The records of (row from 1, JSON text) pairs; errors name the row and field."""
    from tps_tracer.records.jsonl import parse_lines

    if not rows:
        return []
    try:
        return parse_lines([line for _, line in rows], str(path), strict=True)
    except TrajectoryFileError as exc:
        errors = [RecordError(rows[e.line - 1][0] if e.line else 0, e.field, e.message) for e in exc.errors]
        raise TrajectoryFileError(f"{path} (Parquet: 'line' is the row, from 1)", errors) from None
