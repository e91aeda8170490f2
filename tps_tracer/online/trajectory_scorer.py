"""One finished trajectory -> its row of the pair table, in a handful of numpy calls.

The batch path scores millions of steps through flat arrays and sparse weight matrices;
here we score one trajectory at a time, as it stops, on the caller's thread. So the work
is shaped for small inputs: the forecasts of all predictors form one (P, Z) matrix, each
rule's branches come from one call on it, and all rule x branch x schedule sums are one
matrix product with a cached (Z, S) weight matrix for the trajectory's (T, Z).

The results equal the batch path's to floating-point summation order (~1e-15).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tps_tracer.evaluation.aggregators import TIE_DECIMALS
from tps_tracer.scoring.rules import ScoreRule
from tps_tracer.scoring.schedules import DEFAULT_SCHEDULE, WeightSchedule, weights

FloatArray = NDArray[np.float64]

# Distinct (T, Z) weight matrices kept; agents have few step budgets, so this rarely fills.
_MAX_CACHED_SHAPES = 4096


@dataclass
class TrajectoryRow:
    pairs: FloatArray  # (P, R, S, 2): s1, s0; NaN rows for predictors with a gap
    aggregates: FloatArray  # (P, 4): phi_last, phi_avg, phi_min, phi_w
    weight_mass: FloatArray  # (S,): sum_{t<=Z} w_t


class TrajectoryScorer:
    def __init__(self, rules: Sequence[ScoreRule], schedules: Sequence[WeightSchedule]):
        self.rules = list(rules)
        self.schedules = list(schedules)
        self._shapes: OrderedDict[tuple[int, int], tuple[FloatArray, FloatArray, FloatArray]] = OrderedDict()

    def _weights(self, horizon: int, n_steps: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(W (Z, S), its column sums, the Phi_w weights (Z,)) for one (T, Z), cached."""
        key = (horizon, n_steps)
        hit = self._shapes.get(key)
        if hit is None:
            w = np.column_stack([weights(s, horizon)[:n_steps] for s in self.schedules])
            w_phi = weights(DEFAULT_SCHEDULE, horizon)[:n_steps]
            hit = (np.ascontiguousarray(w), w.sum(axis=0), w_phi)
            self._shapes[key] = hit
            if len(self._shapes) > _MAX_CACHED_SHAPES:
                self._shapes.popitem(last=False)
        return hit

    def score(self, values: FloatArray, horizon: int) -> TrajectoryRow:
        """values: (P, Z) forecasts in [0, 1], NaN where missing (that predictor's row becomes NaN)."""
        n_pred, n_steps = values.shape
        r, s = len(self.rules), len(self.schedules)
        w, mass, w_phi = self._weights(horizon, n_steps)
        branches = np.empty((r, 2, n_pred, n_steps))
        for i, rule in enumerate(self.rules):
            branches[i, 0], branches[i, 1] = rule.branches(values)
        sums = branches.reshape(r * 2 * n_pred, n_steps) @ w  # (R*2*P, S)
        pairs = sums.reshape(r, 2, n_pred, s).transpose(2, 0, 3, 1)
        aggregates = np.column_stack(
            (
                values[:, -1],
                np.round(values.sum(axis=1) / n_steps, TIE_DECIMALS),
                values.min(axis=1),
                np.round((values @ w_phi) / w_phi.sum(), TIE_DECIMALS),
            )
        )
        return TrajectoryRow(np.ascontiguousarray(pairs), aggregates, mass)
