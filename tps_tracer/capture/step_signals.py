"""One LLM step -> its five forecasts (the paper's per-step predictors): the raw step, where its action
sits, and the extractor, which never raises: a signal it cannot compute is None, its reason counted in
`counts` and unreadable input in the shared `HealthLedger` (docs/capture.md, "Counts")."""

from __future__ import annotations

import gc
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tps_tracer.capture.verbal_confidence import VerbalConfidenceExtractor, folded
from tps_tracer.constants import DEFAULT_TOP_K
from tps_tracer.errors import InputError
from tps_tracer.health import HealthLedger

if TYPE_CHECKING:  # numpy (logprobs) is imported on the first step that carries logprobs
    from tps_tracer.capture.token_logprobs import TokenLogprobs

VERBAL = "verbal"
TOKEN_PROB = "token_prob"
ENTROPY_CONF = "entropy_conf"
ACTION_TOKEN_PROB = "action_token_prob"
ACTION_ENTROPY_CONF = "action_entropy_conf"
PREDICTORS = (VERBAL, TOKEN_PROB, ENTROPY_CONF, ACTION_TOKEN_PROB, ACTION_ENTROPY_CONF)

# One tool call's arguments (a mapping or its JSON text), or all of a message's parallel calls.
ToolArguments = Mapping[str, Any] | str | Sequence[Mapping[str, Any] | str]


