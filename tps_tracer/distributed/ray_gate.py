"""The gate's per-trajectory rows on Ray: `gate --engine ray` with `--baseline`, `--vs-base-rate`,
`--max-flip`.

Those checks need each trajectory's branch pairs (the paired difference resamples tasks), not
the report's sums, so each Ray Data block is read by the chunk reader (as `ray_engine.py` does)
and turned into its `PairTable` by the same function as the single-process gate
(`gate_input.gate_rows`); the driver concatenates the blocks in order and gates with
`evaluate_gate`, so the result is the local engine's. The tables travel pickled (a fixed-size
row per trajectory, as the local gate holds them).

Task ids (metadata.task_id) for the pairing are read on the driver by the same streaming pass as
the local engine (`records/reading.py`). An input a block cannot be read alone (an error to
report with its line, resolution lines, a repeated id) is gated by the local engine on the driver,
so the error or result is exactly `tps-tracer gate`'s.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from typing import Any

from tps_tracer.constants import DEFAULT_MISSING
from tps_tracer.distributed.ray_engine import _NEEDS_WHOLE, WholeInputNeeded, arrow_block_arrays, jsonl_block_arrays
from tps_tracer.records.limits import repeated_ids


def _rows(read: Any, batch: Any, rule: Any, schedule: Any, missing: str) -> dict[str, list[Any]]:
    """A block's pair table, pickled without its rule and schedule objects (they hold lambdas,
    which pickle refuses; the driver puts its own back)."""
    from tps_tracer.evaluation.gate_input import gate_rows

    try:
        arrays = read(batch)
    except WholeInputNeeded as exc:
        return {"table": [b""], _NEEDS_WHOLE: [str(exc) or "needs the whole input"]}
    if arrays is None:
        return {"table": [], _NEEDS_WHOLE: []}
    table = dataclasses.replace(gate_rows(arrays, rule, schedule, missing), rules=[], schedules=[])
    return {"table": [pickle.dumps(table)], _NEEDS_WHOLE: [""]}


def _jsonl_block(batch: Any, rule: Any, schedule: Any, missing: str) -> dict[str, list[Any]]:
    return _rows(jsonl_block_arrays, batch, rule, schedule, missing)


def _arrow_block(batch: Any, rule: Any, schedule: Any, missing: str) -> dict[str, list[Any]]:
    return _rows(arrow_block_arrays, batch, rule, schedule, missing)


def sample_from_path_ray(
    path: str | os.PathLike[str],
    rule: Any,
    schedule: Any,
    with_task_ids: bool,
    num_blocks: int | None = None,
    missing: str = DEFAULT_MISSING,
) -> Any:
    """The `GateSample` of a file or directory of shards, its blocks reduced on Ray (or WholeInputNeeded)."""
    import ray.data

    from tps_tracer.evaluation.gate_input import GateInputError, GateSample, concat_tables
    from tps_tracer.records.reading import holds_nothing, is_parquet, read_task_ids, source_files

    files = source_files(path)
    if len(files) > 1 and any(map(holds_nothing, files)):  # named and counted by the local reader
        raise WholeInputNeeded("an empty shard")
    parquet = [str(f) for f in files if is_parquet(f)]
    jsonl = [str(f) for f in files if not is_parquet(f)]
    if parquet and jsonl:  # the block order across the two kinds would not be the file order
        raise WholeInputNeeded("a directory of both JSON Lines and Parquet shards")
    fn: Any
    if jsonl:
        ds, fn = ray.data.read_text(jsonl, override_num_blocks=num_blocks), _jsonl_block
    else:
        ds, fn = ray.data.read_parquet(parquet, override_num_blocks=num_blocks), _arrow_block
    if num_blocks is not None:
        ds = ds.repartition(num_blocks)
    out = ds.map_batches(
        fn,
        batch_format="pyarrow",
        batch_size=None,
        fn_kwargs={"rule": rule, "schedule": schedule, "missing": missing},
        zero_copy_batch=True,
    )
    rows = out.take_all()
    whole = [r[_NEEDS_WHOLE] for r in rows if r[_NEEDS_WHOLE]]
    if whole:
        raise WholeInputNeeded(whole[0])
    tables = [dataclasses.replace(pickle.loads(r["table"]), rules=[rule], schedules=[schedule]) for r in rows]
    ids = [i for t in tables for i in t.ids]
    if repeated_ids(ids):
        raise WholeInputNeeded("duplicate trajectory ids")
    if not ids:
        raise GateInputError("no trajectories")
    table = concat_tables(tables, missing)
    task_ids = list(table.ids)
    if with_task_ids:
        read_ids, task_ids = read_task_ids(path)
        if read_ids != table.ids:
            raise GateInputError("the trajectory files changed while the gate was reading them")
    return GateSample(table, task_ids)


def gate_path_ray(
    candidate: str | os.PathLike[str],
    criteria: Any,
    baseline: str | os.PathLike[str] | None = None,
    address: str | None = None,
    num_blocks: int | None = None,
) -> dict[str, Any]:
    """`gate_paths(candidate, criteria, baseline)` with both runs' rows computed on Ray."""
    from tps_tracer.distributed.ray_engine import init_ray
    from tps_tracer.evaluation.gate import evaluate_gate, gate_paths
    from tps_tracer.scoring import get_rule, get_schedule

    criteria.validate(baseline is not None)
    rule, schedule = get_rule(criteria.rule), get_schedule(criteria.weights)
    paired = baseline is not None
    init_ray(address)
    try:
        cand = sample_from_path_ray(candidate, rule, schedule, paired, num_blocks, criteria.missing)
        base = (
            None
            if baseline is None
            else sample_from_path_ray(baseline, rule, schedule, True, num_blocks, criteria.missing)
        )
    except WholeInputNeeded:
        return gate_paths([candidate], criteria, baseline)  # its error, or the result of the exact read
    return evaluate_gate(cand, criteria, base)
