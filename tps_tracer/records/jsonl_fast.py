"""The fast JSON Lines readers (orjson, or pyarrow's JSON reader from `MIN_BYTES` on): a chunk of whole lines
-> `RawColumns` in the plain form where they and the exact read agree, else `NotFast`. Lines are parsed
`BATCH_LINES` at a time with the cyclic collector off; a line over `LONG_LINE` has its steps parsed in pieces."""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import chain, repeat
from typing import Any

import numpy as np
import orjson

from tps_tracer.constants import MAX_PREDICTORS, MAX_RECORD_BYTES
from tps_tracer.records.arrays import (
    STOP_CODE,
    RawColumns,
    TrajectoryArrays,
    concat_raw,
    raw_from_arrow,
    validated_arrays,
)
from tps_tracer.records.errors import NotFast
from tps_tracer.records.limits import plain_json

BATCH_LINES = 1_000
_FEW_LINES = 8  # a chunk of at most this many lines is parsed through views (see `_views`)
LONG_LINE = 8 << 20  # a longer line has its steps parsed in pieces (see `_long_line`)
PIECE_BYTES = 2 << 20
_NUMBER = frozenset({type(None), int, float})  # q_z, forecasts (null = not given / missing)
_OUTCOME = frozenset({type(None), int, float, bool})  # `true` / `false` are outcomes 1 / 0
_INTEGER = frozenset({type(None), int})  # horizon, t
_ABSENT_OBJECT: dict[str, Any] = {}  # the value of an absent `metadata` / `forecasts` (never mutated)
_ABSENT_LIST: list[Any] = []  # the value of an absent `steps` (never mutated)
_ABSENT = float("nan")  # an absent forecast: read as NaN, and counted by identity (orjson never gives a NaN)


def arrays_from_jsonl(chunk: bytes) -> TrajectoryArrays:
    """The validated arrays of a chunk of whole JSON Lines (no BOM), or NotFast."""
    return validated_arrays(raw_from_jsonl(chunk))


def raw_from_jsonl(chunk: bytes, side: Callable[[list[Any]], None] | None = None) -> RawColumns:
    """The raw columns of a chunk of whole JSON Lines, `side` called on each batch's records (convert's
    side columns: a long line is then NotFast); a record beyond MAX_RECORD_BYTES is the exact read's."""
    # Line ends as text mode reads them (what the exact path sees): \n, \r\n and a lone \r.
    lines: list[Any] = chunk.splitlines()
    if len(lines) <= _FEW_LINES:
        lines = _views(chunk, lines)
    parts: list[RawColumns] = []
    start = 0
    for i in [i for i, size in enumerate(map(len, lines)) if size > LONG_LINE]:
        if len(lines[i]) > MAX_RECORD_BYTES:
            raise NotFast("a record beyond the size bound", whole_file=True)
        if side is not None:
            raise NotFast("a long line")
        parts += _batches(lines[start:i])
        parts.append(_long_line(bytes(lines[i])) or parse_batch(lines[i : i + 1]))
        start = i + 1
    parts += _batches(lines[start:], side)
    return concat_raw(parts) if parts else parse_batch([], side)


def _batches(lines: list[Any], side: Callable[[list[Any]], None] | None = None) -> list[RawColumns]:
    return [parse_batch(lines[i : i + BATCH_LINES], side) for i in range(0, len(lines), BATCH_LINES)]


