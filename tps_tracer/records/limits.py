"""What every record reader refuses, sets aside and counts (docs/records-limits.md): record size, predictor
names, the JSON rule (no duplicate key, bounded nesting and integers), set-aside lines, repeated ids."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import orjson

from tps_tracer.constants import MAX_DEPTH, MAX_INT_DIGITS, MAX_PREDICTORS, MAX_RECORD_BYTES
from tps_tracer.errors import InputError
from tps_tracer.records.errors import RecordError, TrajectoryFileError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from tps_tracer.records.schema import TrajectoryRecord


PROBE_CHARS = 1 << 20  # the text reader reads a line in pieces of this many characters
_START_MESSAGE = "not a JSON object (the line starts with {!r}), refused before reading the rest"
_DEPTH_MESSAGE = f"nested more than {MAX_DEPTH} arrays/objects deep (the maximum)"
_SIZE_MESSAGE = (
    f"the record is longer than {MAX_RECORD_BYTES / (1 << 20):g} MiB (the maximum record size); refused unread"
)
PREDICTORS_MESSAGE = (
    f"more than {MAX_PREDICTORS} distinct predictor names in the input "
    "(the maximum: each name is a column of every step)"
)


class JsonRuleError(InputError):
    """A line is JSON but breaks the readers' rule (duplicate key, too deep, huge integer)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


class _Duplicate(dict):
    duplicate = ""


class _HugeInt(int):
    """An integer too long to read, standing for its number of digits."""


def field_path(parts: Sequence[str | int]) -> str:
    """`["steps", 0, "forecasts", "p"]` -> "steps[0].forecasts.p"."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + part
    return out


def _find(obj: Any, hit: Any) -> tuple[list[str | int], Any] | None:
    """(path, value) of the first value, depth first, for which `hit(path, value)` is true."""
    stack: list[tuple[list[str | int], Any]] = [([], obj)]
    while stack:
        path, value = stack.pop()
        if hit(path, value):
            return path, value
        if isinstance(value, dict):
            stack.extend(([*path, k], v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(([*path, i], v) for i, v in reversed(list(enumerate(value))))
    return None


def load_json(text: str | bytes) -> Any:
    """`json.loads` under the readers' rule; raises JSONDecodeError (not JSON) or JsonRuleError."""
    problems: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) == len(items):
            return obj
        seen: set[str] = set()
        dup = _Duplicate(obj)
        dup.duplicate = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        problems.append("duplicate")
        return dup

    def integer(digits: str) -> int | _HugeInt:
        if (n := len(digits) - digits.startswith("-")) > MAX_INT_DIGITS:
            problems.append("huge")
            return _HugeInt(n)
        return int(digits)

    try:
        obj = json.loads(text, object_pairs_hook=pairs, parse_int=integer)
    except RecursionError:  # the C scanner counts nesting against the interpreter's recursion limit
        raise JsonRuleError("", _DEPTH_MESSAGE) from None
    if problems:
        path, value = _find(obj, lambda _, v: isinstance(v, (_Duplicate, _HugeInt)))  # type: ignore[misc]
        if isinstance(value, _Duplicate):
            key = value.duplicate
            raise JsonRuleError(
                field_path([*path, key]), f"duplicate key {key!r} in one object (refused, not read as the last one)"
            )
        raise JsonRuleError(field_path(path), f"an integer of {int(value)} digits (more than {MAX_INT_DIGITS})")
    try:
        orjson.dumps([obj])  # C speed: fails beyond 254 levels counting the list, i.e. MAX_DEPTH
    except orjson.JSONEncodeError:  # too deep, or something else orjson does not write (a 65-bit int)
        found = _find(obj, lambda path, v: isinstance(v, (dict, list)) and len(path) >= MAX_DEPTH)
        if found is not None:  # named down to the third level (the full path is hundreds of "[0]")
            deep = found[0]
            raise JsonRuleError(field_path(deep[:3]) + ("..." if len(deep) > 3 else ""), _DEPTH_MESSAGE) from None
    return obj


def plain_json(raw: bytes, parsed: Any) -> bool:
    """True when `parsed` (orjson's reading of `raw`) provably has no duplicate key (orjson keeps the last
    silently) and nests at most MAX_DEPTH - 1 levels below its list; False: the exact path decides.
    Each key in `raw` has one colon and orjson writes one per key kept; any other colon is in a string,
    the same in both unless spelled `\\u003a`. So the counts agree exactly when no key was dropped."""
    if b"\\u003" in raw and (b"\\u003a" in raw or b"\\u003A" in raw):
        return False
    try:
        canonical = orjson.dumps(parsed)
    except orjson.JSONEncodeError:
        return False
    return raw.count(b":") == canonical.count(b":")


class PredictorNames:
    """The distinct predictor names of one input: each is a column of every step, so they are bounded."""

    def __init__(self, names: Iterable[str] = ()):
        self.names: dict[str, None] = dict.fromkeys(names)

    def add(self, names: Iterable[str]) -> bool:
        """Add the names; False if the input now has more than MAX_PREDICTORS."""
        self.names.update(dict.fromkeys(names))
        return len(self.names) <= MAX_PREDICTORS

    def first_beyond(self, steps: Iterable[Iterable[str]]) -> str | None:
        """Add each step's names in order; the field of the first name beyond the bound, or None."""
        for i, names in enumerate(steps):
            for name in names:
                if name not in self.names:
                    self.names[name] = None
                    if len(self.names) > MAX_PREDICTORS:
                        return f"steps[{i}].forecasts.{name}"
        return None


_SPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() strips in ASCII


