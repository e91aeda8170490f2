"""Verbal confidence: the probability of success the model states at a step.

The grammar (docs/capture.md's "Verbal confidence" section is the user's description)
=====================================================================================

Statements. Matching is case-insensitive; `confidence` is the keyword of every form but the
last. The keyword must not be glued to a word before it: `overconfidence`, `self-confidence`,
`low_confidence` are not statements.

- tag:   `<confidence>VALUE</confidence>`. The inner text runs to the next `<`; an unclosed
  tag (truncated output) is not a statement.
- key:   `"confidence": VALUE` (JSON, or `'...'` in a Python dict), also `confidence_score`,
  `confidence_level`, `confidence_value`, `confidenceScore`, `confidence-score`. VALUE is a
  quoted string or runs to whitespace or one of `, ; < } ]`.
- label: `confidence`, optionally followed by `level` / `score` / `value` / `estimate` /
  `rating` (separated by a space, `_` or `-`), optionally a scale in brackets (`(1-10)`,
  `[0-100]`, `(out of 5)`, `(%)`: the statement's own scale, over any declared one),
  optionally in markdown emphasis, then `:`, `=`
  or `|` (a markdown table row), then VALUE: `Confidence: 85%`, `**Confidence:** 0.7`,
  `| Confidence | 0.85 |`, `confidence_score=0.4`. VALUE must START like a value (a digit, a
  sign, a point, an approximation or bound word, a quote or markdown before them, a
  qualitative level): otherwise the label is prose (`Note on confidence: rough`, `Confidence:
  unknown`) and not a statement.
- spaced label: the label (keyword, suffix, scale in brackets, emphasis as above) then, in
  place of `:`, whitespace, a dash (`-` or `--` before whitespace, `–`, `—`), or a line end
  (the label alone on its line, only markdown before it: `## Confidence`, `**Confidence**`,
  `- Confidence`; the VALUE on the next non-empty line, at most 8 blank lines on, after an
  optional list bullet), when VALUE is unambiguous by its own form: a percent (`70%`, `70
  percent`, `70-80%`), a fraction (`7/10`, `3 out of 4`), a decimal with a point or comma in
  [0, 1] (`0.7`, `.7`, `0,7`, `1.0`), optionally signed, after `~` or a bound sign, in
  markdown or a bracket: `Confidence 70%`, `Confidence — 0.7`, `confidence 7/10`, `## Confidence`
  + newline + `70%`. A bare integer is not (`Confidence 8`, `confidence 2 tools` are prose), nor
  a word (`Confidence - high`). `Confidence -0.2` is the number -0.2 (a hyphen separates only
  before whitespace). Another non-ASCII character in the dash's place starts VALUE: `Confidence
  ≈ 0.7` is 0.7, `Confidence → 70%` is refused (malformed), not missing. Prose of this shape
  is a statement (`I have confidence 90% of the time` is 0.9): the last statement wins, and a
  model asked to state its confidence writes it last.
- is:    `confidence [level|score] is|was|of|at NUMBER`: `My confidence is 0.9`, `a
  confidence of 80%` (a number must follow; `confidence is high` is not a statement).
- prose: a whole percent before `sure`, `confident` or `certain`: `I'm 90% sure`; not when
  negated or bounded (`not 90% sure`, `less than 90% sure`, `at least 90% sure`).

The last statement wins: of all statements, the one that starts last (a keyword, or the
number of a prose percent) is the step's confidence, even when it is refused (then the step
has None, counted): `<confidence>0.6</confidence> ... Confidence: 80%` is 0.8. No statement:
None ("missing").

VALUE is read from the original text (`confidence_value.py`): NFKC, every Unicode decimal
digit as ASCII (`0.８`, `0.٨`, `0.८` are 0.8), dashes as `-`, `≈` as `~`. Leading quotes,
backticks, markdown and brackets are skipped; the expression at the start is read and must
end at a boundary (end, whitespace, punctuation): `0.8 because ...` is 0.8, `0.8abc` is
malformed. Numbers: `[+-]digits[.digits][e[+-]digits]` or `.digits`, a decimal comma (`0,8`,
`85,5%`) unless it could be a thousands separator (`1,000`: ambiguous).

Scales are declared, not guessed (`confidence_value.py`). What each VALUE reads as, with its
status and reason, is the table in docs/capture.md ("Verbal confidence: what is read").

Tool calls. `from_arguments` reads the `argument_keys` (any case, `_`/`-`/spaces ignored:
`confidence`, `Confidence`, `confidence_score`, `confidenceLevel`...) of one call's arguments
(a mapping, or its JSON string; a string that is not JSON is read as text), or of a sequence
of calls (parallel tool calls): the last call that states one wins, as in text. Two keys of
one call that disagree are refused (ambiguous / conflicting_keys). A JSON int is a bare
integer, a float a decimal (same table); a bool, a NaN or a non-scalar is malformed.
`SignalExtractor` reads the arguments only when the text has no statement.

Time. Linear in the text, a bounded amount of work per position. The statements are found on
an ASCII-folded copy (`confidence_value.folded`, one byte per character, ~1 ms per MB), so an
offset there is an offset in the text, from which VALUE is then read. Two regular
expressions, each `(?s:.*)` followed by a literal (the keyword; the prose form's `%`), find
the LAST statement of their family by backtracking from the end, the engine jumping between
the literal's occurrences; every quantifier that could meet another is bounded or over a
disjoint class, and VALUE is at most 128 characters, so the search stops at the first
statement from the end and never collects all of them. A keyword that starts no statement
costs a bounded number of the engine's steps, kept few (`_keyword_regex`): what follows the
keyword up to the separator is matched once (atomic), the forms are a branch the engine
rules out by their first character, and the own-line form's line-start lookbehinds run only
with a line end near. The whole text is read (no truncation): 1 MB of adversarial text takes
at most ~50 ms (tests/benchmarks/bench_verbal_grammar.py; the worst are 30,000 labels alone on
their line with no value and 69,000 spaced labels before bare integers; docs/benchmarks.md).
Custom `patterns` are the user's: they run with `finditer` (re.IGNORECASE | re.DOTALL) on
the text as given, the match that starts last wins.
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
    folded,
    from_json_number,
    normalise,
    read_value,
)

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
# An optional group is written `(?:X|)`, not `(?:X)?`: the same tries in the same order, but a
# branch, which the engine runs several times faster than its generic repeat.
_SUFFIX = r"(?:[ \t_-]{1,3}(?:level|score|value|estimate|rating)|)"
_SEP = r"(?:\*\*?|__?|)"  # optional markdown emphasis around the label or its colon
# A scale written in the label, `Confidence (1-10): 8`, `Confidence [0-100]:`, `(out of 5)`, `(%)`:
# the statement declares its own scale (`?` on the folded text: an en dash).
_ANNOTATION = (
    r"(?:[ \t]{0,3}[(\[][ \t]{0,2}(?:[01][ \t]{0,2}(?:-|to|\?)[ \t]{0,2}(?:100|10|5|1)|%|percent"
    r"|(?:out of|/)[ \t]{0,2}(?:100|10|5))[ \t]{0,2}[)\]]|)"
)
_READ_ANNOTATION = re.compile(
    r"[(\[]\s*(?:[01]\s*(?:-|to)\s*(?P<top>100|10|5|1)|(?P<pct>%|percent)|(?:out of|/)\s*(?P<of>100|10|5))\s*[)\]]"
)
_TOP_SCALES = {"100": "percent", "10": "1-10", "5": "1-5", "1": "0-1"}
_APPROX_WORDS = r"(?:about|around|approximately|approx\.?|roughly|circa|nearly|almost|maybe|perhaps)"
_BOUND_WORDS = r"(?:at least|at most|more than|less than|over|under|above|below)"
# Where a number can start. `?` is any non-ASCII character on the folded text (a full-width
# or Arabic-Indic digit, `≈`, a no-break space): the VALUE is read from the original text.
# One flat branch, each alternative starting with a literal or a class, so the engine rules
# most of them out by their first character (a word is followed by its number).
_DIGIT_START = r"(?:[0-9?]|[-+.][0-9])"
_NUMBER_WORDS = (*_APPROX_WORDS[3:-1].split("|"), *_BOUND_WORDS[3:-1].split("|"), "between")
_NUMBER_START = (
    r"(?:[\"'`*_(\[?~>]{0,4}[ \t]{0,2}(?:[0-9?]|[-+.][0-9]|"
    + "|".join(w + r"[ \t]{1,3}" + _DIGIT_START for w in _NUMBER_WORDS)
    + "))"
)
_WINDOW = r"(?=([^\n<]{0," + str(WINDOW) + r"}))"  # a lookahead: the next statement stays findable
_NEGATIONS = ("not", "than", "least", "most", "over", "under", "above", "below")

# The label without `:` (`Confidence 70%`, `Confidence — 0.7`, `## Confidence` then `70%` on the
# next non-empty line). `?` on the folded text is a non-ASCII character (an en or em dash, a
# no-break space, `≈`): from_text reads one that is not a dash or a space as the start of VALUE.
# An ASCII hyphen separates only before whitespace: `Confidence -0.2` is the number -0.2.
_GAP = r"(?:[ \t]{1,8}|[ \t]{0,8}(?:-{1,2}[ \t]|\?)[ \t]{0,8})"
# A VALUE unambiguous by its own form: a percent (`70%`, `70 percent`, `70-80%`), a fraction
# (`7/10`, `3 out of 4`), a decimal with a point or comma in [0, 1] (`0.7`, `.7`, `0,7`, `1.0`),
# optionally signed, approximate (`~`) or bounded (`>`, `<=`: then refused as a bound), in
# markdown or a bracket. Never a bare integer (`Confidence 8`, `confidence 2 tools`).
_DIGITS = r"[0-9]{1,8}(?:[.,][0-9]{1,8}|)"
_PERCENT_TAIL = r"(?:[ \t]{0,2}(?:-|to)[ \t]{0,2}" + _DIGITS + r"|)[ \t]?(?:%|percent(?![a-z]))"  # after the number
_FRACTION_TAIL = r"[ \t]{0,2}(?:/|out of)[ \t]{0,2}[0-9]"
# Written as: a decimal in [0, 1]; else an integer part then its tail (a percent or a fraction,
# the fraction's number with a point only), which a bare integer followed by a word fails at once.
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
# The label alone on its line: only markdown before it (`## `, `**`, `- `, `> `) and after it,
# then the VALUE on the next non-empty line (at most 8 blank lines), after an optional list
# bullet. Line start: for each length k (0-8) of the markup run before the keyword, no other
# character than a line end right before it (fixed-width negative lookbehinds, the keyword
# included, tried in order of k: prose is rejected at its run's length, `my confidence` at 1).
_MARKUP = r"[#*_ \t>+-]"
_LINE_START = "".join(f"(?<![^\\n#*_ \\t>+-]{_MARKUP}{{{k}}}confidence)" for k in range(9))
_LINE_START += f"(?<!{_MARKUP}{{9}}confidence)"
_LINE_END = r"[ \t]{0,8}\r?\n"
# `(?![ \t\r\n])`: after the blank lines, so fewer of them fail at once when VALUE is not there.
_BLANK_LINES = r"(?:[ \t]{0,8}\r?\n){0,8}[ \t]{0,8}(?![ \t\r\n])"
_BULLET = r"(?:[-*+][ \t]{1,3}|)(?![ \t])"
_NEXT_LINE = _BLANK_LINES + _BULLET
_PROSE_TAIL = r"[ \t]{1,2}(?:sure|confident|certain)(?![a-z])"


_IS_WORDS = ("is", "was", "of", "at")
_IS_TAIL = r"[ \t]{1,3}(?![ \t])(?=" + _NUMBER_START + ")"  # after `is` / `was` / `of` / `at`


def _label_value(levels: Sequence[str]) -> str:
    """After a label's `:`, `=` or `|`: emphasis, whitespace, then the start of a VALUE (a lookahead)."""
    words = "|".join(re.escape(w) for w in sorted(set(levels), key=len, reverse=True))
    value_start = r"(?=" + _NUMBER_START + r"|[\"'`*_(\[]{0,4}(?:" + words + r")(?![a-z]))"
    # `(?!\s)` after a whitespace run: backing off into it would only retry the same VALUE.
    return _SEP + r"\s{0,16}(?!\s)" + value_start


