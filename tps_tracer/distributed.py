"""The Ray engine (docs/scale.md), the only module importing Ray, and only when called (the `ray` extra): each
block reduced where it lies to a `PartialState` (the report, `evaluate`) or the gate's `PairTable`, merged on the
driver in block order. An input a block cannot read alone goes to the single-process path."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import trajectory_keys
from tps_tracer.evaluation.gate import (
    GateCriteria,
    GateSample,
    gate_paths,
    gate_rows,
    sample_from_tables,
)
from tps_tracer.evaluation.partial_state import PartialState, StateSpec, merge_states
from tps_tracer.evaluation.report import report_from_state
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records.errors import NotFast, TrajectoryFileError
from tps_tracer.records.limits import repeated_ids, repeated_keys
from tps_tracer.records.reading import holds_nothing, is_parquet, read_arrow_batch, read_jsonl_chunk, source_files
from tps_tracer.scoring import get_rule, get_schedule

LOCAL_NUM_CPUS = 2
_NEEDS_WHOLE = "needs_whole_input"


class WholeInputNeeded(Exception):
    """A block could not be reduced on its own; the caller evaluates the input on the driver."""


def jsonl_block_arrays(batch: Any) -> Any:
    """A block of JSON Lines (Ray Data's `text` column) read by the chunk reader: arrays, None if blank."""
    chunk = ("\n".join(batch.column("text").to_pylist()) + "\n").encode("utf-8")
    return read_jsonl_chunk(chunk, "ray block")[0] if chunk.strip() else None


def arrow_block_arrays(batch: Any) -> Any:
    """A block of trajectory rows in the Parquet schema: arrays, None if empty."""
    return read_arrow_batch(batch, "ray block", 0)[0] if batch.num_rows else None


def _reduce_block(batch: Any, read: Callable[[Any], Any], reduce: Callable[..., bytes], args: tuple[Any, ...]) -> Any:
    """On a worker: one block's payload, or why it needs the whole input (a block the reader refuses)."""
    try:
        arrays = read(batch)
    except (NotFast, TrajectoryFileError) as exc:
        return {"payload": [b""], _NEEDS_WHOLE: [str(exc) or "needs the whole input"]}
    if arrays is None:
        return {"payload": [], _NEEDS_WHOLE: []}
    return {"payload": [reduce(arrays, *args)], _NEEDS_WHOLE: [""]}


def _map_blocks(ds: Any, read: Callable[[Any], Any], reduce: Callable[..., bytes], *args: Any) -> list[bytes]:
    rows = ds.map_batches(
        _reduce_block,
        batch_format="pyarrow",
        batch_size=None,
        fn_kwargs={"read": read, "reduce": reduce, "args": args},
        zero_copy_batch=True,
    ).take_all()
    whole = [r[_NEEDS_WHOLE] for r in rows if r[_NEEDS_WHOLE]]
    if whole:
        raise WholeInputNeeded(whole[0])
    return [r["payload"] for r in rows]


def _datasets(
    path: str | os.PathLike[str], num_blocks: int | None, one_kind: bool = False
) -> list[tuple[int, Any, Any]]:
    """(index of its first file, dataset, block reader) for the input's JSON Lines and its Parquet files,
    in file order; num_blocks: Ray Data's `override_num_blocks` (default: Ray decides)."""
    import ray.data

    files = source_files(path)
    if len(files) > 1 and any(map(holds_nothing, files)):  # named and counted by the local reader
        raise WholeInputNeeded("an empty shard")
    order = {str(f): i for i, f in enumerate(files)}
    parquet = [str(f) for f in files if is_parquet(f)]
    jsonl = [str(f) for f in files if not is_parquet(f)]
    if one_kind and parquet and jsonl:  # the block order across the two kinds would not be the file order
        raise WholeInputNeeded("a directory of both JSON Lines and Parquet shards")
    kinds = ((jsonl, ray.data.read_text, jsonl_block_arrays), (parquet, ray.data.read_parquet, arrow_block_arrays))
    groups = [(order[fs[0]], open_(fs, override_num_blocks=num_blocks), read) for fs, open_, read in kinds if fs]
    if num_blocks is not None:  # Ray Data may still bundle small files into one read task
        groups = [(first, ds.repartition(num_blocks), read) for first, ds, read in groups]
    return sorted(groups, key=lambda g: g[0])


def init_ray(address: str | None = None, num_cpus: int = LOCAL_NUM_CPUS) -> Any:
    """Connect to a cluster at `address`, or start a local Ray bound to 127.0.0.1 (Ray >= 2.59 generates
    its auth token under ~/.ray; a remote cluster's token is provided as Ray documents)."""
    if address is None:
        # Ray resolves "127.0.0.1" to the routable address unless clustering is off (read at import, inherited).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return ray
    where: dict[str, Any] = {"address": address}
    if address is None:
        # Imported before we set the variable: the constant is read at call time, set it too.
        constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
        if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
            constants.ENABLE_RAY_CLUSTER = False
        # "local": always a new instance (with no address Ray joins another process's, which refuses num_cpus).
        where = {"address": "local", "num_cpus": num_cpus, "include_dashboard": False, "_node_ip_address": "127.0.0.1"}
    ray.init(**where, log_to_driver=False, configure_logging=False)
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.execution_options.preserve_order = True  # predictors in first-seen order, as the local report
    ctx.enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # per-dataset INFO lines on stderr otherwise
    return ray


# -- the report: a PartialState per block (bootstrap weights depend on trajectory ids, so they add up) --


def _state_of(arrays: Any, spec: StateSpec) -> bytes:
    keys = trajectory_keys(arrays.ids)  # 8 bytes per trajectory, for the duplicate-id check
    state = PartialState.from_arrays(arrays, spec, origin=(), keys=keys)
    return pickle.dumps((json.dumps(state.to_dict()), keys.tobytes()))


def _states(ds: Any, read: Callable[[Any], Any], spec: StateSpec, origin: tuple[int, ...] = ()) -> list[PartialState]:
    """The blocks' partial states, first-seen predictors keyed by `origin` (the file) and the block's index."""
    payloads = [pickle.loads(p) for p in _map_blocks(ds, read, _state_of, spec)]
    if repeated_keys([np.frombuffer(keys, dtype=np.uint64) for _, keys in payloads]).size:
        raise WholeInputNeeded("duplicate trajectory ids")  # the exact path confirms on the ids and names the lines
    states = []
    for i, (state, _) in enumerate(payloads):
        st = PartialState.from_dict(json.loads(state))
        st.first_seen = {p: (*origin, i, *where) for p, where in st.first_seen.items()}  # block order = input order
        states.append(st)
    return states


def _spec_for(options: ReportOptions) -> StateSpec:
    if options.calibrate is not None or options.calibrator is not None:
        raise InputError("recalibration refits on the whole sample: not available with the Ray engine")
    return StateSpec.from_options(options)


def states_from_path(
    path: str | os.PathLike[str], spec: StateSpec, num_blocks: int | None = None
) -> list[PartialState]:
    """Partial states of every block of a file or directory of shards (JSON Lines and/or Parquet)."""
    return [st for first, ds, read in _datasets(path, num_blocks) for st in _states(ds, read, spec, (first,))]


def report_from_path_ray(
    path: str | os.PathLike[str],
    options: ReportOptions | None = None,
    address: str | None = None,
    num_blocks: int | None = None,
) -> dict[str, Any]:
    """`report_from_path` computed on Ray: the same report (counts equal, numbers within 1e-12)."""
    from tps_tracer.evaluation.chunked import report_from_path

    opts = options or ReportOptions()
    spec = _spec_for(opts)
    Path(path).stat()  # a missing path is the same error as the single-process path's
    init_ray(address)
    try:
        states = states_from_path(path, spec, num_blocks)
    except WholeInputNeeded:
        states = []
    if not states:  # the single-process result, or its error for an input without trajectories
        return report_from_path(path, opts)
    return report_from_state(merge_states(states), opts)


def evaluate(
    source: Any | Iterable[PartialState | dict[str, Any]],
    options: ReportOptions | None = None,
) -> dict[str, Any]:
    """The report of a Ray Dataset of trajectory rows in the Parquet schema (reduced block by block on the
    cluster), or of partial states computed elsewhere (`PartialState`s or their `to_dict()`, e.g. from
    `Accumulator` replicas): the report `tps_tracer.evaluate` gives on all trajectories at once."""
    opts = options or ReportOptions()
    spec = _spec_for(opts)
    if hasattr(source, "map_batches"):
        try:
            states = _states(source, arrow_block_arrays, spec)
        except WholeInputNeeded as exc:
            raise InputError(f"the dataset cannot be evaluated block by block: {exc}") from None
    else:
        items = [source] if isinstance(source, (PartialState, dict)) else list(source)
        states = [s if isinstance(s, PartialState) else PartialState.from_dict(s) for s in items]
        if any(s.spec.signature() != spec.signature() for s in states):
            raise InputError("a partial state was computed with other rules, schedules, policy, bootstrap or seed")
    if not states:
        raise InputError("no trajectories to evaluate")
    return report_from_state(merge_states(states), opts)


# -- the gate: a PairTable per block, for the checks that resample trajectories (--baseline, ...) --


def _table_of(arrays: Any, crit: GateCriteria) -> bytes:
    # Pickled without its rule and schedule (they hold lambdas, which pickle refuses); the driver puts them back.
    return pickle.dumps(dataclasses.replace(gate_rows(arrays, crit), rules=[], schedules=[]))


def sample_from_path_ray(
    path: str | os.PathLike[str], crit: GateCriteria, with_task_ids: bool, num_blocks: int | None = None
) -> GateSample:
    """The `GateSample` of a file or directory of shards, its blocks reduced on Ray (or WholeInputNeeded)."""
    [(_, ds, read)] = _datasets(path, num_blocks, one_kind=True)
    rules, schedules = [get_rule(crit.rule)], [get_schedule(crit.weights)]
    tables = [
        dataclasses.replace(pickle.loads(p), rules=rules, schedules=schedules)
        for p in _map_blocks(ds, read, _table_of, crit)
    ]
    if repeated_ids([i for t in tables for i in t.ids]):
        raise WholeInputNeeded("duplicate trajectory ids")
    return sample_from_tables(tables, [path], with_task_ids, crit.missing)  # task ids read on the driver


def gate_path_ray(
    candidate: str | os.PathLike[str],
    criteria: GateCriteria,
    baseline: str | os.PathLike[str] | None = None,
    address: str | None = None,
    num_blocks: int | None = None,
) -> dict[str, Any]:
    """`gate_paths(candidate, criteria, baseline)` with both runs' rows computed on Ray."""

    def read(paths: Any, with_task_ids: bool) -> GateSample:
        init_ray(address)
        return sample_from_path_ray(paths[0], criteria, with_task_ids, num_blocks)

    try:
        return gate_paths([candidate], criteria, baseline, read=read)
    except WholeInputNeeded:
        return gate_paths([candidate], criteria, baseline)  # its error, or the result of the exact read
