"""What a valid horizon and a valid probability are, on the capture side: one function each.

Issue 36 found the path `on_llm_end -> line on disk` deciding horizon validity in 3 places and
forecast validity in 5, with small differences (NaN, bool, numpy scalars, integral floats). Every
capture-side check calls these (tracking/trajectory.py's step budgets, tracking/tracker.py's
default horizon, online/input_checks.py's steps, q_Z and stop horizons, the sink's resolution
lines, capture/confidence_value.py's qualitative levels); the read side (records/) has its own
schema with the same bounds. No numpy import: this sits on the capture path (start-up cost).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from tps_tracer.constants import MAX_HORIZON


def probability(value: Any) -> float | None:
    """`value` as a probability: a real number (Python or numpy, not bool) in [0, 1]; else None
    (NaN, infinities, strings, None)."""
    if type(value) is float:  # the common case first: this runs on every forecast
        return value if 0.0 <= value <= 1.0 else None
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    x = float(value)
    return x if 0.0 <= x <= 1.0 else None


def horizon(value: Any, at_least: int = 1, labels: bool = False) -> int | None:
    """`value` as a step budget T: an integer in [max(at_least, 1), MAX_HORIZON], else None.

    labels: the value was read from metadata or a span attribute, where an integral float (8.0)
    or a digit string ("8") is how the budget arrives; an API argument must be an integer."""
    if isinstance(value, bool):
        return None
    if labels and isinstance(value, str):
        text = value.strip()
        if not text.isdigit() or len(text) > 9:  # > 9 digits exceeds MAX_HORIZON; int() of huge text is slow
            return None
        value = int(text)
    elif labels and isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if not isinstance(value, Integral):
        return None
    t = int(value)
    return t if max(at_least, 1) <= t <= MAX_HORIZON else None
