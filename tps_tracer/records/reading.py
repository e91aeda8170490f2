"""How a trajectory input (JSON Lines, Parquet, shards) is read: in chunks of whole trajectories, each the
first way that takes it (fast columnar, else exact per record); a whole-file `NotFast` sends the input to
`exact_records`, whose messages name the line (docs/offline-speed.md lists the refusals)."""

from __future__ import annotations

import bisect
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import orjson

from tps_tracer.records import jsonl_fast
from tps_tracer.records.arrays import STOP_REASONS, TrajectoryArrays, raw_from_arrow, to_arrays, validated_arrays
from tps_tracer.records.errors import NotFast, RecordError, Rescan, TrajectoryFileError, whole_file
from tps_tracer.records.limits import (
    PREDICTORS_MESSAGE,
    PredictorNames,
    ReadRecords,
    SetAside,
    check_unfinished_line,
    duplicate_message,
    line_number_at,
    load_json,
)
from tps_tracer.records.stop_reasons import StopReason

if TYPE_CHECKING:  # pydantic (~0.3 s of import): only the exact reads need it
    from tps_tracer.records.jsonl import ShardLinks
    from tps_tracer.records.schema import TrajectoryRecord

T = TypeVar("T")


def first_that_reads(*ways: Callable[[], T]) -> T:
    """The first way's result that does not refuse with `NotFast`; a whole-file `NotFast` is passed on."""
    for way in ways[:-1]:
        try:
            return way()
        except NotFast as exc:
            if exc.whole_file:
                raise
    return ways[-1]()


def fast_else_whole_file(fast: Callable[[], T], whole: Callable[[], T]) -> T:
    try:
        return fast()
    except NotFast:
        pass  # `whole` runs outside the handler: the fast path's frames (and chunks) are freed first
    return whole()


def read_jsonl_chunk(chunk: bytes, source: str, resolutions_scanned: bool = False) -> tuple[TrajectoryArrays, bool]:
    """(arrays, read by the fast path) of a chunk of whole JSON Lines (no BOM), or a whole-file NotFast.
    `resolutions_scanned`: its resolution lines were taken out (a "resolves" left is a trajectory's text)."""
    if not resolutions_scanned and b'"resolves"' in chunk:
        raise whole_file("resolution lines")

    # pyarrow's parser pays from a megabyte on; below, orjson (looked up per call: tests patch them); strict:
    # a repeated id or an orphan resolution needs the whole-file read, which counts it
    ways = [
        lambda: (jsonl_fast.arrays_from_jsonl(chunk), True),
        lambda: (to_arrays(exact_chunk(chunk, source, strict=True)), False),
    ]
    if len(chunk) >= jsonl_fast.MIN_BYTES:
        ways.insert(0, lambda: (validated_arrays(jsonl_fast.raw_from_jsonl_arrow(chunk)), True))
    return first_that_reads(*ways)


def exact_chunk(chunk: bytes, source: str, strict: bool = False) -> ReadRecords:
    """A chunk's records by the exact reader, or a whole-file NotFast (the whole-file read names the error)."""
    from tps_tracer.records.jsonl import parse_lines  # pydantic (~0.3 s): only the exact path

    try:
        return parse_lines(io.TextIOWrapper(io.BytesIO(chunk), encoding="utf-8"), source, strict=strict)
    except (TrajectoryFileError, UnicodeDecodeError):
        raise whole_file(source) from None


def read_arrow_batch(
    batch: Any, source: str, first_row: int, whole: Callable[[], Any] | None = None
) -> tuple[TrajectoryArrays, bool]:
    """(arrays, read by the fast path) of a batch, or TrajectoryFileError naming the row and field.
    `whole()`: the batch with every column, for the exact read."""

    def exact() -> tuple[TrajectoryArrays, bool]:
        from tps_tracer.records.parquet import row_json, validated_rows

        rows = (whole() if whole is not None else batch).to_pylist()
        return to_arrays(validated_rows(source, [(first_row + i, row_json(r)) for i, r in enumerate(rows, 1)])), False

    return first_that_reads(lambda: (validated_arrays(raw_from_arrow(batch)), True), exact)


