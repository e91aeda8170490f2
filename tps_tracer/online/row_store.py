"""Columnar storage of finished trajectories: the pair table, grown one row at a time.

Each finished trajectory costs a fixed number of bytes whatever its length: per
predictor its branch pairs (R x S x 2 floats), four summaries and a usable flag; per
trajectory a few scalars, the truncated weight mass per schedule and its id. Arrays grow
by 25 % so the slack stays small; predictors that first appear late get new columns
(rows stored before are unusable for them, counted as "missing").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tps_tracer.evaluation.pairs import AGGREGATOR_NAMES, PairTable, PredictorPairs, skip_counts
from tps_tracer.scoring.rules import ScoreRule
from tps_tracer.scoring.schedules import WeightSchedule

FloatArray = NDArray[np.float64]

_INITIAL_CAPACITY = 256
_GROWTH = 1.25


@dataclass
class _PredictorColumns:
    usable: NDArray[np.bool_]
    pairs: FloatArray
    aggregates: FloatArray


class RowStore:
    def __init__(self, rules: list[ScoreRule], schedules: list[WeightSchedule]):
        self.rules = rules
        self.schedules = schedules
        self.n = 0
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self._cap = 0
        self.stop_code = np.zeros(0, dtype=np.int8)
        self.outcome = np.zeros(0)
        self.q_z = np.zeros(0)
        self.n_steps = np.zeros(0, dtype=np.int64)
        self.horizon = np.zeros(0)
        self.weight_mass = np.zeros((0, len(schedules)))
        self.predictors: dict[str, _PredictorColumns] = {}
        self.outcome_on_unscored = 0
        self._grow(_INITIAL_CAPACITY)

    def _pair_shape(self) -> tuple[int, int, int]:
        return (len(self.rules), len(self.schedules), 2)

    def _grow(self, cap: int) -> None:
        def grown(a: NDArray[np.generic], fill: float | bool) -> NDArray[np.generic]:
            out = np.full((cap, *a.shape[1:]), fill, dtype=a.dtype)
            out[: self.n] = a[: self.n]
            return out

        self.stop_code = grown(self.stop_code, 0)  # type: ignore[assignment]
        self.outcome = grown(self.outcome, np.nan)  # type: ignore[assignment]
        self.q_z = grown(self.q_z, np.nan)  # type: ignore[assignment]
        self.n_steps = grown(self.n_steps, 0)  # type: ignore[assignment]
        self.horizon = grown(self.horizon, 0)  # type: ignore[assignment]
        self.weight_mass = grown(self.weight_mass, 0.0)  # type: ignore[assignment]
        for col in self.predictors.values():
            col.usable = grown(col.usable, False)  # type: ignore[assignment]
            col.pairs = grown(col.pairs, np.nan)  # type: ignore[assignment]
            col.aggregates = grown(col.aggregates, np.nan)  # type: ignore[assignment]
        self._cap = cap

    def add_predictor(self, name: str) -> _PredictorColumns:
        col = _PredictorColumns(
            np.zeros(self._cap, dtype=bool),
            np.full((self._cap, *self._pair_shape()), np.nan),
            np.full((self._cap, len(AGGREGATOR_NAMES)), np.nan),
        )
        self.predictors[name] = col
        return col

    def append_many(
        self,
        ids: list[str],
        stop_code: list[int],
        outcome: list[float],
        q_z: list[float],
        n_steps: list[int],
        horizon: list[int],
        weight_mass: FloatArray,
        predictors: dict[str, tuple[NDArray[np.bool_], FloatArray, FloatArray]],
    ) -> None:
        """Store k finished trajectories; predictors maps name -> (usable (k,), pairs (k,R,S,2), aggregates (k,4))."""
        k = len(ids)
        while self.n + k > self._cap:
            self._grow(max(self.n + k, int(self._cap * _GROWTH)))
        sl = slice(self.n, self.n + k)
        for j, tid in enumerate(ids):
            self.row_of[tid] = self.n + j
        self.ids.extend(ids)
        self.stop_code[sl] = stop_code
        self.outcome[sl] = outcome
        self.q_z[sl] = q_z
        self.n_steps[sl] = n_steps
        self.horizon[sl] = horizon
        self.weight_mass[sl] = weight_mass
        for name, (usable, pairs, aggs) in predictors.items():
            col = self.predictors.get(name) or self.add_predictor(name)
            col.usable[sl] = usable
            col.pairs[sl] = pairs
            col.aggregates[sl] = aggs
        self.n += k

    def table(self) -> PairTable:
        """A copy of the stored rows as a pair table (safe to use after the lock is released)."""
        n = self.n
        return PairTable(
            ids=list(self.ids),
            stop_code=self.stop_code[:n].copy(),
            outcome=self.outcome[:n].copy(),
            q_z=self.q_z[:n].copy(),
            n_steps=self.n_steps[:n].copy(),
            horizon=self.horizon[:n].copy(),
            rules=self.rules,
            schedules=self.schedules,
            weight_mass=self.weight_mass[:n].copy(),
            predictors={
                name: PredictorPairs(
                    col.usable[:n].copy(),
                    col.pairs[:n].copy(),
                    col.aggregates[:n].copy(),
                    skip_counts(col.usable[:n], self.n_steps[:n]),
                )
                for name, col in self.predictors.items()
            },
            outcome_on_unscored=self.outcome_on_unscored,
        )

    def take_out(self, rows: NDArray[np.bool_], outcome_on_unscored: int) -> PairTable:
        """Remove the selected rows and return them as a pair table (summary mode folds them into
        its partial state); `outcome_on_unscored` of the removed rows moves with them."""
        full = self.table()
        idx = np.flatnonzero(rows)
        keep = np.flatnonzero(~rows)
        taken = full.reordered(idx)
        taken.outcome_on_unscored = outcome_on_unscored
        for pp in taken.predictors.values():  # reordered keeps the whole table's counts
            pp.skipped = skip_counts(pp.usable, taken.n_steps)
        rest = full.reordered(keep)
        # Negative entries are ids reserved by the accumulator while they are being scored: kept.
        self.n, self.ids = 0, []
        self.row_of = {tid: r for tid, r in self.row_of.items() if r < 0}
        self.outcome_on_unscored = full.outcome_on_unscored - outcome_on_unscored
        self.append_many(
            rest.ids,
            rest.stop_code.tolist(),
            rest.outcome.tolist(),
            rest.q_z.tolist(),
            rest.n_steps.tolist(),
            rest.horizon.astype(np.int64).tolist(),
            rest.weight_mass,
            {name: (c.usable, c.pairs, c.aggregates) for name, c in rest.predictors.items()},
        )
        # Freed slots back to their fill values: append_many writes only the predictors a batch
        # mentions and relies on unwritten slots being unusable.
        freed = slice(self.n, full.n)
        self.outcome[freed] = np.nan
        self.q_z[freed] = np.nan
        for col in self.predictors.values():
            col.usable[freed] = False
            col.pairs[freed] = np.nan
            col.aggregates[freed] = np.nan
        return taken

    def nbytes(self) -> int:
        """Bytes held by the arrays (capacity included), for memory reporting."""
        total = sum(a.nbytes for a in (self.stop_code, self.outcome, self.q_z, self.n_steps, self.horizon))
        total += self.weight_mass.nbytes
        for col in self.predictors.values():
            total += col.usable.nbytes + col.pairs.nbytes + col.aggregates.nbytes
        return total
