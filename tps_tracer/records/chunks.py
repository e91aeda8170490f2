"""Read trajectory files in chunks of flat arrays: JSON Lines, Parquet, or a directory of shards.

Each chunk holds whole trajectories (a JSON Lines chunk ends at a line end; a Parquet chunk
is a record batch), so memory is bounded by the chunk size, not the file size.

JSON Lines chunks take the columnar path (pyarrow's multi-threaded JSON reader, validation
over flat arrays, `columnar.py`) when they can, and otherwise the exact per-record path of
`jsonl.py` for that chunk alone (same arrays). When the exact path finds an error, or the
file needs the whole-file view (resolution lines fill records anywhere in the file), the
reader raises `NeedsWholeFile` and the caller reads the file the exact way, so every error
message is the one `read_trajectories` gives, with its line numbers.

Parquet chunks have no line numbers: errors name the row (counted from 1 in the file) and field.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tps_tracer.records.arrays import TrajectoryArrays, to_arrays
from tps_tracer.records.columnar import NotColumnar, ambiguous_null_rows, arrays_from_arrow
from tps_tracer.records.jsonl import RecordError, TrajectoryFileError, parse_lines

DEFAULT_CHUNK_BYTES = 32 << 20  # JSON Lines bytes per chunk
DEFAULT_BATCH_ROWS = 32_768  # Parquet rows per chunk
PARQUET_SUFFIXES = (".parquet", ".pq")
_BOM = b"\xef\xbb\xbf"
# An explicit null where the schema wants an object, list or bool: the exact path rejects it, the
# JSON reader would read it as absent. (A false alarm only costs the exact path for that chunk.)
_NULL_WHERE_ABSENT_DIFFERS = re.compile(rb'"(?:steps|metadata|forecasts|outcome_pending)"\s*:\s*null')


_NON_SPACE = re.compile(rb"\S")


class NeedsWholeFile(Exception):
    """The file must be read the exact, whole-file way (an error to report, or resolution lines)."""


@dataclass
class Chunk:
    arrays: TrajectoryArrays
    origin: tuple[int, int]  # (file index, byte offset or first row): orders first-seen predictors
    fast: bool  # read by the columnar path
    source: str
    done: int = 0  # bytes (JSON Lines) or rows (Parquet) of this file read so far
    size: int = 0  # the file's size in the same unit


def is_parquet(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in PARQUET_SUFFIXES


def source_files(path: str | os.PathLike[str]) -> list[Path]:
    """A file, or the Parquet / JSON Lines shards of a directory (recursively, in name order)."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    files = sorted(f for f in p.rglob("*") if f.is_file() and (is_parquet(f) or f.suffix.lower() == ".jsonl"))
    if not files:
        raise TrajectoryFileError(str(p), [RecordError(0, "", "the directory holds no .parquet or .jsonl files")])
    return files


