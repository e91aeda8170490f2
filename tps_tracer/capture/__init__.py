"""Capture: pure functions from one LLM step (text, logprobs) to forecasts. No framework imports.

Names are imported when first used (PEP 562), so the adapters, which import
`capture.step_signals`, do not load numpy until a step carries logprobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tps_tracer.errors import lazy_names

if TYPE_CHECKING:
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

_WHERE = {
    "action_span": ("DEFAULT_ACTION_SPAN", "react_span", "substring_span", "tag_span", "token_mask"),
    "step_signals": (
        "ACTION_ENTROPY_CONF",
        "ACTION_TOKEN_PROB",
        "ENTROPY_CONF",
        "PREDICTORS",
        "TOKEN_PROB",
        "VERBAL",
        "SignalExtractor",
    ),
    "token_logprobs": (
        "LogprobsFormatError",
        "LogprobsStream",
        "TokenLogprobs",
        "from_legacy_completion",
        "from_openai_chat",
        "parse_logprobs",
    ),
    "token_signals": ("entropy_confidence", "token_probability"),
    "verbal_confidence": ("Confidence", "VerbalConfidenceExtractor"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

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


__getattr__, __dir__ = lazy_names(__name__, _MODULE_OF)
