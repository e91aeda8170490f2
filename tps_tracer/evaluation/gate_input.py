"""What the gate reads: one pair table (the gated rule and schedule, every predictor) per run.

The gate needs, per trajectory, its branch pairs for one rule x schedule, its role and its
weight mass (which scores the base-rate forecast): a fixed-size row whatever the length of
the trajectory. Files are read chunk by chunk through the same readers as `report`
(columnar fast path, exact fallback with line-numbered errors), each chunk reduced to its
rows at once, so memory holds those rows and never the records or their steps. The rows
are those `pair_table_from_arrays` gives on the whole file, so the gate's numbers are the
same however the file is read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tps_tracer.constants import DEFAULT_MISSING
from tps_tracer.errors import InputError
from tps_tracer.evaluation.chunked import Progress, map_chunks
from tps_tracer.evaluation.pairs import PairTable, PredictorPairs, pair_table_from_arrays
from tps_tracer.records.arrays import TrajectoryArrays, to_arrays
from tps_tracer.records.limits import SetAside
from tps_tracer.records.reading import (
    DEFAULT_CHUNK_BYTES,
    has_resolution_lines,
    is_parquet,
    read_task_ids,
    source_files,
    task_id_of,
)
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule


class GateInputError(InputError):
    """The gate cannot run on this input (the message says why)."""


@dataclass
class GateSample:
    """One run: its pair table, for pairing with a baseline each trajectory's task id, and the
    lines its files held but the gate does not judge (records/limits.py; shown in its output)."""

    table: PairTable
    task_ids: list[str]
    set_aside: SetAside = field(default_factory=SetAside)


def gate_rows(
    arrays: TrajectoryArrays, rule: ScoreRule, schedule: WeightSchedule, missing: str = DEFAULT_MISSING
) -> PairTable:
    """The gate's rows of flat arrays: branch pairs of every predictor, without the diagnostics' summaries."""
    return pair_table_from_arrays(
        arrays, list(arrays.predictors), [rule], [schedule], with_summaries=False, missing=missing
    )


def concat_tables(parts: Sequence[PairTable], missing: str = DEFAULT_MISSING) -> PairTable:
    """One table from consecutive parts; a predictor a part lacks is all gaps there (as `concat_arrays`),
    scored by the `missing` policy."""
    if not parts:
        raise InputError("no tables to concatenate")
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    names = list(dict.fromkeys(name for p in parts for name in p.predictors))
    predictors: dict[str, PredictorPairs] = {}
    for name in names:
        usable, pairs, clipped, gaps = [], [], [], []
        skipped: dict[str, int] = {}
        for part in parts:
            col = part.predictors.get(name)
            if col is None:  # never mentioned in this part: every step of it is a gap
                col = PredictorPairs.never_stated(part.n_steps, part.weight_mass, part.rules, 0, missing)
            usable.append(col.usable)
            pairs.append(col.pairs)
            clipped.append(np.zeros(part.n, dtype=np.int64) if col.clipped is None else col.clipped)
            gaps.append(np.zeros((part.n, 4)) if col.missing is None else col.missing)
            for k, v in col.skipped.items():
                skipped[k] = skipped.get(k, 0) + v
        predictors[name] = PredictorPairs(
            np.concatenate(usable),
            np.concatenate(pairs),
            np.empty((sum(p.n for p in parts), 0)),
            {k: v for k, v in skipped.items() if v},
            np.concatenate(clipped),
            np.concatenate(gaps),
        )
    return PairTable(
        ids=[i for p in parts for i in p.ids],
        stop_code=np.concatenate([p.stop_code for p in parts]),
        outcome=np.concatenate([p.outcome for p in parts]),
        q_z=np.concatenate([p.q_z for p in parts]),
        n_steps=np.concatenate([p.n_steps for p in parts]),
        horizon=np.concatenate([p.horizon for p in parts]),
        rules=first.rules,
        schedules=first.schedules,
        weight_mass=np.concatenate([p.weight_mass for p in parts]),
        predictors=predictors,
        outcome_on_unscored=sum(p.outcome_on_unscored for p in parts),
    )


def sample_from_records(
    records: Sequence[TrajectoryRecord], rule: ScoreRule, schedule: WeightSchedule, missing: str = DEFAULT_MISSING
) -> GateSample:
    if not records:
        raise GateInputError("no trajectories")
    # The records of `read_trajectories` carry what their reader set aside (ReadRecords).
    set_aside = getattr(records, "set_aside", None)
    return GateSample(
        gate_rows(to_arrays(records), rule, schedule, missing),
        [task_id_of(r) for r in records],
        set_aside if isinstance(set_aside, SetAside) else SetAside(),
    )


def sample_from_paths(
    paths: Sequence[str | os.PathLike[str]],
    rule: ScoreRule,
    schedule: WeightSchedule,
    with_task_ids: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Progress | None = None,
    missing: str = DEFAULT_MISSING,
) -> GateSample:
    """The files (JSON Lines, Parquet, directories of shards) read as one run, chunk by chunk.

    Task ids (metadata.task_id) are read only when asked (`with_task_ids`: a baseline
    comparison), in one more streaming pass over the files; otherwise they are the ids.
    """
    parts: list[PairTable] = []
    seen: set[str] = set()  # ids of the earlier files (within one file, the reader checks duplicates)
    inputs: list[Any] = list(paths)
    set_aside = SetAside()
    if len(paths) > 1 and any(not is_parquet(f) and has_resolution_lines(f) for f in source_files(inputs)):
        # A grading job's resolution lines may sit in a file of their own: the files are one input
        # then (records/reading.py), as the shards of a directory are.
        inputs = [inputs]
    for k, path in enumerate(inputs):
        tables = map_chunks(path, lambda a: gate_rows(a, rule, schedule, missing), chunk_bytes, progress, set_aside)
        if len(inputs) > 1:
            dup = next((i for t in tables for i in t.ids if i in seen), None)
            if dup is not None:
                raise GateInputError(f"{path}: trajectory id {dup!r} also appears in an earlier file")
            if k < len(inputs) - 1:
                seen.update(i for t in tables for i in t.ids)
        parts.extend(tables)
    if not parts or sum(p.n for p in parts) == 0:
        raise GateInputError("no trajectories")
    table = concat_tables(parts, missing)
    task_ids = list(table.ids)
    if with_task_ids:
        ids: list[str] = []
        task_ids = []
        for path in paths:
            more_ids, more_tasks = read_task_ids(path)
            ids.extend(more_ids)
            task_ids.extend(more_tasks)
        if set_aside.counts.get("duplicate_id"):
            # The readers kept the first record of a repeated id (a re-run appended to the file)
            # and set the rest aside; so does this pass (it stopped the gate: "the files changed").
            ids, task_ids = _first_of_each_id(ids, task_ids)
        if ids != table.ids:  # both passes read the same files in the same order
            raise GateInputError("the trajectory files changed while the gate was reading them")
    return GateSample(table, task_ids, set_aside)


def _first_of_each_id(ids: list[str], task_ids: list[str]) -> tuple[list[str], list[str]]:
    seen: set[str] = set()
    kept: tuple[list[str], list[str]] = ([], [])
    for i, t in zip(ids, task_ids, strict=True):
        if i not in seen:
            seen.add(i)
            kept[0].append(i)
            kept[1].append(t)
    return kept
