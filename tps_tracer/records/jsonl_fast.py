"""A chunk of JSON Lines -> `RawColumns` with orjson + numpy: the core install's fast reader.

Each line is parsed by orjson (a ~1 MB wheel, ~2x faster than `json.loads`); the records are
flattened into per-field Python lists, their *types* checked in C (`set(map(type, values))`), and
turned into numpy columns; `columnar.validated_arrays` then checks the values, the one
validation the Parquet reader shares. Only the plain form is accepted, the one where orjson and
pydantic's lax mode must agree: strings where strings belong, `int` / `float` (and `bool` for the
outcome) where numbers belong, objects and lists where they belong, explicit `null` only where the
schema takes one. Anything else raises `NotFast` and the chunk is read by the exact path:

- what orjson refuses and `json.loads` may accept: `NaN` / `Infinity` literals, lone surrogate
  escapes (`"\\ud800"`), numbers that overflow a double; the exact path decides;
- whitespace JSON does not know around a record (form feed, NBSP), which `str.strip()` removes;
- a record with a `resolves` key (however its name is escaped): resolution lines need the file;
- integers beyond 64 bits, which orjson reads as floats: they are never valid here (a float
  horizon or step number is refused, and such a number is outside every accepted range).

Lines are parsed `BATCH_LINES` at a time, so the Python objects of at most one batch are alive at
once: a 32 MB chunk of dicts would be ~200 MB, and a batch of ~1 MB of JSON keeps its objects in
the CPU caches (measured on 100k x 10 steps: 1,000 lines per batch read in ~0.65 s, 5,000 in
~1.1 s, 20,000 in ~2 s). A line longer than `LONG_LINE` (one trajectory of very many steps) has
its `steps` array parsed in pieces (`_long_line`): one 1.5M-step trajectory peaks at ~0.4 GB
instead of ~1.1 GB.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import chain, repeat
from typing import Any

import numpy as np
import orjson

from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.columnar import STOP_CODE, RawColumns, concat_raw, validated_arrays
from tps_tracer.records.limits import MAX_PREDICTORS, plain_json
from tps_tracer.records.reading import NotFast

BATCH_LINES = 1_000
_FEW_LINES = 8  # a chunk of at most this many lines is parsed through views (see `_views`)
LONG_LINE = 8 << 20  # a longer line has its steps parsed in pieces (see `_long_line`)
PIECE_BYTES = 2 << 20
_NONE, _INT, _FLOAT, _BOOL, _STR = type(None), int, float, bool, str
_NUMBER = frozenset({_NONE, _INT, _FLOAT})  # q_z, forecasts (null = not given / missing)
_OUTCOME = frozenset({_NONE, _INT, _FLOAT, _BOOL})  # `true` / `false` are outcomes 1 / 0
_INTEGER = frozenset({_NONE, _INT})  # horizon, t
_ABSENT_OBJECT: dict[str, Any] = {}  # the value of an absent `metadata` / `forecasts` (never mutated)
_ABSENT_LIST: list[Any] = []  # the value of an absent `steps` (never mutated)
_ABSENT = float("nan")  # an absent forecast: read as NaN, and counted by identity (orjson never gives a NaN)


def arrays_from_jsonl(chunk: bytes) -> TrajectoryArrays:
    """Validated flat arrays of a chunk of whole JSON Lines (no BOM), or NotFast."""
    return validated_arrays(raw_from_jsonl(chunk))


def raw_from_jsonl(chunk: bytes) -> RawColumns:
    """The raw columns of a chunk of whole JSON Lines (no BOM), or NotFast."""
    # Line ends as text mode reads them (what the exact path sees): \n, \r\n and a lone \r.
    lines: list[Any] = chunk.splitlines()
    if len(lines) <= _FEW_LINES:
        lines = _views(chunk, lines)
    parts: list[RawColumns] = []
    start = 0
    for i in [i for i, size in enumerate(map(len, lines)) if size > LONG_LINE]:
        parts += _batches(lines[start:i])
        parts.append(_long_line(bytes(lines[i])) or _batch(lines[i : i + 1]))
        start = i + 1
    parts += _batches(lines[start:])
    return concat_raw(parts) if parts else _batch([])


def _batches(lines: list[Any]) -> list[RawColumns]:
    return [_batch(lines[i : i + BATCH_LINES]) for i in range(0, len(lines), BATCH_LINES)]


def _long_line(line: bytes) -> RawColumns | None:
    """One long record with its `steps` parsed PIECE_BYTES at a time, or None if the line does not
    have the plain shape this needs (then it is parsed whole).

    Parsed whole, a trajectory of 1.5M steps is ~700 MB of Python objects plus orjson's own
    document tree. Here the line is cut after a `},` that is followed by `{`, inside the top-level
    `steps` array. A cut may fall inside a string or a nested array; then the piece before it
    is not a complete sequence of JSON values and fails to parse, and the line is parsed whole.
    When every piece parses (each one starting where the previous one ended, outside any string
    at the array's own depth), the pieces are exactly the array's elements, in order. The record
    around the array is parsed with the array's last piece inside it. Lines with a `\\u` escape
    are left whole, so no other key can also spell "steps" (a duplicate key wins when it is last).
    """
    k = line.find(b'"steps"')
    j = line.find(b"[", k)
    if k < 0 or j < 0 or line.count(b'"steps"') != 1 or b"\\u" in line or line[k + 7 : j].strip() != b":":
        return None
    head = line[: j + 1]
    enabled = gc.isenabled()
    gc.disable()  # as in _batch
    try:
        try:
            shape = orjson.loads(head + b"]}")  # `steps` must be the top-level object's last key so far
        except orjson.JSONDecodeError:
            return None
        if not isinstance(shape, dict) or list(shape)[-1:] != ["steps"] or shape["steps"] != []:
            return None
        pieces: list[RawColumns] = []
        begin = j + 1
        while (cut := _cut(line, begin + PIECE_BYTES)) > 0:
            try:
                steps = orjson.loads(b"[" + line[begin:cut] + b"]")
            except orjson.JSONDecodeError:
                return None
            if not plain_json(line[begin:cut], [[steps]]):  # as deep as in the record (limits.py)
                return None
            pieces.append(_flatten([{"trajectory_id": "", "stop_reason": "other", "steps": steps}]))
            begin = cut + 1
        if not pieces:
            return None
        try:
            record = orjson.loads(head + line[begin:])
        except orjson.JSONDecodeError:
            return None
        if not plain_json(head + line[begin:], [record]):
            return None
        last = _flatten([record])
    finally:
        if enabled:
            gc.enable()
    steps_only = concat_raw([*pieces, last])  # per-step columns in order, names first-seen
    return replace(
        last, lengths=np.array([int(steps_only.lengths.sum())]), t=steps_only.t, forecasts=steps_only.forecasts
    )


def _cut(line: bytes, start: int) -> int:
    """The position of the comma of the first `},{` or `}, {` at or after `start`, or -1."""
    found = [p for p in (line.find(b"},{", start), line.find(b"}, {", start)) if p >= 0]
    return min(found) + 1 if found else -1


def _views(chunk: bytes, lines: list[bytes]) -> list[memoryview]:
    """The lines as views into the chunk, so a very long line (one trajectory of 1.5M steps is 75 MB)
    is not held twice while its objects are built (the copies are freed before parsing)."""
    views, pos, whole = [], 0, memoryview(chunk)
    for line in lines:
        start = chunk.find(line, pos)  # only line-end bytes lie between pos and the line's start
        views.append(whole[start : start + len(line)])
        pos = start + len(line)
    return views


def _batch(lines: Sequence[bytes | memoryview]) -> RawColumns:
    # Parsing allocates ~10 dicts and lists per record, all kept alive until the batch is flattened:
    # the cyclic collector would run every ~700 allocations and walk them all (it roughly doubles
    # the read time, measured), although JSON values cannot form cycles. So it is off for the
    # batch and restored as it was, also when the batch raises.
    enabled = gc.isenabled()
    gc.disable()
    try:
        recs = _parse(lines)
        # Duplicate keys and nesting (records/limits.py): orjson keeps the last key silently.
        if not plain_json(b"".join(lines), recs):
            raise NotFast("a duplicate key, deep nesting or an escaped ASCII character")
        return _flatten(recs)
    finally:
        if enabled:
            gc.enable()


def _parse(lines: Sequence[bytes | memoryview]) -> list[Any]:
    try:
        return list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        pass
    try:  # blank lines (the exact path skips them too; bytes.strip() strips only ASCII whitespace,
        # all of which str.strip() strips as well; a longer run of spaces goes to the exact path)
        return [orjson.loads(line) for line in lines if len(line) > 64 or bytes(line).strip()]
    except orjson.JSONDecodeError as exc:
        raise NotFast(f"orjson: {exc}") from None


def _only(values: Iterable[Any], allowed: frozenset[type] | type, what: str) -> set[type]:
    """The exact types of the values (bool is not int here); NotFast unless all are allowed."""
    found = set(map(type, values))
    if not (found <= allowed if isinstance(allowed, frozenset) else found <= {allowed}):
        raise NotFast(f"{what}: {sorted(t.__name__ for t in found)}")
    return found


def _field(dicts: list[dict[str, Any]], key: str, default: Any = None) -> list[Any]:
    """`[d.get(key, default) for d in dicts]`, ~15% faster (no bytecode per item); dicts only (checked)."""
    return list(map(dict.get, dicts, repeat(key), repeat(default)))


def _floats(values: list[Any]) -> np.ndarray:
    return np.array(values, dtype=np.float64) if values else np.zeros(0)  # None -> NaN, True -> 1.0


def _flatten(recs: list[Any]) -> RawColumns:
    """The batch's columns; empties `recs` on the way, so the parsed objects are freed as soon as their
    values are read (one long trajectory's objects are ~450 bytes a step)."""
    n = len(recs)
    _only(recs, dict, "a line is not an object")
    if any("resolves" in r for r in recs):
        raise NotFast("resolution line")
    ids = _field(recs, "trajectory_id")
    _only(ids, _STR, "trajectory_id")
    reasons = _field(recs, "stop_reason")
    _only(reasons, _STR, "stop_reason")
    stop_code = np.fromiter(map(STOP_CODE.get, reasons, repeat(-1)), dtype=np.int64, count=n)
    outcome = _field(recs, "outcome")
    _only(outcome, _OUTCOME, "outcome")
    pending = _field(recs, "outcome_pending", False)  # an explicit null is refused (NoneType)
    _only(pending, _BOOL, "outcome_pending")
    q_z = _field(recs, "q_z")
    _only(q_z, _NUMBER, "q_z")
    horizon = _field(recs, "horizon")
    _only(horizon, _INTEGER, "horizon")
    _only(_field(recs, "metadata", _ABSENT_OBJECT), dict, "metadata")

    steps = _field(recs, "steps", _ABSENT_LIST)
    _only(steps, list, "steps")
    recs.clear()  # the record dicts; their steps live on in `steps`
    lengths = np.fromiter(map(len, steps), dtype=np.int64, count=n)
    flat = list(chain.from_iterable(steps))
    del steps
    _only(flat, dict, "steps: items are not objects")
    t_values = _field(flat, "t")
    t_types = _only(t_values, _INTEGER, "steps.t")
    fcs = _field(flat, "forecasts", _ABSENT_OBJECT)
    del flat  # the step dicts; their t and forecasts live on in the two lists
    t = _floats(t_values) if _INT in t_types else None
    del t_values
    _only(fcs, dict, "forecasts")
    return RawColumns(
        ids=ids,
        stop_code=stop_code,
        outcome=_floats(outcome),
        outcome_pending=np.array(pending, dtype=bool),
        q_z=_floats(q_z),
        horizon=_floats(horizon),
        lengths=lengths,
        t=t,
        forecasts=_forecast_columns(fcs),
    )


def _forecast_columns(fcs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """One float64 column per forecast name (NaN: null or absent), names in first-seen order."""
    keys = sum(map(len, fcs))
    # Usually every step names the same predictors as the first one: then the first step's names, in
    # its order, are all the names, which the count of keys present proves. Otherwise: each distinct
    # key sequence once, in the order it first occurs.
    # Past MAX_PREDICTORS names the exact path names the line (the columns would need gigabytes).
    names = list(fcs[0]) if fcs else []
    if len(names) > MAX_PREDICTORS:
        raise NotFast("too many predictor names")
    columns = _columns(fcs, names)
    if sum(present for _, present in columns.values()) != keys:
        names = list(dict.fromkeys(chain.from_iterable(dict.fromkeys(map(tuple, fcs)))))
        if len(names) > MAX_PREDICTORS:
            raise NotFast("too many predictor names")
        columns = {**columns, **_columns(fcs, [n for n in names if n not in columns])}
    return {name: columns[name][0] for name in names}


def _columns(fcs: list[dict[str, Any]], names: list[str]) -> dict[str, tuple[np.ndarray, int]]:
    out = {}
    for name in names:
        values = _field(fcs, name, _ABSENT)
        _only(values, _NUMBER, f"forecasts.{name}")
        out[name] = (_floats(values), len(values) - values.count(_ABSENT))
    return out
