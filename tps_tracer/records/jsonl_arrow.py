"""A chunk of JSON Lines -> `RawColumns` with pyarrow's columnar JSON reader: the big-file fast path.

orjson builds ~10 Python objects per record and the columns are then gathered from them one
`dict.get` at a time (`jsonl_fast.py`): ~1.7x a bare `json.loads` pass in CPU time, of which the
parse is a third. pyarrow's reader (C++, no Python objects) parses straight into Arrow columns in
~0.4x, and `arrow_columns.raw_from_arrow` (the Parquet reader's converter) turns those into the
same `RawColumns`, which `columnar.validated_arrays` validates as for every other reader.

pyarrow's parser is not Python's `json`, so a chunk is taken only in the form where both read the
same values, and everything else raises `NotFast` (the caller then tries `jsonl_fast.py`,
which keeps today's exact fallback). Refused before parsing (byte scans of the chunk):

- a `\\r` (the exact path splits lines on a lone `\\r` too), a blank or whitespace-only line
  (pyarrow skips it, so the row count below could not prove one object per line);
- `NaN` / `Infinity` anywhere (pyarrow reads them as numbers, as `json.loads` does, but orjson
  does not, and the rule for them belongs to the other readers);
- bytes that are not UTF-8 (pyarrow checks only the strings it converts);
- an integer `-0` (Python reads int 0; Arrow reads -0.0 where the column is float);
- an escaped ASCII character (`\\u0000`-`\\u007f`): a key spelled with an escape could be any
  of the schema's names, so the key counts below could not see it.

Refused after parsing: an explicit `null` for `steps`, `metadata`, `outcome_pending` or
`forecasts` (Arrow cannot tell it from an absent key, and the exact path refuses the null where
it takes the absence): the chunk must mention each such key exactly as often as Arrow holds a
value for it.

Also refused after parsing: nesting deeper than `MAX_DEPTH` (the exact path has a limit, pyarrow
none), a parse error of any kind (duplicate keys, bad UTF-8, lone surrogates,
a value whose type changes between records, ...), and a table whose row count is not the
chunk's line count (two objects on one line parse as two rows). Types and values are then
checked by the shared converter and validation, as for Parquet.

pyarrow is the `parquet` extra: without it this reader refuses every chunk.
"""

from __future__ import annotations

import re
from typing import Any

from tps_tracer.records.columnar import RawColumns
from tps_tracer.records.reading import NotFast

# Below this size a chunk goes to orjson: importing pyarrow costs more than it saves on a small
# file (a 40-run report must start fast), and a small chunk's parse is cheap either way.
MIN_BYTES = 1 << 20

_BLANK_LINE = re.compile(rb"\n[ \t]*(?:\n|\Z)")
_BLANK_FIRST_LINE = re.compile(rb"[ \t]*(?:\n|\Z)")
_ASCII_ESCAPE = re.compile(rb"\\u00[0-7][0-9a-fA-F]")
_MINUS_ZERO = re.compile(rb"-0(?=[\s,\]}])")  # a number ending in -0: the integer -0, or an exponent
PROBE_BYTES = 64 << 10  # the chunk's first lines, whose fields are all the chunk may name
MAX_SLOTS = 1 << 25  # fields x objects: Arrow's null slots for absent fields, ~300 MB at worst
MAX_DEPTH = 32  # nesting of the inferred Arrow type; a plain file has 4 (steps, step, forecasts, value)
# Keys whose explicit null Arrow reads as absent: (key, its column path in the table).
_NULLABLE_OBJECTS = (
    (b'"steps"', ("steps",)),
    (b'"metadata"', ("metadata",)),
    (b'"outcome_pending"', ("outcome_pending",)),
    (b'"forecasts"', ("steps", "forecasts")),
)


