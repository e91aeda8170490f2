"""Verbal confidence: the probability of success the model states at a step.

The paper's prompts ask for `<confidence>0.85</confidence>`; models (and other prompt
styles) also write `Confidence: 85%`, `{"confidence": 0.85}`, or pass a `confidence`
argument in a tool call. The extractor reads all of these:

- the value is the last statement in the text (the one the step commits to);
- `85%` means 0.85; a bare number above 1 is read as a percentage too (`Confidence: 85`),
  unless `percent_without_sign=False`;
- values outside [0, 1] after scaling are clipped, and counted as clipped;
- no statement gives a missing value (None), never a default; a statement that is not
  a number (`<confidence>high</confidence>`) is malformed and also gives None.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "clipped", "missing", "malformed"]

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_VALUE = re.compile(rf"^\s*[\"']?\s*({_NUMBER})\s*(%?)\s*[\"']?\s*$")

# Each pattern captures the raw statement; the value is parsed from it afterwards, so a
# present-but-unreadable statement is told apart from an absent one.
DEFAULT_PATTERNS: tuple[str, ...] = (
    r"<confidence>(.*?)</confidence>",
    r"\"confidence\"\s*:\s*(\"[^\"]*\"|[^,}\s]+)",
    r"\bconfidence(?:\s+(?:level|score))?\s*[:=]\s*([^\s,;<]+%?)",
)


@dataclass(frozen=True)
class Confidence:
    value: float | None
    status: Status


@dataclass
class VerbalConfidenceExtractor:
    """Configurable parser of stated confidences (see the module docstring)."""

    patterns: Sequence[str] = DEFAULT_PATTERNS
    argument_keys: Sequence[str] = ("confidence",)
    percent_without_sign: bool = True
    _compiled: list[re.Pattern[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._compiled = [re.compile(p, re.IGNORECASE | re.DOTALL) for p in self.patterns]

    def _scale(self, raw: str) -> Confidence:
        m = _VALUE.match(raw.rstrip(".!?)"))  # "Confidence: 0.9." ends a sentence
        if not m:
            return Confidence(None, "malformed")
        value = float(m.group(1))
        if not math.isfinite(value):
            return Confidence(None, "malformed")
        if m.group(2) or (self.percent_without_sign and value > 1.0):
            value /= 100.0
        if 0.0 <= value <= 1.0:
            return Confidence(value, "ok")
        return Confidence(min(1.0, max(0.0, value)), "clipped")

    def from_text(self, text: str | None) -> Confidence:
        """The last confidence statement of the first pattern that matches, scaled and clipped."""
        if not text:
            return Confidence(None, "missing")
        for pattern in self._compiled:
            found = pattern.findall(text)
            if found:
                return self._scale(found[-1])
        return Confidence(None, "missing")

    def from_arguments(self, arguments: Mapping[str, Any] | str | None) -> Confidence:
        """A confidence passed as a tool-call argument (a dict, or its JSON string)."""
        if isinstance(arguments, str):
            text = arguments
            try:
                arguments = json.loads(text)
            except ValueError:
                return self.from_text(text)  # not JSON: maybe still a "confidence: 0.8" string
        if not isinstance(arguments, Mapping):
            return Confidence(None, "missing")
        for key in self.argument_keys:
            if key in arguments:
                v = arguments[key]
                if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                    return Confidence(None, "malformed")
                return self._scale(str(v))
        return Confidence(None, "missing")

    def __call__(self, text: str | None) -> float | None:
        return self.from_text(text).value
