"""Where the committed action sits in a step's text, and which tokens spell it.

A locator maps the completion text to a character span [start, end) or None. Built in:

- `tag_span("action")`: the inner text of the last `<action>...</action>` (the paper's
  format); an unclosed tag (truncated output) gives None;
- `react_span`: LangChain's text ReAct: the last `Action:` label and the first
  `Action Input:` label after it form the action when only the tool name (one line) and
  whitespace separate them (the tool may also sit on the `Action Input:` line, as
  LangChain's parser allows); the span runs from the tool name to the end of the input's
  line (trailing whitespace excluded). If that pair does not hold, the `Action:` labels
  before it are tried, the last MAX_ACTION_LABELS (16) at most: a text whose last 16
  `Action:` labels form no pair is not a ReAct step. Else the answer after the first
  `Final Answer:`, up to the last non-space character of the text (the finishing action,
  so the last step of a clean run has an action span too);
- `substring_span(s)`: the last occurrence of a given string (e.g. a tool call's
  arguments, for servers that return logprobs over tool-call text);
- `first_of(...)`: the first locator that finds something (`DEFAULT_ACTION_SPAN` tries the
  tag, then ReAct).

Tokens are mapped through their character offsets: a token belongs to the span if it
overlaps it, so an action split across tokens (or sharing a token with the tag) is
covered whole.

Time: linear in the text, whatever it holds. Labels are matched case-insensitively on an
ASCII-folded copy (`confidence_value.folded`: one byte per character, so offsets are kept;
~1 ms per MB whatever the script); the last label is found by
`(?s:.*)label`, which backtracks from the end and stops at the first hit; every label
pattern is bounded, and each try of the ReAct pair searches only between the labels it
looks at, so no region is scanned twice. (The old patterns were cubic on `Action:` +
spaces and quadratic on `Final Answer:` + spaces: minutes on 1 MB.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from tps_tracer.capture.confidence_value import folded

if TYPE_CHECKING:  # locating a span needs no numpy: the capture path imports it only to read logprobs
    import numpy as np
    from numpy.typing import NDArray

    from tps_tracer.capture.token_logprobs import TokenLogprobs

Span = tuple[int, int]
SpanLocator = Callable[[str], Span | None]


def tag_span(tag: str = "action") -> SpanLocator:
    if not tag.isascii():  # a non-ASCII tag name cannot be matched on the folded text
        last_opening_s = re.compile(rf"(?s:.*)<{re.escape(tag)}>", re.IGNORECASE)
        closing_s = re.compile(rf"</{re.escape(tag)}>", re.IGNORECASE)

        def locate_unicode(text: str) -> Span | None:
            start = last_opening_s.match(text)
            end = closing_s.search(text, start.end()) if start else None
            return (start.end(), end.start()) if start and end else None

        return locate_unicode

    name = re.escape(tag.lower()).encode("ascii")
    last_opening = re.compile(rb"(?s:.*)<" + name + rb">")  # backtracks from the end: the last opening
    closing = re.compile(rb"</" + name + rb">")

    def locate(text: str) -> Span | None:
        subject = folded(text)
        start = last_opening.match(subject)
        end = closing.search(subject, start.end()) if start else None
        return (start.end(), end.start()) if start and end else None

    return locate


MAX_ACTION_LABELS = 16
# Labels, on the folded text: "action:" and "action input:", not inside a word ("transaction:").
# Each starts with its literal (the engine searches for it) and looks behind afterwards.
# (No group around the label: it would cost the engine's fast scan for the literal.)
_LAST_ACTION = re.compile(rb"(?s:.*)action(?<!\waction)[ \t]{0,8}:")
_INPUT = re.compile(rb"action(?<!\waction)[ \t]{0,8}input[ \t]{0,8}:[ \t]*")
_FINAL = re.compile(rb"final[ \t]{0,8}answer[ \t]{0,8}:")
_NON_SPACE = re.compile(rb"\S")


def _react_pair(low: bytes) -> Span | None:
    """The last Action / Action Input pair of the folded text (see the module docstring)."""
    end = len(low)  # labels are searched before this offset
    for _ in range(MAX_ACTION_LABELS):
        action = _LAST_ACTION.match(low, 0, end)
        if action is None:
            return None
        inp = _INPUT.search(low, action.end(), end)
        if inp is not None:
            between = low[action.end() : inp.start()]
            tool = between.strip()
            if b"\n" not in tool:  # the tool name is one line (or absent)
                start = action.end() + len(between) - len(between.lstrip()) if tool else inp.end()
                line_end = low.find(b"\n", inp.end())
                line_end = len(low) if line_end < 0 else line_end
                stop = inp.end() + len(low[inp.end() : line_end].rstrip())
                return (start, max(start, stop))
        # The next try: an earlier Action label, with an input before this one.
        end = low.rfind(b"action", 0, action.end())
    return None


def react_span(text: str) -> Span | None:
    low = folded(text)
    pair = _react_pair(low)
    if pair is not None:
        return pair
    label = _FINAL.search(low)
    if label is None:
        return None
    first = _NON_SPACE.search(low, label.end())
    if first is None:
        return None
    return (first.start(), len(low.rstrip()))


def substring_span(needle: str) -> SpanLocator:
    def locate(text: str) -> Span | None:
        if not needle:
            return None
        i = text.rfind(needle)
        return None if i < 0 else (i, i + len(needle))

    return locate


def first_of(*locators: SpanLocator) -> SpanLocator:
    def locate(text: str) -> Span | None:
        for loc in locators:
            span = loc(text)
            if span is not None:
                return span
        return None

    return locate


DEFAULT_ACTION_SPAN: SpanLocator = first_of(tag_span("action"), react_span)


def token_mask(lp: TokenLogprobs, span: Span) -> NDArray[np.bool_]:
    """Tokens overlapping the character span [start, end)."""
    start, end = span
    return (lp.offsets[:-1] < end) & (lp.offsets[1:] > start)
