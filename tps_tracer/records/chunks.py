"""Read trajectory files in chunks of flat arrays: JSON Lines, Parquet, or a directory of shards.

Each chunk holds whole trajectories (a JSON Lines chunk ends at a line end; a Parquet chunk
is a record batch), so memory is bounded by the chunk size, not the file size.

How each chunk is read (fast, exact, or the whole file the exact way) is decided in
`reading.py`; a file that needs the whole-file view raises `reading.NotFast(whole_file=True)`
and the caller reads it the exact way (`reading.fast_else_whole_file`, `shards.exact_records`).
Resolution lines are applied chunk by chunk (`resolutions.py`).

Parquet chunks have no line numbers: errors name the row (counted from 1 in the file) and field.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tps_tracer.records.arrays import TrajectoryArrays, to_arrays
from tps_tracer.records.errors import RecordError, TrajectoryFileError  # jsonl.py where used: pydantic
from tps_tracer.records.jsonl_fast import read_jsonl_chunk
from tps_tracer.records.limits import PredictorNames, check_unfinished_line, line_number_at, predictors_message
from tps_tracer.records.reading import NotFast, whole_file
from tps_tracer.records.resolutions import SharedResolutions, apply_resolutions, scan_resolutions, scan_shards
from tps_tracer.records.set_aside import SetAside

DEFAULT_CHUNK_BYTES = 32 << 20  # JSON Lines bytes per chunk
DEFAULT_BATCH_ROWS = 32_768  # Parquet rows per chunk
SCAN_BYTES = 8 << 20  # pieces of the byte search for resolution lines (resolutions.py)
PARQUET_SUFFIXES = (".parquet", ".pq")
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


@dataclass
class YieldedPart:
    """What a shard's chunks gave before it fell back to its whole-file read: the ids, outcomes and
    q_z in order (what resolutions change; a few bytes a trajectory), and the bytes read."""

    ids: list[str] = field(default_factory=list)
    outcome: list[Any] = field(default_factory=list)
    q_z: list[Any] = field(default_factory=list)
    end: int = 0

    def add(self, arrays: TrajectoryArrays, end: int) -> None:
        self.ids.extend(arrays.ids)
        self.outcome.append(arrays.outcome)
        self.q_z.append(arrays.q_z)
        self.end = end


def is_parquet(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in PARQUET_SUFFIXES


def source_files(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """A file, or the Parquet / JSON Lines shards of a directory (recursively, in name order); of a
    list or tuple of paths (several files given together), the files of each in turn."""
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
) -> Iterator[Chunk]:
    """Chunks of whole trajectories from a JSON Lines file, a Parquet file or a directory of shards
    (or a list of them, read as one input). A shard holding nothing is counted in `set_aside`
    (`empty_shard`) and logged."""
    files = source_files(path)
    # Resolution lines of any shard apply to every shard (records/shards.py): found first.
    shared = None
    if len(files) > 1:
        jsonl = [(k, f) for k, f in enumerate(files) if not is_parquet(f)]
        try:
            shared = scan_shards([(k, ((o, b) for o, b, _ in byte_chunks(f, SCAN_BYTES))) for k, f in jsonl])
        except OSError:
            raise whole_file("a shard that cannot be read") from None
    names = PredictorNames()  # distinct predictor names over the whole input (records/limits.py)
    for k, f in enumerate(files):
        if is_parquet(f):
            chunks = _parquet_chunks(f, k, batch_rows, shared)
        else:
            chunks = _jsonl_chunks(f, k, chunk_bytes, shared)
        # What this shard gave so far: a shard among many may fall back midway (a single file falls
        # back whole, and keeps nothing: its ids would outlive its chunks). With shared resolution
        # lines the whole input falls back (their records may lie in shards already given).
        done = YieldedPart() if len(files) > 1 and shared is None else None
        gave = False
        try:
            for chunk in chunks:
                if not names.add(chunk.arrays.predictors):
                    _too_many_predictors(chunk, names)
                if done is not None:
                    done.add(chunk.arrays, chunk.done)
                gave = True
                yield chunk
        except NotFast:
            if done is None:
                raise
            # One shard among many: its exact read gives the error, or the records it did not yet give.
            arrays, aside, start = shard_rest(f, done)
            chunk = Chunk(arrays, (k, start), False, str(f), set_aside=aside)
            if not names.add(chunk.arrays.predictors):
                _too_many_predictors(chunk, names)
            gave = True
            yield chunk
        if not gave and len(files) > 1 and not (shared is not None and k in shared.lines):
            _empty_shard(f, str(path), set_aside)
    if shared is not None and shared.pending.by_id:
        raise whole_file("a resolution of an id in no shard")  # shards.read_shards names it


def shard_rest(path: Path, done: YieldedPart) -> tuple[TrajectoryArrays, SetAside, int]:
    """(arrays, set aside, byte offset) of a shard among many that fell back to its whole-file read
    after its first chunks were given: the exact read's trajectories not given yet, and what it set
    aside. The exact read's first trajectories must be the ones given (same ids in order, same
    outcomes and q_z: a whole-file read keeps the first of a repeated id); else every trajectory is
    given again, and the caller's duplicate-id check names them (as for repeats across chunks)."""
    from tps_tracer.records.jsonl import read_trajectories

    records = read_trajectories(path)  # raises the error a shard read alone gives
    n = len(done.ids)
    if n:
        head = to_arrays(records[:n])
        if head.ids == done.ids and all(
            np.array_equal(got, np.concatenate(given), equal_nan=True)
            for got, given in ((head.outcome, done.outcome), (head.q_z, done.q_z))
        ):
            return to_arrays(records[n:]), records.set_aside, done.end
    return to_arrays(records), records.set_aside, 0


