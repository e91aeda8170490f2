"""A trajectory file (JSON Lines, Parquet, shards) evaluated chunk by chunk, each reduced to its
`PartialState` and merged: memory bounded by the chunk plus a few scalars per trajectory, the result
`build_report`'s on the whole file."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import trajectory_keys
from tps_tracer.evaluation.partial_state import PartialState, StateSpec
from tps_tracer.evaluation.report import build_report, report_from_state
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.skipped_predictors import NO_PREDICTOR, check_no_base_rate
from tps_tracer.records.arrays import TrajectoryArrays, concat_arrays, to_arrays
from tps_tracer.records.errors import RecordError, Rescan, TrajectoryFileError
from tps_tracer.records.limits import SetAside, duplicate_message, repeated_keys
from tps_tracer.records.reading import (
    DEFAULT_CHUNK_BYTES,
    Chunk,
    exact_records,
    fast_else_whole_file,
    input_name,
    iter_chunks,
    source_files,
    whole_file,
)

Progress = Callable[[Chunk], None]
T = TypeVar("T")


def _chunks(
    path: str | os.PathLike[str],
    chunk_bytes: int,
    progress: Progress | None,
    set_aside: SetAside,
    scan_first: bool,
) -> Iterator[Chunk]:
    """The file's chunks, the next one read in a background thread while the caller reduces this one;
    lines set aside are added to `set_aside`."""
    chunks = iter_chunks(path, chunk_bytes, set_aside=set_aside, scan_first=scan_first)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tps-read") as reader:
        pending = reader.submit(next, chunks, None)
        while True:
            chunk = pending.result()  # re-raises the reader's exceptions (NotFast, errors)
            if chunk is None:
                return
            pending = reader.submit(next, chunks, None)
            if progress is not None:
                progress(chunk)
            set_aside.merge(chunk.set_aside)
            yield chunk


def _check_unique(path: str | os.PathLike[str], keys: list[np.ndarray], chunk_bytes: int) -> None:
    dup = repeated_keys(keys)
    if not dup.size:
        return
    files = source_files(path)
    if len(files) == 1:  # the exact reader names both lines (or rows), and sets the repeat aside
        raise whole_file("duplicate ids")
    wanted = set(dup.tolist())
    where: dict[int, str] = {}
    errors = []
    within_a_shard = False
    for chunk in iter_chunks(path, chunk_bytes):
        for tid, key in zip(chunk.arrays.ids, trajectory_keys(chunk.arrays.ids).tolist(), strict=True):
            if key not in wanted:
                continue
            if key not in where:
                where[key] = chunk.source
            elif where[key] == chunk.source:
                within_a_shard = True  # set aside, as in a file read alone: the exact read names both lines
            else:
                message = duplicate_message(tid, f"in {chunk.source}, first seen in {where[key]}")
                errors.append(RecordError(0, "trajectory_id", message))
    if errors:  # else: distinct ids whose 64-bit keys collide, which is allowed
        raise TrajectoryFileError(input_name(path), errors[:20], truncated=len(errors) > 20)
    if within_a_shard:
        raise whole_file("duplicate ids inside a shard")


def _fold(
    path: str | os.PathLike[str],
    step: Callable[[T | None, Chunk, np.ndarray], T],
    chunk_bytes: int,
    progress: Progress | None,
    set_aside: SetAside | None,
) -> T:
    """`step(so far, chunk, its trajectory keys)` over the chunks, or a whole-file NotFast. The file is read
    once; again, its resolution lines found first, when one came after chunks were folded (`Rescan`)."""

    def once(scan_first: bool) -> T:
        acc: T | None = None
        keys = []
        # Merged only on success: a chunked read that falls back has counted lines the exact read counts again.
        found = SetAside()
        for chunk in _chunks(path, chunk_bytes, progress, found, scan_first):
            keys.append(trajectory_keys(chunk.arrays.ids))
            acc = step(acc, chunk, keys[-1])
        _check_unique(path, keys, chunk_bytes)
        if acc is None:
            raise whole_file("no trajectories")
        if set_aside is not None:
            set_aside.merge(found)
        return acc

    try:
        return once(False)
    except Rescan:
        return once(True)


def map_chunks(
    path: str | os.PathLike[str],
    fn: Callable[[TrajectoryArrays], T],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Progress | None = None,
    set_aside: SetAside | None = None,
) -> list[T]:
    """`fn` of every chunk's arrays in file order (one result from the exact reader when the file needs
    the whole-file view); lines read but not scored are added to `set_aside` either way."""

    def whole() -> list[T]:
        records = exact_records(path)
        if set_aside is not None:
            set_aside.merge(records.set_aside)
        return [fn(to_arrays(records))]

    def step(out: list[T] | None, chunk: Chunk, _keys: np.ndarray) -> list[T]:
        return [*(out or []), fn(chunk.arrays)]

    return fast_else_whole_file(lambda: _fold(path, step, chunk_bytes, progress, set_aside), whole)


def read_arrays(
    path: str | os.PathLike[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES, progress: Progress | None = None
) -> TrajectoryArrays:
    """All trajectories of the file(s) as one set of flat arrays."""
    return concat_arrays(map_chunks(path, lambda arrays: arrays, chunk_bytes, progress))


def report_from_path(
    path: str | os.PathLike[str],
    options: ReportOptions | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """`build_report` of a trajectory file, directory of shards or Parquet file, in bounded memory;
    recalibration fits on the whole sample, so it reads all chunks into one set of arrays."""
    opts = options or ReportOptions()
    if opts.calibrate is not None or opts.calibrator is not None:
        return build_report(read_arrays(path, chunk_bytes, progress), opts)
    spec = StateSpec.from_options(opts)

    def merge(state: PartialState | None, chunk: Chunk, keys: np.ndarray) -> PartialState:
        part = PartialState.from_arrays(chunk.arrays, spec, origin=chunk.origin, keys=keys)
        return part if state is None else state.merge(part)

    def chunked() -> dict[str, Any]:
        set_aside = SetAside()
        state = _fold(path, merge, chunk_bytes, progress, set_aside)
        if opts.predictors is None and not state.predictors:
            raise InputError(NO_PREDICTOR)
        check_no_base_rate(state.predictors)
        return with_set_aside(report_from_state(state, opts), set_aside)

    def whole() -> dict[str, Any]:
        records = exact_records(path)
        return with_set_aside(build_report(to_arrays(records), opts), records.set_aside)

    return fast_else_whole_file(chunked, whole)


def with_set_aside(report: dict[str, Any], set_aside: SetAside) -> dict[str, Any]:
    """The report with an "input" section counting the lines read but not scored, when there are any."""
    if set_aside:
        report["input"] = {"set_aside": set_aside.as_dict()}
    return report
