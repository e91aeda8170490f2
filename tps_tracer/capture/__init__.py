"""Capture: pure functions from one LLM step (text, logprobs) to forecasts, no framework imports.
The token_logprobs names are imported on first use (PEP 562): numpy loads once a step carries logprobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tps_tracer.capture.step_signals import (
    ACTION_ENTROPY_CONF,
    ACTION_TOKEN_PROB,
    DEFAULT_ACTION_SPAN,
    ENTROPY_CONF,
    PREDICTORS,
    TOKEN_PROB,
    VERBAL,
    SignalExtractor,
    react_span,
    substring_span,
    tag_span,
)
from tps_tracer.capture.verbal_confidence import Confidence, VerbalConfidenceExtractor
from tps_tracer.errors import lazy_names

if TYPE_CHECKING:
    from tps_tracer.capture.token_logprobs import (
        LogprobsFormatError,
        LogprobsStream,
        TokenLogprobs,
        from_legacy_completion,
        from_openai_chat,
        parse_logprobs,
        token_mask,
    )

__all__ = [
    "ACTION_ENTROPY_CONF",
    "ACTION_TOKEN_PROB",
    "DEFAULT_ACTION_SPAN",
    "ENTROPY_CONF",
    "PREDICTORS",
    "TOKEN_PROB",
    "VERBAL",
    "Confidence",
    "LogprobsFormatError",
    "LogprobsStream",
    "SignalExtractor",
    "TokenLogprobs",
    "VerbalConfidenceExtractor",
    "from_legacy_completion",
    "from_openai_chat",
    "parse_logprobs",
    "react_span",
    "substring_span",
    "tag_span",
    "token_mask",
]
__getattr__, __dir__ = lazy_names(__name__, {name: "token_logprobs" for name in __all__ if name not in globals()})