def _empty_shard(f: Path, source: str, set_aside: SetAside | None) -> None:
    """A shard of a directory holding nothing is named and counted, never dropped silently."""
    note = SetAside()
    note.add("empty_shard", str(f))
    note.log_once(source)
    if set_aside is not None:
        set_aside.merge(note)


def _too_many_predictors(chunk: Chunk, names: PredictorNames) -> None:
    """Raise the error naming the first predictor name beyond the bound (the chunk that crossed it)."""
    before = [n for n in names.names if n not in chunk.arrays.predictors]  # names of the earlier chunks
    if not is_parquet(chunk.source) and chunk.done > chunk.origin[1]:  # (not a shard read whole)
        # Find the line: re-read the chunk's lines in order, counting from the earlier chunks' names.
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
        chunk.source, [RecordError(0, "steps.forecasts", f"{predictors_message()} (reached in {where})")]
    )


def jsonl_byte_chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """The file's bytes in pieces of about `chunk_bytes` that end at a line end (a longer line is
    one piece); a leading UTF-8 BOM is dropped; whitespace-only pieces are skipped."""
    for _, chunk, _ in byte_chunks(path, chunk_bytes):
        yield chunk


def byte_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """(byte offset, chunk, file size) as in `jsonl_byte_chunks`; a line still being read is refused
    early if it cannot be a record (records/limits.py)."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(len(_BOM))
        offset = len(head) if head == _BOM else 0
        carry = b"" if head == _BOM else head
        long_line: list[bytes] = []  # the blocks of a line longer than the chunk, joined once
        while True:
            block = fh.read(chunk_bytes)
            more = bool(block)
            if more and b"\n" not in block:  # one line longer than the chunk: keep reading,
                long_line.append(block)  # refused early if it cannot be a record (records/limits.py)
                check_unfinished_line([carry, *long_line], len(carry) + sum(map(len, long_line)), path, offset)
                continue
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


def _jsonl_chunks(path: Path, file_index: int, chunk_bytes: int, shared: SharedResolutions | None) -> Iterator[Chunk]:
    try:
        # Resolution lines (late outcomes, q_z) are found first and applied chunk by chunk: this
        # file's, or (`shared`) those of every shard of the input.
        if shared is None:
            own = pending = scan_resolutions((o, piece) for o, piece, _ in byte_chunks(path, SCAN_BYTES))
        else:
            own, pending = shared.lines.get(file_index), shared.pending
        for offset, chunk, size in byte_chunks(path, chunk_bytes):
            end = offset + len(chunk)
            if own is not None:
                chunk = own.drop_lines(chunk, offset)
            arrays, fast = read_jsonl_chunk(chunk, str(path), resolutions_scanned=own is not None)
            if pending is not None:
                arrays = apply_resolutions(arrays, pending)
            if arrays.n:
                yield Chunk(arrays, (file_index, offset), fast, str(path), end, size)
        if shared is None and pending is not None and pending.by_id:
            raise whole_file("a resolution of an id not in the file")
    except OSError:
        raise whole_file(str(path)) from None


# -- Parquet -----------------------------------------------------------------------------------


def _parquet_chunks(
    path: Path, file_index: int, batch_rows: int, shared: SharedResolutions | None = None
) -> Iterator[Chunk]:
    from tps_tracer.records.parquet import open_parquet, projected_batches, read_arrow_batch  # pyarrow

    pf = open_parquet(path)
    if "resolves" in pf.schema_arrow.names:
        raise TrajectoryFileError(str(path), [RecordError(0, "resolves", "resolution records cannot be in Parquet")])
    total = pf.metadata.num_rows
    # Only the columns the scores need; a refused batch is read whole (parquet.py).
    for row, batch, whole in projected_batches(pf, batch_rows):
        arrays, fast = read_arrow_batch(batch, str(path), row, whole)
        if shared is not None:  # resolution lines of the input's JSON Lines shards
            arrays = apply_resolutions(arrays, shared.pending)
        if arrays.n:
            yield Chunk(arrays, (file_index, row), fast, str(path), row + batch.num_rows, total)
