"""Reading one stated VALUE (the text after a confidence statement) on a declared scale.

`verbal_confidence.py` finds the statement; this module turns its VALUE into a
`Confidence` (value, status, reason). The grammar is written out in that module's
docstring and in docs/capture.md's "Verbal confidence" table; the rules in short:

- The VALUE is taken from the original text (never from the ASCII-folded copy) and
  NFKC-normalised, and every Unicode decimal digit becomes its ASCII digit, so `0.８`,
  `0.٨`, `0.८` read 0.8 and `9０` reads 90.
- What is read is the expression at the start of VALUE; it must end at a boundary (end,
  whitespace or punctuation): `0.8abc` is not a number.
- Scales are declared, never guessed. A number written with a `%` (or `percent`) is a
  percent; `a/b` and `a out of b` carry their own scale; a number written with a point
  and at most 1 (`0.85`, `1.0`, `8.5e-1`), and 0, are probabilities on every scale. Any
  other number (an integer >= 1, a decimal above 1) is read on the declared scale x/max
  (`percent` 100, `1-10` 10, `1-5` 5, `0-1` 1), clipped to 1 above max. Undeclared, it is
  read only when a single scale fits (10 < x <= 100: percent); 1..10 could be on several
  scales and is refused as `ambiguous / undeclared_scale`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tps_tracer.errors import InputError
from tps_tracer.validity import probability


def folded(text: str) -> bytes:
    """The case-insensitive view of a model output that the capture patterns search: ASCII-folded
    lower case, one byte per character (a non-ASCII character, lone surrogates included, is `?`),
    so an offset in it is an offset in `text`. ~1 ms per MB whatever the script, where
    `str.lower()` costs up to 40 ms per MB on some (U+0130) and can turn one character into two
    (shifting offsets), and re.IGNORECASE makes the literal search ~30x slower. It only LOCATES
    statements (keywords, tags and labels are ASCII); a VALUE is read from the original text at
    the same offsets (`normalise`), so `0.８` is 0.8, not `0.?`."""
    return text.encode("ascii", "replace").lower()


Status = Literal["ok", "clipped", "missing", "malformed", "ambiguous"]

# The scales a user may declare (verbal_scale=...), each with the number its top is written as.
SCALES: dict[str, float] = {"percent": 100.0, "0-1": 1.0, "1-10": 10.0, "1-5": 5.0}
# An explicit "no scale" (a per-run override of the extractor's scale, e.g. after an invalid
# one in the run's metadata): integers that fit several scales are refused.
UNDECLARED = "undeclared"

MAX_NUMBER_CHARS = 64  # a longer number is malformed ("too_long"), as a 1 MB digit run
MAX_VALUE_CHARS = 256  # a longer VALUE (tag inner text) is not read at all ("too_long")
WIDEST_RANGE = 0.2  # a range `lo-hi` reads its midpoint when hi - lo <= this, else ambiguous

# Qualitative levels known by default (so that `Confidence: high` is a statement, refused as
# `qualitative` unless the user maps levels to numbers).
DEFAULT_LEVELS: tuple[str, ...] = ("very high", "very low", "high", "medium", "moderate", "low")


@dataclass(frozen=True)
class Confidence:
    value: float | None
    status: Status
    reason: str = ""  # why a refusal (malformed / ambiguous) or a missing value


MISSING = Confidence(None, "missing")


def malformed(reason: str) -> Confidence:
    return Confidence(None, "malformed", reason)


def ambiguous(reason: str) -> Confidence:
    return Confidence(None, "ambiguous", reason)


def check_scale(scale: str | None) -> str | None:
    """`scale` itself if it is None, UNDECLARED or one of SCALES; else ValueError naming the choices."""
    if scale is None or scale == UNDECLARED or (isinstance(scale, str) and scale in SCALES):
        return scale
    raise InputError(f"verbal_scale must be one of {sorted(SCALES)} or None, got {scale!r}")


def check_levels(levels: Mapping[str, float] | None) -> dict[str, float]:
    """The qualitative mapping, keys lower-cased; ValueError for a key that is not words or a value outside [0, 1]."""
    out: dict[str, float] = {}
    for key, value in (levels or {}).items():
        if not isinstance(key, str) or not re.fullmatch(r"[a-z]+(?:[ -][a-z]+)*", key.lower()):
            raise InputError(f"qualitative levels: a level must be ASCII words, got {key!r}")
        if probability(value) is None:
            raise InputError(f"qualitative levels: {key!r} must map to a number in [0, 1], got {value!r}")
        out[key.lower()] = float(value)
    return out


def _clip(value: float) -> Confidence:
    if 0.0 <= value <= 1.0:
        return Confidence(value + 0.0, "ok")  # + 0.0: -0.0 reads as 0.0
    return Confidence(1.0 if value > 1.0 else 0.0, "clipped")


def on_scale(x: float, point: bool, scale: str | None) -> Confidence:
    """A plain number (no %, no fraction) `x` >= 0; `point`: written with a decimal point or exponent."""
    if x == 0.0 or (point and x <= 1.0):
        return Confidence(x + 0.0, "ok")
    if scale is None or scale == UNDECLARED:
        if x > 100.0:
            return Confidence(1.0, "clipped")  # above every scale
        if x > 10.0:
            return Confidence(x / 100.0, "ok")  # only percent fits
        return ambiguous("undeclared_scale")
    top = SCALES[scale]
    return Confidence(x / top, "ok") if x <= top else Confidence(1.0, "clipped")


def from_json_number(value: object, scale: str | None) -> Confidence:
    """A tool-call argument that is a JSON number: an int as a bare integer, a float as a decimal."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return malformed("not_a_number")
    if isinstance(value, int):  # compared, never converted: float(10**400) would raise
        if value < 0:
            return Confidence(0.0, "clipped")
        if value > 100:
            return Confidence(1.0, "clipped")
        return on_scale(float(value), False, scale)
    if math.isnan(value):
        return malformed("not_a_number")
    if value < 0:
        return Confidence(0.0, "clipped")
    return on_scale(value, True, scale)


