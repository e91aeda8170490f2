"""The Ray engine: Ray Data reads trajectory shards, each block becomes a `PartialState`, the
driver merges them into the report (the one mechanism of docs/design.md "Scale").

The result equals `report_from_path` on the same input (every count equal, means, CIs and
diagnostics <= 1e-12): bootstrap weights are a pure function of trajectory id, replicate
and seed, so the replicate sums of the blocks add up to the whole sample's.

- JSON Lines: `ray.data.read_text` gives lines; a block's lines are read by the same chunk
  reader as the single-process path (`records/reading.py`).
- Parquet: `ray.data.read_parquet`; a block is an Arrow table in the project's schema
  (`records/parquet.py`), read by `records/arrays.py`.
- Inputs that need the whole-file view (a record error to report with its line number,
  resolution lines, duplicate ids across blocks) are evaluated by the single-process path
  on the driver, so the error or result is exactly `tps-tracer report`'s.

Blocks keep their order (`preserve_order`), so predictors are listed in first-seen order as
in the single-process report. States travel as `PartialState.to_dict()` JSON, plus each
block's trajectory keys (8 bytes per trajectory) for the duplicate-id check.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import trajectory_keys
from tps_tracer.evaluation.partial_state import PartialState, StateSpec, merge_states
from tps_tracer.evaluation.report import report_from_state
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records.limits import repeated_keys

LOCAL_NUM_CPUS = 2
_NEEDS_WHOLE = "needs_whole_input"


class WholeInputNeeded(Exception):
    """A block could not be reduced on its own; the caller evaluates the input on the driver."""


def _block_result(arrays: Any, spec: StateSpec) -> dict[str, list[Any]]:
    keys = trajectory_keys(arrays.ids)
    state = PartialState.from_arrays(arrays, spec, origin=(), keys=keys)
    return {"state": [json.dumps(state.to_dict())], "keys": [keys.tobytes()], _NEEDS_WHOLE: [""]}


def _whole(reason: str) -> dict[str, list[Any]]:
    return {"state": [""], "keys": [b""], _NEEDS_WHOLE: [reason or "needs the whole input"]}


def jsonl_block_arrays(batch: Any) -> Any:
    """A block of JSON Lines (Ray Data's `text` column) read as the chunk reader reads it: its
    arrays, None for a blank block, or WholeInputNeeded."""
    from tps_tracer.records.errors import NotFast
    from tps_tracer.records.jsonl import TrajectoryFileError
    from tps_tracer.records.reading import read_jsonl_chunk

    lines = batch.column("text").to_pylist()
    chunk = ("\n".join(lines) + "\n").encode("utf-8")
    if not chunk.strip():
        return None
    try:
        arrays, _ = read_jsonl_chunk(chunk, "ray block")
    except (NotFast, TrajectoryFileError) as exc:
        raise WholeInputNeeded(str(exc)) from None
    return arrays


def arrow_block_arrays(batch: Any) -> Any:
    """A block of trajectory rows in the Parquet schema: its arrays, None if empty, or WholeInputNeeded."""
    from tps_tracer.records.jsonl import TrajectoryFileError
    from tps_tracer.records.reading import read_arrow_batch

    if batch.num_rows == 0:
        return None
    try:
        return read_arrow_batch(batch, "ray block", 0)[0]
    except TrajectoryFileError as exc:
        raise WholeInputNeeded(str(exc)) from None


def _reduce(read: Any, batch: Any, spec: StateSpec) -> dict[str, list[Any]]:
    try:
        arrays = read(batch)
    except WholeInputNeeded as exc:
        return _whole(str(exc))
    if arrays is None:
        return {"state": [], "keys": [], _NEEDS_WHOLE: []}
    return _block_result(arrays, spec)


def _reduce_jsonl_block(batch: Any, spec: StateSpec) -> dict[str, list[Any]]:
    """A block of JSON Lines -> its state, as the chunk reader reads it."""
    return _reduce(jsonl_block_arrays, batch, spec)


def _reduce_arrow_block(batch: Any, spec: StateSpec) -> dict[str, list[Any]]:
    """A block of trajectory rows in the Parquet schema -> its state."""
    return _reduce(arrow_block_arrays, batch, spec)


def _collect(ds: Any, fn: Any, spec: StateSpec) -> list[PartialState]:
    """Map every block to its state (in block order), check ids across blocks, parse on the driver."""
    out = ds.map_batches(fn, batch_format="pyarrow", batch_size=None, fn_kwargs={"spec": spec}, zero_copy_batch=True)
    rows = out.take_all()
    whole = [r[_NEEDS_WHOLE] for r in rows if r[_NEEDS_WHOLE]]
    if whole:
        raise WholeInputNeeded(whole[0])
    keys = [np.frombuffer(r["keys"], dtype=np.uint64) for r in rows]
    if repeated_keys(keys).size:  # the exact path confirms on the ids and names the lines
        raise WholeInputNeeded("duplicate trajectory ids")
    states = []
    for i, r in enumerate(rows):
        st = PartialState.from_dict(json.loads(r["state"]))
        st.first_seen = {p: (i, *where) for p, where in st.first_seen.items()}  # block order = input order
        states.append(st)
    return states


def _spec_for(options: ReportOptions) -> StateSpec:
    if options.calibrate is not None or options.calibrator is not None:
        raise InputError("recalibration refits on the whole sample: not available with the Ray engine")
    return StateSpec.from_options(options)


def init_ray(address: str | None = None, num_cpus: int = LOCAL_NUM_CPUS) -> Any:
    """Connect to a cluster at `address`, or start a local Ray bound to 127.0.0.1.

    Locally, Ray >= 2.59 turns on token authentication and writes a token under ~/.ray (it
    is generated, nothing to do). For a remote cluster with token auth, provide its token
    as Ray documents (RAY_AUTH_TOKEN or the token file) before calling.
    """
    if address is None:
        # Ray resolves "127.0.0.1" to the machine's routable address unless clustering is off;
        # read when ray is imported, so set before the import (workers inherit it).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return ray
    if address is None:
        # Imported before we set the variable: the constant is read at call time, set it too.
        constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
        if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
            constants.ENABLE_RAY_CLUSTER = False
        ray.init(
            # "local": always a new instance; with no address Ray joins a local cluster it finds (another
            # process's), which refuses num_cpus.
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            configure_logging=False,
        )
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # per-dataset INFO lines on stderr otherwise
    return ray


def states_from_path(
    path: str | os.PathLike[str], spec: StateSpec, num_blocks: int | None = None
) -> list[PartialState]:
    """Partial states of every block of a file or directory of shards (JSON Lines and/or Parquet);
    num_blocks: Ray Data's `override_num_blocks` (default: Ray decides from sizes and cores)."""
    import ray.data

    from tps_tracer.records.reading import holds_nothing, is_parquet, source_files

    files = source_files(path)
    if len(files) > 1 and any(map(holds_nothing, files)):  # named and counted by the local reader
        raise WholeInputNeeded("an empty shard")
    parquet = [str(f) for f in files if is_parquet(f)]
    jsonl = [str(f) for f in files if not is_parquet(f)]
    states: list[PartialState] = []
    # Files are read in name order, JSON Lines and Parquet each as one dataset; first-seen order
    # across the two kinds follows the file order of the single-process reader.
    order = {str(f): i for i, f in enumerate(files)}
    groups: list[tuple[int, Any, Any]] = []
    if jsonl:
        ds = ray.data.read_text(jsonl, override_num_blocks=num_blocks)
        groups.append((order[jsonl[0]], ds, _reduce_jsonl_block))
    if parquet:
        groups.append(
            (order[parquet[0]], ray.data.read_parquet(parquet, override_num_blocks=num_blocks), _reduce_arrow_block)
        )
    for first, ds, fn in sorted(groups, key=lambda g: g[0]):
        if num_blocks is not None:  # Ray Data may still bundle small files into one read task
            ds = ds.repartition(num_blocks)
        for st in _collect(ds, fn, spec):
            st.first_seen = {p: (first, *where) for p, where in st.first_seen.items()}
            states.append(st)
    return states


def report_from_path_ray(
    path: str | os.PathLike[str],
    options: ReportOptions | None = None,
    address: str | None = None,
    num_blocks: int | None = None,
) -> dict[str, Any]:
    """`report_from_path` computed on Ray (see the module docstring)."""
    from tps_tracer.evaluation.chunked import report_from_path

    opts = options or ReportOptions()
    spec = _spec_for(opts)
    Path(path).stat()  # a missing path is the same error as the single-process path's
    init_ray(address)
    try:
        states = states_from_path(path, spec, num_blocks)
    except WholeInputNeeded:
        return report_from_path(path, opts)
    if not states:
        return report_from_path(path, opts)  # its error for an input without trajectories
    return report_from_state(merge_states(states), opts)


def evaluate(
    source: Any | Iterable[PartialState | dict[str, Any]],
    options: ReportOptions | None = None,
) -> dict[str, Any]:
    """The report of a Ray Dataset of trajectory rows, or of partial states computed elsewhere.

    source: a `ray.data.Dataset` whose rows are trajectory records in the Parquet schema
    (`trajectory_id`, `stop_reason`, `outcome`, `horizon`, `q_z`, `steps` as a list of
    {t, forecasts: {predictor: p}}, ...), reduced block by block on the cluster; or an
    iterable of `PartialState` objects / `PartialState.to_dict()` dicts (e.g. from
    `Accumulator` replicas or your own tasks), merged here. Same report object as
    `tps_tracer.evaluate` on all trajectories at once.
    """
    opts = options or ReportOptions()
    spec = _spec_for(opts)
    if hasattr(source, "map_batches"):
        try:
            states = _collect(source, _reduce_arrow_block, spec)
        except WholeInputNeeded as exc:
            raise InputError(f"the dataset cannot be evaluated block by block: {exc}") from None
    else:
        states = [s if isinstance(s, PartialState) else PartialState.from_dict(s) for s in _as_list(source)]
        for s in states:
            if s.spec.signature() != spec.signature():
                raise InputError("a partial state was computed with other rules, schedules, policy, bootstrap or seed")
    if not states:
        raise InputError("no trajectories to evaluate")
    return report_from_state(merge_states(states), opts)


def _as_list(source: Any) -> Sequence[Any]:
    if isinstance(source, (PartialState, dict)):
        return [source]
    return list(source)
