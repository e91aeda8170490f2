"""Trajectories as Parquet: one row per trajectory, steps nested. JSON Lines <-> Parquet.

Schema (what `jsonl_to_parquet` writes and every command reads; columns as in the JSON Lines
format, see `schema.py`):

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
than "non_numeric") and counted in the conversion summary.

Resolution lines (`{"resolves": ...}`) are applied while converting; Parquet holds resolved records.
"""

from __future__ import annotations

import io
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tps_tracer.records.duplicate_ids import duplicate_message
from tps_tracer.records.jsonl import RecordError, TrajectoryFileError, parse_lines, read_trajectories, record_json
from tps_tracer.records.pyarrow_extra import require_pyarrow
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.set_aside import ReadRecords, SetAside

DEFAULT_ROWS_PER_GROUP = 50_000


@dataclass
class ConvertSummary:
    trajectories: int = 0
    predictors: tuple[str, ...] = ()
    non_numeric_as_null: int = 0  # forecasts that were not numbers, written as null

    def describe(self, out: str) -> str:
        names = f" ({', '.join(self.predictors)})" if self.predictors else ""
        text = f"wrote {self.trajectories} trajectories{names} to {out}"
        if self.non_numeric_as_null:
            text += f"; {self.non_numeric_as_null} non-numeric forecasts written as null (read as missing)"
        return text


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


def _number(value: Any) -> tuple[float | None, bool]:
    """(value as float or None, whether a non-number was dropped)."""
    from tps_tracer.validity import classify_forecast

    number = classify_forecast(value)
    if isinstance(number, str):
        return None, number == "non_numeric"
    return number, False


def records_table(records: Sequence[TrajectoryRecord], predictors: Sequence[str], summary: ConvertSummary) -> Any:
    """An Arrow table of validated records in the schema above."""
    import pyarrow as pa

    rows = []
    for rec in records:
        steps = []
        for step in rec.steps:
            fc = {}
            for name in predictors:
                value, dropped = _number(step.forecasts.get(name))
                summary.non_numeric_as_null += dropped
                fc[name] = value
            extra = step.model_extra or {}
            steps.append({"t": step.t, "forecasts": fc, "extra": json.dumps(extra) if extra else None})
        extra = rec.model_extra or {}
        rows.append(
            {
                "trajectory_id": rec.trajectory_id,
                "stop_reason": rec.stop_reason.value,
                "outcome": rec.outcome,
                "outcome_pending": rec.outcome_pending,
                "horizon": rec.horizon,
                "q_z": rec.q_z,
                "steps": steps,
                "metadata": json.dumps(rec.metadata),
                "extra": json.dumps(extra) if extra else None,
            }
        )
    summary.trajectories += len(rows)
    return pa.Table.from_pylist(rows, schema=arrow_schema(predictors))


def _record_batches(src: Path, chunk_bytes: int) -> Iterator[list[TrajectoryRecord]]:
    """Validated records of a JSON Lines file, a chunk at a time (whole file if it has resolution lines)."""
    from tps_tracer.records.chunks import jsonl_byte_chunks

    # Resolutions may refer to any line: the exact whole-file read. Looked for before any chunk is
    # yielded (found in a later chunk, the earlier chunks' records were written twice).
    if any(b'"resolves"' in chunk for chunk in jsonl_byte_chunks(src, chunk_bytes)):
        yield read_trajectories(src)
        return
    seen: set[str] = set()
    for chunk in jsonl_byte_chunks(src, chunk_bytes):
        try:
            records: list[TrajectoryRecord] = parse_lines(
                io.TextIOWrapper(io.BytesIO(chunk), encoding="utf-8"), str(src)
            )
        except (TrajectoryFileError, UnicodeDecodeError):
            read_trajectories(src)  # raises the exact error, with line numbers in the whole file
            raise
        yield drop_repeats(records, seen, src)


def drop_repeats(records: list[TrajectoryRecord], seen: set[str], src: Path) -> list[TrajectoryRecord]:
    """A repeated id (a re-run appended to the sink) is set aside, the first kept, as the whole-file
    reader does (records/set_aside.py); `seen` (the ids of earlier chunks) takes the chunk's ids."""
    repeated = [r for r in records if r.trajectory_id in seen]
    if repeated:
        set_aside = SetAside()
        for r in repeated:
            set_aside.add("duplicate_id", duplicate_message(r.trajectory_id, "an earlier line has it"))
        set_aside.log_once(str(src))
        records = [r for r in records if r.trajectory_id not in seen]
    seen.update(r.trajectory_id for r in records)
    return records