def iter_chunks(
    path: str | os.PathLike[str],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[Chunk]:
    """Chunks of whole trajectories from a JSON Lines file, a Parquet file or a directory of shards."""
    files = source_files(path)
    for k, f in enumerate(files):
        if is_parquet(f):
            yield from _parquet_chunks(f, k, batch_rows)
        else:
            try:
                yield from _jsonl_chunks(f, k, chunk_bytes)
            except NeedsWholeFile:
                if len(files) == 1:
                    raise
                # One shard among many: its exact read gives the error (or the resolved records).
                from tps_tracer.records.jsonl import read_trajectories

                yield Chunk(to_arrays(read_trajectories(f)), (k, 0), False, str(f))


def jsonl_byte_chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """The file's bytes in pieces of about `chunk_bytes` that end at a line end (a longer line is
    one piece); a leading UTF-8 BOM is dropped; whitespace-only pieces are skipped."""
    for _, chunk, _ in _byte_chunks(path, chunk_bytes):
        yield chunk


def _byte_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """(byte offset, chunk, file size) as in `jsonl_byte_chunks`."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(len(_BOM))
        offset = len(head) if head == _BOM else 0
        carry = b"" if head == _BOM else head
        while True:
            block = fh.read(chunk_bytes)
            data = carry + block
            if block:
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # one line longer than the chunk: keep reading
                    carry = data
                    continue
                chunk, carry = data[:cut], data[cut:]
            else:
                chunk, carry = data, b""
            if _NON_SPACE.search(chunk):
                yield offset, chunk, size
            offset += len(chunk)
            if not block:
                return


def _jsonl_chunks(path: Path, file_index: int, chunk_bytes: int) -> Iterator[Chunk]:
    try:
        pieces = _byte_chunks(path, chunk_bytes)
        for offset, chunk, size in pieces:
            arrays, fast = _read_jsonl_chunk(chunk, str(path))
            if arrays.n:
                yield Chunk(arrays, (file_index, offset), fast, str(path), offset + len(chunk), size)
    except OSError:
        raise NeedsWholeFile(str(path)) from None


def _read_jsonl_chunk(chunk: bytes, source: str) -> tuple[TrajectoryArrays, bool]:
    if b'"resolves"' in chunk:
        raise NeedsWholeFile("resolution lines")
    try:
        return _columnar_jsonl(chunk), True
    except (NotColumnar, ValueError, UnicodeDecodeError, ImportError):
        pass  # pyarrow's ArrowInvalid is a ValueError
    try:
        text = io.TextIOWrapper(io.BytesIO(chunk), encoding="utf-8")
        return to_arrays(parse_lines(text, source)), False
    except (TrajectoryFileError, UnicodeDecodeError):
        raise NeedsWholeFile(source) from None


def _columnar_jsonl(chunk: bytes) -> TrajectoryArrays:
    import pyarrow.json as pj

    if not chunk.isascii():
        chunk.decode("utf-8")  # the JSON reader does not check UTF-8 in strings it is not asked for
    ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    longest = int(np.max(np.diff(ends, prepend=-1))) if ends.size else len(chunk)
    # Blocks are parsed in parallel; a block must hold the longest line.
    block = max(longest + 2, len(chunk) // (os.cpu_count() or 1) + 1, 1 << 16)
    table = pj.read_json(io.BytesIO(chunk), read_options=pj.ReadOptions(block_size=block, use_threads=True))
    rows = ambiguous_null_rows(table)
    if rows.size:
        _check_explicit_nulls(chunk, ends, rows, table.num_rows)
    arrays = arrays_from_arrow(table, from_json=True)
    if len(arrays.predictors) > 1:
        order = _first_seen_order(chunk, ends, list(arrays.predictors))
        arrays.predictors = {name: arrays.predictors[name] for name in order}
    return arrays


def _first_seen_order(chunk: bytes, ends: np.ndarray, names: list[str]) -> list[str]:
    """Predictor names in the order the records first mention them (as `to_arrays` lists them).

    The multi-threaded reader merges the blocks' schemas in no fixed order, and cannot tell a
    key with a null value from an absent one. So: find the first line that spells each name,
    parse just that line, and read the order off its forecasts; a line that spells a name
    elsewhere (in metadata, say) moves the search on. Usually the first line settles it.
    """
    starts = np.concatenate(([0], ends + 1))
    spelled = {n: {json.dumps(n).encode(), json.dumps(n, ensure_ascii=False).encode()} for n in names}
    search_from = dict.fromkeys(names, 0)
    rank: dict[str, tuple[int, int]] = {}
    while len(rank) < len(names):
        first_pos: dict[str, int] = {}
        for name in names:
            if name in rank:
                continue
            hits = [h for h in (chunk.find(b, search_from[name]) for b in spelled[name]) if h >= 0]
            if not hits:
                raise NotColumnar(f"cannot place predictor {name!r}")
            first_pos[name] = min(hits)
        pos = min(first_pos.values())
        line = int(np.searchsorted(starts, pos, side="right")) - 1
        line_end = int(ends[line]) if line < ends.size else len(chunk)
        record = json.loads(chunk[int(starts[line]) : line_end])
        order = [k for step in record.get("steps") or [] for k in (step.get("forecasts") or {})]
        for k in dict.fromkeys(order):
            if k in first_pos and k not in rank:
                rank[k] = (line, len(rank))
        for name in first_pos:
            if name not in rank and first_pos[name] < line_end:
                search_from[name] = line_end  # spelled on this line, but not as a forecast
    return sorted(names, key=lambda n: rank[n])


def _check_explicit_nulls(chunk: bytes, ends: np.ndarray, rows: np.ndarray, n_rows: int) -> None:
    """NotColumnar if one of these rows writes an explicit null where absence is meant."""
    starts = np.concatenate(([0], ends + 1))
    stops = np.concatenate((ends, [len(chunk)]))
    record = stops - starts > 8  # a record line is longer; shorter ones are checked one by one
    for i in np.flatnonzero(~record).tolist():
        record[i] = bool(chunk[int(starts[i]) : int(stops[i])].strip())
    line_of = np.flatnonzero(record)
    if line_of.size != n_rows:  # whitespace-only long lines: cannot map rows to lines cheaply
        if _NULL_WHERE_ABSENT_DIFFERS.search(chunk):
            raise NotColumnar("explicit null")
        return
    for r in rows.tolist():
        i = line_of[r]
        if _NULL_WHERE_ABSENT_DIFFERS.search(chunk, int(starts[i]), int(stops[i])):
            raise NotColumnar("explicit null")


# -- Parquet -----------------------------------------------------------------------------------


def _parquet_chunks(path: Path, file_index: int, batch_rows: int) -> Iterator[Chunk]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise TrajectoryFileError(str(path), [RecordError(0, "", f"cannot read Parquet ({exc})")]) from None
    if "resolves" in pf.schema_arrow.names:
        raise TrajectoryFileError(str(path), [RecordError(0, "resolves", "resolution records cannot be in Parquet")])
    total = pf.metadata.num_rows
    row = 0
    for batch in pf.iter_batches(batch_size=batch_rows):
        try:
            arrays, fast = arrays_from_arrow(batch, from_json=False), True
        except NotColumnar:
            arrays, fast = _exact_parquet_batch(batch, str(path), row), False
        if arrays.n:
            yield Chunk(arrays, (file_index, row), fast, str(path), row + batch.num_rows, total)
        row += batch.num_rows


def _row_json(row: dict[str, Any]) -> str:
    meta = row.get("metadata")
    if isinstance(meta, str):
        try:
            row["metadata"] = json.loads(meta)
        except ValueError:
            pass  # left as text: the schema check names it
    if row.get("outcome_pending") is None:
        row.pop("outcome_pending", None)
    return json.dumps(row, default=str)


def _exact_parquet_batch(batch: Any, source: str, first_row: int) -> TrajectoryArrays:
    """The exact per-record path for one batch; errors name the row in the file (from 1)."""
    lines = (_row_json(r) for r in batch.to_pylist())
    try:
        return to_arrays(parse_lines(lines, source))
    except TrajectoryFileError as exc:
        errors = [RecordError(e.line + first_row if e.line else 0, e.field, e.message) for e in exc.errors]
        raise TrajectoryFileError(f"{source} (Parquet: 'line' is the row, from 1)", errors) from None
