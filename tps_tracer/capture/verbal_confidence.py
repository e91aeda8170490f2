"""Verbal confidence: the probability of success a model states at a step. One written grammar
(docs/capture.md, "Verbal confidence: what is read"): the last statement in the text wins, its VALUE
is read from the original text on a declared scale, never a guessed one, in time linear in the text."""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tps_tracer.errors import InputError
from tps_tracer.validity import probability


def folded(text: str) -> bytes:
    """ASCII-folded lower case, one byte per character (non-ASCII is `?`), so an offset in it is one in
    `text`: ~1 ms per MB in any script, where str.lower() can shift offsets and re.IGNORECASE is ~30x
    slower. It only locates statements; a VALUE is read from the original text (`normalise`)."""
    return text.encode("ascii", "replace").lower()


Status = Literal["ok", "clipped", "missing", "malformed", "ambiguous"]

# The scales a user may declare (verbal_scale=...), each with the number its top is written as.
SCALES: dict[str, float] = {"percent": 100.0, "0-1": 1.0, "1-10": 10.0, "1-5": 5.0}
# An explicit "no scale", overriding the extractor's for a run (after an invalid one in its metadata).
UNDECLARED = "undeclared"

MAX_NUMBER_CHARS = 64  # a longer number is malformed ("too_long"), as a 1 MB digit run
MAX_VALUE_CHARS = 256  # a longer VALUE (tag inner text) is not read at all ("too_long")
WIDEST_RANGE = 0.2  # a range `lo-hi` reads its midpoint when hi - lo <= this, else ambiguous

# Known by default, so that `Confidence: high` is a statement (refused unless the user maps levels).
DEFAULT_LEVELS: tuple[str, ...] = ("very high", "very low", "high", "medium", "moderate", "low")


@dataclass(frozen=True)
class Confidence:
    value: float | None
    status: Status
    reason: str = ""  # why a refusal (malformed / ambiguous) or a missing value


MISSING = Confidence(None, "missing")
malformed = functools.partial(Confidence, None, "malformed")
ambiguous = functools.partial(Confidence, None, "ambiguous")


def check_scale(scale: str | None) -> str | None:
    if scale is None or scale == UNDECLARED or (isinstance(scale, str) and scale in SCALES):
        return scale
    raise InputError(f"verbal_scale must be one of {sorted(SCALES)} or None, got {scale!r}")


def check_levels(levels: Mapping[str, float] | None) -> dict[str, float]:
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
    """A plain number `x` >= 0 (no %, no fraction), `point`: written with a point or exponent. A point
    and at most 1, or 0, is a probability on every scale; else x / the declared scale's top, and
    undeclared only when a single scale fits (10 < x <= 100: percent)."""
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


# ---------------------------------------------------------------- reading a VALUE

# Dashes as `-`, approximately-signs as `~`, the Arabic percent sign (NFKC keeps it) as `%`.
_SIGNS = {
    **dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"), "-"),
    **dict.fromkeys(map(ord, "\u2248\u223c\u2243\u2245"), "~"),
    0x066A: "%",
}

_NUM = r"(?P<{g}>[-+]?(?:[0-9]+(?:[.,][0-9]+)?|\.[0-9]+)(?:e[-+]?[0-9]+)?)(?:\s?(?P<{g}pct>%|percent\b|pct\b))?"
_PRE_CHARS = " \t\r\n\"'`*_(["  # quotes and markdown before a number
# Words before a number (`about 0.8`, `at least 80%`), shared by the VALUE reader and the statement forms.
_APPROX_WORDS = r"(?:about|around|approximately|approx\.?|roughly|circa|nearly|almost|maybe|perhaps)"
_BOUND_WORDS = r"(?:at least|at most|more than|less than|over|under|above|below)"
_APPROX = re.compile(r"(?:~|ca\.|close to|" + _APPROX_WORDS + r")(?![a-z])\s*")
_BOUND = re.compile(r"(?:>=?|=>|<=?|" + _BOUND_WORDS + r")(?![a-z])\s*")
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
    """NFKC, every Unicode decimal digit as ASCII (`0.٨` is 0.8), dashes as `-`, `≈` as `~`, lower case."""
    s = unicodedata.normalize("NFKC", raw).translate(_SIGNS)
    if not s.isascii():  # digits of any script; format characters (zero-width space, RTL marks) dropped
        s = "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in s if unicodedata.category(c) != "Cf")
    return s.lower()


