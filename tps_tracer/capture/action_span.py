"""Where the committed action sits in a step's text, and which tokens spell it.

A locator maps the completion text to a character span [start, end) or None. Built in:

- `tag_span("action")`: the inner text of the last `<action>...</action>` (the paper's
  format); an unclosed tag (truncated output) gives None;
- `react_span`: LangChain's text ReAct, from the tool name after the last `Action:` to the
  end of the `Action Input:` line, or else the answer after `Final Answer:` (the finishing
  action, so the last step of a clean run has an action span too);
- `substring_span(s)`: the last occurrence of a given string (e.g. a tool call's
  arguments, for servers that return logprobs over tool-call text);
- `first_of(...)`: the first locator that finds something (`DEFAULT_ACTION_SPAN` tries the
  tag, then ReAct).

Tokens are mapped through their character offsets: a token belongs to the span if it
overlaps it, so an action split across tokens (or sharing a token with the tag) is
covered whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from tps_tracer.capture.token_logprobs import TokenLogprobs

Span = tuple[int, int]
SpanLocator = Callable[[str], Span | None]


def tag_span(tag: str = "action") -> SpanLocator:
    opening = re.compile(rf"<{re.escape(tag)}>", re.IGNORECASE)
    closing = re.compile(rf"</{re.escape(tag)}>", re.IGNORECASE)

    def locate(text: str) -> Span | None:
        starts = [m.end() for m in opening.finditer(text)]
        if not starts:
            return None
        end = closing.search(text, starts[-1])
        return (starts[-1], end.start()) if end else None

    return locate


_REACT = re.compile(r"Action\s*:\s*(?P<tool>.*?)\s*\n\s*Action\s*Input\s*:\s*(?P<input>[^\n]*)", re.IGNORECASE)


_FINAL_ANSWER = re.compile(r"Final\s*Answer\s*:\s*(?P<answer>.*\S)", re.IGNORECASE | re.DOTALL)


def react_span(text: str) -> Span | None:
    matches = list(_REACT.finditer(text))
    if matches:
        m = matches[-1]
        return (m.start("tool"), m.end("input"))
    final = _FINAL_ANSWER.search(text)
    return (final.start("answer"), final.end("answer")) if final else None


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
