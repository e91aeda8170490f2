"""One LLM step -> its five forecasts, the per-step predictors of the paper.

    extractor = SignalExtractor()
    forecasts = extractor.forecasts(text, logprobs)      # feed to Accumulator.observe
    # {"verbal": 0.85, "token_prob": 0.91, "entropy_conf": 0.77,
    #  "action_token_prob": 0.83, "action_entropy_conf": 0.64}

A signal that cannot be computed is None (never a default), and the reason is counted
in `extractor.counts` (thread-safe): no stated confidence, a malformed one, no logprobs,
malformed logprobs (also logged once), no top-k candidates, no action span.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from tps_tracer.capture.action_span import DEFAULT_ACTION_SPAN, SpanLocator, substring_span, token_mask
from tps_tracer.capture.token_logprobs import LogprobsFormatError, TokenLogprobs, parse_logprobs
from tps_tracer.capture.token_signals import (
    DEFAULT_TOP_K,
    masked_mean,
    per_token_entropy_confidence,
    per_token_probability,
)
from tps_tracer.capture.verbal_confidence import VerbalConfidenceExtractor

logger = logging.getLogger("tps_tracer")

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
    ):
        self.confidence = confidence or VerbalConfidenceExtractor()
        self.action_span = action_span
        self.top_k = top_k
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._warned = False

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def verbal(self, text: str | None, tool_arguments: Mapping[str, Any] | str | None = None) -> float | None:
        """Stated confidence from the text, else from a tool call's arguments."""
        found = self.confidence.from_text(text)
        if found.status == "missing" and tool_arguments is not None:
            found = self.confidence.from_arguments(tool_arguments)
        if found.status != "ok":
            self._count(f"verbal_{found.status}")
        return found.value

    def parse(self, logprobs: Any) -> TokenLogprobs | None:
        """Parsed logprobs, or None (counted; a malformed object is also logged once)."""
        if logprobs is None:
            self._count("no_logprobs")
            return None
        try:
            return parse_logprobs(logprobs)
        except LogprobsFormatError as exc:
            self._count("malformed_logprobs")
            if not self._warned:
                self._warned = True
                logger.warning(
                    "tps-tracer: malformed logprobs (%s); logprob signals missing, further ones counted", exc
                )
            return None

    def forecasts(
        self,
        text: str | None,
        logprobs: Any = None,
        tool_arguments: Mapping[str, Any] | str | None = None,
        action_text: str | None = None,
    ) -> dict[str, float | None]:
        """The five per-step forecasts.

        text: the step's completion (for the verbal confidence; defaults to the tokens' text).
        logprobs: any format `parse_logprobs` accepts (or None).
        tool_arguments: a tool call's arguments, read for a `confidence` when the text has none.
        action_text: locate the action as this exact string instead of with `action_span`.
        """
        lp = self.parse(logprobs)
        out: dict[str, float | None] = {
            VERBAL: self.verbal(text if text is not None else (lp.text if lp else None), tool_arguments)
        }
        if lp is None:
            out.update(dict.fromkeys(PREDICTORS[1:]))
            return out
        if lp.n == 0:
            self._count("no_tokens")
        prob = per_token_probability(lp)
        ent = per_token_entropy_confidence(lp, self.top_k)
        out[TOKEN_PROB] = masked_mean(prob)
        out[ENTROPY_CONF] = masked_mean(ent)
        if out[ENTROPY_CONF] is None and lp.n:
            self._count("no_top_logprobs")
        locate = substring_span(action_text) if action_text is not None else self.action_span
        span = locate(lp.text)
        if span is None:
            self._count("no_action_span")
            out[ACTION_TOKEN_PROB] = out[ACTION_ENTROPY_CONF] = None
        else:
            mask = token_mask(lp, span)
            out[ACTION_TOKEN_PROB] = masked_mean(prob, mask)
            out[ACTION_ENTROPY_CONF] = masked_mean(ent, mask)
        return out