class _Number:
    """Group `g` of a match, a number, and how it was written (which decides its scale)."""

    def __init__(self, m: re.Match[str], g: str):
        self.text = text = m.group(g)
        self.percent = m.group(g + "pct") is not None
        digits = text.replace(",", ".")
        self.value = float(digits)  # the grammar admits only what float() reads
        self.point = "." in digits or "e" in digits
        self.negative = text.startswith("-")

    def refused(self) -> Confidence | None:
        """Too long, or `1,000` (a thousands separator?); `0,85` and `85,5` are decimal commas."""
        if len(self.text) > MAX_NUMBER_CHARS:
            return malformed("too_long")
        whole, _, frac = self.text.lstrip("+-").partition(",")
        if "," in self.text and whole.strip("0") != "" and len(frac.split("e")[0]) == 3:
            return ambiguous("comma")
        return None

    def read(self, scale: str | None) -> Confidence:
        refused = self.refused()
        if refused is not None:
            return refused
        if self.percent:
            return _clip(self.value / 100.0)
        if self.negative or math.isinf(self.value):
            return _clip(self.value)
        return on_scale(self.value, self.point, scale)


def _fraction(a: _Number, b: _Number) -> Confidence:
    refused = a.refused() or b.refused()
    if refused is not None:
        return refused
    if a.percent or b.percent or a.negative or b.negative:
        return malformed("not_a_number")
    if b.value == 0.0:
        return malformed("zero_denominator")
    if math.isinf(a.value) or math.isinf(b.value):
        return malformed("too_long")
    return _clip(a.value / b.value)


def _range(a: _Number, b: _Number, scale: str | None) -> Confidence:
    a.percent = b.percent = a.percent or b.percent  # `80-90%`: the sign written once covers both ends
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
        return _range(_Number(m, "a"), _Number(m, "b"), scale), m.end()
    m = _EXPR.match(s, pos)
    if m is None:
        return None
    a = _Number(m, "a")
    op = m.group("op")
    a_end = m.end("apct") if m.group("apct") is not None else m.end("a")
    if op is None or ("(" in op and m.group("close") is None):
        return a.read(scale), a_end  # `4 (out of` with no closing bracket: the number alone
    b = _Number(m, "b")
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
    """One VALUE: the expression at its start, which must end at a boundary (`0.8abc` is malformed)."""

    if len(raw) > MAX_VALUE_CHARS:
        return malformed("too_long")
    s = normalise(raw)
    pos = len(s) - len(s.lstrip(_PRE_CHARS))
    bound = _BOUND.match(s, pos)
    if bound is not None:
        after = _APPROX.match(s, bound.end())  # `at least about 80%`
        start = after.end() if after is not None else bound.end()
        return ambiguous("bound") if _expression(s, start, scale) is not None else malformed("not_a_number")
    approx = _APPROX.match(s, pos)
    pos = approx.end() if approx else pos
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


# ---------------------------------------------------------------- finding the statement

WINDOW = 128  # characters of VALUE read after a label or key (the expression at its start is read)