def _forms(levels: Sequence[str]) -> tuple[str, str, str, str, str, str]:
    """What follows the keyword in each keyword form: tag, key, label (`:`), spaced label,
    `is`/`of`, and the label on its own line (a lookahead, a line-start check, the form)."""
    tag = r"(?<=<confidence)[ \t]{0,8}>([^<]*)</confidence[ \t]{0,8}>"
    key = (
        r"(?<=[\"']confidence)(?:[_ -]?(?:score|level|value)|)[\"'][ \t]{0,8}:\s{0,64}"
        r"(?=(\"[^\"\n]{0,126}\"|'[^'\n]{0,126}'|[^\s,;<}\]]{0,65}))"
    )
    label = _ANNOTATION + _SEP + r"[ \t]{0,8}[:=|]" + _label_value(levels) + _WINDOW
    prose_is = r"[ \t]{1,3}(?:" + "|".join(_IS_WORDS) + ")" + _IS_TAIL + _WINDOW
    # Without `:`, only a VALUE unambiguous by its form makes a statement (`Confidence 8` stays prose).
    spaced = _ANNOTATION + _SEP + _GAP + _PLAIN_VALUE + _WINDOW
    own_line = _ANNOTATION + _SEP + _LINE_END + _NEXT_LINE + _PLAIN_VALUE + _WINDOW
    return tag, key, label, spaced, prose_is, own_line


