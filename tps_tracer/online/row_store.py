"""Columnar storage of finished trajectories: the pair table, grown one row at a time.

Each finished trajectory costs a fixed number of bytes whatever its length: per
predictor its branch pairs (R x S x 2 floats), four summaries and a usable flag; per
trajectory a few scalars, the truncated weight mass per schedule and its id. Arrays grow
by 25 % so the slack stays small; predictors that first appear late get new columns
(rows stored before are unusable for them, counted as "missing").

Summary mode takes settled rows out (`take_out`) in O(rows taken): the holes are filled with
the last rows, so row order is arrival order only until the first take-out; `seq` keeps each
row's arrival number for the policies that need the oldest rows.
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
    clipped: NDArray[np.int64]  # forecasts the log rule clipped, per row


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
        self.seq = np.zeros(0, dtype=np.int64)  # arrival number of each row
        self._next_seq = 0
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
        self.seq = grown(self.seq, 0)  # type: ignore[assignment]
        self.weight_mass = grown(self.weight_mass, 0.0)  # type: ignore[assignment]
        for col in self.predictors.values():
            col.usable = grown(col.usable, False)  # type: ignore[assignment]
            col.pairs = grown(col.pairs, np.nan)  # type: ignore[assignment]
            col.aggregates = grown(col.aggregates, np.nan)  # type: ignore[assignment]
            col.clipped = grown(col.clipped, 0)  # type: ignore[assignment]
        self._cap = cap

    def add_predictor(self, name: str) -> _PredictorColumns:
        col = _PredictorColumns(
            np.zeros(self._cap, dtype=bool),
            np.full((self._cap, *self._pair_shape()), np.nan),
            np.full((self._cap, len(AGGREGATOR_NAMES)), np.nan),
            np.zeros(self._cap, dtype=np.int64),
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
        predictors: dict[str, tuple[NDArray[np.bool_], FloatArray, FloatArray, NDArray[np.int64] | None]],
    ) -> None:
        """Store k finished trajectories; predictors maps name -> (usable (k,), pairs (k,R,S,2), aggregates (k,4),
        clipped forecasts (k,), None for a state that did not carry them: 0)."""
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
        self.seq[sl] = np.arange(self._next_seq, self._next_seq + k)
        self._next_seq += k
        self.weight_mass[sl] = weight_mass
        for name, (usable, pairs, aggs, clipped) in predictors.items():
            col = self.predictors.get(name) or self.add_predictor(name)
            col.usable[sl] = usable
            col.pairs[sl] = pairs
            col.aggregates[sl] = aggs
            col.clipped[sl] = 0 if clipped is None else clipped
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
                    col.clipped[:n].copy(),
                )
                for name, col in self.predictors.items()
            },
            outcome_on_unscored=self.outcome_on_unscored,
        )

    def take_out(
        self, rows: NDArray[np.bool_], outcome_on_unscored: int
    ) -> tuple[PairTable, NDArray[np.int64], NDArray[np.int64]]:
        """Remove the selected rows (a mask over the n stored ones) and return them as a pair table
        (summary mode folds them into its partial state); `outcome_on_unscored` of the removed rows
        moves with them. Costs O(rows removed): each hole below the new end is filled with a kept
        row from above it. Returns (table, holes, movers): row movers[i] now lives at holes[i], so
        a caller keeping a list parallel to the rows moves its entries the same way."""
        n = self.n
        idx = np.flatnonzero(rows[:n])
        new_n = n - idx.size
        n_steps = self.n_steps[idx]
        taken = PairTable(
            ids=[self.ids[i] for i in idx.tolist()],
            stop_code=self.stop_code[idx],
            outcome=self.outcome[idx],
            q_z=self.q_z[idx],
            n_steps=n_steps,
            horizon=self.horizon[idx],
            rules=self.rules,
            schedules=self.schedules,
            weight_mass=self.weight_mass[idx],
            predictors={
                name: PredictorPairs(
                    col.usable[idx],
                    col.pairs[idx],
                    col.aggregates[idx],
                    skip_counts(col.usable[idx], n_steps),
                    col.clipped[idx],
                )
                for name, col in self.predictors.items()
            },
            outcome_on_unscored=outcome_on_unscored,
        )
        holes = idx[idx < new_n]
        movers = np.flatnonzero(~rows[new_n:n]) + new_n  # kept rows above the new end, as many as holes
        arrays: list[NDArray[np.generic]] = [
            self.stop_code,
            self.outcome,
            self.q_z,
            self.n_steps,
            self.horizon,
            self.seq,
            self.weight_mass,
        ]
        for col in self.predictors.values():
            arrays += [col.usable, col.pairs, col.aggregates, col.clipped]
        for a in arrays:
            a[holes] = a[movers]
        for tid in taken.ids:
            del self.row_of[tid]
        for h, m in zip(holes.tolist(), movers.tolist(), strict=True):
            tid = self.ids[m]
            self.ids[h] = tid
            self.row_of[tid] = h
        del self.ids[new_n:]
        # Freed slots back to their fill values: append_many writes only the predictors a batch
        # mentions and relies on unwritten slots being unusable.
        freed = slice(new_n, n)
        self.outcome[freed] = np.nan
        self.q_z[freed] = np.nan
        for col in self.predictors.values():
            col.usable[freed] = False
            col.pairs[freed] = np.nan
            col.aggregates[freed] = np.nan
            col.clipped[freed] = 0
        self.n = new_n
        self.outcome_on_unscored -= outcome_on_unscored
        return taken, holes, movers

    def nbytes(self) -> int:
        """Bytes held by the arrays (capacity included), for memory reporting."""
        total = sum(a.nbytes for a in (self.stop_code, self.outcome, self.q_z, self.n_steps, self.horizon, self.seq))
        total += self.weight_mass.nbytes
        for col in self.predictors.values():
            total += col.usable.nbytes + col.pairs.nbytes + col.aggregates.nbytes + col.clipped.nbytes
        return total