# The keyword, not glued to a word (`overconfidence`, `self-confidence`); the lookbehinds include it so
# the engine meets the literal first.
_KW = r"confidence(?<![a-z0-9]confidence)(?<![a-z0-9][-_]confidence)"
# An optional group is `(?:X|)`, not `(?:X)?`: the same tries, as a branch the engine runs faster.
_SUFFIX = r"(?:[ \t_-]{1,3}(?:level|score|value|estimate|rating)|)"
_SEP = r"(?:\*\*?|__?|)"  # optional markdown emphasis around the label or its colon
# A scale written in the label, `Confidence (1-10): 8`, `(out of 5)`, `(%)` (`?`: an en dash, folded).
_ANNOTATION = (
    r"(?:[ \t]{0,3}[(\[][ \t]{0,2}(?:[01][ \t]{0,2}(?:-|to|\?)[ \t]{0,2}(?:100|10|5|1)|%|percent"
    r"|(?:out of|/)[ \t]{0,2}(?:100|10|5))[ \t]{0,2}[)\]]|)"
)
_READ_ANNOTATION = re.compile(
    r"[(\[]\s*(?:[01]\s*(?:-|to)\s*(?P<top>100|10|5|1)|(?P<pct>%|percent)|(?:out of|/)\s*(?P<of>100|10|5))\s*[)\]]"
)
_TOP_SCALES = {"100": "percent", "10": "1-10", "5": "1-5", "1": "0-1"}
# Where a number can start (`?`: any non-ASCII character, folded, such as a full-width digit or `≈`),
# one flat branch whose alternatives the engine rules out by their first character.
_DIGIT_START = r"(?:[0-9?]|[-+.][0-9])"
_NUMBER_WORDS = (*_APPROX_WORDS[3:-1].split("|"), *_BOUND_WORDS[3:-1].split("|"), "between")
_NUMBER_START = (
    r"(?:[\"'`*_(\[?~>]{0,4}[ \t]{0,2}(?:[0-9?]|[-+.][0-9]|"
    + "|".join(w + r"[ \t]{1,3}" + _DIGIT_START for w in _NUMBER_WORDS)
    + "))"
)
_WINDOW = r"(?=([^\n<]{0," + str(WINDOW) + r"}))"  # a lookahead: the next statement stays findable
_NEGATIONS = ("not", "than", "least", "most", "over", "under", "above", "below")

# The label without `:` (`Confidence 70%`, `Confidence — 0.7`); a hyphen separates only before
# whitespace (`Confidence -0.2` is -0.2); `?` (non-ASCII) other than a dash or space starts VALUE.
_GAP = r"(?:[ \t]{1,8}|[ \t]{0,8}(?:-{1,2}[ \t]|\?)[ \t]{0,8})"
# A VALUE unambiguous by its own form: a percent, a fraction, a decimal in [0, 1], never a bare
# integer (`Confidence 8`, `confidence 2 tools` stay prose).
_DIGITS = r"[0-9]{1,8}(?:[.,][0-9]{1,8}|)"
_PERCENT_TAIL = r"(?:[ \t]{0,2}(?:-|to)[ \t]{0,2}" + _DIGITS + r"|)[ \t]?(?:%|percent(?![a-z]))"  # after the number
_FRACTION_TAIL = r"[ \t]{0,2}(?:/|out of)[ \t]{0,2}[0-9]"
# A decimal in [0, 1], else an integer part then its tail, which a bare integer then a word fails at once.
_TAILS = (
    r"\.[0-9]{1,8}(?:" + _PERCENT_TAIL + "|" + _FRACTION_TAIL + ")",
    ",[0-9]{1,8}" + _PERCENT_TAIL,
    _PERCENT_TAIL,
    _FRACTION_TAIL,
)
_PLAIN_VALUE = (
    r"(?=[*_`(~<>+0-9.,-])"  # a cheap first check: most text after a label is a word
    r"(?=[*_`(]{0,3}(?:[~<>]=?[ \t]{0,2}|)[-+]?(?:0?[.,][0-9]|1\.0|[0-9]{1,8}"
    r"(?=[.,]?[0-9]{0,8}[ \t]{0,2}[-t%p/o])"  # what every tail starts with
    "(?:" + "|".join(_TAILS) + ")))"
)
# The label alone on its line (only markdown around it), VALUE on the next non-empty line. Line start:
# for each length k of the markup run before the keyword, only a line end before it (fixed-width
# lookbehinds, so prose is rejected at its run's length, `my confidence` at 1).
_MARKUP = r"[#*_ \t>+-]"
_LINE_START = "".join(f"(?<![^\\n#*_ \\t>+-]{_MARKUP}{{{k}}}confidence)" for k in range(9))
_LINE_START += f"(?<!{_MARKUP}{{9}}confidence)"
_LINE_END = r"[ \t]{0,8}\r?\n"
_BLANK_LINES = r"(?:[ \t]{0,8}\r?\n){0,8}[ \t]{0,8}(?![ \t\r\n])"
_BULLET = r"(?:[-*+][ \t]{1,3}|)(?![ \t])"
_NEXT_LINE = _BLANK_LINES + _BULLET
_PROSE_TAIL = r"[ \t]{1,2}(?:sure|confident|certain)(?![a-z])"