def statement_patterns(levels: Sequence[str] = DEFAULT_LEVELS) -> tuple[str, ...]:
    """The statement forms (lower case, one group each: the raw VALUE); `levels`: the qualitative words."""
    tag, key, label, spaced, prose_is, own_line = _forms(levels)
    # `I'm 90% sure`: a whole percent before `sure` / `confident` / `certain`, not negated or
    # bounded (`not 90% sure`, `less than 90% sure`, `at least 90% sure` are not statements).
    behind = r"(?<![0-9.,/-][0-9])" + "".join(rf"(?<!{w} [0-9])" for w in _NEGATIONS)
    prose_pct = r"([0-9]" + behind + r"[0-9]{0,2}[ \t]?%)" + _PROSE_TAIL
    return (
        "confidence" + tag,
        "confidence" + key,
        _KW + _SUFFIX + label,
        _KW + _SUFFIX + spaced,
        _KW + _SUFFIX + prose_is,
        _KW + _LINE_START + _SUFFIX + own_line,
        prose_pct,
    )


DEFAULT_PATTERNS: tuple[str, ...] = statement_patterns()


def _percent_behind(width: int, space: str) -> str:
    """At a `%`: a whole number of `width` digits (then `space`) before it, alone and not negated."""
    num = "[0-9]" * width + space + "%"
    return "(?:(?<=" + num + ")(?<![0-9.,/-]" + num + ")" + "".join(f"(?<!{w} {num})" for w in _NEGATIONS) + ")"