DEFAULT_CHUNK_BYTES = 32 << 20  # JSON Lines bytes per chunk
DEFAULT_BATCH_ROWS = 32_768  # Parquet rows per chunk
SCAN_BYTES = 8 << 20  # pieces of the byte search for resolution lines
_BOM = b"\xef\xbb\xbf"

_NON_SPACE = re.compile(rb"\S")


@dataclass
class Chunk:
    arrays: TrajectoryArrays
    origin: tuple[int, int]  # (file index, byte offset or first row): orders first-seen predictors
    fast: bool  # read by the columnar path
    source: str
    done: int = 0  # bytes (JSON Lines) or rows (Parquet) of this file read so far
    size: int = 0  # the file's size in the same unit
    set_aside: SetAside | None = None  # lines read but not scored (a shard read the whole-file way)


def is_parquet(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in (".parquet", ".pq")


def source_files(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """A file; a directory's .parquet / .jsonl shards (recursively, in name order); a list's files in turn."""
    if not isinstance(path, str | os.PathLike):
        return [f for p in path for f in source_files(p)]
    p = Path(path)
    if not p.is_dir():
        return [p]
    files = sorted(f for f in p.rglob("*") if f.is_file() and (is_parquet(f) or f.suffix.lower() == ".jsonl"))
    if not files:
        raise TrajectoryFileError(str(p), [RecordError(0, "", "the directory holds no .parquet or .jsonl files")])
    return files


def iter_chunks(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    set_aside: SetAside | None = None,
    scan_first: bool = False,
) -> Iterator[Chunk]:
    """Chunks of whole trajectories from one input (a list of files is one input); an empty shard is
    counted in `set_aside`. A file's resolution lines are found as it is read unless `scan_first`."""
    files = source_files(path)
    # Resolution lines of any shard apply to every shard: found first.
    shared = None
    if len(files) > 1:
        try:
            shared = scan_resolutions((k, _pieces(f)) for k, f in enumerate(files) if not is_parquet(f))
        except OSError:
            raise whole_file("a shard that cannot be read") from None
        shared = shared if shared.spans else None
    names = PredictorNames()  # over the whole input
    for k, f in enumerate(files):
        if is_parquet(f):
            chunks = _parquet_chunks(f, k, batch_rows, shared)
        else:
            chunks = _jsonl_chunks(f, k, chunk_bytes, shared, scan_first or len(files) > 1)
        # A shard among many may fall back midway; a single file, or shards sharing resolution lines,
        # fall back whole.
        gave = False
        for chunk in _midway(chunks, f, k) if len(files) > 1 and shared is None else chunks:
            if not names.add(chunk.arrays.predictors):
                _too_many_predictors(chunk, names)
            gave = True
            yield chunk
        if not gave and len(files) > 1 and not (shared is not None and k in shared.spans):
            note = SetAside()
            note.add("empty_shard", str(f))
            note.log_once(str(path))
            if set_aside is not None:
                set_aside.merge(note)
    if shared is not None and shared.by_id:
        raise whole_file("a resolution of an id in no shard")


def _midway(chunks: Iterator[Chunk], path: Path, file_index: int) -> Iterator[Chunk]:
    """A shard's chunks; on a NotFast, its exact read beyond those given, or all of it (for the caller's duplicate
    check) when its first records differ (a repeat among them set aside); such shards hold no resolution lines."""
    from tps_tracer.records.jsonl import read_trajectories

    ids: list[str] = []
    end = 0
    try:
        for chunk in chunks:
            ids.extend(chunk.arrays.ids)
            end = chunk.done
            yield chunk
    except NotFast:
        records = read_trajectories(path)
        given = bool(ids) and [r.trajectory_id for r in records[: len(ids)]] == ids
        rest = records[len(ids) :] if given else records
        yield Chunk(to_arrays(rest), (file_index, end if given else 0), False, str(path), set_aside=records.set_aside)


def _too_many_predictors(chunk: Chunk, names: PredictorNames) -> None:
    """Raise the error naming the first predictor name beyond the bound, with its line when known."""
    before = [n for n in names.names if n not in chunk.arrays.predictors]  # names of the earlier chunks
    if not is_parquet(chunk.source) and chunk.done > chunk.origin[1]:  # re-read the chunk to find the line
        start = chunk.origin[1]
        first_line = line_number_at(chunk.source, start)
        with open(chunk.source, "rb") as fh:
            fh.seek(start)
            data = fh.read(chunk.done - start)
        text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig" if start == 0 else "utf-8")
        try:
            from tps_tracer.records.jsonl import parse_lines

            parse_lines(text, chunk.source, names=PredictorNames(before))
        except TrajectoryFileError as exc:
            shifted = [RecordError(e.line + first_line - 1, e.field, e.message) for e in exc.errors[-1:]]
            raise TrajectoryFileError(chunk.source, shifted) from None
    where = "rows of a Parquet batch" if is_parquet(chunk.source) else "a shard"
    raise TrajectoryFileError(
        chunk.source, [RecordError(0, "steps.forecasts", f"{PREDICTORS_MESSAGE} (reached in {where})")]
    )


def byte_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """(byte offset, bytes ending at a line end, file size) pieces of about `chunk_bytes`: no BOM, no
    whitespace-only piece; a line that cannot be a record is refused while it is read (limits.py)."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(len(_BOM))
        offset = len(head) if head == _BOM else 0
        carry = b"" if head == _BOM else head
        long_line: list[bytes] = []  # the blocks of a line longer than the chunk, joined once
        while True:
            block = fh.read(chunk_bytes)
            more = bool(block)
            if more and b"\n" not in block:  # one line longer than the chunk: keep reading
                long_line.append(block)
                check_unfinished_line([carry, *long_line], len(carry) + sum(map(len, long_line)), path, offset)
                continue
            if long_line:  # the long line ends in this block: its last part can take it past the bound
                end = block.find(b"\n")
                check_unfinished_line([carry, *long_line], len(carry) + sum(map(len, long_line)) + end, path, offset)
            data = b"".join([carry, *long_line, block])
            long_line = []
            if more:
                cut = data.rfind(b"\n") + 1
                chunk, carry = data[:cut], data[cut:]
            else:
                chunk, carry = data, b""
            block = data = b""  # not kept alive while the chunk is parsed (a long line is ~75 MB)
            if _NON_SPACE.search(chunk):
                yield offset, chunk, size
            offset += len(chunk)
            if not more:
                return


def _jsonl_chunks(
    path: Path, file_index: int, chunk_bytes: int, shared: Resolutions | None, scan_first: bool
) -> Iterator[Chunk]:
    """One pass over a file without resolution lines: they are looked for in each chunk as it is read; one
    met after chunks were given raises `Rescan` (it may resolve a record above), `scan_first` finds them first."""
    try:
        found = shared  # None: the file's resolution lines are not looked for yet
        if shared is None and scan_first:
            found = scan_resolutions([(file_index, _pieces(path))])
        given = False
        for offset, chunk, size in byte_chunks(path, chunk_bytes):
            end = offset + len(chunk)
            if found is None and _KEY in chunk:
                if given:
                    raise Rescan()
                whole = [(offset, chunk)] if end == size else _pieces(path)
                found = scan_resolutions([(file_index, whole)])
            if found is not None:
                chunk = found.drop_lines(chunk, file_index, offset)
            arrays, fast = read_jsonl_chunk(chunk, str(path), resolutions_scanned=found is not None)
            if found is not None:
                arrays = apply_resolutions(arrays, found)
            if arrays.n:
                given = True
                yield Chunk(arrays, (file_index, offset), fast, str(path), end, size)
        if shared is None and found is not None and found.by_id:
            raise whole_file("a resolution of an id not in the file")
    except OSError:
        raise whole_file(str(path)) from None


def _pieces(path: Path) -> Iterator[tuple[int, bytes]]:
    return ((offset, piece) for offset, piece, _ in byte_chunks(path, SCAN_BYTES))


def _parquet_chunks(path: Path, file_index: int, batch_rows: int, shared: Resolutions | None = None) -> Iterator[Chunk]:
    from tps_tracer.records.parquet import open_parquet, projected_batches  # pyarrow

    pf = open_parquet(path)
    if "resolves" in pf.schema_arrow.names:
        raise TrajectoryFileError(str(path), [RecordError(0, "resolves", "resolution records cannot be in Parquet")])
    total = pf.metadata.num_rows
    for row, batch, whole in projected_batches(pf, batch_rows):
        arrays, fast = read_arrow_batch(batch, str(path), row, whole)
        if shared is not None:  # resolution lines of the input's JSON Lines shards
            arrays = apply_resolutions(arrays, shared)
        if arrays.n:
            yield Chunk(arrays, (file_index, row), fast, str(path), row + batch.num_rows, total)


_KEY = b'"resolves"'
_CLEAN = STOP_REASONS.index(StopReason.CLEAN)


@dataclass
class Resolutions:
    """The resolution lines of an input's JSON Lines files (any shard's apply to every shard): their byte
    spans per file, and what they say per id."""

    spans: dict[int, list[tuple[int, int]]]  # file index -> (start, end) of each line, end after its "\n"
    by_id: dict[str, list[tuple[float | None, float | None]]]  # id -> (outcome, q_z) in input order; emptied as applied

    def drop_lines(self, chunk: bytes, file_index: int, offset: int) -> bytes:
        spans = self.spans.get(file_index, [])
        lo = bisect.bisect_left(spans, (offset, -1))
        hi = bisect.bisect_left(spans, (offset + len(chunk), -1))
        parts, at = [], 0
        for s, e in spans[lo:hi]:
            parts.append(chunk[at : s - offset])
            at = e - offset
        parts.append(chunk[at:])
        return b"".join(parts)


def scan_resolutions(files: Iterable[tuple[int, Iterable[tuple[int, bytes]]]]) -> Resolutions:
    """The resolution lines of (file index, its (offset, bytes ending at a line end) pieces). Read in pieces:
    mapped pages would count as resident memory."""
    found = Resolutions({}, {})
    for k, pieces in files:
        for offset, piece in pieces:
            hit = piece.find(_KEY)
            while hit >= 0:
                start = piece.rfind(b"\n", 0, hit) + 1
                newline = piece.find(b"\n", hit)
                end = len(piece) if newline < 0 else newline + 1
                said = _resolution(piece[start:end])
                if said is not None:
                    found.spans.setdefault(k, []).append((offset + start, offset + end))
                    found.by_id.setdefault(said[0], []).append(said[1:])
                hit = piece.find(_KEY, end)
    return found


def _resolution(line: bytes) -> tuple[str, float | None, float | None] | None:
    """(id, outcome, q_z) of a resolution line; None for a trajectory that mentions the word (e.g. in its metadata)."""
    try:
        obj = load_json(line)
    except (ValueError, UnicodeDecodeError):
        raise whole_file("a line mentioning 'resolves' is not JSON") from None
    if not isinstance(obj, dict) or "resolves" not in obj:
        return None
    from pydantic import ValidationError  # (~0.3 s of import: only for resolution lines)

    from tps_tracer.records.schema import ResolutionRecord

    try:
        res = ResolutionRecord.model_validate(obj)
    except ValidationError:
        raise whole_file("an invalid resolution line") from None
    return res.resolves, None if res.outcome is None else float(res.outcome), res.q_z


def apply_resolutions(arrays: TrajectoryArrays, resolutions: Resolutions) -> TrajectoryArrays:
    """The plain case of a late outcome / q_z, applied to a chunk's arrays (and taken out of
    `resolutions`); anything else is the exact read's call (a whole-file NotFast)."""
    if not resolutions.by_id:
        return arrays
    hits = [(i, tid) for i, tid in enumerate(arrays.ids) if tid in resolutions.by_id]
    if not hits:
        return arrays
    outcome, q_z = arrays.outcome.copy(), arrays.q_z.copy()
    for i, tid in hits:
        lines = resolutions.by_id.pop(tid, None)
        if lines is None:  # the id's second record: which one a line resolves is the exact read's call
            raise whole_file("a repeated id with resolution lines")
        for y, q in lines:
            if y is not None and arrays.stop_code[i] != _CLEAN:
                raise whole_file("an outcome for a non-clean stop")
            for column, value in ((outcome, y), (q_z, q)):
                if value is not None:
                    if not (np.isnan(column[i]) or column[i] == value):
                        raise whole_file("a conflicting outcome or q_z")
                    column[i] = value
    arrays.outcome, arrays.q_z = outcome, q_z
    return arrays