_IS_WORDS = ("is", "was", "of", "at")
_IS_TAIL = r"[ \t]{1,3}(?![ \t])(?=" + _NUMBER_START + ")"  # after `is` / `was` / `of` / `at`


def _label_value(levels: Sequence[str]) -> str:
    """After a label's `:`, `=` or `|`: emphasis, whitespace, then a lookahead for the start of a VALUE."""
    words = "|".join(re.escape(w) for w in sorted(set(levels), key=len, reverse=True))
    value_start = r"(?=" + _NUMBER_START + r"|[\"'`*_(\[]{0,4}(?:" + words + r")(?![a-z]))"
    # `(?!\s)` after a whitespace run: backing off into it would only retry the same VALUE.
    return _SEP + r"\s{0,16}(?!\s)" + value_start


# What follows the keyword in the tag and key forms (after `<` / a quote before it).
_TAG = r"[ \t]{0,8}>([^<]*)</confidence[ \t]{0,8}>"
_KEY = (
    r"(?:[_ -]?(?:score|level|value)|)[\"'][ \t]{0,8}:\s{0,64}"
    r"(?=(\"[^\"\n]{0,126}\"|'[^'\n]{0,126}'|[^\s,;<}\]]{0,65}))"
)


# `I'm 90% sure`: a whole percent before `sure` / `confident` / `certain`, not negated or bounded.
_PROSE_PERCENT = (
    r"([0-9](?<![0-9.,/-][0-9])" + "".join(rf"(?<!{w} [0-9])" for w in _NEGATIONS) + r"[0-9]{0,2}[ \t]?%)" + _PROSE_TAIL
)
# The statement forms (lower case, one group each: the raw VALUE), run one by one when given as
# `patterns`: tag, key, label, spaced label (without `:`, only a VALUE unambiguous by its form, so
# `Confidence 8` stays prose), `is`/`of`, own line, prose percent.
DEFAULT_PATTERNS: tuple[str, ...] = (
    "confidence(?<=<confidence)" + _TAG,
    "confidence(?<=[\"']confidence)" + _KEY,
    _KW + _SUFFIX + _ANNOTATION + _SEP + r"[ \t]{0,8}[:=|]" + _label_value(DEFAULT_LEVELS) + _WINDOW,
    _KW + _SUFFIX + _ANNOTATION + _SEP + _GAP + _PLAIN_VALUE + _WINDOW,
    _KW + _SUFFIX + r"[ \t]{1,3}(?:" + "|".join(_IS_WORDS) + ")" + _IS_TAIL + _WINDOW,
    _KW + _LINE_START + _SUFFIX + _ANNOTATION + _SEP + _LINE_END + _NEXT_LINE + _PLAIN_VALUE + _WINDOW,
    _PROSE_PERCENT,
)


def _percent_behind(width: int, space: str) -> str:
    """At a `%`: a whole number of `width` digits (then `space`) before it, alone and not negated."""
    num = "[0-9]" * width + space + "%"
    return "(?:(?<=" + num + ")(?<![0-9.,/-]" + num + ")" + "".join(f"(?<!{w} {num})" for w in _NEGATIONS) + ")"


# The prose form for the one-pass search: anchored on its `%` (a literal the engine skips to), the
# words after it first, the number by lookbehinds (tests/test_capture_fuzz.py: reads as the pattern).
_PERCENT_FAST = re.compile(
    (
        "(?s:.*)%(?="
        + _PROSE_TAIL
        + ")(?:"
        + "|".join(_percent_behind(w, sp) for w in (1, 2, 3) for sp in ("", "[ \t]"))
        + ")"
    ).encode("ascii")
)
_PERCENT_NUMBER = re.compile(rb"[0-9]{1,3}[ \t]?$")


def _atomic(name: str, body: str) -> str:
    """`body` matched once, never backed into (no `(?>...)` in 3.10): the lookahead is atomic."""
    return f"(?=(?P<{name}>{body}))(?P={name})"


_OWN_LINE_REACH = 42  # keyword to line end of a lone label: suffix 11, scale 20, emphasis 2, spaces 8, `\r`