def _long_line(line: bytes) -> RawColumns | None:
    """One long record with its `steps` parsed PIECE_BYTES at a time (a 1.5M-step line peaks at ~0.4 GB,
    not ~1.1 GB), or None for a line without that plain shape (then parsed whole). The line is cut after
    `},` before `{` in the top-level `steps`; a cut inside a string or nested array leaves a piece that
    fails to parse, so when all parse they are the array's elements in order. No `\\u` escape: no other
    key can spell "steps"."""
    k = line.find(b'"steps"')
    j = line.find(b"[", k)
    if k < 0 or j < 0 or line.count(b'"steps"') != 1 or b"\\u" in line or line[k + 7 : j].strip() != b":":
        return None
    head = line[: j + 1]
    with gc_off():
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
            pieces.append(flatten([{"trajectory_id": "", "stop_reason": "other", "steps": steps}]))
            begin = cut + 1
        if not pieces:
            return None
        try:
            record = orjson.loads(head + line[begin:])
        except orjson.JSONDecodeError:
            return None
        if not plain_json(head + line[begin:], [record]):
            return None
        last = flatten([record])
    steps_only = concat_raw([*pieces, last])  # per-step columns in order, names first-seen
    return replace(
        last, lengths=np.array([int(steps_only.lengths.sum())]), t=steps_only.t, forecasts=steps_only.forecasts
    )


def _cut(line: bytes, start: int) -> int:
    found = [p for p in (line.find(b"},{", start), line.find(b"}, {", start)) if p >= 0]
    return min(found) + 1 if found else -1


def _views(chunk: bytes, lines: list[bytes]) -> list[memoryview]:
    """The lines as views into the chunk, so a 75 MB line is not held twice while parsed."""
    views, pos, whole = [], 0, memoryview(chunk)
    for line in lines:
        start = chunk.find(line, pos)  # only line-end bytes lie between pos and the line's start
        views.append(whole[start : start + len(line)])
        pos = start + len(line)
    return views


@contextmanager
def gc_off() -> Iterator[None]:
    """The cyclic collector off for a batch: it would walk every parsed object each ~700 allocations
    (twice the read time), and JSON values form no cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_batch(lines: Sequence[bytes | memoryview], side: Callable[[list[Any]], None] | None = None) -> RawColumns:
    """The lines parsed by orjson and flattened (`side(records)` first, if given), or NotFast, also for a
    duplicate key (orjson keeps the last one silently) or deep nesting (limits.plain_json)."""
    with gc_off():
        recs = _parse(lines)
        if not plain_json(b"".join(lines), recs):
            raise NotFast("a duplicate key, deep nesting or an escaped ASCII character")
        if side is not None:
            side(recs)
        return flatten(recs)


def _parse(lines: Sequence[bytes | memoryview]) -> list[Any]:
    try:
        return list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        pass
    try:  # blank lines, which the exact path skips (a long run of spaces goes there)
        return [orjson.loads(line) for line in lines if len(line) > 64 or bytes(line).strip()]
    except orjson.JSONDecodeError as exc:
        raise NotFast(f"orjson: {exc}") from None


def _only(values: Iterable[Any], allowed: frozenset[type] | type, what: str) -> None:
    """NotFast unless each value's exact type is allowed (bool is not int here)."""
    found = set(map(type, values))
    if not (found <= allowed if isinstance(allowed, frozenset) else found <= {allowed}):
        raise NotFast(f"{what}: {sorted(t.__name__ for t in found)}")


def _field(
    dicts: list[dict[str, Any]], key: str, allowed: frozenset[type] | type, default: Any = None, what: str = ""
) -> list[Any]:
    """`[d.get(key, default) for d in dicts]` (~15% faster), NotFast unless each value's type is `allowed`."""
    values = list(map(dict.get, dicts, repeat(key), repeat(default)))
    _only(values, allowed, what or key)
    return values


def _floats(values: list[Any]) -> np.ndarray:
    return np.array(values, dtype=np.float64) if values else np.zeros(0)  # None -> NaN, True -> 1.0


