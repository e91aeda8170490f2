"""JSON Lines <-> Parquet (`tps-tracer convert`): one streamed pass of orjson-parsed chunks (checked as the
report checks them) into row groups, a chunk the fast checks refuse the exact way, and the whole file the
exact way on an error, resolution lines, an oversized record or too many names."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tps_tracer.constants import MAX_PREDICTORS
from tps_tracer.records import jsonl_fast
from tps_tracer.records.arrays import STOP_CODE, RawColumns, validated_arrays
from tps_tracer.records.errors import NotFast, RecordError, TrajectoryFileError, require_pyarrow, whole_file
from tps_tracer.records.jsonl import read_trajectories, write_trajectories
from tps_tracer.records.limits import SetAside, duplicate_message
from tps_tracer.records.parquet import arrow_schema
from tps_tracer.records.reading import (
    byte_chunks,
    exact_chunk,
    fast_else_whole_file,
    first_that_reads,
    parquet_records,
)
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.validity import classify_forecast

DEFAULT_ROWS_PER_GROUP = 50_000

SCHEMA_KEYS = frozenset({"trajectory_id", "stop_reason", "outcome", "horizon", "q_z", "outcome_pending", "steps"})
STEP_KEYS = frozenset({"t", "forecasts"})
_CUT = orjson.Fragment(b"\x00")
_STOP_NAMES = np.array(sorted(STOP_CODE, key=STOP_CODE.__getitem__), dtype=object)
# orjson reads an integer beyond 64 bits as a float (pydantic keeps it exact in metadata and extras),
# which orjson writes back in exponent form: such text (or a float written so) goes the exact way.
_EXPONENT = re.compile(rb"\d[eE][-+]?\d")


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


def records_table(records: Sequence[TrajectoryRecord], predictors: Sequence[str], summary: ConvertSummary) -> Any:
    """An Arrow table of validated records; a non-numeric forecast is written as null and counted."""
    import pyarrow as pa

    rows = []
    for rec in records:
        steps = []
        for step in rec.steps:
            fc = {}
            for name in predictors:
                value = classify_forecast(step.forecasts.get(name))
                summary.non_numeric_as_null += value == "non_numeric"
                fc[name] = None if isinstance(value, str) else value
            extra = json.dumps(step.model_extra) if step.model_extra else None
            steps.append({"t": step.t, "forecasts": fc, "extra": extra})
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
                "extra": json.dumps(rec.model_extra) if rec.model_extra else None,
            }
        )
    summary.trajectories += len(rows)
    return pa.Table.from_pylist(rows, schema=arrow_schema(predictors))


def jsonl_to_parquet(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], chunk_bytes: int = 32 << 20
) -> ConvertSummary:
    require_pyarrow(f"writing Parquet ({dst})")

    from tps_tracer.output import remove_stale, temp_path

    src, dst = Path(src), Path(dst)
    remove_stale(dst)  # a killed earlier conversion's temp file
    tmp = str(temp_path(dst))
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies, as for open()
    except OSError as exc:
        raise OSError(f"cannot write {dst}: {exc.strerror}") from None
    try:
        summary = fast_else_whole_file(lambda: write_stream(src, tmp, chunk_bytes), lambda: _exact_convert(src, tmp))
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return summary


def _exact_convert(src: Path, tmp: str) -> ConvertSummary:
    """The exact way: the validated records of one whole-file read (a repeat's names go with it, as streamed)."""
    import pyarrow.parquet as pq

    records = read_trajectories(src)  # an empty file: the exact reader names it
    names = list(dict.fromkeys(n for r in records for s in r.steps for n in s.forecasts))
    if not names:
        raise TrajectoryFileError(
            str(src), [RecordError(0, "", f"no forecasts in the {len(records)} trajectories: nothing to convert")]
        )
    summary = ConvertSummary(predictors=tuple(names))
    pq.write_table(records_table(records, names, summary), tmp, row_group_size=DEFAULT_ROWS_PER_GROUP)
    return summary


def parquet_to_jsonl(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> ConvertSummary:
    """An input without any trajectory is refused as `report` refuses it, before the output is created."""
    records = parquet_records(src)
    first = next(records, None)  # read before the output file is created
    if first is None:
        what = "the directory holds" if Path(src).is_dir() else "the file holds"
        raise TrajectoryFileError(str(src), [RecordError(0, "", f"{what} no trajectories")])
    return ConvertSummary(trajectories=write_trajectories(itertools.chain([first], records), dst))


@dataclass
class Side:
    """What the score columns do not hold, per record and per step: JSON text or None."""

    metadata: list[bytes] = field(default_factory=list)
    extra: list[str | None] = field(default_factory=list)
    step_extra: list[str | None] = field(default_factory=list)

    def add(self, recs: list[Any]) -> None:
        """A batch's side columns (orjson-parsed records), or NotFast."""
        if set(map(type, recs)) - {dict}:
            raise NotFast("a line is not an object")
        metadata = _dump_each(list(map(dict.get, recs, repeat("metadata"), repeat({}))))
        # Fields outside the schema: none, unless the keys outnumber the schema keys present (counted in C).
        known = SCHEMA_KEYS | {"metadata"}
        if _count(recs, known) == sum(map(len, recs)):
            extra: list[str | None] = [None] * len(recs)
        else:
            extra = [_extra_text(r, known) for r in recs]
        lists = list(map(dict.get, recs, repeat("steps"), repeat(())))
        # steps that are not lists: flatten refuses the batch
        steps = [] if set(map(type, lists)) - {list, tuple} else list(chain.from_iterable(lists))
        step_extra: list[str | None] = [None] * len(steps)
        if not set(map(type, steps)) - {dict} and _count(steps, STEP_KEYS) != sum(map(len, steps)):
            step_extra = [_extra_text(s, STEP_KEYS) for s in steps]
        texts = [e.encode() for e in chain(extra, step_extra) if e is not None]
        if _EXPONENT.search(b"".join(metadata)) or _EXPONENT.search(b"".join(texts)):
            raise NotFast("a number in exponent form (maybe an integer too large for a double)")
        self.metadata += metadata
        self.extra += extra
        self.step_extra += step_extra


def _dump_each(objects: list[Any]) -> list[bytes]:
    """`[orjson.dumps(o) for o in objects]` in one call (~4 us a call saved): dumped as one array with a
    control byte orjson never writes between the items, and cut there (metadata not an object: flatten refuses it)."""
    if not objects:
        return []
    seq: list[Any] = [_CUT] * (2 * len(objects) + 1)
    seq[1::2] = objects
    return orjson.dumps(seq)[3:-3].split(b",\x00,")


def _count(dicts: list[dict[str, Any]], keys: frozenset[str]) -> int:
    return sum(sum(map(dict.__contains__, dicts, repeat(k))) for k in keys)


def _extra_text(obj: dict[str, Any], known: frozenset[str]) -> str | None:
    extra = {k: v for k, v in obj.items() if k not in known}
    return json.dumps(extra) if extra else None


def arrow_table(raw: RawColumns, side: Side, names: Sequence[str]) -> Any:
    """The chunk in `arrow_schema(names)` (a name the chunk lacks: null)."""
    import pyarrow as pa

    n_steps = int(raw.lengths.sum())

    def masked(values: np.ndarray, kind: Any) -> Any:
        nan = np.isnan(values)
        if kind != pa.float64():
            values = np.where(nan, 0, values).astype(np.int64)
        return pa.array(values, type=kind, mask=nan if nan.any() else None)

    forecasts = [
        masked(raw.forecasts[name], pa.float64()) if name in raw.forecasts else pa.nulls(n_steps, pa.float64())
        for name in names
    ]
    t = masked(raw.t, pa.int64()) if raw.t is not None else pa.nulls(n_steps, pa.int64())
    offsets = pa.array(np.concatenate(([0], np.cumsum(raw.lengths))).astype(np.int32))
    columns = [
        pa.array(raw.ids, pa.string()),
        pa.array(_STOP_NAMES[raw.stop_code], pa.string()),
        masked(raw.outcome, pa.int8()),
        pa.array(raw.outcome_pending, pa.bool_()),
        masked(raw.horizon, pa.int64()),
        masked(raw.q_z, pa.float64()),
        _steps(offsets, t, forecasts, pa.array(side.step_extra, pa.string()), names),
        pa.array(side.metadata, pa.string()),
        pa.array(side.extra, pa.string()),
    ]
    return pa.Table.from_arrays(columns, schema=arrow_schema(names))


def _steps(offsets: Any, t: Any, forecasts: list[Any], extra: Any, names: Sequence[str]) -> Any:
    """The `steps` column of `arrow_schema(names)` from its parts (a forecast column per name)."""
    import pyarrow as pa

    steps_type = arrow_schema(names).field("steps").type
    fields = list(steps_type.value_type.field("forecasts").type)
    step = pa.StructArray.from_arrays(
        [t, pa.StructArray.from_arrays(forecasts, fields=fields), extra], names=["t", "forecasts", "extra"]
    )
    return pa.ListArray.from_arrays(offsets, step).cast(steps_type)


def widen(table: Any, names: Sequence[str]) -> Any:
    """A table written with fewer predictor names, in the schema of all `names` (the others null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    steps = table.column("steps").combine_chunks()
    values = steps.values
    old = values.field("forecasts")
    have = {old.type.field(i).name: i for i in range(old.type.num_fields)}
    children = [old.field(have[n]) if n in have else pa.nulls(len(old), pa.float64()) for n in names]
    offsets = pc.subtract(steps.offsets, steps.offsets[0]) if len(steps) else steps.offsets
    new_steps = _steps(offsets, values.field("t"), children, values.field("extra"), names)
    return table.set_column(table.schema.get_field_index("steps"), "steps", new_steps).cast(arrow_schema(names))


def write_stream(src: Path, tmp: str, chunk_bytes: int) -> ConvertSummary:
    """The streamed pass into `tmp`; a whole-file NotFast sends the file the exact way."""
    import pyarrow.parquet as pq

    summary = ConvertSummary()
    names: list[str] = []
    segments: list[tuple[str, Any]] = []  # (path, writer) per set of names
    seen: set[str] = set()
    try:
        # A resolution line, or a line byte_chunks refuses, sends the whole file the exact way (rows written
        # so far are discarded), which applies the one and names the other.
        for _, chunk, _ in byte_chunks(src, chunk_bytes):
            if b'"resolves"' in chunk:
                raise whole_file("resolution lines")
            table = _chunk_table(chunk, src, names, seen, summary)
            if len(names) > MAX_PREDICTORS:
                raise whole_file("too many predictor names")
            if table is None:
                continue
            if not segments or table.schema != segments[-1][1].schema:
                path = tmp if not segments else f"{tmp}.{len(segments)}"
                segments.append((path, pq.ParquetWriter(path, table.schema)))
            segments[-1][1].write_table(table, row_group_size=max(1, table.num_rows))
    except BaseException as exc:
        for path, writer in segments:
            writer.close()
            if path != tmp and os.path.exists(path):
                os.unlink(path)  # the caller removes `tmp`
        if isinstance(exc, TrajectoryFileError):
            raise whole_file("a line the exact read refuses") from None
        raise
    for _, writer in segments:
        writer.close()
    if not names:
        raise whole_file("no forecasts")
    summary.predictors = tuple(names)
    if len(segments) > 1:
        _merge(tmp, [p for p, _ in segments], names)
    return summary


def _chunk_table(chunk: bytes, src: Path, names: list[str], seen: set[str], summary: ConvertSummary) -> Any:
    """The chunk's table in the names seen so far (`names` grows), or None when empty."""

    def fast() -> Any:
        side = Side()
        raw = jsonl_fast.raw_from_jsonl(chunk, side.add)
        validated_arrays(raw)  # the report's value checks (or NotFast); the arrays themselves are not needed
        ids = raw.ids
        if len(set(ids)) != len(ids) or not seen.isdisjoint(ids):
            raise NotFast("a repeated id")
        names.extend(n for n in raw.forecasts if n not in names)
        if ids and not names:  # no column to write yet: the exact way (which names such a file)
            raise whole_file("no forecasts yet")
        seen.update(ids)
        summary.trajectories += len(ids)
        return arrow_table(raw, side, names) if ids else None

    def exact() -> Any:
        records = list(exact_chunk(chunk, str(src)))
        repeated = SetAside()
        for r in records:
            if r.trajectory_id in seen:
                repeated.add("duplicate_id", duplicate_message(r.trajectory_id, "an earlier line has it"))
        repeated.log_once(str(src))
        records = [r for r in records if r.trajectory_id not in seen]
        seen.update(r.trajectory_id for r in records)
        chunk_names = dict.fromkeys(n for r in records for s in r.steps for n in s.forecasts)
        names.extend(n for n in chunk_names if n not in names)
        return records_table(records, names, summary) if records else None

    return first_that_reads(fast, exact)


def _merge(tmp: str, paths: list[str], names: Sequence[str]) -> None:
    """Rewrite the segments as one file of every name, a row group at a time."""
    import pyarrow.parquet as pq

    merged = f"{tmp}.merged"
    try:
        with pq.ParquetWriter(merged, arrow_schema(names)) as writer:
            for path in paths:
                pf = pq.ParquetFile(path)
                for g in range(pf.metadata.num_row_groups):
                    table = pf.read_row_group(g)
                    writer.write_table(widen(table, names), row_group_size=max(1, table.num_rows))
        os.replace(merged, tmp)
    finally:
        for path in [merged, *paths[1:]]:
            if os.path.exists(path):
                os.unlink(path)