@functools.lru_cache(maxsize=32)
def _keyword_regex(levels: tuple[str, ...]) -> re.Pattern[bytes]:
    """The last keyword statement of any of DEFAULT_PATTERNS' forms, `(?s:.*)` backtracking to the keyword.
    A keyword starting no statement costs few engine steps: the label is matched once (atomic), the forms
    are ruled out by their first character, the own-line form runs only near a line end."""
    # One lookbehind for both: `<` or a quote before the keyword (group `lt`: which).
    tag_or_key = r"(?<=(?:(?P<lt><)|[\"'])confidence)(?(lt)" + _TAG + "|" + _KEY + ")"
    value = r"([^\n<]{0," + str(WINDOW) + "})"
    plain = _PLAIN_VALUE + value
    after = [
        "[:=|]" + _label_value(levels) + value,
        r"(?<=[ \t])" + plain,
        r"--?[ \t][ \t]{0,8}" + plain,
        r"\?[ \t]{0,8}" + plain,
    ]
    for w in _IS_WORDS:
        behind = "|".join(f"(?<=[a-z][ \\t]{{{n}}}{w})" for n in (1, 2, 3))
        after.append(w + "(?=" + behind + ")" + _IS_TAIL + value)
    label = _SUFFIX + _ANNOTATION + _SEP + r"[ \t]{0,8}"
    # 88: eight blank lines of eight spaces and `\r\n`, then eight spaces.
    next_line = "(?=" + _BLANK_LINES + ")" + _atomic("blank", r"[ \t\r\n]{0,88}") + _BULLET
    alone = (
        f"(?![^\\n]{{{_OWN_LINE_REACH + 1}}})" + _LINE_START + _atomic("alone", label) + r"\r?\n" + next_line + plain
    )
    head = _KW[len("confidence") :] + r"(?=[ \t\r\n_*:=|(\[?-])"  # what can follow a label's keyword
    forms = "(?:" + _atomic("label", label) + "(?:" + "|".join(after) + ")|" + alone + ")"
    source = "(?s:.*)confidence(?:" + tag_or_key + "|" + head + forms + ")"
    return re.compile(source.encode("ascii"))


_SPACED_LABEL = re.compile((_KW + _SUFFIX + _ANNOTATION + _SEP + _GAP).encode("ascii"))


def _separator_kept(label: str) -> str:
    """The non-ASCII character a spaced label ends with when it is no dash or space: the start of VALUE
    (`Confidence ≈ 0.7` is 0.7, `Confidence → 70%` malformed, never read as if it were not there)."""
    end = len(label.rstrip(" \t"))
    # 96: longer than any spaced label (a prose percent's "label" runs from an earlier keyword).
    if end == 0 or (label[end - 1].isascii() and label[end - 1] != "?") or len(label) > 96:
        return ""
    if _SPACED_LABEL.fullmatch(folded(label)) is None or normalise(label[end - 1]).strip() in ("", "-"):
        return ""
    return label[end - 1 :]


def _normal_key(key: str) -> str:
    return re.sub(r"[\s_-]", "", key.lower())


