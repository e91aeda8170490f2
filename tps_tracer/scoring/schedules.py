"""Step-weight schedules for the Trajectory Proper Score.

Weights are normalised over the evaluated horizon T (sum_{t=1..T} w_t = 1) and, for a
prefix stopped at Z < T, truncated at Z without renormalisation (paper, Section 3.1 and
Appendix "Score-Family and Weight-Schedule Sensitivity"):

    linear-front       w_t = 2 (T - t + 1) / (T (T + 1))      (the default)
    uniform            w_t = 1 / T
    exponential-front  w_t = 2^-(t-1) / (2 (1 - 2^-T))
    linear-back        w_t = 2 t / (T (T + 1))

Custom schedules supply positive raw weights as a function of (t, T); they are
normalised over t = 1..T numerically, once per distinct horizon.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tps_tracer.constants import MAX_HORIZON
from tps_tracer.errors import InputError

FloatArray = NDArray[np.float64]
RawWeightFn = Callable[[FloatArray, FloatArray], ArrayLike]
_TOTAL_BLOCK = 1 << 20  # steps per block when a custom schedule is normalised numerically


@dataclass(frozen=True)
class WeightSchedule:
    """A named schedule: raw positive weights of (t, T), plus the closed-form sum over t=1..T if known."""

    name: str
    raw: RawWeightFn
    total: Callable[[FloatArray], FloatArray] | None = None

    def step_weights(self, t: ArrayLike, horizon: ArrayLike) -> FloatArray:
        """Normalised weights w_t for 1-based steps t of trajectories with horizon T (elementwise)."""
        ta = np.asarray(t, dtype=np.float64)
        ha = np.asarray(horizon, dtype=np.float64)
        raw = np.asarray(self.raw(ta, ha), dtype=np.float64)
        if self.total is not None:
            return raw / self.total(ha)
        return raw / self._numeric_totals(ha)

    def _numeric_totals(self, horizon: FloatArray) -> FloatArray:
        uniq, inverse = np.unique(horizon, return_inverse=True)
        if uniq.size and not uniq[-1] <= MAX_HORIZON:  # the numeric total costs O(T) (NaN sorts last)
            raise InputError(
                f"schedule {self.name!r}: horizon must be at most MAX_HORIZON = {MAX_HORIZON}, got {uniq[-1]!r}"
            )
        totals = np.empty(uniq.shape, dtype=np.float64)
        for i, big_t in enumerate(uniq):
            # One pass for usual horizons; in blocks beyond, so memory stays bounded for any T.
            total = 0.0
            for lo in range(1, int(big_t) + 1, _TOTAL_BLOCK):
                steps = np.arange(float(lo), min(float(lo + _TOTAL_BLOCK), big_t + 1.0))
                raw = np.asarray(self.raw(steps, np.full_like(steps, big_t)), dtype=np.float64)
                if raw.shape != steps.shape or not np.all(np.isfinite(raw) & (raw > 0)):
                    raise InputError(
                        f"schedule {self.name!r} must give finite positive weights for t=1..T (T={int(big_t)})"
                    )
                total += raw.sum()
            totals[i] = total
        return totals[inverse].reshape(horizon.shape)


def _tri(h: FloatArray) -> FloatArray:
    return h * (h + 1.0) / 2.0


LINEAR_FRONT = WeightSchedule("linear-front", lambda t, h: h - t + 1.0, _tri)
UNIFORM = WeightSchedule("uniform", lambda t, h: np.ones_like(t), lambda h: h)
EXPONENTIAL_FRONT = WeightSchedule(
    "exponential-front", lambda t, h: np.exp2(-(t - 1.0)), lambda h: 2.0 * (1.0 - np.exp2(-h))
)
LINEAR_BACK = WeightSchedule("linear-back", lambda t, h: t, _tri)

BUILTIN_SCHEDULES: dict[str, WeightSchedule] = {
    s.name: s for s in (LINEAR_FRONT, UNIFORM, EXPONENTIAL_FRONT, LINEAR_BACK)
}
DEFAULT_SCHEDULE = LINEAR_FRONT


def custom_schedule(name: str, raw: RawWeightFn) -> WeightSchedule:
    """A user schedule from raw positive weights raw(t, T); normalisation is done for you."""
    if name in BUILTIN_SCHEDULES:
        raise InputError(f"{name!r} is a built-in schedule name; choose another name")
    return WeightSchedule(name, raw)


def get_schedule(schedule: str | WeightSchedule) -> WeightSchedule:
    if isinstance(schedule, WeightSchedule):
        return schedule
    key = schedule.strip().lower()
    try:
        return BUILTIN_SCHEDULES[key]
    except KeyError:
        known = ", ".join(BUILTIN_SCHEDULES)
        raise InputError(f"unknown weight schedule {schedule!r}; known: {known}") from None


def parse_schedules(text: str) -> list[WeightSchedule]:
    """Parse "linear-front,uniform" or "all"."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if names == ["all"]:
        return list(BUILTIN_SCHEDULES.values())
    if not names:
        raise InputError("no weight schedule given")
    return [get_schedule(n) for n in names]


def weights(schedule: str | WeightSchedule = "linear-front", horizon: int = 1) -> FloatArray:
    """The normalised weight vector (w_1, ..., w_T) of a schedule for horizon T."""
    # The range first: int() of NaN or infinity would raise its own, less helpful error.
    number = isinstance(horizon, (int, float, np.integer, np.floating)) and not isinstance(horizon, bool)
    if not number or not 1 <= horizon <= MAX_HORIZON or int(horizon) != horizon:
        raise InputError(f"horizon must be an integer in [1, MAX_HORIZON = {MAX_HORIZON}], got {horizon!r}")
    steps = np.arange(1.0, int(horizon) + 1.0)
    return get_schedule(schedule).step_weights(steps, np.full_like(steps, float(horizon)))