# ---------------------------------------------------------------- the VALUE grammar

_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"), "-")
_APPROX_SIGNS = dict.fromkeys(map(ord, "\u2248\u223c\u2243\u2245"), "~")
_PERCENT_SIGNS = {0x066A: "%"}  # the Arabic percent sign (NFKC keeps it)

_NUM = r"(?P<{g}>[-+]?(?:[0-9]+(?:[.,][0-9]+)?|\.[0-9]+)(?:e[-+]?[0-9]+)?)(?:\s?(?P<{g}pct>%|percent\b|pct\b))?"
_PRE_CHARS = " \t\r\n\"'`*_(["  # quotes and markdown before a number
_APPROX = re.compile(
    r"(?:~|about|around|approximately|approx\.?|roughly|circa|ca\.|nearly|almost|close to|maybe|perhaps)(?![a-z])\s*"
)
_BOUND = re.compile(r"(?:>=?|=>|<=?|at least|at most|more than|less than|over|under|above|below)(?![a-z])\s*")
_BETWEEN = re.compile(r"between\s+" + _NUM.format(g="a") + r"\s+and\s+" + _NUM.format(g="b"))
# A fraction `8/10`, `8 out of 10`, `9 of 10`, `1 in 3`, `4 (out of 5)`; a range `80-90%`, `0.7 to 0.8`.
_EXPR = re.compile(
    _NUM.format(g="a")
    + r"(?:(?P<op>\s*(?:/|out of|of|in)\s*|\s*\(\s*(?:out of|/)\s*|\s*(?:-|to)\s*)"
    + _NUM.format(g="b")
    + r"(?P<close>\s*\))?)?"
)
_ODDS = re.compile(r"\s*:\s*[0-9]")  # `3:1` after a number: odds, not a probability
_REVISED = re.compile(r"\s*(?:-+>|=>|\u2192)")  # `0.9 -> 0.7`: which one is meant is not written
_END = re.compile(r"$|[\s.,;:!?)\]}*_\"'`|]")
_IN_BRACKETS = re.compile(r"\s*(?:[(\[]\s*|[-:,=]\s+|\s)")


def normalise(raw: str) -> str:
    """NFKC, every Unicode decimal digit as ASCII, dashes as `-`, approximately-signs as `~`, lower case."""
    s = unicodedata.normalize("NFKC", raw).translate(_DASHES).translate(_APPROX_SIGNS).translate(_PERCENT_SIGNS)
    if not s.isascii():  # digits of any script; format characters (zero-width space, RTL marks) dropped
        s = "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in s if unicodedata.category(c) != "Cf")
    return s.lower()


class _Number:
    """One number as written: its value, and how it was written (which decides its scale)."""

    def __init__(self, text: str, percent: bool):
        self.text = text
        self.percent = percent
        self.comma = "," in text
        digits = text.replace(",", ".")
        self.value = float(digits)  # the grammar admits only what float() reads
        self.point = "." in digits or "e" in digits
        self.negative = text.startswith("-")

    def comma_ambiguous(self) -> bool:
        # `0,85` and `85,5` are decimal commas; `1,000` could be a thousands separator.
        if not self.comma:
            return False
        whole, frac = self.text.lstrip("+-").split(",", 1)
        return whole.strip("0") != "" and len(frac.split("e")[0]) == 3

    def read(self, scale: str | None) -> Confidence:
        if len(self.text) > MAX_NUMBER_CHARS:
            return malformed("too_long")
        if self.comma_ambiguous():
            return ambiguous("comma")
        if self.percent:
            return _clip(self.value / 100.0)
        if self.negative or math.isinf(self.value):
            return _clip(self.value)
        return on_scale(self.value, self.point, scale)