@dataclass
class VerbalConfidenceExtractor:
    """verbal_scale: the scale of bare numbers ("percent", "0-1", "1-10", "1-5"; None: only numbers
    that fit one scale); levels: qualitative levels as numbers ({"high": 0.9}; else refused)."""

    patterns: Sequence[str] | None = None
    argument_keys: Sequence[str] = ("confidence", "confidence_score", "confidence_level", "confidence_value")
    verbal_scale: str | None = None
    levels: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        check_scale(self.verbal_scale)
        self._levels = check_levels(self.levels)
        self._keys = {_normal_key(k) for k in self.argument_keys}
        # The default grammar takes the one-pass path; given patterns (even the default ones) run one by one.
        self._fast = _keyword_regex(DEFAULT_LEVELS + tuple(self._levels)) if self.patterns is None else None
        self._compiled = [re.compile(p, re.IGNORECASE | re.DOTALL) for p in self.patterns or ()]

    def _scale(self, scale: str | None) -> str | None:
        return self.verbal_scale if scale is None else check_scale(scale)

    def from_number(self, value: Any, verbal_scale: str | None = None) -> Confidence:
        """A JSON number (tool-call argument): an int as a bare integer, a float as a decimal."""
        scale = self._scale(verbal_scale)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN
            return malformed("not_a_number")
        if value < 0:
            return Confidence(0.0, "clipped")
        if isinstance(value, int) and value > 100:  # compared, never converted: float(10**400) would raise
            return Confidence(1.0, "clipped")
        return on_scale(float(value), isinstance(value, float), scale)

    # ---------------------------------------------------------------- text

    def _last_statement(self, text: str) -> tuple[str, str] | None:
        """(raw VALUE, the text from the keyword to VALUE) of the statement that starts last."""
        if self._fast is None:  # given patterns: the first of the matches that start last
            best = max((m for p in self._compiled for m in p.finditer(text)), key=re.Match.start, default=None)
            if best is None:
                return None
            raw = best.group(1) if best.re.groups else best.group(0)
            # A group that did not take part: malformed.
            raw = "" if raw is None else _separator_kept(best.group(0)) + raw
            return raw, best.group(0)
        buf = folded(text)
        keyword = self._fast.match(buf)
        start = -1
        prose = False  # whether a prose percent is the last statement
        if keyword is not None:
            s, e = keyword.span(keyword.lastindex or 0)  # VALUE: the group that closes last
            start = buf.rfind(b"confidence", 0, s)  # nothing between the keyword and VALUE spells it
        # A prose percent counts only after the keyword statement: search from there (its
        # lookbehinds still see the text before), and not at all without a `%` (memchr).
        percent = _PERCENT_FAST.match(buf, start + 1) if buf.find(b"%", start + 1) != -1 else None
        if percent is not None:
            at = percent.end() - 1  # the match ends right after its `%`
            number = _PERCENT_NUMBER.search(buf, max(0, at - 4), at)
            assert number is not None  # the lookbehinds checked it
            if number.start() > start:
                s, e, prose = number.start(), at + 1, True
        if keyword is None and percent is None:
            return None
        label = text[start:s] if start >= 0 else ""  # same offsets as buf
        # A spaced label's non-separator character starts its VALUE (never a prose percent's).
        return ("" if prose else _separator_kept(label)) + text[s:e], label

    def from_text(self, text: str | None, verbal_scale: str | None = None) -> Confidence:
        """The last statement of the text (any form), read with the grammar; missing if none."""
        found = self._last_statement(text) if text and isinstance(text, str) else None
        if found is None:
            return MISSING
        raw, label = found
        written = _READ_ANNOTATION.search(normalise(label)) if "(" in label or "[" in label else None
        if written is not None:  # the statement's own scale wins over any declared one
            verbal_scale = "percent" if written["pct"] else _TOP_SCALES[written["top"] or written["of"]]
        return read_value(raw, self._scale(verbal_scale), self._levels)

    # ---------------------------------------------------------------- tool calls

    def _from_one_call(self, arguments: Any, scale: str | None) -> Confidence:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                return self.from_text(arguments, scale)  # not JSON: maybe still a "confidence: 0.8" string
        if not isinstance(arguments, Mapping):
            return MISSING
        readings = [
            read_value(v, self._scale(scale), self._levels) if isinstance(v, str) else self.from_number(v, scale)
            for k, v in arguments.items()
            if isinstance(k, str) and _normal_key(k) in self._keys
        ]
        if not readings:
            return MISSING
        if any(r != readings[0] for r in readings[1:]):
            return ambiguous("conflicting_keys")  # `confidence` and `confidence_score` that disagree
        return readings[0]

    def from_arguments(self, arguments: Any, verbal_scale: str | None = None) -> Confidence:
        """A confidence passed as a tool-call argument: one call's arguments (a mapping or its
        JSON string), or a sequence of them, one per parallel call (the last that states one wins)."""
        calls = [arguments] if arguments is None or isinstance(arguments, (str, Mapping)) else arguments
        if isinstance(calls, Sequence) and not isinstance(calls, (bytes, bytearray)):
            for call in reversed(calls):
                found = self._from_one_call(call, verbal_scale)
                if found.status != "missing":
                    return found
        return MISSING

    def __call__(self, text: str | None) -> float | None:
        return self.from_text(text).value
