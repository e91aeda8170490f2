"""The shards of one input (a directory, or several files given together) read the exact way, as one.

A grading job often writes its resolution lines (`{"resolves": id, "outcome": ...}`) to a file
of its own, next to the records it grades: `runs/a.jsonl` (pending records) and `runs/b.jsonl`
(resolutions). Read shard by shard, b.jsonl would hold "no trajectories" and every resolution would be
an orphan. Here the input is read as the concatenation of its shards in name order, as if they were
one file, with each error still naming its shard and line:

- each shard is read as alone (`jsonl.parse_lines` with `ShardLinks`; a Parquet file through
  `parquet.parquet_file_iter`), its repeats set aside as in a single file; a resolution of an
  id the shard lacks is kept for the input (`links.foreign`);
- those resolutions are then applied by the single file's rule: a resolution belongs to the
  nearest record of its id above it in the concatenation, the first one if none is above
  (records/set_aside.py). An id's record lies in one shard (a repeat across shards is an
  error), so a resolution in a later shard belongs to that shard's last repeat of the id when
  there is one (set aside as `duplicate_resolution`), else to the record; one naming an id no
  shard holds is set aside as `orphan_resolution`, named by shard and line;
- a shard holding nothing (an empty file, or only blank lines; a 0-row Parquet file) is counted
  as `empty_shard` and named; an input where no shard holds a trajectory is an error, as a single
  empty file is.

The chunked reader (`chunks.iter_chunks`) applies the plain case of the same rule chunk by chunk
and comes here (`NotFast(whole_file=True)`, then `exact_records`) for everything else, so both
give the same records. `exact_records` is the exact whole-file read of any input; `read_records`
and `parquet_records` are the record readers of `convert` and the Python API.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tps_tracer.records.chunks import is_parquet, source_files
from tps_tracer.records.duplicate_ids import duplicate_message
from tps_tracer.records.errors import RecordError, TrajectoryFileError
from tps_tracer.records.set_aside import ReadRecords

if TYPE_CHECKING:  # pydantic (~0.3 s of import): imported where records are read
    from tps_tracer.records.jsonl import ShardLinks
    from tps_tracer.records.schema import TrajectoryRecord

_KEY = b'"resolves"'


def input_name(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> str:
    """How errors name an input: the path, or several files given together joined by commas."""
    return str(path) if isinstance(path, str | os.PathLike) else ", ".join(map(str, path))


def has_resolution_lines(path: Path, block: int = 8 << 20) -> bool:
    """Whether a JSON Lines file mentions "resolves" (a byte search; a trajectory mentioning the word
    only sends the input to the exact read, which is never wrong)."""
    tail = b""
    try:
        with path.open("rb") as fh:
            while piece := fh.read(block):
                if _KEY in tail + piece[: len(_KEY)] or _KEY in piece:
                    return True
                tail = piece[-len(_KEY) :]
    except OSError:
        return False  # (the reader gives the error: missing file, no permission, ...)
    return False


def holds_nothing(path: Path) -> bool:
    """Whether a shard holds nothing: a JSON Lines file of only whitespace, a Parquet file of 0 rows
    (an unreadable file is not "nothing": its reader gives the error)."""
    try:
        if is_parquet(path):
            import pyarrow.parquet as pq

            return bool(pq.ParquetFile(path).metadata.num_rows == 0)
        with path.open("rb") as fh:
            while piece := fh.read(1 << 16):
                if piece.strip(b" \t\r\n\x0b\x0c\xef\xbb\xbf"):  # (a BOM is nothing too)
                    return False
        return True
    except (OSError, ValueError):  # (pyarrow's errors are both kinds) the reader reports it
        return False


def read_shards(files: Sequence[Path], source: str) -> ReadRecords:
    """Every record of the shards, in order, resolutions applied across them (see the module)."""
    from tps_tracer.records.jsonl import ShardLinks, read_trajectories
    from tps_tracer.records.parquet import parquet_file_records

    out = ReadRecords()
    shard_of: dict[str, int] = {}
    links: list[ShardLinks] = []
    for k, f in enumerate(files):
        link = ShardLinks()
        part = parquet_file_records(f) if is_parquet(f) else read_trajectories(f, links=link)
        for rec in part:
            if rec.trajectory_id in shard_of:
                message = duplicate_message(rec.trajectory_id, "also in an earlier shard")
                raise TrajectoryFileError(str(f), [RecordError(0, "trajectory_id", message)])
            shard_of[rec.trajectory_id] = k
        if not part and not link.foreign and not part.set_aside:
            out.set_aside.add("empty_shard", str(f))
        out.set_aside.merge(part.set_aside)
        out.extend(part)
        links.append(link)
    _apply_foreign(out, files, links, shard_of)
    if not out:
        raise TrajectoryFileError(source, [RecordError(0, "", no_trajectories_message(source))])
    return out


def no_trajectories_message(source: str) -> str:
    """The error of an input of shards none of which holds a trajectory (every reader's wording)."""
    if Path(source).is_dir():
        return "the directory holds no trajectories (each of its shards is empty or holds only resolutions)"
    return "the files hold no trajectories"


def _apply_foreign(out: ReadRecords, files: Sequence[Path], links: list[ShardLinks], shard_of: dict[str, int]) -> None:
    """Apply each shard's resolutions of ids held by other shards, by the single file's rule."""
    from tps_tracer.records.jsonl import apply_resolution_records

    for k, link in enumerate(links):
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


def exact_records(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> ReadRecords:
    """The whole-file read of one input, the exact way for its format: JSON Lines through
    `jsonl.read_trajectories`, a Parquet file through `parquet.parquet_file_records` (errors name
    the row, a repeated id is set aside; an empty file is an error, as for JSON Lines), a directory
    (or a list of files) through `read_shards` (resolution lines apply across its shards)."""
    if not isinstance(path, str | os.PathLike) or Path(path).is_dir():
        return read_shards(source_files(path), input_name(path))
    if not is_parquet(path):
        from tps_tracer.records.jsonl import read_trajectories

        return read_trajectories(path)
    from tps_tracer.records.parquet import parquet_file_records

    records = parquet_file_records(path)
    if not records:
        raise TrajectoryFileError(str(path), [RecordError(0, "", "the file holds no trajectories")])
    return records


def parquet_records(src: str | os.PathLike[str], batch_rows: int = 32_768) -> Iterator[TrajectoryRecord]:
    """Validated records of a Parquet file or a directory of shards (errors name the row), streamed;
    a directory's `.jsonl` shards are read as JSON Lines (no pyarrow needed for them).

    A repeated id inside one file is set aside and counted, as the JSON Lines reader does; across
    shards it is an error. A directory whose JSON Lines shards hold resolution lines is read whole
    (`read_shards`: a resolution may name a record of any shard), else shard by shard."""
    from tps_tracer.records.jsonl import read_trajectories
    from tps_tracer.records.parquet import parquet_file_iter

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


def read_records(path: str | os.PathLike[str]) -> list[TrajectoryRecord]:
    """Validated records of a JSON Lines file, a Parquet file or a directory of Parquet shards."""
    if Path(path).is_dir() or is_parquet(path):
        return list(parquet_records(path))
    from tps_tracer.records.jsonl import read_trajectories

    return read_trajectories(path)