# The prose form as the one-pass search runs it: anchored on its `%` (a literal, so the engine
# skips to the candidates), the words after it checked first (most `%` are not before `sure`),
# then the number by fixed-width lookbehinds. Reads what
# DEFAULT_PATTERNS' prose form reads (tests/test_capture_fuzz.py checks both paths alike).
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
    """`body` matched once and never backed into (Python 3.10 has no `(?>...)`): a lookahead
    is atomic, and the backreference consumes what it matched."""
    return f"(?=(?P<{name}>{body}))(?P={name})"


# The most characters from a keyword to the line end of a label alone on its line: a suffix
# (3 + 8), a scale in brackets (3 + 1 + 2 + 11 + 2 + 1), emphasis (2), whitespace (8), `\r` (1).
_OWN_LINE_REACH = 42


@functools.lru_cache(maxsize=32)
def _keyword_regex(levels: tuple[str, ...]) -> re.Pattern[bytes]:
    # The last keyword statement of any form: greedy `.*` backtracks from the end, so the first
    # match is the one whose keyword comes last; the keyword is a literal right after `.*`,
    # so the engine jumps between its candidates. The same forms as statement_patterns, laid
    # out so that a keyword that starts no statement (30,000 to 70,000 of them in 1 MB of
    # adversarial text) costs few steps of the engine:
    # - the suffix, scale, emphasis and whitespace after the keyword are matched once, as one
    #   atomic run: a shorter one leaves a character no form accepts next (a letter, `*`, `_`,
    #   `(`, whitespace), so backing into it could only fail again;
    # - then one branch whose alternatives start with a literal or a class (the engine skips
    #   them by their first character): `:=|` (label), whitespace then VALUE (spaced label),
    #   a dash then VALUE, `is`/`was`/`of`/`at` (only after 1-3 spaces right after the keyword
    #   or its suffix: a letter before the whitespace);
    # - the label alone on its line is tried only when a line end is near (its line-start
    #   lookbehinds are the costly part), and its blank lines once, as an atomic run;
    # - VALUE groups are consumed (the match ends there); named groups are not VALUE.
    tag, key, *_ = _forms(levels)
    # One lookbehind for both: `<` or a quote before the keyword (group `lt`: which of them).
    assert tag.startswith("(?<=<confidence)") and key.startswith("(?<=[\\\"']confidence)")
    tag_or_key = (
        r"(?<=(?:(?P<lt><)|[\"'])confidence)(?(lt)"
        + tag[len("(?<=<confidence)") :]
        + "|"
        + key[len("(?<=[\\\"']confidence)") :]
        + ")"
    )
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


