"""Strictly proper binary score rules (reward-oriented, as their branches S(p, 1), S(p, 0)), step weight
schedules (normalised over the horizon T, truncated at Z), and the branch pairs every TPS variant mixes
(docs/design.md, "The branch pair"; formulas in "Conventions")."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tps_tracer.constants import MAX_HORIZON
from tps_tracer.errors import InputError

LOG_CLIP_EPS = 1e-6

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


class ScoreRule(Protocol):
    @property
    def name(self) -> str: ...

    def branches(self, p: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(S(p, 1), S(p, 0)) elementwise; p already validated."""


@dataclass(frozen=True)
class LogRule:
    """S(p, 1) = log p, S(p, 0) = log(1 - p), p clipped to [eps, 1 - eps]."""

    eps: float = LOG_CLIP_EPS
    name: str = "log"

    def branches(self, p: FloatArray) -> tuple[FloatArray, FloatArray]:
        # In-place on one buffer: this runs over every step of every trajectory.
        buf = np.clip(p, self.eps, 1.0 - self.eps, out=np.empty_like(p, dtype=np.float64))
        s1 = np.log(buf)
        return s1, np.log1p(np.negative(buf, out=buf), out=buf)


@dataclass(frozen=True)
class BrierRule:
    """S(p, 1) = -(1 - p)^2, S(p, 0) = -p^2."""

    name: str = "brier"

    def branches(self, p: FloatArray) -> tuple[FloatArray, FloatArray]:
        return -np.square(1.0 - p), -np.square(p)


@dataclass(frozen=True)
class BetaRule:
    """Schervish-Buja threshold mixture with density c^(a-1) (1-c)^(b-1), unnormalised: S(p, 1) =
    -B(a, b+1) I_{1-p}(b+1, a), S(p, 0) = -B(a+1, b) I_p(a+1, b); integers by the closed form (no scipy)."""

    a: float
    b: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.a) and math.isfinite(self.b) and self.a > 0 and self.b > 0):
            raise InputError(f"beta(a,b) needs finite a > 0 and b > 0, got a={self.a}, b={self.b}")

    @property
    def name(self) -> str:
        return f"beta({_fmt_param(self.a)},{_fmt_param(self.b)})"

    @cached_property
    def _constants(self) -> tuple[float, float]:
        from scipy import special  # only the beta family needs scipy: not imported by the capture path

        return float(special.beta(self.a, self.b + 1.0)), float(special.beta(self.a + 1.0, self.b))

    def branches(self, p: FloatArray) -> tuple[FloatArray, FloatArray]:
        a, b = self.a, self.b
        if float(a).is_integer() and float(b).is_integer() and a + b <= _MAX_POLY_DEGREE:
            x = np.asarray(p, dtype=np.float64)
            xc = 1.0 - x
            return -_incomplete_integral(xc, x, int(b), int(a) - 1), -_incomplete_integral(x, xc, int(a), int(b) - 1)
        from scipy import special

        k1, k0 = self._constants
        # I_{1-p}(b+1, a) instead of 1 - I_p(a, b+1): no cancellation for p near 1.
        s1 = special.betainc(b + 1.0, a, 1.0 - p)
        s1 *= -k1
        s0 = special.betainc(a + 1.0, b, p)
        s0 *= -k0
        return np.asarray(s1, dtype=np.float64), np.asarray(s0, dtype=np.float64)


# Integer beta rules up to this a + b use the closed form (a sum of at most this many terms).
_MAX_POLY_DEGREE = 16


