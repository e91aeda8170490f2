"""`RawStep`: what one model call returned, untouched, on its way to signal extraction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# One tool call's arguments (a mapping or its JSON text), or all of a message's parallel calls.
ToolArguments = Mapping[str, Any] | str | Sequence[Mapping[str, Any] | str]


@dataclass(frozen=True)
class RawStep:
    """Text, logprobs in any accepted format, and tool-call arguments of one model call.

    `forecasts`: forecasts computed by the caller (e.g. a span's `tps.forecasts`), used as
    they are instead of extracting signals from the text and logprobs.
    `verbal_scale`: the run's `tps_verbal_scale` metadata, checked by the tracker."""

    text: str | None
    logprobs: Any = None
    tool_arguments: ToolArguments | None = None
    forecasts: Mapping[str, Any] | None = None
    verbal_scale: str | None = None  # the run's declared scale of stated confidences (None: the extractor's)
