"""What a valid forecast (probability) and a valid horizon are: every rule in this one file.

Two sides ask, with the same bounds ([0, 1]; [1, MAX_HORIZON]) and different consequences:
the capture side (what an adapter or the accumulator is given: refused and counted) and the
read side (what a trajectory file holds: a non-numeric forecast is a counted per-predictor skip,
an out-of-range one an error naming the line), further down.

Capture side.

Every capture-side check calls these (tracking/tracker.py's step budgets and
default horizon, online/input_checks.py's steps, q_Z and stop horizons, the sink's resolution
lines, capture/confidence_value.py's qualitative levels), so the path `on_llm_end -> line on disk`
cannot decide a rule twice with small differences (NaN, bool, numpy scalars, integral floats); the
read side's rules follow below.
No numpy import: this sits on the capture path (start-up cost).
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


# -- Read side -----------------------------------------------------------------------------------
# What a forecast and a horizon may be when a file is read: each rule decided in one function here.
#
# Every reader asks these: the exact per-record path (`schema.py`, `jsonl.py`, `arrays.py`), the
# columnar value check of the fast paths (`columnar.validated_arrays`, over numpy arrays: the range
# functions take a number or an array alike) and the converter (`parquet.py`). The fast readers never
# see a NaN *value* (orjson and the Arrow readers refuse it, `reading.NotFast`): there NaN means
# "absent", and only the exact path names a NaN forecast.


def classify_forecast(value: Any) -> float | str:
    """A numeric forecast as float, or why the step has none: "missing" (null) or "non_numeric"
    (a string, a bool, an object: a per-predictor skip, counted, not an error)."""
    if value is None:
        return "missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "non_numeric"
    return float(value)


def forecast_outside(value: Any) -> Any:
    """True where a forecast is outside [0, 1] (a number, or elementwise over an array; NaN is not)."""
    return (value < 0.0) | (value > 1.0)


def forecast_problem(value: Any) -> str | None:
    """Why a numeric forecast value is an error (NaN, infinite, outside [0, 1]), or None.

    Missing (None) and non-numeric values are not problems here: they are per-predictor
    skips, counted when arrays are built (`classify_forecast`).
    """
    number = classify_forecast(value)
    if isinstance(number, str):
        return None
    if math.isnan(number):
        return "forecast is NaN"
    if forecast_outside(number):
        return f"forecast {value!r} is outside [0, 1]"
    return None


def horizon_range_problem(horizon: int) -> str | None:
    """Why a given horizon is out of range (the words pydantic's ge/le bounds used), or None. The
    capture path's bound (constants.MAX_HORIZON): a schedule over a larger T costs O(T) memory."""
    if not horizon_outside(horizon):
        return None
    if horizon < 1:
        return "Input should be greater than or equal to 1"
    return f"Input should be less than or equal to {MAX_HORIZON}"


def horizon_outside(horizon: Any) -> Any:
    """True where a given horizon is outside [1, MAX_HORIZON] (elementwise over an array; NaN, "not
    given", is not): `horizon_range_problem`'s rule for the columnar check."""
    return (horizon < 1) | (horizon > MAX_HORIZON)


def horizon_below_steps(horizon: Any, n_steps: Any) -> Any:
    """True where a given horizon is smaller than the number of observed steps (NaN: not given)."""
    return horizon < n_steps