def _number(m: re.Match[str], g: str) -> _Number:
    return _Number(m.group(g), m.group(g + "pct") is not None)


def _fraction(a: _Number, b: _Number) -> Confidence:
    for n in (a, b):
        if len(n.text) > MAX_NUMBER_CHARS:
            return malformed("too_long")
        if n.comma_ambiguous():
            return ambiguous("comma")
    if a.percent or b.percent or a.negative or b.negative:
        return malformed("not_a_number")
    if b.value == 0.0:
        return malformed("zero_denominator")
    if math.isinf(a.value) or math.isinf(b.value):
        return malformed("too_long")
    return _clip(a.value / b.value)


def _range(a: _Number, b: _Number, scale: str | None) -> Confidence:
    if a.percent != b.percent:  # `80-90%`: the sign written once covers both ends
        a.percent = b.percent = True
    lo, hi = a.read(scale), b.read(scale)
    for end in (lo, hi):
        if end.status == "clipped":
            return malformed("range_outside")  # `95-105%`: no midpoint of a range that leaves [0, 1]
        if end.status != "ok":
            return end
    assert lo.value is not None and hi.value is not None
    if lo.value > hi.value:
        return malformed("range_order")
    if hi.value - lo.value > WIDEST_RANGE + 1e-12:
        return ambiguous("wide_range")
    return Confidence((lo.value + hi.value) / 2.0, "ok")


def _expression(s: str, pos: int, scale: str | None) -> tuple[Confidence, int] | None:
    """The number, fraction or range at `pos` and where it ends; None if there is none."""
    m = _BETWEEN.match(s, pos)
    if m is not None:
        return _range(_number(m, "a"), _number(m, "b"), scale), m.end()
    m = _EXPR.match(s, pos)
    if m is None:
        return None
    a = _number(m, "a")
    op = m.group("op")
    a_end = m.end("apct") if m.group("apct") is not None else m.end("a")
    if op is None or ("(" in op and m.group("close") is None):
        return a.read(scale), a_end  # `4 (out of` with no closing bracket: the number alone
    b = _number(m, "b")
    end = m.end() if "(" in op else (m.end("bpct") if m.group("bpct") is not None else m.end("b"))
    if "-" in op or "to" in op:
        return _range(a, b, scale), end
    if op.strip() in ("of", "in") and (a.point or b.point or a.percent or b.percent):
        return a.read(scale), a_end  # `0.9 in 2 sources`: only whole numbers make `1 in 3`
    if a.text == b.text == "50" and "/" in op:
        return ambiguous("odds"), end  # `50/50`: even odds (0.5), not 50 over 50
    return _fraction(a, b), end


def _level(s: str, pos: int, levels: Mapping[str, float]) -> tuple[str, int] | None:
    for word in sorted(set(DEFAULT_LEVELS) | set(levels), key=len, reverse=True):
        if s.startswith(word, pos) and not s[pos + len(word) : pos + len(word) + 1].isalpha():
            return word, pos + len(word)
    return None


def read_value(raw: str, scale: str | None, levels: Mapping[str, float]) -> Confidence:
    """One VALUE as written after a statement (see the module docstring)."""
    if len(raw) > MAX_VALUE_CHARS:
        return malformed("too_long")
    s = normalise(raw)
    pos = len(s) - len(s.lstrip(_PRE_CHARS))
    bound = _BOUND.match(s, pos)
    if bound is not None and bound.end() > pos:
        after = _APPROX.match(s, bound.end())  # `at least about 80%`
        start = after.end() if after is not None else bound.end()
        return ambiguous("bound") if _expression(s, start, scale) is not None else malformed("not_a_number")
    approx = _APPROX.match(s, pos)
    if approx is not None:
        pos = approx.end()
    found = _expression(s, pos, scale)
    if found is None:
        word = _level(s, pos, levels)
        if word is None:
            return malformed("not_a_number")
        # `High (0.85)`, `high - 85%`: the number written with the level is the reading.
        after = _IN_BRACKETS.match(s, word[1])
        if after is not None:
            inner = _APPROX.match(s, after.end())
            found = _expression(s, inner.end() if inner else after.end(), scale)
        if found is None:
            return Confidence(levels[word[0]], "ok") if word[0] in levels else ambiguous("qualitative")
    reading, end = found
    if _ODDS.match(s, end):
        return ambiguous("odds")
    if _REVISED.match(s, end):
        return ambiguous("revised")
    if not _END.match(s, end):
        return malformed("not_a_number")  # `0.8abc`, `8/10ths`
    return reading