def flatten(recs: list[Any]) -> RawColumns:
    """The batch's columns (types checked, values not yet); empties `recs` as it goes, so parsed
    objects are freed once read."""
    n = len(recs)
    _only(recs, dict, "a line is not an object")
    if any("resolves" in r for r in recs):
        raise NotFast("resolution line")
    ids = _field(recs, "trajectory_id", str)
    reasons = _field(recs, "stop_reason", str)
    stop_code = np.fromiter(map(STOP_CODE.get, reasons, repeat(-1)), dtype=np.int64, count=n)
    outcome = _field(recs, "outcome", _OUTCOME)
    pending = _field(recs, "outcome_pending", bool, False)  # an explicit null is refused (NoneType)
    q_z = _field(recs, "q_z", _NUMBER)
    horizon = _field(recs, "horizon", _INTEGER)
    _field(recs, "metadata", dict, _ABSENT_OBJECT)

    steps = _field(recs, "steps", list, _ABSENT_LIST)
    recs.clear()  # the record dicts; their steps live on in `steps`
    lengths = np.fromiter(map(len, steps), dtype=np.int64, count=n)
    flat = list(chain.from_iterable(steps))
    del steps
    _only(flat, dict, "steps: items are not objects")
    t_values = _field(flat, "t", _INTEGER, what="steps.t")
    fcs = _field(flat, "forecasts", dict, _ABSENT_OBJECT)
    del flat  # the step dicts; their t and forecasts live on in the two lists
    t = _floats(t_values) if t_values.count(None) < len(t_values) else None  # None: no step gives one
    del t_values
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
    # Usually the first step's names are all the names (the count of keys present proves it); else each
    # distinct key sequence once. Past MAX_PREDICTORS, the exact path names the line.
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
        values = _field(fcs, name, _NUMBER, _ABSENT, f"forecasts.{name}")
        out[name] = (_floats(values), len(values) - values.count(_ABSENT))
    return out


# Below this size a chunk goes to orjson: importing pyarrow would cost a small file more than it saves.
MIN_BYTES = 1 << 20

_BLANK_LINE = re.compile(rb"\n[ \t]*(?:\n|\Z)")
_BLANK_FIRST_LINE = re.compile(rb"[ \t]*(?:\n|\Z)")
_ASCII_ESCAPE = re.compile(rb"\\u00[0-7][0-9a-fA-F]")
_MINUS_ZERO = re.compile(rb"-0(?=[\s,\]}])")  # a number ending in -0: the integer -0, or an exponent
PROBE_BYTES = 64 << 10  # the chunk's first lines, whose fields are all the chunk may name
MAX_SLOTS = 1 << 25  # fields x objects: Arrow's null slots for absent fields, ~300 MB at worst
_ARROW_DEPTH = 32  # nesting of the inferred Arrow type; a plain file has 4 (steps, step, forecasts, value)
# Keys whose explicit null Arrow reads as absent: (key, its column path in the table).
_NULLABLE_OBJECTS = (
    (b'"steps"', ("steps",)),
    (b'"metadata"', ("metadata",)),
    (b'"outcome_pending"', ("outcome_pending",)),
    (b'"forecasts"', ("steps", "forecasts")),
)


