"""Capture: pure functions from one LLM step (text, logprobs) to forecasts. No framework imports."""

from tps_tracer.capture.action_span import DEFAULT_ACTION_SPAN, react_span, substring_span, tag_span, token_mask
from tps_tracer.capture.step_signals import (
    ACTION_ENTROPY_CONF,
    ACTION_TOKEN_PROB,
    ENTROPY_CONF,
    PREDICTORS,
    TOKEN_PROB,
    VERBAL,
    SignalExtractor,
)
from tps_tracer.capture.token_logprobs import (
    LogprobsFormatError,
    LogprobsStream,
    TokenLogprobs,
    from_legacy_completion,
    from_openai_chat,
    parse_logprobs,
)
from tps_tracer.capture.token_signals import entropy_confidence, token_probability
from tps_tracer.capture.verbal_confidence import Confidence, VerbalConfidenceExtractor

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
    "entropy_confidence",
    "from_legacy_completion",
    "from_openai_chat",
    "parse_logprobs",
    "react_span",
    "substring_span",
    "tag_span",
    "token_mask",
    "token_probability",
]
