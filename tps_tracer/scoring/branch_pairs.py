"""Branch pairs (s1, s0) = (sum_{t<=Z} w_t S(F_t, 1), sum_{t<=Z} w_t S(F_t, 0)) over flat arrays: every
TPS variant is eta s1 + (1 - eta) s0. Steps of all trajectories sit in one flat array, `offsets`
marking where each starts (as in CSR); segment sums are np.add.reduceat, no object per step."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tps_tracer.errors import InputError
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule, get_rule, get_schedule, weights

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


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