def raw_from_jsonl_arrow(chunk: bytes) -> RawColumns:
    """The raw columns of a chunk by pyarrow's JSON reader (no Python object per record), or
    NotFast for every form where its parser and Python's `json` could read different values."""
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        raise NotFast("pyarrow is not installed") from None
    # The scans stop before a final line end (no copy of the chunk). Each is a bytes.find or a regex with a
    # literal prefix (~25 ms per 32 MB; one starting with an alternation took seconds).
    end = len(chunk) - 1 if chunk.endswith(b"\n") else len(chunk)
    if end <= 0:
        raise NotFast("empty chunk")
    # pyarrow skips a blank line, so the row count could not prove one object per line
    if _BLANK_FIRST_LINE.match(chunk, 0, end) or _BLANK_LINE.search(chunk, 0, end):
        raise NotFast("arrow: a blank line")
    # the exact path splits lines on a lone \r too; NaN / Infinity: their rule is the other readers'
    if any(chunk.find(s, 0, end) >= 0 for s in (b"\r", b"NaN", b"Infinity")):
        raise NotFast("arrow: a carriage return, NaN or Infinity")
    # a key spelled with an escape could be any of the schema's names, unseen by the key counts below
    if chunk.find(b"\\u00", 0, end) >= 0 and _ASCII_ESCAPE.search(chunk, 0, end):
        raise NotFast("arrow: an escaped ASCII character")
    if chunk.find(b"-0", 0, end) >= 0 and any(
        chunk[m.start() - 1 : m.start()] not in b"eE" for m in _MINUS_ZERO.finditer(chunk, 0, end)
    ):
        raise NotFast("arrow: an integer -0")  # Arrow reads -0.0 in a float column; Python: int 0
    if not chunk.isascii():
        try:  # pyarrow checks UTF-8 only in the strings it converts; the exact path decodes every line
            chunk.decode("utf-8")
        except UnicodeDecodeError:
            raise NotFast("arrow: invalid UTF-8") from None
    # One block: predictor columns come out in the order the records first name them.
    read = pj.ReadOptions(use_threads=False, block_size=len(chunk) + 1)
    try:
        table = pj.read_json(pa.BufferReader(chunk), read_options=read, parse_options=_bounded_schema(chunk, end))
    except (pa.ArrowException, UnicodeDecodeError, ValueError) as exc:
        raise NotFast(f"arrow: {exc}") from None
    if _shape(pa.struct(list(table.schema)))[1] > _ARROW_DEPTH:
        raise NotFast("arrow: nested too deep")  # pyarrow has no depth limit; the exact path has one
    if table.num_rows != chunk.count(b"\n", 0, end) + 1:
        raise NotFast("arrow: not one object per line")
    try:
        for key, path in _NULLABLE_OBJECTS:
            # Every mention must be a value Arrow holds: an explicit null or a mention elsewhere is refused.
            mentions = chunk.count(key, 0, end)
            if mentions and mentions != _present(table, path):
                raise NotFast(f"arrow: {key.decode()} null or mentioned elsewhere")
        return raw_from_arrow(table, from_json=True)
    except pa.ArrowException as exc:  # pyarrow 26 builds an invalid list<null> array from `[null, null]`
        raise NotFast(f"arrow: {exc}") from None


def _bounded_schema(chunk: bytes, end: int) -> Any:
    """Parse options fixing the fields to those of the chunk's first PROBE_BYTES, or NotFast: Arrow gives
    every field a slot in every object (5,000 names in 0.5 MB took 2 s and 400 MB), so fields x objects
    must stay under MAX_SLOTS."""
    import pyarrow as pa
    import pyarrow.json as pj

    cut = chunk.find(b"\n", min(PROBE_BYTES, end))
    probe = chunk[: cut + 1] if cut >= 0 else chunk
    try:
        schema = pj.read_json(pa.BufferReader(probe), read_options=pj.ReadOptions(use_threads=False)).schema
    except (pa.ArrowException, UnicodeDecodeError, ValueError) as exc:
        raise NotFast(f"arrow: {exc}") from None
    if _shape(pa.struct(list(schema)))[0] * chunk.count(b"{", 0, end) > MAX_SLOTS:
        raise NotFast("arrow: too many fields for the chunk's objects")
    return pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")


def _shape(t: Any) -> tuple[int, int]:
    """(fields, nesting depth) of an Arrow type, counted down to _ARROW_DEPTH + 1 levels (no recursion)."""
    total, level, types = 0, 0, [t]
    while types and level <= _ARROW_DEPTH:
        level += 1
        types = [c.field(i).type for c in types for i in range(c.num_fields)]
        total += len(types)
    return total, level


def _present(table: Any, path: tuple[str, ...]) -> int:
    """How many non-null values the column at `path` holds (a list column's items for a nested name)."""
    import pyarrow as pa

    if path[0] not in table.schema.names:
        return 0
    col = table.column(path[0]).combine_chunks()
    for name in path[1:]:
        if not pa.types.is_list(col.type) or not pa.types.is_struct(col.type.value_type):
            return -1  # not a list of objects: the converter refuses it anyway
        items = col.flatten()
        if items.type.get_field_index(name) < 0:
            return 0
        col = items.field(name)
    return int(len(col) - col.null_count)
