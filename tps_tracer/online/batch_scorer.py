"""Score a batch of stopped trajectories into pair-table rows, vectorised.

The accumulator queues stopped trajectories and scores them here a batch at a time, so
the fixed cost of each numpy call is shared by the whole batch instead of paid per
trajectory (a handful of numpy calls on one 10-step trajectory already costs ~100 us).

Layout: the segments are (predictor, trajectory) pairs, predictor-major, over one flat
array of forecasts. Each rule's branches are computed once over all of it; every
rule x branch x schedule weighted sum is then a single `np.add.reduceat` over the
(rules x 2 x schedules x steps) product, with per-(T, Z) weight vectors cached (agents
have few step budgets). The formulas are those of the batch path
(`tps_tracer.scoring.branch_pairs`, `tps_tracer.evaluation.aggregators`); results agree
with it to summation order (~1e-16 relative).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tps_tracer.evaluation.aggregators import TIE_DECIMALS
from tps_tracer.scoring.rules import ScoreRule
from tps_tracer.scoring.schedules import DEFAULT_SCHEDULE, WeightSchedule

FloatArray = NDArray[np.float64]

_MAX_CACHED_SHAPES = 4096


@dataclass
class ScoredBatch:
    """Rows for k trajectories and P predictors (NaN / False where a trajectory has no steps)."""

    pairs: FloatArray  # (k, P, R, S, 2)
    aggregates: FloatArray  # (k, P, 4): phi_last, phi_avg, phi_min, phi_w
    usable: NDArray[np.bool_]  # (k, P): every step has a forecast for the predictor
    weight_mass: FloatArray  # (k, S): sum_{t<=Z} w_t


class BatchScorer:
    def __init__(self, rules: Sequence[ScoreRule], schedules: Sequence[WeightSchedule]):
        self.rules = list(rules)
        self.schedules = list(schedules)
        self._shapes: OrderedDict[tuple[int, int], FloatArray] = OrderedDict()

    def _weights(self, horizon: int, n_steps: int) -> FloatArray:
        """(S + 1, Z): each schedule's w_1..w_Z for horizon T, then the Phi_w weights; cached."""
        key = (horizon, n_steps)
        w = self._shapes.get(key)
        if w is None:
            scheds = [*self.schedules, DEFAULT_SCHEDULE]
            # w_1..w_Z only: closed-form normalisers, so a huge declared horizon costs O(Z), not O(T).
            t = np.arange(1.0, n_steps + 1.0)
            w = np.stack([s.step_weights(t, np.full_like(t, float(horizon))) for s in scheds]).reshape(len(scheds), -1)
            self._shapes[key] = w
            if len(self._shapes) > _MAX_CACHED_SHAPES:
                self._shapes.popitem(last=False)
        return w

    def score(
        self,
        step_lists: Sequence[Sequence[Mapping[str, float | None]]],
        horizons: Sequence[int],
        names: Sequence[str],
    ) -> ScoredBatch:
        k, n_pred, n_rules, n_sched = len(step_lists), len(names), len(self.rules), len(self.schedules)
        pairs = np.full((k, n_pred, n_rules, n_sched, 2), np.nan)
        aggregates = np.full((k, n_pred, 4), np.nan)
        usable = np.zeros((k, n_pred), dtype=bool)
        mass = np.zeros((k, n_sched))
        rows = [i for i in range(k) if step_lists[i]]
        m = len(rows)
        if m == 0 or n_pred == 0:
            return ScoredBatch(pairs, aggregates, usable, mass)
        steps = [step for i in rows for step in step_lists[i]]
        # Predictor-major flat forecasts; dtype=float turns None (no forecast) into NaN.
        values = np.array([step.get(name) for name in names for step in steps], dtype=np.float64)
        lens = np.array([len(step_lists[i]) for i in rows], dtype=np.int64)
        n = int(lens.sum())
        w_one = np.concatenate([self._weights(int(horizons[i]), len(step_lists[i])) for i in rows], axis=1)
        w_all = np.tile(w_one, n_pred)  # (S + 1, P * n)
        starts = np.concatenate(([0], np.cumsum(np.tile(lens, n_pred))[:-1]))
        gaps = np.isnan(values)
        clean = np.where(gaps, 0.5, values)  # keep rules away from NaN; gapped segments are masked
        ok = (np.add.reduceat(gaps.astype(np.int64), starts) == 0).reshape(n_pred, m)

        branches = np.empty((n_rules, 2, n_pred * n))
        for r, rule in enumerate(self.rules):
            branches[r, 0], branches[r, 1] = rule.branches(clean)
        sums = np.add.reduceat(branches[:, :, None, :] * w_all[None, None, :n_sched, :], starts, axis=-1)
        # sums: (R, 2, S, P * m) -> (m, P, R, S, 2)
        pairs[rows] = sums.reshape(n_rules, 2, n_sched, n_pred, m).transpose(4, 3, 0, 2, 1)

        seg_len = np.tile(lens, n_pred).astype(np.float64)
        w_phi = w_all[n_sched]
        agg = np.empty((4, n_pred * m))
        agg[0] = clean[np.cumsum(np.tile(lens, n_pred)) - 1]
        agg[1] = np.round(np.add.reduceat(clean, starts) / seg_len, TIE_DECIMALS)
        agg[2] = np.minimum.reduceat(clean, starts)
        agg[3] = np.round(np.add.reduceat(w_phi * clean, starts) / np.add.reduceat(w_phi, starts), TIE_DECIMALS)
        aggregates[rows] = agg.reshape(4, n_pred, m).transpose(2, 1, 0)

        mass[rows] = np.add.reduceat(w_one[:n_sched], starts[:m], axis=1).T
        usable[rows] = ok.T
        pairs[~usable] = np.nan
        aggregates[~usable] = np.nan
        return ScoredBatch(pairs, aggregates, usable, mass)
