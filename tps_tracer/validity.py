"""What a valid forecast (probability) and horizon are, for the capture side (refused and counted) and the
read side (a counted skip, or an error naming the line). No numpy: this is on the capture path."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from tps_tracer.constants import MAX_HORIZON


def probability(value: Any) -> float | None:
    """`value` as a probability: a real number (Python or numpy, not bool) in [0, 1]; else None."""
    if type(value) is float:  # the common case first: this runs on every forecast
        return value if 0.0 <= value <= 1.0 else None
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    x = float(value)
    return x if 0.0 <= x <= 1.0 else None


def horizon(value: Any, at_least: int = 1, labels: bool = False) -> int | None:
    """`value` as a step budget T: an integer in [max(at_least, 1), MAX_HORIZON], else None. labels: read
    from metadata or a span attribute, where an integral float (8.0) or digit string ("8") is accepted."""
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


# -- Read side: the range functions take a number or a numpy array alike (the columnar check); in the
# fast readers' arrays NaN means "absent", so only the exact path names a NaN forecast.


def classify_forecast(value: Any) -> float | str:
    """A numeric forecast as float, or why the step has none: "missing" (null) or "non_numeric" (a counted skip)."""
    if value is None:
        return "missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "non_numeric"
    return float(value)


def forecast_outside(value: Any) -> Any:
    """True where a forecast is outside [0, 1] (NaN is not)."""
    return (value < 0.0) | (value > 1.0)


def forecast_problem(value: Any) -> str | None:
    """Why a numeric forecast value is an error (NaN, infinite, outside [0, 1]), or None (also for skips)."""
    number = classify_forecast(value)
    if isinstance(number, str):
        return None
    if math.isnan(number):
        return "forecast is NaN"
    if forecast_outside(number):
        return f"forecast {value!r} is outside [0, 1]"
    return None


def horizon_range_problem(horizon: int) -> str | None:
    """Why a given horizon is out of range (in the words of pydantic's ge/le bounds), or None."""
    if not horizon_outside(horizon):
        return None
    if horizon < 1:
        return "Input should be greater than or equal to 1"
    return f"Input should be less than or equal to {MAX_HORIZON}"


def horizon_outside(horizon: Any) -> Any:
    """True where a given horizon is outside [1, MAX_HORIZON] (NaN, "not given", is not)."""
    return (horizon < 1) | (horizon > MAX_HORIZON)
