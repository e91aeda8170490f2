"""Verbal confidence: the probability of success the model states at a step.

The grammar (the README's "Verbal confidence" section says the same)
=====================================================================

Statements. Matching is case-insensitive; `confidence` is the keyword of all three forms.

- tag:   `<confidence>VALUE</confidence>` (the paper's format). The inner text runs to the
  next `<`; an unclosed tag (truncated output) is not a statement.
- key:   `"confidence": VALUE` or `'confidence': VALUE` (JSON / a Python dict in the text).
  VALUE ends at whitespace or one of `, ; < } ]`.
- label: `confidence`, optionally `confidence level` / `confidence score` (separated by a
  space, `_` or `-`), optionally in markdown emphasis (`**`, `*`, `__`, `_`) before or
  after the colon, then `:` or `=`, then VALUE: `Confidence: 85%`, `My confidence = 0.9.`,
  `**Confidence:** 0.7`, `*Confidence*: 70%`, `__Confidence__: 0.7`, `confidence_score=0.4`.
  The keyword must not follow a letter or digit (`overconfidence: 3` is not a statement).
  VALUE ends at whitespace or one of `, ; <` (a decimal comma, `0,8`, stays in VALUE and
  makes it malformed rather than reading 0).

Whitespace between the colon and VALUE: at most 16 characters for a label, 64 for a key
(more, and VALUE is empty: malformed). Anything else (`I am 80% confident`, `confidence is
high`) is not a statement.

The last statement wins: of all statements in the text, in any form, the one whose keyword
comes last is the step's confidence, even if it is malformed (then the step has None):
`<confidence>0.6</confidence> ... Confidence: 80%` is 0.8. No statement: None ("missing").

VALUE. Surrounding whitespace, quotes, backticks and markdown `*` / `_` are removed, and
trailing sentence punctuation (`. ! ? )`); what remains must be a number written with ASCII
digits, `[+-]digits[.digits][e[+-]digits]`, optionally followed by `%` (one space allowed
before it). A VALUE longer than 64 characters, or anything else, is malformed (None).

| written                                   | read as                                  | status    |
|-------------------------------------------|------------------------------------------|-----------|
| `0`, `0.85`, `.85`, `1`, `1.0`, `8.5e-1`   | the number                               | ok        |
| `85%`, `85.5 %`, `100%`                    | number / 100                             | ok        |
| `150%`, `-5%`                              | number / 100, clipped to [0, 1]          | clipped   |
| `85`, `100`: digits only, no sign, 1 < x <= 100 | x / 100 (percent; `percent_without_sign=False`: clipped to 1) | ok |
| `1.2`, `1.5`, `85.0`, `1.3e0`, `+85`: not digits only, above 1 | not rescaled: clipped to 1.0 | clipped |
| `150`, `101`: digits only, above 100       | clipped to 1.0                           | clipped   |
| `-0.2`, `-3`                               | clipped to 0.0                           | clipped   |
| `1e999`, `-1e999` (overflow)               | clipped to 1.0 / 0.0                     | clipped   |
| `high`, ``, `nan`, `0,8`, `8/10`, `８５`, 65+ characters | None                       | malformed |
| no statement                              | None                                     | missing   |

Tool calls. `from_arguments` reads the `confidence` argument (`argument_keys`) of one
call's arguments (a mapping, or its JSON string; a string that is not JSON is read as
text), or of a sequence of calls (parallel tool calls): the last call that states one
wins, as in text. A JSON number follows the same table (an int 85 is percent, a float 85.0
is clipped); a bool, a NaN or a non-scalar is malformed. `SignalExtractor` reads the
arguments only when the text has no statement: the text has priority.

Time. The default grammar runs in time linear in the text, with a bounded amount of work
per position. It is matched case-insensitively on an ASCII-folded copy of the text
(`text_folding.folded`, ~1 ms per MB). Every quantifier that could meet another one is
bounded (`{0,64}`) or over a class disjoint from its neighbours, and one regular
expression, `(?s:.*)(?:statement)`, finds the LAST statement by backtracking from the end,
so the search stops at the first statement from the end and never collects all of them.
The tag's inner text is the one unbounded part; it stops at the next `<`, so no two
attempts scan the same characters. The whole text is read (no truncation): 1 MB of
adversarial text takes at most ~20 ms (tests/benchmarks/bench_extraction.py).
Custom `patterns` are the user's: they run with `finditer` (re.IGNORECASE | re.DOTALL) on
the text as given, and the match that starts last wins.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tps_tracer.capture.confidence_value import (
    DEFAULT_LEVELS,
    MISSING,
    SCALES,
    UNDECLARED,
    Confidence,
    Status,
    ambiguous,
    check_levels,
    check_scale,
    from_json_number,
    read_value,
)
from tps_tracer.capture.text_folding import folded

__all__ = [
    "DEFAULT_PATTERNS",
    "SCALES",
    "UNDECLARED",
    "Confidence",
    "Status",
    "VerbalConfidenceExtractor",
    "statement_patterns",
]

WINDOW = 128  # characters of VALUE read after a label or key (the expression at its start is read)

# The keyword, not glued to a word before it: `overconfidence`, `self-confidence`,
# `low_confidence` are not statements (the lookbehinds include the keyword so the engine
# meets the literal first).
_KW = r"confidence(?<![a-z0-9]confidence)(?<![a-z0-9][-_]confidence)"
_SUFFIX = r"(?:[ \t_-]{1,3}(?:level|score|value|estimate|rating))?"
_SEP = r"(?:\*\*?|__?)?"  # optional markdown emphasis around the label or its colon
_APPROX_WORDS = r"(?:about|around|approximately|approx\.?|roughly|circa|nearly|almost|maybe|perhaps)"
_BOUND_WORDS = r"(?:at least|at most|more than|less than|over|under|above|below)"
# Where a number can start. `?` is any non-ASCII character on the folded text (a full-width
# or Arabic-Indic digit, `≈`, a no-break space): the VALUE is read from the original text.
_NUMBER_START = (
    r"(?:[\"'`*_(\[?~>]{0,4}[ \t]{0,2}(?:(?:"
    + _APPROX_WORDS
    + "|"
    + _BOUND_WORDS
    + r"|between)[ \t]{1,3})?(?:[0-9?]|[-+.][0-9]))"
)
_WINDOW = r"(?=([^\n<]{0," + str(WINDOW) + r"}))"  # a lookahead: the next statement stays findable
_NEGATIONS = ("not", "than", "least", "most", "over", "under", "above", "below")
_PROSE_TAIL = r"[ \t]{1,2}(?:sure|confident|certain)(?![a-z])"


def _forms(levels: Sequence[str]) -> tuple[str, str, str, str]:
    """What follows the keyword in each keyword form: tag, key, label (`:`), and `is`/`of`."""
    words = "|".join(re.escape(w) for w in sorted(set(levels), key=len, reverse=True))
    value_start = r"(?=" + _NUMBER_START + r"|[\"'`*_(\[]{0,4}(?:" + words + r")(?![a-z]))"
    tag = r"(?<=<confidence)[ \t]{0,8}>([^<]*)</confidence[ \t]{0,8}>"
    key = (
        r"(?<=[\"']confidence)(?:[_ -]?(?:score|level|value))?[\"'][ \t]{0,8}:\s{0,64}"
        r"(?=(\"[^\"\n]{0,126}\"|'[^'\n]{0,126}'|[^\s,;<}\]]{0,65}))"
    )
    label = _SEP + r"[ \t]{0,8}[:=|]" + _SEP + r"\s{0,16}" + value_start + _WINDOW
    prose_is = r"[ \t]{1,3}(?:is|was|of|at)[ \t]{1,3}(?=" + _NUMBER_START + ")" + _WINDOW
    return tag, key, label, prose_is


def statement_patterns(levels: Sequence[str] = DEFAULT_LEVELS) -> tuple[str, ...]:
    """The statement forms (lower case, one group each: the raw VALUE); `levels`: the qualitative words."""
    tag, key, label, prose_is = _forms(levels)
    # `I'm 90% sure`: a whole percent before `sure` / `confident` / `certain`, not negated or
    # bounded (`not 90% sure`, `less than 90% sure`, `at least 90% sure` are not statements).
    behind = r"(?<![0-9.,/-][0-9])" + "".join(rf"(?<!{w} [0-9])" for w in _NEGATIONS)
    prose_pct = r"([0-9]" + behind + r"[0-9]{0,2}[ \t]?%)" + _PROSE_TAIL
    return (
        "confidence" + tag,
        "confidence" + key,
        _KW + _SUFFIX + label,
        _KW + _SUFFIX + prose_is,
        prose_pct,
    )


DEFAULT_PATTERNS: tuple[str, ...] = statement_patterns()


def _percent_behind(width: int, space: str) -> str:
    """At a `%`: a whole number of `width` digits (then `space`) before it, alone and not negated."""
    num = "[0-9]" * width + space + "%"
    return "(?:(?<=" + num + ")(?<![0-9.,/-]" + num + ")" + "".join(f"(?<!{w} {num})" for w in _NEGATIONS) + ")"


# The prose form as the one-pass search runs it: anchored on its `%` (a literal, so the engine
# skips to the candidates), the number checked by fixed-width lookbehinds. Reads what
# DEFAULT_PATTERNS' prose form reads (tests/test_capture_fuzz.py checks both paths alike).
_PERCENT_FAST = re.compile(
    (
        "(?s:.*)%(?:" + "|".join(_percent_behind(w, sp) for w in (1, 2, 3) for sp in ("", "[ \t]")) + ")" + _PROSE_TAIL
    ).encode("ascii")
)
_PERCENT_NUMBER = re.compile(rb"[0-9]{1,3}[ \t]?$")


@functools.lru_cache(maxsize=32)
def _keyword_regex(levels: tuple[str, ...]) -> re.Pattern[bytes]:
    # The last keyword statement of any form: greedy `.*` backtracks from the end, so the first
    # match is the one whose keyword comes last; the keyword is a literal right after `.*`,
    # so the engine jumps between its candidates, and the label and `is` forms share their
    # keyword checks. The same forms as statement_patterns (groups in the same order).
    tag, key, label, prose_is = _forms(levels)
    words = _KW[len("confidence") :] + _SUFFIX
    source = "(?s:.*)confidence(?:" + tag + "|" + key + "|" + words + "(?:" + label + "|" + prose_is + "))"
    return re.compile(source.encode("ascii"))


def _normal_key(key: str) -> str:
    return re.sub(r"[\s_-]", "", key.lower())


@dataclass
class VerbalConfidenceExtractor:
    """Configurable parser of stated confidences (see the module docstring for the grammar).

    verbal_scale: the scale of bare numbers ("percent", "0-1", "1-10", "1-5"); None: only
      numbers that fit a single scale are read, the others are refused as ambiguous.
    levels: optional mapping of qualitative levels to numbers ({"high": 0.9, ...}); None:
      `Confidence: high` is refused (ambiguous / qualitative).
    """

    patterns: Sequence[str] | None = None
    argument_keys: Sequence[str] = ("confidence", "confidence_score", "confidence_level", "confidence_value")
    verbal_scale: str | None = None
    levels: Mapping[str, float] | None = None
    _levels: dict[str, float] = field(init=False, repr=False)
    _fast: re.Pattern[bytes] | None = field(init=False, repr=False)
    _compiled: list[re.Pattern[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_scale(self.verbal_scale)
        self._levels = check_levels(self.levels)
        levels = tuple(DEFAULT_LEVELS) + tuple(self._levels)
        self._keys = {_normal_key(k) for k in self.argument_keys}
        # The default grammar takes the one-pass path on the folded text; other patterns run
        # one by one as given (so does a list holding the default patterns, which the tests
        # use to check that both paths read alike).
        if self.patterns is None:
            self._fast, self._compiled = _keyword_regex(levels), []
        else:
            self._fast = None
            self._compiled = [re.compile(p, re.IGNORECASE | re.DOTALL) for p in self.patterns]

    # ---------------------------------------------------------------- values

    def _scale(self, scale: str | None) -> str | None:
        return self.verbal_scale if scale is None else check_scale(scale)

    def scale(self, raw: str, verbal_scale: str | None = None) -> Confidence:
        """One VALUE (the text of a statement) read with the grammar of the module docstring."""
        return read_value(raw, self._scale(verbal_scale), self._levels)

    def from_number(self, value: Any, verbal_scale: str | None = None) -> Confidence:
        """A JSON number (tool-call argument): an int as a bare integer, a float as a decimal."""
        return from_json_number(value, self._scale(verbal_scale))

    # ---------------------------------------------------------------- text

    def _last_statement_fast(self, text: str) -> str | None:
        assert self._fast is not None
        buf = folded(text)
        keyword = self._fast.match(buf)
        percent = _PERCENT_FAST.match(buf)
        start = -1
        if keyword is not None:
            g = next(i for i in range(1, keyword.re.groups + 1) if keyword.group(i) is not None)
            s, e = keyword.span(g)
            start = buf.rfind(b"confidence", 0, s)  # nothing between the keyword and VALUE spells it
        if percent is not None:
            at = buf.rfind(b"%", 0, percent.end())
            number = _PERCENT_NUMBER.search(buf, max(0, at - 4), at)
            assert number is not None  # the lookbehinds checked it
            if number.start() > start:
                s, e = number.start(), at + 1
        return None if keyword is None and percent is None else text[s:e]  # same offsets as buf

    def _last_statement(self, text: str) -> str | None:
        """The raw VALUE of the statement that starts last (from the original text)."""
        if self._fast is not None:
            return self._last_statement_fast(text)
        best: re.Match[str] | None = None
        for pattern in self._compiled:
            for m in pattern.finditer(text):
                if best is None or m.start() > best.start():
                    best = m
        if best is None:
            return None
        raw = best.group(1) if best.re.groups else best.group(0)
        return "" if raw is None else raw  # an optional group that did not take part: malformed

    def from_text(self, text: str | None, verbal_scale: str | None = None) -> Confidence:
        """The last statement of the text (any form), read with the grammar; missing if none."""
        if not text or not isinstance(text, str):
            return MISSING
        raw = self._last_statement(text)
        return MISSING if raw is None else self.scale(raw, verbal_scale)

    # ---------------------------------------------------------------- tool calls

    def _from_mapping(self, arguments: Mapping[str, Any], scale: str | None) -> Confidence:
        readings = [
            self.scale(v, scale) if isinstance(v, str) else self.from_number(v, scale)
            for k, v in arguments.items()
            if isinstance(k, str) and _normal_key(k) in self._keys
        ]
        if not readings:
            return MISSING
        if any(r != readings[0] for r in readings[1:]):
            return ambiguous("conflicting_keys")  # `confidence` and `confidence_score` that disagree
        return readings[0]

    def _from_one_call(self, arguments: Any, scale: str | None) -> Confidence:
        if isinstance(arguments, str):
            try:
                decoded = json.loads(arguments)
            except (ValueError, RecursionError):
                return self.from_text(arguments, scale)  # not JSON: maybe still a "confidence: 0.8" string
            return self._from_mapping(decoded, scale) if isinstance(decoded, Mapping) else MISSING
        if isinstance(arguments, Mapping):
            return self._from_mapping(arguments, scale)
        return MISSING

    def from_arguments(self, arguments: Any, verbal_scale: str | None = None) -> Confidence:
        """A confidence passed as a tool-call argument: one call's arguments (a mapping or its
        JSON string), or a sequence of them, one per parallel call (the last that states one wins)."""
        if arguments is None or isinstance(arguments, (str, Mapping)):
            return self._from_one_call(arguments, verbal_scale)
        if isinstance(arguments, Sequence) and not isinstance(arguments, (bytes, bytearray)):
            for call in reversed(arguments):
                found = self._from_one_call(call, verbal_scale)
                if found.status != "missing":
                    return found
        return MISSING

    def __call__(self, text: str | None) -> float | None:
        return self.from_text(text).value