def _incomplete_integral(x: FloatArray, xc: FloatArray, m: int, n: int) -> FloatArray:
    """int_0^x u^m (1-u)^n du for integers m, n >= 0; xc is 1 - x, given so that it is not rounded twice:
    B(m+1, n+1) times the binomial tail I_x(m+1, n+1) = sum_{j>m} C(N, j) x^j xc^(N-j), N = m+n+1:
    every term is positive, so the sum loses no digits to cancellation (unlike the power series)."""
    big_n = m + n + 1
    # Powers by repeated multiplication (a float power per element costs ~10x a product).
    xc_pow = [np.ones_like(x)]
    for _ in range(n):
        xc_pow.append(xc_pow[-1] * xc)
    x_pow = x ** (m + 1)
    acc = math.comb(big_n, m + 1) * x_pow * xc_pow[n]
    for j in range(m + 2, big_n + 1):
        x_pow = x_pow * x
        acc += math.comb(big_n, j) * x_pow * xc_pow[big_n - j]
    return np.asarray(acc * (math.factorial(m) * math.factorial(n) / math.factorial(big_n)), dtype=np.float64)


def _fmt_param(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


_BETA_RE = re.compile(r"^beta\(\s*([^,\s]+)\s*,\s*([^)\s]+)\s*\)$")


def get_rule(rule: str | ScoreRule) -> ScoreRule:
    """Resolve a rule name ("log", "brier", "beta(2,4)") or pass a rule object through."""
    if not isinstance(rule, str):
        return rule
    name = rule.strip().lower()
    if name in ("log", "brier"):
        return LogRule() if name == "log" else BrierRule()
    m = _BETA_RE.match(name)
    if m:
        try:
            a, b = float(m.group(1)), float(m.group(2))
        except ValueError:
            raise InputError(f"cannot read the parameters of rule {rule!r}") from None
        return BetaRule(a, b)
    raise InputError(f"unknown score rule {rule!r}: use 'log', 'brier' or 'beta(a,b)' with a, b > 0")


def parse_rules(text: str) -> list[ScoreRule]:
    """Parse a comma-separated rule list such as "log,brier,beta(2,4)" (commas inside parentheses kept)."""
    parts = [p for p in re.split(r",(?![^()]*\))", text) if p.strip()]
    if not parts:
        raise InputError("no score rule given")
    return [get_rule(p) for p in parts]


def validate_probabilities(p: ArrayLike, what: str = "forecast") -> FloatArray:
    arr = np.asarray(p, dtype=np.float64)
    bad = ~((arr >= 0.0) & (arr <= 1.0))  # also catches NaN
    if bad.any():
        first = arr[bad].flat[0]
        raise InputError(f"{what} values must lie in [0, 1]; found {int(bad.sum())} invalid value(s), e.g. {first!r}")
    return arr


def score(p: ArrayLike, y: ArrayLike, rule: str | ScoreRule = "log") -> FloatArray:
    """Forecasts p against outcomes y (0/1 or a soft label eta in [0, 1]). Two 1-D sequences must have equal
    lengths (3 forecasts against 1 outcome is a mistake); a scalar pairs with every element, 2+ dims broadcast."""
    r = get_rule(rule)
    pa = validate_probabilities(p, "forecast")
    ya = validate_probabilities(y, "outcome")
    if pa.ndim == 1 and ya.ndim == 1 and pa.shape != ya.shape:
        raise InputError(
            f"{pa.size} forecasts but {ya.size} outcomes: give one outcome per forecast (or one scalar outcome)"
        )
    return mix(*r.branches(pa), ya)


def branches_at(rules: Sequence[ScoreRule], p: float) -> FloatArray:
    """(R, 2): S(p, 1), S(p, 0) per rule for one constant forecast p (the base rate, the missing-forecast prior)."""
    at = np.array([p], dtype=np.float64)
    return np.array([[float(b[0]) for b in rule.branches(at)] for rule in rules]).reshape(len(rules), 2)


# -- weight schedules

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
        return raw / (self.total or self._numeric_totals)(ha)

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


# -- branch pairs over flat arrays

_MAX_LUT = 5_000_000  # weight tables larger than this (sum of distinct horizons): direct evaluation


@dataclass
class StepLayout:
    """Where each trajectory's steps sit in a flat array, and its integer horizon T; every trajectory has
    >= 1 step (reduceat cannot express empty segments). Weights are cached per schedule."""

    offsets: IntArray
    horizon: FloatArray
    _weights: dict[str, FloatArray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        self.horizon = np.asarray(self.horizon, dtype=np.float64)
        lengths = np.diff(self.offsets)
        if self.offsets.ndim != 1 or self.offsets.size < 1 or self.offsets[0] != 0:
            raise InputError("offsets must be a 1-d array starting at 0")
        if lengths.size and lengths.min() < 1:
            raise InputError("every trajectory needs at least one step")
        if self.horizon.shape != lengths.shape:
            raise InputError("horizon needs one entry per trajectory")
        if np.any(self.horizon < lengths) or np.any(self.horizon != np.floor(self.horizon)):
            raise InputError("horizon T must be an integer and at least the number of observed steps Z")

    @classmethod
    def from_lengths(cls, lengths: ArrayLike, horizon: ArrayLike | None = None) -> StepLayout:
        lens = np.asarray(lengths, dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lens)))
        return cls(offsets, lens.astype(np.float64) if horizon is None else np.asarray(horizon))

    @property
    def n_steps(self) -> int:
        return int(self.offsets[-1])

    @property
    def starts(self) -> IntArray:
        return self.offsets[:-1]

    @property
    def lengths(self) -> IntArray:
        return np.diff(self.offsets)

    def step_index(self) -> FloatArray:
        t = np.arange(self.n_steps, dtype=np.float64) + 1.0
        return t - np.repeat(self.starts.astype(np.float64), self.lengths)

    def weights(self, schedule: str | WeightSchedule) -> FloatArray:
        """Flat per-step weights w_t (normalised over T, truncated at Z), cached per schedule."""
        sched = get_schedule(schedule)
        cached = self._weights.get(sched.name)
        if cached is None:
            cached = self._weights[sched.name] = self._build_weights(sched)
        return cached

    def _build_weights(self, sched: WeightSchedule) -> FloatArray:
        if self.n_steps == 0:
            return np.zeros(0)
        # w depends only on (t, T) and agents have few distinct T: a table per T, then a gather.
        h = self.horizon.astype(np.int64)
        largest = int(h.max())
        distinct = np.zeros(0, dtype=np.int64)
        if largest <= _MAX_LUT:
            present = np.zeros(largest + 1, dtype=bool)
            present[h] = True
            distinct = np.flatnonzero(present)
        if largest > _MAX_LUT or int(distinct.sum()) > _MAX_LUT:  # direct evaluation
            return sched.step_weights(self.step_index(), np.repeat(self.horizon, self.lengths))
        base = np.zeros(present.size, dtype=np.int64)
        base[distinct] = np.concatenate(([0], np.cumsum(distinct)[:-1]))
        table = np.concatenate([weights(sched, int(big_t)) for big_t in distinct])
        gather = np.repeat(base[h] - self.starts, self.lengths) + np.arange(self.n_steps, dtype=np.int64)
        return table[gather]

    def weighted_sum(self, flat: FloatArray, schedule: str | WeightSchedule) -> FloatArray:
        if self.offsets.size == 1:
            return np.zeros(0)
        return np.add.reduceat(self.weights(schedule) * flat, self.starts)


def branch_pairs(
    values: FloatArray,
    layout: StepLayout,
    rule: str | ScoreRule = "log",
    schedule: str | WeightSchedule = "linear-front",
) -> tuple[FloatArray, FloatArray]:
    """(s1, s0) for every trajectory of `layout`; `values` are validated forecasts in [0, 1]."""
    b1, b0 = get_rule(rule).branches(values)
    return layout.weighted_sum(b1, schedule), layout.weighted_sum(b0, schedule)


def mix(s1: ArrayLike, s0: ArrayLike, eta: ArrayLike) -> FloatArray:
    """eta * s1 + (1 - eta) * s0: the one formula behind every TPS variant."""
    e, a1, a0 = (np.asarray(x, dtype=np.float64) for x in (eta, s1, s0))
    return np.asarray(e * a1 + (1.0 - e) * a0, dtype=np.float64)