def raw_from_jsonl_arrow(chunk: bytes) -> RawColumns:
    """The raw columns of a chunk of whole JSON Lines (no BOM), or NotFast (see the module)."""
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        raise NotFast("pyarrow is not installed") from None
    from tps_tracer.records.arrow_columns import raw_from_arrow

    # The scans stop before a final line end (no copy of the chunk: a long trajectory's line is ~75 MB).
    end = len(chunk) - 1 if chunk.endswith(b"\n") else len(chunk)
    if end <= 0:
        raise NotFast("empty chunk")
    # (bytes.find and regexes with a literal prefix: ~25 ms per 32 MB each; a regex starting with
    # an alternation tries every position and took seconds)
    if _BLANK_FIRST_LINE.match(chunk, 0, end) or _BLANK_LINE.search(chunk, 0, end):
        raise NotFast("arrow: a blank line")
    if any(chunk.find(s, 0, end) >= 0 for s in (b"\r", b"NaN", b"Infinity")):
        raise NotFast("arrow: a carriage return, NaN or Infinity")
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
    # One block for the whole chunk: every line fits, and predictor columns come out in the order
    # the records first name them (a new field is appended to the inferred struct).
    read = pj.ReadOptions(use_threads=False, block_size=len(chunk) + 1)
    try:
        table = pj.read_json(pa.BufferReader(chunk), read_options=read, parse_options=_bounded_schema(chunk, end))
    except (pa.ArrowException, UnicodeDecodeError, ValueError) as exc:
        raise NotFast(f"arrow: {exc}") from None
    if _depth(pa.struct(list(table.schema))) > MAX_DEPTH:
        raise NotFast("arrow: nested too deep")  # pyarrow has no depth limit; the exact path has one
    if table.num_rows != chunk.count(b"\n", 0, end) + 1:
        raise NotFast("arrow: not one object per line")
    for key, path in _NULLABLE_OBJECTS:
        # Every mention of the key must be one of the values Arrow holds: an explicit null (or the
        # key elsewhere: in a string, in metadata) makes the count larger, and the chunk is refused.
        mentions = chunk.count(key, 0, end)
        if mentions and mentions != _present(table, path):
            raise NotFast(f"arrow: {key.decode()} null or mentioned elsewhere")
    return raw_from_arrow(table, from_json=True)


def _bounded_schema(chunk: bytes, end: int) -> Any:
    """Parse options fixing the fields to those of the chunk's first lines (PROBE_BYTES), or NotFast.

    Arrow's JSON builder gives every field of an object type a slot in every object of that type,
    null where absent: a chunk naming a new predictor on each line costs fields x steps (5,000
    names in 0.5 MB took 2 s and 400 MB). So the fields are those the first lines name, a later
    new field is a parse error (the chunk goes to the orjson reader, which bounds names), and the
    fields times the objects in the chunk (a bound on the slots) must stay under MAX_SLOTS.
    """
    import pyarrow as pa
    import pyarrow.json as pj

    cut = chunk.find(b"\n", min(PROBE_BYTES, end))
    probe = chunk[: cut + 1] if cut >= 0 else chunk
    try:
        schema = pj.read_json(pa.BufferReader(probe), read_options=pj.ReadOptions(use_threads=False)).schema
    except (pa.ArrowException, UnicodeDecodeError, ValueError) as exc:
        raise NotFast(f"arrow: {exc}") from None
    if _fields(pa.struct(list(schema))) * chunk.count(b"{", 0, end) > MAX_SLOTS:
        raise NotFast("arrow: too many fields for the chunk's objects")
    return pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")


def _fields(t: Any) -> int:
    """The number of fields of an Arrow type, nested ones included (stops past MAX_DEPTH levels)."""
    total, level, types = 0, 0, [t]
    while types and level <= MAX_DEPTH:
        level += 1
        types = [c.field(i).type for c in types for i in range(c.num_fields)]
        total += len(types)
    return total


def _depth(t: Any) -> int:
    """The nesting depth of an Arrow type, counted up to MAX_DEPTH + 1 (no recursion: it may be deep)."""
    deepest, level, types = 0, 0, [t]
    while types and level <= MAX_DEPTH:
        level += 1
        deepest = level
        types = [c.field(i).type for c in types for i in range(c.num_fields)]
    return deepest


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