def _atomic_target(dst: Path) -> tuple[int, str]:
    """A temp file beside `dst` (renamed over it when complete), with the permissions of a new file."""
    from tps_tracer.atomic_write import remove_stale, temp_path

    remove_stale(dst)  # a killed earlier conversion's temp file (atomic_write.py)
    tmp = str(temp_path(dst))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    except OSError as exc:
        raise OSError(f"cannot write {dst}: {exc.strerror}") from None
    return fd, tmp


def jsonl_to_parquet(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], chunk_bytes: int = 32 << 20
) -> ConvertSummary:
    """Convert a JSON Lines trajectory file to one Parquet file (written to a temp file, then renamed)."""
    require_pyarrow(f"writing Parquet ({dst})")
    from tps_tracer.records.convert_stream import write_stream
    from tps_tracer.records.reading import fast_else_whole_file

    src, dst = Path(src), Path(dst)
    fd, tmp = _atomic_target(dst)
    os.close(fd)
    try:
        # One streamed pass, no pydantic per record (convert_stream.py); an error, resolution lines
        # or too many names: the exact whole-file way below, which gives the precise error.
        def stream() -> ConvertSummary:
            summary = ConvertSummary()
            write_stream(src, tmp, chunk_bytes, summary)
            return summary

        summary = fast_else_whole_file(stream, lambda: _exact_convert(src, tmp, chunk_bytes))
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return summary


def _exact_convert(src: Path, tmp: str, chunk_bytes: int) -> ConvertSummary:
    """The converter's exact path: validated records, predictor names from a first pass."""
    import pyarrow.parquet as pq

    from tps_tracer.records.chunks import iter_chunks
    from tps_tracer.records.reading import fast_else_whole_file

    # Pass 1 (fast reader): the predictor names, in first-seen order, for the file's one schema;
    # an error or resolution lines: the exact whole-file read (which raises the precise error).
    names = fast_else_whole_file(
        lambda: list(dict.fromkeys(name for c in iter_chunks(src, chunk_bytes) for name in c.arrays.predictors)),
        lambda: list(dict.fromkeys(n for r in read_trajectories(src) for s in r.steps for n in s.forecasts)),
    )
    if not names:  # an empty file (the exact reader names it), or records without any forecast
        records = read_trajectories(src)
        raise TrajectoryFileError(
            str(src), [RecordError(0, "", f"no forecasts in the {len(records)} trajectories: nothing to convert")]
        )
    summary = ConvertSummary(predictors=tuple(names))
    with pq.ParquetWriter(tmp, arrow_schema(names)) as writer:
        for batch in _record_batches(src, chunk_bytes):
            writer.write_table(records_table(batch, names, summary), row_group_size=DEFAULT_ROWS_PER_GROUP)
    return summary


def _row_to_json(row: dict[str, Any]) -> str:
    """A Parquet row (schema above) back to its JSON Lines record text."""
    meta = row.pop("metadata", None)
    extra = row.pop("extra", None)
    obj: dict[str, Any] = {k: v for k, v in row.items() if not (k == "outcome_pending" and not v)}
    if isinstance(meta, str):
        obj["metadata"] = json.loads(meta)
    elif meta is not None:
        obj["metadata"] = meta
    if isinstance(extra, str):
        obj.update(json.loads(extra))
    for step in obj.get("steps") or []:
        step_extra = step.pop("extra", None)
        if step.get("t") is None:
            step.pop("t", None)
        if isinstance(step_extra, str):
            step.update(json.loads(step_extra))
    return json.dumps(obj, allow_nan=False)