@dataclass(frozen=True)
class RawStep:
    """What one model call returned, untouched. `forecasts`: computed by the caller (a span's
    `tps.forecasts`), used instead of extracting; `verbal_scale`: the run's `tps_verbal_scale`."""

    text: str | None
    logprobs: Any = None
    tool_arguments: ToolArguments | None = None
    forecasts: Mapping[str, Any] | None = None
    verbal_scale: str | None = None


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_reenable = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a large acyclic tree (a decoded output with logprobs) is built, which it would
    rescan every 700 allocations. Process-wide: nested or concurrent pauses share a counter; the last one
    restores the state the first one found."""
    global _gc_depth, _gc_reenable
    with _gc_lock:
        if _gc_depth == 0:
            _gc_reenable = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_reenable:
                gc.enable()


# ---------------------------------------------------------------- action spans

# A locator maps the completion text to the action's character span [start, end), or None. Labels are
# matched on the ASCII-folded text (offsets kept), the last one by `(?s:.*)label` backtracking from
# the end, every pattern bounded: linear in the text (docs/capture.md, "Time").
Span = tuple[int, int]
SpanLocator = Callable[[str], Span | None]


def tag_span(tag: str = "action") -> SpanLocator:
    """The inner text of the last `<tag>...</tag>` (the paper's format); an unclosed tag gives None."""
    ascii_only = tag.isascii()  # a non-ASCII tag name cannot be matched on the folded text
    name = re.escape(tag.lower() if ascii_only else tag)
    sources = (f"(?s:.*)<{name}>", f"</{name}>")
    compiled: list[re.Pattern[Any]] = [
        re.compile(p.encode("ascii")) if ascii_only else re.compile(p, re.I) for p in sources
    ]
    last_opening, closing = compiled

    def locate(text: str) -> Span | None:
        subject = folded(text) if ascii_only else text
        start = last_opening.match(subject)
        end = closing.search(subject, start.end()) if start else None
        return (start.end(), end.start()) if start and end else None

    return locate


MAX_ACTION_LABELS = 16
# "action:" and "action input:", not inside a word ("transaction:"); each starts with its literal (the
# engine's fast scan) and looks behind afterwards.
_LAST_ACTION = re.compile(rb"(?s:.*)action(?<!\waction)[ \t]{0,8}:")
_INPUT = re.compile(rb"action(?<!\waction)[ \t]{0,8}input[ \t]{0,8}:[ \t]*")
_FINAL = re.compile(rb"final[ \t]{0,8}answer[ \t]{0,8}:")
_NON_SPACE = re.compile(rb"\S")


def react_span(text: str) -> Span | None:
    """LangChain's text ReAct action: the last `Action:` / `Action Input:` pair with only a one-line tool
    name between them (the tool may also sit on the input's line), spanning the tool name to the input
    line's end; earlier `Action:` labels are tried, MAX_ACTION_LABELS at most, each searching only up to
    the last one. Else the answer after the first `Final Answer:` (the finishing action, so a clean run's
    last step has a span too)."""
    low = folded(text)
    end = len(low)
    for _ in range(MAX_ACTION_LABELS):
        action = _LAST_ACTION.match(low, 0, end)
        if action is None:
            break
        inp = _INPUT.search(low, action.end(), end)
        if inp is not None:
            between = low[action.end() : inp.start()]
            tool = between.strip()
            if b"\n" not in tool:
                start = action.end() + len(between) - len(between.lstrip()) if tool else inp.end()
                stop = inp.end() + len(low[inp.end() :].partition(b"\n")[0].rstrip())
                return (start, max(start, stop))
        end = low.rfind(b"action", 0, action.end())
    label = _FINAL.search(low)
    first = _NON_SPACE.search(low, label.end()) if label else None
    return (first.start(), len(low.rstrip())) if first else None


def substring_span(needle: str) -> SpanLocator:
    """The last occurrence of `needle` (a tool call's arguments, for servers with logprobs over them)."""

    def locate(text: str) -> Span | None:
        if not needle:
            return None
        i = text.rfind(needle)
        return None if i < 0 else (i, i + len(needle))

    return locate


_ACTION_TAG = tag_span("action")


def _tag_or_react(text: str) -> Span | None:
    return _ACTION_TAG(text) or react_span(text)


DEFAULT_ACTION_SPAN: SpanLocator = _tag_or_react


# ---------------------------------------------------------------- the extractor


# The health entry (kind, key, message) of a stated confidence refused or clipped, by its status.
_VERBAL_HEALTH = {
    "malformed": ("malformed", "confidence", "a confidence statement that is not a number ({why}); verbal is None"),
    "ambiguous": ("rejected", "confidence_{why}", "an ambiguous confidence ({why}); verbal is None"),
    "clipped": ("malformed", "confidence_clipped", "a stated confidence outside [0, 1] was clipped to {value}"),
}


class _ThreadTally(threading.local):
    def __init__(self, tallies: dict[int, Counter[str]]) -> None:
        # A thread reusing a finished thread's id carries on its Counter: one per id, not one per thread ever run.
        self.tally = tallies.setdefault(threading.get_ident(), Counter())


class SignalExtractor:
    def __init__(
        self,
        confidence: VerbalConfidenceExtractor | None = None,
        action_span: SpanLocator = DEFAULT_ACTION_SPAN,
        top_k: int = DEFAULT_TOP_K,
        health: HealthLedger | None = None,
        verbal_scale: str | None = None,
    ):
        """verbal_scale: the scale of bare numbers in stated confidences ("percent", "0-1", "1-10",
        "1-5"; None: only numbers that fit one scale), for the default `confidence` extractor."""
        if confidence is not None and verbal_scale is not None:
            raise InputError("give verbal_scale to the VerbalConfidenceExtractor passed as `confidence`, not both")
        self.confidence = confidence or VerbalConfidenceExtractor(verbal_scale=verbal_scale)
        self.action_span = action_span
        self.top_k = top_k
        self.health = health if health is not None else HealthLedger()
        self._tallies: dict[int, Counter[str]] = {}
        self._mine = _ThreadTally(self._tallies)

    @property
    def counts(self) -> Counter[str]:
        """Why signals were None, summed over the threads that extracted."""
        total: Counter[str] = Counter()
        for tally in list(self._tallies.values()):
            total.update(dict(tally))  # dict(): one C-level copy, safe while its thread counts on
        return total

    def _count(self, what: str) -> None:
        # No lock: each thread adds to its own Counter, which no other thread writes, so no count is lost.
        self._mine.tally[what] += 1

    def _internal_error(self, where: str, exc: BaseException) -> None:
        self._count("extraction_error")
        self.health.count("error", "signal_extraction", f"{where} failed ({type(exc).__name__}: {exc}); signal is None")

    def verbal(self, text: str | None, tool_arguments: Any = None, verbal_scale: str | None = None) -> float | None:
        """Stated confidence from the text, else from the tool calls' arguments (one call's, or a
        sequence of parallel calls': the last that states one wins); verbal_scale: this call's."""
        try:
            found = self.confidence.from_text(text, verbal_scale)
            if found.status == "missing" and tool_arguments is not None:
                found = self.confidence.from_arguments(tool_arguments, verbal_scale)
        except Exception as exc:  # a custom pattern or argument object that misbehaves
            self._internal_error("verbal confidence", exc)
            return None
        if found.status != "ok":
            self._count(f"verbal_{found.status}")
            if found.status in _VERBAL_HEALTH:
                kind, key, message = _VERBAL_HEALTH[found.status]
                self.health.count(
                    kind, key.format(why=found.reason), message.format(why=found.reason, value=found.value)
                )
        return found.value

    def _parse(self, logprobs: Any) -> TokenLogprobs | None:
        """Parsed logprobs, or None (counted; a malformed object is also counted in `health`)."""
        if logprobs is None:
            self._count("no_logprobs")
            return None
        try:
            if isinstance(logprobs, Mapping) and "content" in logprobs and logprobs["content"] is None:
                # OpenAI's tool-call-only message: no logprobs for the call's arguments, a gap for the token predictors.
                self._count("no_content_logprobs")
                return None
            from tps_tracer.capture.token_logprobs import parse_logprobs

            return parse_logprobs(logprobs)
        except InputError as exc:  # a LogprobsFormatError, the only error parse_logprobs raises
            self._count("malformed_logprobs")
            self.health.count("malformed", "logprobs", f"malformed logprobs ({exc}); logprob signals missing")
        except Exception as exc:  # a Mapping whose lookups raise
            self._internal_error("logprobs parsing", exc)
        return None

    def forecasts(
        self,
        text: str | None,
        logprobs: Any = None,
        tool_arguments: Any = None,
        action_text: str | None = None,
        verbal_scale: str | None = None,
    ) -> dict[str, float | None]:
        """The five per-step forecasts; never raises. text: defaults to the tokens' text; tool_arguments: read
        when the text states no confidence; action_text: the action as this exact string, not `action_span`."""
        return self._finish(self._parse(logprobs), text, tool_arguments, action_text, verbal_scale, None)

    def forecasts_batch(
        self, steps: Sequence[tuple[str | None, Any, Any, str | None]]
    ) -> list[dict[str, float | None]]:
        """`forecasts` of each (text, logprobs, tool_arguments, verbal_scale), the same to the bit, the
        per-token arrays of same-shaped steps computed in one numpy pass (`batched_per_token`)."""
        parsed = [self._parse(logprobs) for _, logprobs, _, _ in steps]
        try:
            from tps_tracer.capture.token_logprobs import batched_per_token

            arrays = batched_per_token(parsed, self.top_k)
        except Exception as exc:  # the steps are then computed one by one
            self._internal_error("batched token signals", exc)
            arrays = {}
        return [
            self._finish(lp, text, tool_arguments, None, verbal_scale, arrays.get(i))
            for i, (lp, (text, _, tool_arguments, verbal_scale)) in enumerate(zip(parsed, steps, strict=True))
        ]

    def _finish(
        self,
        lp: TokenLogprobs | None,
        text: str | None,
        tool_arguments: Any,
        action_text: str | None,
        verbal_scale: str | None,
        arrays: tuple[Any, Any] | None,
    ) -> dict[str, float | None]:
        out: dict[str, float | None] = dict.fromkeys(PREDICTORS)
        out[VERBAL] = self.verbal(text if text is not None else (lp.text if lp else None), tool_arguments, verbal_scale)
        if lp is None:
            return out
        try:
            import tps_tracer.capture.token_logprobs as tl

            if not lp.tokens:
                self._count("no_tokens")
            span = (substring_span(action_text) if action_text is not None else self.action_span)(lp.text)
            if span is None:
                self._count("no_action_span")
            # One call for the four token forecasts: this runs on every model call.
            signals = tl.token_forecasts(lp, self.top_k, arrays, span)
            out[TOKEN_PROB], out[ENTROPY_CONF], out[ACTION_TOKEN_PROB], out[ACTION_ENTROPY_CONF] = signals
            if out[ENTROPY_CONF] is None and lp.tokens:
                self._count("no_top_logprobs")
        except Exception as exc:
            self._internal_error("token signals", exc)
            out.update(dict.fromkeys(PREDICTORS[1:]))
        return out