def line_number_at(path: str | os.PathLike[str], offset: int) -> int:
    """The number (from 1) of the line starting at byte `offset`, as text mode counts; for errors only."""
    lines, last = 0, b""
    with open(path, "rb") as fh:
        while (remaining := offset - fh.tell()) > 0 and (piece := fh.read(min(remaining, 8 << 20))):
            # a \r\n split across pieces is counted once: count over the joined byte
            lines += piece.count(b"\n") + piece.count(b"\r") - (last + piece).count(b"\r\n")
            last = piece[-1:]
    return lines + 1


def check_unfinished_line(parts: Sequence[bytes], size: int, path: str | os.PathLike[str], offset: int) -> None:
    """Refuse a line still being read (`parts`, `size` bytes so far, from byte `offset`) whose first
    non-blank byte is not `{`, or that passed MAX_RECORD_BYTES. A byte >= 0x80 may start Unicode
    whitespace, which the exact reader strips: left to the bound."""
    for part in parts:
        if rest := part.lstrip(_SPACE):  # C speed: a line of a gigabyte of spaces is not walked in Python
            if rest[0] != ord("{") and rest[0] < 0x80:
                message = _START_MESSAGE.format(chr(rest[0]))
                raise TrajectoryFileError(str(path), [RecordError(line_number_at(path, offset), "", message)])
            break
    if size > MAX_RECORD_BYTES:
        raise TrajectoryFileError(str(path), [RecordError(line_number_at(path, offset), "", _SIZE_MESSAGE)])


def bounded_lines(fh: IO[str], source: str) -> Iterator[str]:
    """A text stream's lines, each read PROBE_CHARS at a time: one that does not start like an object, or
    passes MAX_RECORD_BYTES, is refused before it is held whole."""
    line_no = 0
    while line := fh.readline(PROBE_CHARS):
        line_no += 1
        if len(line) < PROBE_CHARS or line.endswith("\n"):
            yield line
            continue
        first = line.removeprefix("\ufeff").lstrip()[:1]
        if first and first != "{":
            raise TrajectoryFileError(source, [RecordError(line_no, "", _START_MESSAGE.format(first))])
        parts, size = [line], len(line.encode("utf-8", "surrogatepass"))
        while not parts[-1].endswith("\n") and (more := fh.readline(PROBE_CHARS)):
            parts.append(more)
            size += len(more.encode("utf-8", "surrogatepass"))
            if size > MAX_RECORD_BYTES:
                raise TrajectoryFileError(source, [RecordError(line_no, "", _SIZE_MESSAGE)])
        yield "".join(parts)


logger = logging.getLogger("tps_tracer")

KINDS = ("duplicate_id", "duplicate_resolution", "orphan_resolution", "empty_shard")
_WHAT = {
    "duplicate_id": "record(s) repeating an id of an earlier line (a re-run appended to the file?); first kept",
    "duplicate_resolution": "resolution line(s) of those repeated records",
    "orphan_resolution": "resolution line(s) for an id no record in the file has (its record was never written?)",
    "empty_shard": "shard(s) of the input holding no records (an empty file)",
}


@dataclass
class SetAside:
    """Lines read but not scored, counted by kind (`_WHAT`), the first of each named (a resolution belongs to the
    nearest record of its id above it, else the first); the lenient read counts them, `strict=True` refuses them."""

    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)  # kind -> "source line N: ..." of its first line

    def add(self, kind: str, where: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first.setdefault(kind, where)

    def merge(self, other: SetAside | None) -> None:
        if other is None:
            return
        for kind, n in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
            self.first.setdefault(kind, other.first[kind])

    def __bool__(self) -> bool:
        return bool(self.counts)

    def as_dict(self) -> dict[str, Any]:
        return {kind: {"count": self.counts[kind], "first": self.first[kind]} for kind in KINDS if kind in self.counts}

    def lines(self) -> list[str]:
        return [f"{self.counts[k]} {_WHAT[k]}; first: {self.first[k]}" for k in KINDS if k in self.counts]

    def log_once(self, source: str) -> None:
        for line in self.lines():
            logger.warning("%s: set aside (not scored): %s", source, line)


class ReadRecords(list["TrajectoryRecord"]):
    """The records a reader returns, with what it set aside."""

    set_aside: SetAside

    def __init__(self, records: Any = (), set_aside: SetAside | None = None):
        super().__init__(records)
        self.set_aside = set_aside if set_aside is not None else SetAside()


class DuplicateIdError(InputError):
    """A trajectory id twice in what is scored (it would double its weight in every mean): report and gate raise it."""


def duplicate_message(tid: str, where: str) -> str:
    return f"duplicate id {tid!r} ({where})"


def repeated_ids(ids: Sequence[str]) -> list[str]:
    """Ids that occur more than once, in first-seen order."""
    if len(set(ids)) == len(ids):
        return []
    return [i for i, k in Counter(ids).items() if k > 1]


def check_unique_ids(ids: Sequence[str]) -> None:
    if dups := repeated_ids(ids):
        more = f" (and {len(dups) - 3} more)" if len(dups) > 3 else ""
        raise DuplicateIdError(
            f"duplicate trajectory id(s) {', '.join(map(repr, dups[:3]))}{more}: each trajectory must appear once"
        )


def repeated_keys(keys: Sequence[NDArray[np.uint64]]) -> NDArray[np.uint64]:
    """64-bit id keys met more than once across the arrays; distinct ids may share a key (about
    n^2 / 2^65), so a caller confirms on the ids."""
    import numpy as np

    if not keys:
        return np.zeros(0, dtype=np.uint64)
    k = np.sort(np.concatenate(keys))
    r = k[1:][k[1:] == k[:-1]]  # sorted; each repeat once (not np.unique: it imports numpy.ma, ~30 ms)
    return r[np.concatenate(([True], r[1:] != r[:-1]))] if r.size else r
