"""What a forecast and a horizon may be when a file is read: each rule decided in one function here.

Every reader asks these: the exact per-record path (`schema.py`, `jsonl.py`, `arrays.py`), the
columnar value check of the fast paths (`columnar.validated_arrays`, over numpy arrays: the range
functions take a number or an array alike) and the converter (`parquet.py`). The fast readers never
see a NaN *value* (orjson and the Arrow readers refuse it, `reading.NotFast`): there NaN means
"absent", and only the exact path names a NaN forecast. The capture side (the adapters and the
online accumulator) has its own checks of what it is given (docs/design.md lists them).
"""

from __future__ import annotations

import math
from typing import Any

from tps_tracer.constants import MAX_HORIZON


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
