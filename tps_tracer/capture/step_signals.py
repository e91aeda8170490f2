"""One LLM step -> its five forecasts, the per-step predictors of the paper.

    extractor = SignalExtractor()
    forecasts = extractor.forecasts(text, logprobs)      # feed to Accumulator.observe
    # {"verbal": 0.85, "token_prob": 0.91, "entropy_conf": 0.77,
    #  "action_token_prob": 0.83, "action_entropy_conf": 0.64}

A signal that cannot be computed is None (never a default), and the reason is counted
in `extractor.counts` (thread-safe): no stated confidence, a malformed one, no logprobs,
no content logprobs (a tool-call-only message), malformed logprobs, no top-k candidates, no action span.

`forecasts` never raises, whatever the text, tool arguments or logprobs: unreadable input
gives None for the signals it feeds and is counted in the shared `HealthLedger`
(`extractor.health`, logged once per kind):

| category  | kind                | when                                                         |
|-----------|---------------------|--------------------------------------------------------------|
| malformed | confidence          | the last confidence statement is not a number                |
| rejected  | confidence_<reason> | an ambiguous statement, refused (undeclared_scale, wide_range, |
|           |                     | qualitative, comma, bound, odds, revised, conflicting_keys)   |
| malformed | confidence_clipped  | a stated confidence outside [0, 1] (clipped, still used)     |
| malformed | logprobs            | parse_logprobs rejects the payload (token signals None, the  |
|           |                     | verbal confidence kept)                                      |
| error     | signal_extraction   | an unexpected failure inside the extractor (that signal None) |
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tps_tracer.capture.action_span import DEFAULT_ACTION_SPAN, SpanLocator, substring_span, token_mask
from tps_tracer.capture.verbal_confidence import Confidence, VerbalConfidenceExtractor
from tps_tracer.constants import DEFAULT_TOP_K
from tps_tracer.errors import InputError
from tps_tracer.health import HealthLedger

if TYPE_CHECKING:
    from tps_tracer.capture.token_logprobs import TokenLogprobs

# The numpy parts (logprob parsing, token signals) are imported on the first step that carries
# logprobs, not with the adapters: importing the handler or the span processor stays light.

VERBAL = "verbal"
TOKEN_PROB = "token_prob"
ENTROPY_CONF = "entropy_conf"
ACTION_TOKEN_PROB = "action_token_prob"
ACTION_ENTROPY_CONF = "action_entropy_conf"
PREDICTORS = (VERBAL, TOKEN_PROB, ENTROPY_CONF, ACTION_TOKEN_PROB, ACTION_ENTROPY_CONF)


class SignalExtractor:
    def __init__(
        self,
        confidence: VerbalConfidenceExtractor | None = None,
        action_span: SpanLocator = DEFAULT_ACTION_SPAN,
        top_k: int = DEFAULT_TOP_K,
        health: HealthLedger | None = None,
        verbal_scale: str | None = None,
    ):
        """verbal_scale: the scale of bare numbers in stated confidences ("percent", "0-1",
        "1-10", "1-5"; None: only numbers that fit one scale are read), for the default
        `confidence` extractor; give one or the other."""
        if confidence is not None and verbal_scale is not None:
            raise InputError("give verbal_scale to the VerbalConfidenceExtractor passed as `confidence`, not both")
        self.confidence = confidence or VerbalConfidenceExtractor(verbal_scale=verbal_scale)
        self.action_span = action_span
        self.top_k = top_k
        self.health = health if health is not None else HealthLedger()
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def _internal_error(self, where: str, exc: BaseException) -> None:
        self._count("extraction_error")
        self.health.count("error", "signal_extraction", f"{where} failed ({type(exc).__name__}: {exc}); signal is None")

    def verbal(self, text: str | None, tool_arguments: Any = None, verbal_scale: str | None = None) -> float | None:
        """Stated confidence from the text, else from the tool calls' arguments.

        tool_arguments: one call's arguments (a mapping or its JSON string) or a sequence of
        them, one per parallel tool call; the last call that states a confidence wins.
        verbal_scale: this call's scale of bare numbers (None: the extractor's)."""
        try:
            found = self.confidence.from_text(text, verbal_scale)
            if found.status == "missing" and tool_arguments is not None:
                found = self.confidence.from_arguments(tool_arguments, verbal_scale)
        except Exception as exc:  # a custom pattern or argument object that misbehaves
            self._internal_error("verbal confidence", exc)
            return None
        self._record(found)
        return found.value

    def _record(self, found: Confidence) -> None:
        if found.status == "ok":
            return
        self._count(f"verbal_{found.status}")
        if found.status == "malformed":
            self.health.count(
                "malformed",
                "confidence",
                f"a confidence statement that is not a number ({found.reason}); verbal is None",
            )
        elif found.status == "ambiguous":  # refused, under its own reason (undeclared_scale, wide_range, ...)
            self.health.count(
                "rejected", f"confidence_{found.reason}", f"an ambiguous confidence ({found.reason}); verbal is None"
            )
        elif found.status == "clipped":
            self.health.count(
                "malformed", "confidence_clipped", f"a stated confidence outside [0, 1] was clipped to {found.value}"
            )

    def parse(self, logprobs: Any) -> TokenLogprobs | None:
        """Parsed logprobs, or None (counted; a malformed object is also counted in `health`)."""
        if logprobs is None:
            self._count("no_logprobs")
            return None
        if isinstance(logprobs, Mapping) and "content" in logprobs and logprobs["content"] is None:
            # OpenAI's shape for a message that is only a tool call: chat completions give no logprobs
            # for the call's arguments. A provider that does puts the call's tokens in "content" and
            # they are scored like text; without them the step is a gap for the token predictors.
            self._count("no_content_logprobs")
            return None
        from tps_tracer.capture.token_logprobs import LogprobsFormatError, parse_logprobs

        try:
            return parse_logprobs(logprobs)
        except LogprobsFormatError as exc:
            self._count("malformed_logprobs")
            self.health.count("malformed", "logprobs", f"malformed logprobs ({exc}); logprob signals missing")
            return None

    def forecasts(
        self,
        text: str | None,
        logprobs: Any = None,
        tool_arguments: Any = None,
        action_text: str | None = None,
        verbal_scale: str | None = None,
    ) -> dict[str, float | None]:
        """The five per-step forecasts; never raises.

        text: the step's completion (for the verbal confidence; defaults to the tokens' text).
        logprobs: any format `parse_logprobs` accepts (or None).
        tool_arguments: tool calls' arguments (one mapping / JSON string, or a sequence of
          them, one per parallel call), read for a `confidence` when the text has none.
        action_text: locate the action as this exact string instead of with `action_span`.
        verbal_scale: this call's scale of bare numbers in the stated confidence (None: the
          extractor's; a run's `tps_verbal_scale` metadata arrives here).
        """
        return self._finish(self._parse_guarded(logprobs), text, tool_arguments, action_text, verbal_scale, None)

    def forecasts_batch(
        self, steps: Sequence[tuple[str | None, Any, Any, str | None]]
    ) -> list[dict[str, float | None]]:
        """`forecasts(text, logprobs, tool_arguments, verbal_scale=...)` of each (text, logprobs,
        tool_arguments, verbal_scale), the same to the bit, with the per-token arrays of steps whose
        candidate rows are full and of one width computed in one numpy pass (token_signals.py:
        elementwise and row-wise operations give each element what the step alone gives it;
        each step's means are still taken over its own slice). Never raises."""
        parsed = [self._parse_guarded(logprobs) for _, logprobs, _, _ in steps]
        arrays = self._batched_arrays(parsed)
        return [
            self._finish(lp, text, tool_arguments, None, verbal_scale, arrays.get(i))
            for i, (lp, (text, _, tool_arguments, verbal_scale)) in enumerate(zip(parsed, steps, strict=True))
        ]

    def _batched_arrays(self, parsed: list[TokenLogprobs | None]) -> dict[int, tuple[Any, Any]]:
        """{step index: (per-token probability, entropy confidence)} for the steps one pass can serve."""
        try:
            from tps_tracer.capture.token_signals import batched_per_token

            return batched_per_token(parsed, self.top_k)
        except Exception as exc:  # the steps are then computed one by one, as forecasts() does
            self._internal_error("batched token signals", exc)
            return {}

    def _parse_guarded(self, logprobs: Any) -> TokenLogprobs | None:
        try:
            return self.parse(logprobs)
        except Exception as exc:  # parse_logprobs only raises LogprobsFormatError; a guard
            self._internal_error("logprobs parsing", exc)
            return None

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
            self._token_signals(lp, action_text, out, arrays)
        except Exception as exc:
            self._internal_error("token signals", exc)
            out.update(dict.fromkeys(PREDICTORS[1:]))
        return out

    def _token_signals(
        self,
        lp: TokenLogprobs,
        action_text: str | None,
        out: dict[str, float | None],
        arrays: tuple[Any, Any] | None = None,
    ) -> None:
        from tps_tracer.capture.token_signals import masked_mean, per_token_entropy_confidence, per_token_probability

        if lp.n == 0:
            self._count("no_tokens")
        if arrays is None:
            prob, ent = per_token_probability(lp), per_token_entropy_confidence(lp, self.top_k)
        else:
            prob, ent = arrays
        out[TOKEN_PROB] = masked_mean(prob)
        out[ENTROPY_CONF] = masked_mean(ent)
        if out[ENTROPY_CONF] is None and lp.n:
            self._count("no_top_logprobs")
        locate = substring_span(action_text) if action_text is not None else self.action_span
        span = locate(lp.text)
        if span is None:
            self._count("no_action_span")
        else:
            mask = token_mask(lp, span)
            out[ACTION_TOKEN_PROB] = masked_mean(prob, mask)
            out[ACTION_ENTROPY_CONF] = masked_mean(ent, mask)
