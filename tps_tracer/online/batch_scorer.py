"""Score a batch of stopped trajectories into pair-table rows, vectorised.

The accumulator queues stopped trajectories and scores them here a batch at a time, so
the fixed cost of each numpy call is shared by the whole batch instead of paid per
trajectory (a handful of numpy calls on one 10-step trajectory already costs ~100 us).

The scoring itself is the batch path's kernel (`tps_tracer.evaluation.rows.score_rows`);
what is online-specific is turning step dicts into flat arrays and caching the per-(T, Z)
weight vectors (agents have few step budgets, and the closed-form normalisers make a huge
declared horizon cost O(Z), not O(T)).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_MISSING
from tps_tracer.evaluation.rows import score_rows
from tps_tracer.scoring.rules import DEFAULT_SCHEDULE, ScoreRule, WeightSchedule

FloatArray = NDArray[np.float64]

_MAX_CACHED_SHAPES = 4096


@dataclass
class ScoredBatch:
    """Rows for k trajectories and P predictors (NaN / False where a trajectory has no steps)."""

    pairs: FloatArray  # (k, P, R, S, 2)
    aggregates: FloatArray  # (k, P, 4): phi_last, phi_avg, phi_min, phi_w
    usable: NDArray[np.bool_]  # (k, P): every step has a forecast for the predictor
    weight_mass: FloatArray  # (k, S): sum_{t<=Z} w_t
    clipped: NDArray[np.int64]  # (k, P): forecasts the log rule clipped
    missing: FloatArray  # (k, P, 4): steps without / with a forecast, cost of missingness (d1, d0)


class BatchScorer:
    def __init__(self, rules: Sequence[ScoreRule], schedules: Sequence[WeightSchedule], missing: str = DEFAULT_MISSING):
        self.rules = list(rules)
        self.schedules = list(schedules)
        self.missing = missing
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
        k = len(step_lists)
        lens = np.array([len(steps) for steps in step_lists], dtype=np.int64)
        flat_steps = [step for steps in step_lists for step in steps]
        # dtype=float turns None (no forecast) into NaN: a gap, scored by the missing-forecast policy.
        values = [np.array([step.get(name) for step in flat_steps], dtype=np.float64) for name in names]
        if flat_steps:
            w = np.concatenate([self._weights(int(horizons[i]), int(lens[i])) for i in range(k) if lens[i]], axis=1)
        else:
            w = np.zeros((len(self.schedules) + 1, 0))
        rows = score_rows(values, lens, w, self.rules, len(self.schedules), missing=self.missing)
        return ScoredBatch(
            rows.pairs.transpose(1, 0, 2, 3, 4),
            rows.aggregates.transpose(1, 0, 2),
            rows.usable.T,
            rows.weight_mass,
            rows.clipped.T,
            rows.missing.transpose(1, 0, 2),
        )

    def score_safely(
        self,
        step_lists: Sequence[Sequence[Mapping[str, float | None]]],
        horizons: Sequence[int],
        names: Sequence[str],
        on_error: Callable[[str, BaseException], None],
    ) -> ScoredBatch:
        """`score`; if that fails, one by one, so one bad trajectory cannot take others down. A
        trajectory that cannot be scored still gets its row (no usable predictor), so it stays in
        the termination audit; each failure goes to `on_error` (an internal error)."""
        try:
            return self.score(step_lists, horizons, names)
        except Exception as exc:
            on_error("score", exc)
        parts = []
        for steps, horizon in zip(step_lists, horizons, strict=True):
            try:
                parts.append(self.score([steps], [horizon], names))
            except Exception as exc:
                on_error("score", exc)
                parts.append(self.score([[]], [0], names))
        return ScoredBatch(
            np.concatenate([p.pairs for p in parts]),
            np.concatenate([p.aggregates for p in parts]),
            np.concatenate([p.usable for p in parts]),
            np.concatenate([p.weight_mass for p in parts]),
            np.concatenate([p.clipped for p in parts]),
            np.concatenate([p.missing for p in parts]),
        )
