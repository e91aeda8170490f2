"""A chunk of JSON Lines -> `RawColumns` with orjson + numpy: the core install's fast reader.

Each line is parsed by orjson (a ~1 MB wheel, ~2x faster than `json.loads`); the records are
flattened into per-field Python lists, their *types* checked in C (`set(map(type, values))`), and
turned into numpy columns; `columnar.validated_arrays` then checks the values, the one
validation the Parquet reader shares. Only the plain form is accepted, the one where orjson and
pydantic's lax mode must agree: strings where strings belong, `int` / `float` (and `bool` for the
outcome) where numbers belong, objects and lists where they belong, explicit `null` only where the
schema takes one. Anything else raises `NotColumnar` and the chunk is read by the exact path:

- what orjson refuses and `json.loads` may accept: `NaN` / `Infinity` literals, lone surrogate
  escapes (`"\\ud800"`), numbers that overflow a double; the exact path decides;
- whitespace JSON does not know around a record (form feed, NBSP), which `str.strip()` removes;
- a record with a `resolves` key (however its name is escaped): resolution lines need the file;
- integers beyond 64 bits, which orjson reads as floats: they are never valid here (a float
  horizon or step number is refused, and such a number is outside every accepted range).

Lines are parsed `BATCH_LINES` at a time, so the Python objects of at most one batch are alive at
once: a 32 MB chunk of dicts would be ~200 MB, and a batch of ~1 MB of JSON keeps its objects in
the CPU caches (measured on 100k x 10 steps: 1,000 lines per batch read in ~0.65 s, 5,000 in
~1.1 s, 20,000 in ~2 s).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from typing import Any

import numpy as np
import orjson

from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.columnar import STOP_CODE, NotColumnar, RawColumns, concat_raw, validated_arrays

BATCH_LINES = 1_000
_NONE, _INT, _FLOAT, _BOOL, _STR = type(None), int, float, bool, str
_NUMBER = frozenset({_NONE, _INT, _FLOAT})  # q_z, forecasts (null = not given / missing)
_OUTCOME = frozenset({_NONE, _INT, _FLOAT, _BOOL})  # `true` / `false` are outcomes 1 / 0
_INTEGER = frozenset({_NONE, _INT})  # horizon, t
_ABSENT_OBJECT: dict[str, Any] = {}  # the value of an absent `metadata` / `forecasts` (never mutated)
_ABSENT_LIST: list[Any] = []  # the value of an absent `steps` (never mutated)
_ABSENT = float("nan")  # an absent forecast: read as NaN, and counted by identity (orjson never gives a NaN)


def arrays_from_jsonl(chunk: bytes) -> TrajectoryArrays:
    """Validated flat arrays of a chunk of whole JSON Lines (no BOM), or NotColumnar."""
    return validated_arrays(raw_from_jsonl(chunk))


def raw_from_jsonl(chunk: bytes) -> RawColumns:
    """The raw columns of a chunk of whole JSON Lines (no BOM), or NotColumnar."""
    # Line ends as text mode reads them (what the exact path sees): \n, \r\n and a lone \r.
    lines = chunk.splitlines()
    parts = [_batch(lines[i : i + BATCH_LINES]) for i in range(0, len(lines), BATCH_LINES)]
    return concat_raw(parts) if parts else _batch([])


def _batch(lines: Sequence[bytes]) -> RawColumns:
    # Parsing allocates ~10 dicts and lists per record, all kept alive until the batch is flattened:
    # the cyclic collector would run every ~700 allocations and walk them all (it roughly doubles
    # the read time, measured), although JSON values cannot form cycles. So it is off for the
    # batch and restored as it was, also when the batch raises.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _flatten(_parse(lines))
    finally:
        if enabled:
            gc.enable()


def _parse(lines: Sequence[bytes]) -> list[Any]:
    try:
        return list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        pass
    try:  # blank lines (the exact path skips them too; bytes.strip() strips only ASCII whitespace,
        # all of which str.strip() strips as well)
        return [orjson.loads(line) for line in lines if line.strip()]
    except orjson.JSONDecodeError as exc:
        raise NotColumnar(f"orjson: {exc}") from None


def _only(values: Iterable[Any], allowed: frozenset[type] | type, what: str) -> set[type]:
    """The exact types of the values (bool is not int here); NotColumnar unless all are allowed."""
    found = set(map(type, values))
    if not (found <= allowed if isinstance(allowed, frozenset) else found <= {allowed}):
        raise NotColumnar(f"{what}: {sorted(t.__name__ for t in found)}")
    return found


def _floats(values: list[Any]) -> np.ndarray:
    return np.array(values, dtype=np.float64) if values else np.zeros(0)  # None -> NaN, True -> 1.0


def _flatten(recs: list[Any]) -> RawColumns:
    n = len(recs)
    _only(recs, dict, "a line is not an object")
    if any("resolves" in r for r in recs):
        raise NotColumnar("resolution line")
    ids = [r.get("trajectory_id") for r in recs]
    _only(ids, _STR, "trajectory_id")
    reasons = [r.get("stop_reason") for r in recs]
    _only(reasons, _STR, "stop_reason")
    stop_code = np.fromiter(map(STOP_CODE.get, reasons, repeat(-1)), dtype=np.int64, count=n)
    outcome = [r.get("outcome") for r in recs]
    _only(outcome, _OUTCOME, "outcome")
    pending = [r.get("outcome_pending", False) for r in recs]  # an explicit null is refused (NoneType)
    _only(pending, _BOOL, "outcome_pending")
    q_z = [r.get("q_z") for r in recs]
    _only(q_z, _NUMBER, "q_z")
    horizon = [r.get("horizon") for r in recs]
    _only(horizon, _INTEGER, "horizon")
    _only((r.get("metadata", _ABSENT_OBJECT) for r in recs), dict, "metadata")

    steps = [r.get("steps", _ABSENT_LIST) for r in recs]
    _only(steps, list, "steps")
    lengths = np.fromiter(map(len, steps), dtype=np.int64, count=n)
    flat = list(chain.from_iterable(steps))
    _only(flat, dict, "steps: items are not objects")
    t = [s.get("t") for s in flat]
    t_types = _only(t, _INTEGER, "steps.t")
    fcs = [s.get("forecasts", _ABSENT_OBJECT) for s in flat]
    _only(fcs, dict, "forecasts")
    forecasts = _forecast_columns(fcs)
    return RawColumns(
        ids=ids,
        stop_code=stop_code,
        outcome=_floats(outcome),
        outcome_pending=np.array(pending, dtype=bool),
        q_z=_floats(q_z),
        horizon=_floats(horizon),
        lengths=lengths,
        t=_floats(t) if _INT in t_types else None,
        forecasts=forecasts,
    )


def _forecast_columns(fcs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """One float64 column per forecast name (NaN: null or absent), names in first-seen order."""
    keys = sum(map(len, fcs))
    # Usually every step names the same predictors as the first one: then the first step's names, in
    # its order, are all the names, which the count of keys present proves. Otherwise: each distinct
    # key sequence once, in the order it first occurs.
    names = list(fcs[0]) if fcs else []
    columns = _columns(fcs, names)
    if sum(present for _, present in columns.values()) != keys:
        names = list(dict.fromkeys(chain.from_iterable(dict.fromkeys(map(tuple, fcs)))))
        columns = {**columns, **_columns(fcs, [n for n in names if n not in columns])}
    return {name: columns[name][0] for name in names}


def _columns(fcs: list[dict[str, Any]], names: list[str]) -> dict[str, tuple[np.ndarray, int]]:
    out = {}
    for name in names:
        values = [f.get(name, _ABSENT) for f in fcs]
        _only(values, _NUMBER, f"forecasts.{name}")
        out[name] = (_floats(values), len(values) - values.count(_ABSENT))
    return out