def input_name(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> str:
    return str(path) if isinstance(path, str | os.PathLike) else ", ".join(map(str, path))


def has_resolution_lines(path: Path) -> bool:
    """Whether a JSON Lines file mentions "resolves" (a trajectory that does only costs the exact read)."""
    try:
        return any(_KEY in piece for _, piece in _pieces(path))
    except (OSError, TrajectoryFileError):
        return False  # the reader gives the error


def holds_nothing(path: Path) -> bool:
    """Whether a shard is only whitespace or 0 Parquet rows (an unreadable one is its reader's error)."""
    try:
        if is_parquet(path):
            import pyarrow.parquet as pq

            return bool(pq.ParquetFile(path).metadata.num_rows == 0)
        return next(byte_chunks(path, 1 << 16), None) is None
    except (OSError, ValueError):  # (pyarrow's errors are both kinds; a refused line is a ValueError)
        return False


def read_shards(files: Sequence[Path], source: str) -> ReadRecords:
    """Every record of the shards read as their concatenation: a resolution belongs to the nearest record
    of its id above it (records/limits.py, `SetAside`), errors name the shard and line."""
    from tps_tracer.records.jsonl import ShardLinks, apply_resolution_records

    out = ReadRecords()
    shard_of: dict[str, int] = {}
    links: list[ShardLinks] = []
    for k, f in enumerate(files):
        links.append(ShardLinks())
        part = _exact_file(f, links[k])
        for rec in part:
            if rec.trajectory_id in shard_of:
                message = duplicate_message(rec.trajectory_id, "also in an earlier shard")
                raise TrajectoryFileError(str(f), [RecordError(0, "trajectory_id", message)])
            shard_of[rec.trajectory_id] = k
        if not part and not links[k].foreign and not part.set_aside:
            out.set_aside.add("empty_shard", str(f))
        out.set_aside.merge(part.set_aside)
        out.extend(part)
    for k, link in enumerate(links):  # resolutions of another shard's records
        kept = []
        for line, res in link.foreign:
            j = shard_of.get(res.resolves)
            if j is None:
                out.set_aside.add(
                    "orphan_resolution", f"{files[k]} line {line}: no trajectory {res.resolves!r} in the input"
                )
            elif j < k and res.resolves in links[j].repeated:  # the nearest record above is a set-aside repeat
                out.set_aside.add(
                    "duplicate_resolution",
                    f"{files[k]} line {line}: resolves the repeated {res.resolves!r} of {files[j]}",
                )
            else:
                kept.append((line, res))
        if kept:
            errors: list[RecordError] = []
            out[:] = apply_resolution_records(out, kept, errors)
            if errors:
                raise TrajectoryFileError(str(files[k]), errors[:20], truncated=len(errors) > 20)
    if not out:
        message = "the files hold no trajectories"
        if Path(source).is_dir():
            message = "the directory holds no trajectories (each of its shards is empty or holds only resolutions)"
        raise TrajectoryFileError(source, [RecordError(0, "", message)])
    return out


def _exact_file(path: Path, links: ShardLinks | None = None) -> ReadRecords:
    """One file's exact read; a Parquet file's errors name the row."""
    from tps_tracer.records.jsonl import read_trajectories
    from tps_tracer.records.parquet import parquet_file_iter

    if not is_parquet(path):
        return read_trajectories(path, links=links)
    out = ReadRecords()
    out.extend(parquet_file_iter(path, set_aside=out.set_aside))
    return out


def exact_records(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> ReadRecords:
    """The exact whole-file read of one input: JSON Lines, Parquet (errors name the row), or shards."""
    if not isinstance(path, str | os.PathLike) or Path(path).is_dir():
        return read_shards(source_files(path), input_name(path))
    records = _exact_file(Path(path))
    if not records:  # (an empty JSON Lines file is its reader's error)
        raise TrajectoryFileError(str(path), [RecordError(0, "", "the file holds no trajectories")])
    return records


def parquet_records(src: str | os.PathLike[str]) -> Iterator[TrajectoryRecord]:
    """Validated records of a Parquet file or directory, streamed shard by shard (read whole when a
    JSON Lines shard holds resolution lines); a repeated id is set aside within a file, an error across."""
    from tps_tracer.records.jsonl import read_trajectories
    from tps_tracer.records.parquet import parquet_file_iter

    files = source_files(src)
    if len(files) > 1 and any(not is_parquet(f) and has_resolution_lines(f) for f in files):
        yield from read_shards(files, str(src))
        return
    seen: set[str] = set()
    for path in files:
        records = parquet_file_iter(path) if is_parquet(path) else read_trajectories(path)
        for rec in records:
            if rec.trajectory_id in seen:
                msg = duplicate_message(rec.trajectory_id, "also in an earlier shard")
                raise TrajectoryFileError(str(path), [RecordError(0, "trajectory_id", msg)])
            seen.add(rec.trajectory_id)
            yield rec


def read_records(path: str | os.PathLike[str]) -> list[TrajectoryRecord]:
    return list(parquet_records(path))


def task_id_from(trajectory_id: str, metadata: Any) -> str:
    return str(metadata.get("task_id", trajectory_id) if isinstance(metadata, dict) else trajectory_id)


def read_task_ids(path: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """(trajectory ids, task ids: `metadata.task_id` else the id) of an input already read without
    error, in file order; the gate pairs runs by task."""
    ids: list[str] = []
    tasks: list[str] = []
    for f in source_files(path):
        if is_parquet(f):
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(f)
            columns = [c for c in ("trajectory_id", "metadata") if c in pf.schema_arrow.names]
            for batch in pf.iter_batches(columns=columns, batch_size=32_768):
                batch_ids = batch.column("trajectory_id").to_pylist()
                metas = batch.column("metadata").to_pylist() if "metadata" in columns else [None] * len(batch_ids)
                ids.extend(batch_ids)
                for i, m in zip(batch_ids, metas, strict=True):  # metadata as JSON text or a struct
                    tasks.append(task_id_from(i, json.loads(m) if isinstance(m, str) else m))
            continue
        with open(f, encoding="utf-8-sig") as fh:
            for line in filter(str.strip, fh):  # (a blank line skipped)
                obj = _loads(line)
                if "resolves" not in obj:  # a resolution line is not a trajectory
                    ids.append(obj["trajectory_id"])
                    tasks.append(task_id_from(obj["trajectory_id"], obj.get("metadata")))
    return ids, tasks


def _loads(line: str) -> Any:
    """orjson where it reads as json.loads does (a text or absent task id), else json.loads."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict) and "task_id" in meta and type(meta["task_id"]) is not str:
        return json.loads(line)
    return obj