@functools.lru_cache(maxsize=32)
def _value_groups(pattern: re.Pattern[bytes]) -> tuple[int, ...]:
    """The groups of a one-pass regex that hold a VALUE: the unnamed ones."""
    named = set(pattern.groupindex.values())
    return tuple(i for i in range(1, pattern.groups + 1) if i not in named)


_SPACED_LABEL = re.compile((_KW + _SUFFIX + _ANNOTATION + _SEP + _GAP).encode("ascii"))


def _separator_kept(label: str) -> str:
    """The character a spaced label ends with when it is not a separator but may begin VALUE.

    On the folded text `?` stands for any non-ASCII character between a label and its VALUE
    (`Confidence — 70%`). A dash or a space is a separator; anything else (`≈`, `→`, a literal
    `?`) is read as the start of VALUE, so `Confidence ≈ 0.7` is 0.7 and `Confidence → 70%`
    is refused (malformed), never read as if the character were not there.
    """
    end = len(label.rstrip(" \t"))
    if end == 0 or (label[end - 1].isascii() and label[end - 1] != "?") or len(label) > 96:
        return ""  # 96: longer than any spaced label (a prose percent's "label" runs from an earlier keyword)
    if _SPACED_LABEL.fullmatch(folded(label)) is None:
        return ""
    sign = normalise(label[end - 1]).strip()
    return "" if sign in ("", "-") else label[end - 1 :]


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

    def _last_statement_fast(self, text: str) -> tuple[str, str] | None:
        assert self._fast is not None
        buf = folded(text)
        keyword = self._fast.match(buf)
        start = -1
        prose = False  # whether a prose percent is the last statement
        if keyword is not None:
            g = next(i for i in _value_groups(keyword.re) if keyword.group(i) is not None)
            s, e = keyword.span(g)
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

    def _last_statement(self, text: str) -> tuple[str, str] | None:
        """(raw VALUE, the text from the keyword to VALUE) of the statement that starts last."""
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
        raw = "" if raw is None else _separator_kept(best.group(0)) + raw  # a group that did not take part: malformed
        return raw, best.group(0)

    def from_text(self, text: str | None, verbal_scale: str | None = None) -> Confidence:
        """The last statement of the text (any form), read with the grammar; missing if none."""
        if not text or not isinstance(text, str):
            return MISSING
        found = self._last_statement(text)
        if found is None:
            return MISSING
        raw, label = found
        written = _READ_ANNOTATION.search(normalise(label)) if "(" in label or "[" in label else None
        if written is not None:  # the statement's own scale wins over any declared one
            verbal_scale = "percent" if written["pct"] else _TOP_SCALES[written["top"] or written["of"]]
        return self.scale(raw, verbal_scale)

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
