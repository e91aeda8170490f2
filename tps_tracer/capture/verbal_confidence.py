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

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tps_tracer.capture.text_folding import folded

Status = Literal["ok", "clipped", "missing", "malformed"]

MAX_VALUE_CHARS = 64

_SEP = r"(?:\*\*?|__?)?"  # optional markdown emphasis around the label or its colon
# The three forms, written lower-case: the default path runs them on `folded(text)`, a
# custom `patterns` list on the text with re.IGNORECASE. Each starts with the keyword (so
# the engine can search for that literal) and checks what precedes it with a lookbehind.
# Each has one group: the raw VALUE.
TAG_PATTERN = r"confidence(?<=<confidence)[ \t]{0,8}>([^<]*)</confidence[ \t]{0,8}>"
KEY_PATTERN = r"confidence(?<=[\"']confidence)[\"'][ \t]{0,8}:\s{0,64}([^\s,;<}\]]{0,65})"
LABEL_PATTERN = (
    r"confidence(?<![^\W_]confidence)(?:[ \t_-]{1,3}(?:level|score))?"
    + _SEP
    + r"[ \t]{0,8}[:=]"
    + _SEP
    + r"\s{0,16}([^\s,;<]{0,65}(?:,[0-9]|[ \t]%)?)"
)
DEFAULT_PATTERNS: tuple[str, ...] = (TAG_PATTERN, KEY_PATTERN, LABEL_PATTERN)

# The last statement of any form: greedy `.*` backtracks from the end, so the first match
# is the one whose keyword comes last. Run on the ASCII-folded text (`folded`).
_LAST_STATEMENT = re.compile(("(?s:.*)(?:" + "|".join(DEFAULT_PATTERNS) + ")").encode("ascii"))


_VALUE = re.compile(r"([-+]?)([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?(?:[ \t]?(%))?")
_STRIP_BOTH = " \t\r\n\"'`*_"
_STRIP_END = ".!?)" + _STRIP_BOTH


@dataclass(frozen=True)
class Confidence:
    value: float | None
    status: Status


MISSING = Confidence(None, "missing")
MALFORMED = Confidence(None, "malformed")


def _clip(value: float) -> Confidence:
    if 0.0 <= value <= 1.0:
        return Confidence(value + 0.0, "ok")  # + 0.0: -0.0 reads as 0.0
    return Confidence(1.0 if value > 1.0 else 0.0, "clipped")


@dataclass
class VerbalConfidenceExtractor:
    """Configurable parser of stated confidences (see the module docstring for the grammar)."""

    patterns: Sequence[str] = DEFAULT_PATTERNS
    argument_keys: Sequence[str] = ("confidence",)
    percent_without_sign: bool = True
    _compiled: list[re.Pattern[str]] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # The default grammar (the DEFAULT_PATTERNS tuple itself) takes the one-pass path on the
        # folded text; other patterns run one by one as given (so does a list holding the
        # default patterns, which the tests use to check that both paths read alike).
        default = tuple(self.patterns) == DEFAULT_PATTERNS and isinstance(self.patterns, tuple)
        self._compiled = None if default else [re.compile(p, re.IGNORECASE | re.DOTALL) for p in self.patterns]

    # ---------------------------------------------------------------- values

    def _number(self, sign: str, digits: str, fraction: str | None, exponent: str | None, percent: bool) -> Confidence:
        value = float(sign + digits + (exponent or ""))  # digits includes the fraction
        if math.isnan(value):  # not reachable from the grammar; kept as a guard
            return MALFORMED
        if percent:
            return _clip(value / 100.0)
        integer = not sign and fraction is None and exponent is None and digits[:1] != "."
        if integer and 1.0 < value <= 100.0 and self.percent_without_sign:
            return Confidence(value / 100.0, "ok")
        return _clip(value)

    def scale(self, raw: str) -> Confidence:
        """One VALUE (the text of a statement) read with the table of the module docstring."""
        s = raw.strip(_STRIP_BOTH).rstrip(_STRIP_END).lstrip("(" + _STRIP_BOTH)
        if not s or len(s) > MAX_VALUE_CHARS:
            return MALFORMED
        m = _VALUE.fullmatch(s)
        if m is None:
            return MALFORMED
        sign, digits, fraction, exponent, percent = m.groups()
        return self._number(sign, digits, fraction, exponent, percent is not None)

    def from_number(self, value: Any) -> Confidence:
        """A JSON number (tool-call argument): an int follows the integer rows of the table."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return MALFORMED
        if isinstance(value, int):  # compared, never converted: float(10**400) would raise
            if 1 < value <= 100 and self.percent_without_sign:
                return Confidence(value / 100.0, "ok")
            if value > 1:
                return Confidence(1.0, "clipped")
            return Confidence(0.0, "clipped") if value < 0 else Confidence(float(value), "ok")
        if math.isnan(value):
            return MALFORMED
        return _clip(value)

    # ---------------------------------------------------------------- text

    def _last_statement(self, text: str) -> str | None:
        if self._compiled is None:
            last = _LAST_STATEMENT.match(folded(text))
            if last is None:
                return None
            return next(g for g in last.groups() if g is not None).decode("ascii")
        best: re.Match[str] | None = None
        for pattern in self._compiled:
            for m in pattern.finditer(text):
                if best is None or m.start() > best.start():
                    best = m
        if best is None:
            return None
        raw = best.group(1) if best.re.groups else best.group(0)
        return "" if raw is None else raw  # an optional group that did not take part: malformed

    def from_text(self, text: str | None) -> Confidence:
        """The last statement of the text (any form), read with the table; missing if none."""
        if not text or not isinstance(text, str):
            return MISSING
        raw = self._last_statement(text)
        return MISSING if raw is None else self.scale(raw)

    # ---------------------------------------------------------------- tool calls

    def _from_mapping(self, arguments: Mapping[str, Any]) -> Confidence:
        for key in self.argument_keys:
            if key in arguments:
                v = arguments[key]
                if isinstance(v, str):
                    return self.scale(v)
                return self.from_number(v)
        return MISSING

    def _from_one_call(self, arguments: Any) -> Confidence:
        if isinstance(arguments, str):
            try:
                decoded = json.loads(arguments)
            except (ValueError, RecursionError):
                return self.from_text(arguments)  # not JSON: maybe still a "confidence: 0.8" string
            return self._from_mapping(decoded) if isinstance(decoded, Mapping) else MISSING
        if isinstance(arguments, Mapping):
            return self._from_mapping(arguments)
        return MISSING

    def from_arguments(self, arguments: Any) -> Confidence:
        """A confidence passed as a tool-call argument: one call's arguments (a mapping or its
        JSON string), or a sequence of them, one per parallel call (the last that states one wins)."""
        if arguments is None or isinstance(arguments, (str, Mapping)):
            return self._from_one_call(arguments)
        if isinstance(arguments, Sequence) and not isinstance(arguments, (bytes, bytearray)):
            for call in reversed(arguments):
                found = self._from_one_call(call)
                if found.status != "missing":
                    return found
        return MISSING

    def __call__(self, text: str | None) -> float | None:
        return self.from_text(text).value