def parquet_records(src: str | os.PathLike[str], batch_rows: int = 32_768) -> Iterator[TrajectoryRecord]:
    """Validated records of a Parquet file or a directory of shards (errors name the row); a directory's
    `.jsonl` shards are read as JSON Lines (no pyarrow needed for them).

    A repeated id inside one file is set aside and counted, as the JSON Lines reader does; across
    shards it is an error. A directory whose JSON Lines shards hold resolution lines is read whole
    (`shards.read_shards`: a resolution may name a record of any shard), else shard by shard."""
    from tps_tracer.records.chunks import is_parquet, source_files
    from tps_tracer.records.shards import has_resolution_lines, read_shards

    files = source_files(src)
    if len(files) > 1 and any(not is_parquet(f) and has_resolution_lines(f) for f in files):
        yield from read_shards(files, str(src))
        return
    seen: set[str] = set()
    for path in files:
        records = parquet_file_iter(path, batch_rows) if is_parquet(path) else read_trajectories(path)
        for rec in records:
            if rec.trajectory_id in seen:
                msg = duplicate_message(rec.trajectory_id, "also in an earlier shard")
                raise TrajectoryFileError(str(path), [RecordError(0, "trajectory_id", msg)])
            seen.add(rec.trajectory_id)
            yield rec


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
    (records/set_aside.py); it once was an error naming no row."""
    aside = set_aside if set_aside is not None else SetAside()
    first_row: dict[str, int] = {}
    for row, ids, lines in _parquet_batches(path, batch_rows):
        keep = []
        for i, (tid, line) in enumerate(zip(ids, lines, strict=True)):
            at = row + i + 1
            if isinstance(tid, str) and tid in first_row:
                aside.add("duplicate_id", f"row {at}: {duplicate_message(tid, f'first seen on row {first_row[tid]}')}")
                continue
            if isinstance(tid, str):
                first_row[tid] = at
            keep.append((at, line))
        yield from _validated_rows(path, keep)
    aside.log_once(str(path))


def _parquet_batches(path: str | os.PathLike[str], batch_rows: int) -> Iterator[tuple[int, list[Any], list[str]]]:
    """(first row, trajectory ids, rows as JSON Lines text) per record batch of one Parquet file."""
    require_pyarrow(f"reading Parquet ({path})")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tps_tracer.records.limits import check_parquet_predictors

    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise TrajectoryFileError(str(path), [RecordError(0, "", f"cannot read Parquet ({exc})")]) from None
    check_parquet_predictors(pf.schema_arrow, str(path))  # before a batch builds 100,000 columns
    row = 0
    for batch in pf.iter_batches(batch_size=batch_rows):
        rows = batch.to_pylist()
        yield row, [r.get("trajectory_id") for r in rows], [_row_to_json(r) for r in rows]
        row += batch.num_rows


def _validated_rows(path: str | os.PathLike[str], rows: list[tuple[int, str]]) -> list[TrajectoryRecord]:
    """The records of (row from 1, JSON text) pairs; errors name the row and field."""
    if not rows:
        return []
    try:
        return parse_lines([line for _, line in rows], str(path), strict=True)
    except TrajectoryFileError as exc:
        errors = [RecordError(rows[e.line - 1][0] if e.line else 0, e.field, e.message) for e in exc.errors]
        raise TrajectoryFileError(f"{path} (Parquet: 'line' is the row, from 1)", errors) from None


def write_jsonl_atomic(records: Iterable[TrajectoryRecord], dst: str | os.PathLike[str]) -> int:
    dst = Path(dst)
    fd, tmp = _atomic_target(dst)
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(record_json(rec))
                n += 1
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


def parquet_to_jsonl(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> ConvertSummary:
    """Write the records of a Parquet file or directory as JSON Lines. An input without any
    trajectory is refused as `report` refuses it (it once wrote an empty file, exit 0)."""
    records = parquet_records(src)
    first = next(records, None)  # read before the output file is created
    if first is None:
        what = "the directory holds" if Path(src).is_dir() else "the file holds"
        raise TrajectoryFileError(str(src), [RecordError(0, "", f"{what} no trajectories")])
    n = write_jsonl_atomic(itertools.chain([first], records), dst)
    return ConvertSummary(trajectories=n)


def read_records(path: str | os.PathLike[str]) -> list[TrajectoryRecord]:
    """Validated records of a JSON Lines file, a Parquet file or a directory of Parquet shards."""
    from tps_tracer.records.chunks import is_parquet

    if Path(path).is_dir() or is_parquet(path):
        return list(parquet_records(path))
    return read_trajectories(path)
