"""The accumulator's checks of what a caller gives it: ids, forecasts, outcomes, q_Z, horizons, metadata.

Each check returns the cleaned value (or False / None when it is refused) and reports a refusal
through `reject(kind, message)`: the accumulator counts it in its health ledger under that kind,
or raises in strict mode. Nothing here keeps state beyond the configured predictor names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from tps_tracer.constants import MAX_HORIZON
from tps_tracer.records.record_shape import InvalidOutcome, as_outcome, id_problem
from tps_tracer.validity import horizon as valid_horizon
from tps_tracer.validity import probability


class InputChecks:
    def __init__(self, reject: Callable[[str, str], None], predictors: frozenset[str] | None):
        """reject(kind, message): count (or raise) a refused input. predictors: the only names
        accepted in a step (None: any)."""
        self.reject = reject
        self.predictors = predictors

    def step(self, trajectory_id: str, forecasts: Mapping[str, Any]) -> dict[str, float | None]:
        allowed = self.predictors
        out: dict[str, float | None] = {}
        for name, v in forecasts.items():
            if allowed is not None and name not in allowed:
                self.reject("unconfigured_predictor", f"predictor {name!r} is not one of {sorted(allowed)}")
                continue
            if type(v) is float and 0.0 <= v <= 1.0:  # probability()'s first case, inlined: every forecast
                out[name] = v
            elif v is None:
                out[name] = None
            elif (p := probability(v)) is not None:
                out[name] = p
            else:
                self.reject("invalid_forecast", f"{trajectory_id!r}: forecast {name}={v!r} is not a number in [0, 1]")
                out[name] = None
        return out

    def valid_id(self, trajectory_id: Any) -> bool:
        """The reader's rule (records/record_shape.py): an id written is an id read back."""
        problem = id_problem(trajectory_id)
        if problem is None:
            return True
        self.reject("invalid_id", problem)
        return False

    # ------------------------------------------------------------------ events

    def outcome(self, trajectory_id: str, outcome: Any) -> int | None:
        try:
            return as_outcome(outcome, allow_strings=False)
        except InvalidOutcome as exc:
            self.reject("invalid_outcome", f"{trajectory_id!r}: {exc}")
            return None

    def q_z(self, trajectory_id: str, q_z: Any) -> float | None:
        if q_z is None:
            return None
        q = probability(q_z)
        if q is not None:
            return q
        self.reject("invalid_q_z", f"{trajectory_id!r}: q_z must be a probability in [0, 1], got {q_z!r}")
        return None

    def horizon_ok(self, tid: str, horizon: Any, n_steps: int) -> bool:
        if valid_horizon(horizon, at_least=n_steps) is not None:
            return True
        self.reject(
            "invalid_horizon",
            f"{tid!r}: horizon {str(horizon)[:40]!r} is not an integer in [{max(n_steps, 1)}, {MAX_HORIZON}] "
            "(the steps taken, the largest budget accepted); using the steps taken",
        )
        return False

    def metadata(self, tid: str, metadata: Any) -> dict[str, Any]:
        """The record's metadata as strict JSON: a non-mapping is dropped, NaN/inf and non-JSON values
        are replaced (null, their repr), counted as invalid_metadata; never a reason to lose the run."""
        if metadata is None:
            return {}
        if not isinstance(metadata, Mapping):
            self.reject("invalid_metadata", f"{tid!r}: metadata must be a mapping, got {type(metadata).__name__}")
            return {}
        md = dict(metadata)
        try:
            json.dumps(md, allow_nan=False)
            if all(type(k) is str for k in md):
                return md
        except (TypeError, ValueError, RecursionError):
            pass
        self.reject("invalid_metadata", f"{tid!r}: metadata is not strict JSON; bad values written as null / repr")
        return {str(k): _json_safe(v, 0) for k, v in md.items()}


def _json_safe(value: Any, depth: int) -> Any:
    """A strict-JSON stand-in for a metadata value: NaN/inf -> null, unknown objects -> their repr."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth < 8 and isinstance(value, Mapping):
        return {str(k): _json_safe(v, depth + 1) for k, v in value.items()}
    if depth < 8 and isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value]
    return repr(value)[:200]
