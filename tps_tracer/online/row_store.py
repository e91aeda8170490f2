"""The rows store: finished trajectories as the pair table, grown one row at a time.

Each finished trajectory costs a fixed number of bytes whatever its length: per
predictor its branch pairs (R x S x 2 floats), four summaries and a usable flag; per
trajectory a few scalars, its bootstrap key, the truncated weight mass per schedule and its
id. Arrays grow by 25 % so the slack stays small; predictors that first appear late get new
columns (rows stored before are unusable for them, counted as "missing").

An outcome given on a non-clean stop is kept in `unscored_outcome` only to detect a
conflicting one later: scoring ignores it, and the report counts it (outcome_on_unscored).

Summary mode takes settled rows out (`take_out`) in O(rows taken): the holes are filled with
the last rows, so row order is arrival order only until the first take-out; `seq` keeps each
row's arrival number for the policies that need the oldest rows. Not thread-safe on its own:
used under the accumulator's lock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_MISSING
from tps_tracer.evaluation.pairs import AGGREGATOR_NAMES, PairTable, PredictorPairs, skip_counts
from tps_tracer.online.batch_scorer import ScoredBatch
from tps_tracer.online.live_store import _Live
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import CensoringPolicy, StopReason
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule

FloatArray = NDArray[np.float64]

_INITIAL_CAPACITY = 256
_GROWTH = 1.25
_NAN = float("nan")
_CLEAN_CODE = STOP_REASONS.index(StopReason.CLEAN)


@dataclass
class _PredictorColumns:
    usable: NDArray[np.bool_]
    pairs: FloatArray
    aggregates: FloatArray
    clipped: NDArray[np.int64]  # forecasts the log rule clipped, per row
    missing: FloatArray  # (n, 4) steps without / with a forecast, cost of missingness (PredictorPairs.missing)
    written: NDArray[np.bool_]  # rows whose batch scored this predictor (others never mention it)


class RowStore:
    def __init__(self, rules: list[ScoreRule], schedules: list[WeightSchedule], missing: str = DEFAULT_MISSING):
        self.rules = rules
        self.schedules = schedules
        self.missing = missing
        self.n = 0
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.unscored_outcome: dict[str, int] = {}  # outcomes of non-clean stops: ignored, counted
        self._cap = 0
        self.stop_code = np.zeros(0, dtype=np.int8)
        self.outcome = np.zeros(0)
        self.q_z = np.zeros(0)
        self.n_steps = np.zeros(0, dtype=np.int64)
        self.horizon = np.zeros(0)
        self.seq = np.zeros(0, dtype=np.int64)  # arrival number of each row
        self.key = np.zeros(0, dtype=np.uint64)  # id-derived bootstrap key: a snapshot's canonical order
        self._next_seq = 0
        self.weight_mass = np.zeros((0, len(schedules)))
        self.predictors: dict[str, _PredictorColumns] = {}
        self._grow(_INITIAL_CAPACITY)

    @property
    def outcome_on_unscored(self) -> int:
        return len(self.unscored_outcome)

    def _pair_shape(self) -> tuple[int, int, int]:
        return (len(self.rules), len(self.schedules), 2)

    def _columns(self) -> list[NDArray[np.generic]]:
        """Every per-row array (the ids and their index are kept apart)."""
        arrays: list[NDArray[np.generic]] = [
            self.stop_code,
            self.outcome,
            self.q_z,
            self.n_steps,
            self.horizon,
            self.seq,
            self.key,
            self.weight_mass,
        ]
        for col in self.predictors.values():
            arrays += [col.usable, col.pairs, col.aggregates, col.clipped, col.missing, col.written]
        return arrays

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
        self.key = grown(self.key, 0)  # type: ignore[assignment]
        self.weight_mass = grown(self.weight_mass, 0.0)  # type: ignore[assignment]
        for col in self.predictors.values():
            col.usable = grown(col.usable, False)  # type: ignore[assignment]
            col.pairs = grown(col.pairs, np.nan)  # type: ignore[assignment]
            col.aggregates = grown(col.aggregates, np.nan)  # type: ignore[assignment]
            col.clipped = grown(col.clipped, 0)  # type: ignore[assignment]
            col.missing = grown(col.missing, 0.0)  # type: ignore[assignment]
            col.written = grown(col.written, False)  # type: ignore[assignment]
        self._cap = cap

    def add_predictor(self, name: str) -> _PredictorColumns:
        col = _PredictorColumns(
            np.zeros(self._cap, dtype=bool),
            np.full((self._cap, *self._pair_shape()), np.nan),
            np.full((self._cap, len(AGGREGATOR_NAMES)), np.nan),
            np.zeros(self._cap, dtype=np.int64),
            np.zeros((self._cap, 4)),
            np.zeros(self._cap, dtype=bool),
        )
        self.predictors[name] = col
        return col

    def append_many(
        self,
        ids: list[str],
        keys: Sequence[int] | NDArray[np.uint64],
        stop_code: Sequence[int] | NDArray[np.int8],
        outcome: Sequence[float] | FloatArray,
        q_z: Sequence[float] | FloatArray,
        n_steps: Sequence[int] | NDArray[np.int64],
        horizon: Sequence[int] | FloatArray,
        weight_mass: FloatArray,
        predictors: Mapping[
            str, tuple[NDArray[np.bool_], FloatArray, FloatArray, NDArray[np.int64] | None, FloatArray | None]
        ],
    ) -> None:
        """Store k finished trajectories; predictors maps name -> (usable (k,), pairs (k,R,S,2), aggregates (k,4),
        clipped forecasts (k,), missing (k, 4); None for a state that did not carry them: 0)."""
        k = len(ids)
        while self.n + k > self._cap:
            self._grow(max(self.n + k, int(self._cap * _GROWTH)))
        sl = slice(self.n, self.n + k)
        for j, tid in enumerate(ids):
            self.row_of[tid] = self.n + j
        self.ids.extend(ids)
        self.key[sl] = keys
        self.stop_code[sl] = stop_code
        self.outcome[sl] = outcome
        self.q_z[sl] = q_z
        self.n_steps[sl] = n_steps
        self.horizon[sl] = horizon
        self.seq[sl] = np.arange(self._next_seq, self._next_seq + k)
        self._next_seq += k
        self.weight_mass[sl] = weight_mass
        for name, (usable, pairs, aggs, clipped, missing) in predictors.items():
            col = self.predictors.get(name) or self.add_predictor(name)
            col.usable[sl] = usable
            col.pairs[sl] = pairs
            col.aggregates[sl] = aggs
            col.clipped[sl] = 0 if clipped is None else clipped
            col.missing[sl] = 0.0 if missing is None else missing
            col.written[sl] = True
        self.n += k

    def add_scored(
        self, ids: list[str], keys: list[int], lives: Sequence[_Live], scored: ScoredBatch, names: Sequence[str]
    ) -> None:
        """Stopped trajectories (reserved in `row_of`), their steps scored as `scored`, as rows."""
        outcome, q_z = [], []
        for tid, lv in zip(ids, lives, strict=True):
            del self.row_of[tid]
            clean = lv.reason is StopReason.CLEAN
            if lv.outcome is not None and not clean:  # ignored by scoring, counted as in batch
                self.unscored_outcome[tid] = lv.outcome
            outcome.append(float(lv.outcome) if clean and lv.outcome is not None else _NAN)
            q_z.append(_NAN if lv.q_z is None else lv.q_z)
        self.append_many(
            ids,
            keys,
            [STOP_REASONS.index(lv.reason) for lv in lives],
            outcome,
            q_z,
            [len(lv.steps) for lv in lives],
            [lv.horizon for lv in lives],
            scored.weight_mass,
            {
                name: (
                    scored.usable[:, j],
                    scored.pairs[:, j],
                    scored.aggregates[:, j],
                    scored.clipped[:, j],
                    scored.missing[:, j],
                )
                for j, name in enumerate(names)
            },
        )

    def append_table(
        self, table: PairTable, keys: Sequence[int] | NDArray[np.uint64], unscored: Mapping[str, int]
    ) -> None:
        """Store a pair table's rows (another accumulator's, a state's, a failed fold's), with their
        bootstrap keys and the outcomes given on their non-clean stops."""
        self.append_many(
            table.ids,
            keys,
            table.stop_code,
            table.outcome,
            table.q_z,
            table.n_steps,
            table.horizon.astype(np.int64),
            table.weight_mass,
            {name: (c.usable, c.pairs, c.aggregates, c.clipped, c.missing) for name, c in table.predictors.items()},
        )
        self.unscored_outcome.update(unscored)

    def _table(self, sel: slice | NDArray[np.int64], outcome_on_unscored: int) -> PairTable:
        """The selected rows as a pair table of their own (copied: safe once the lock is released)."""
        pick = (lambda a: a[sel].copy()) if isinstance(sel, slice) else (lambda a: a[sel])
        n_steps = pick(self.n_steps)
        weight_mass = pick(self.weight_mass)
        ids = self.ids[sel] if isinstance(sel, slice) else [self.ids[i] for i in sel.tolist()]
        return PairTable(
            ids=list(ids),
            stop_code=pick(self.stop_code),
            outcome=pick(self.outcome),
            q_z=pick(self.q_z),
            n_steps=n_steps,
            horizon=pick(self.horizon),
            rules=self.rules,
            schedules=self.schedules,
            weight_mass=weight_mass,
            predictors={name: self._column(col, pick, n_steps, weight_mass) for name, col in self.predictors.items()},
            outcome_on_unscored=outcome_on_unscored,
        )

    def _column(self, col: _PredictorColumns, pick: Any, n_steps: Any, weight_mass: FloatArray) -> PredictorPairs:
        """One predictor's rows; rows whose batch never mentioned it are all gaps, as the batch path
        scores a record that lacks the predictor (`PredictorPairs.never_stated`)."""
        out = PredictorPairs(pick(col.usable), pick(col.pairs), pick(col.aggregates), {}, pick(col.clipped))
        out.missing = pick(col.missing)
        unwritten = ~pick(col.written)
        if unwritten.any():
            absent = PredictorPairs.never_stated(
                n_steps[unwritten], weight_mass[unwritten], self.rules, out.aggregates.shape[1], self.missing
            )
            out.usable[unwritten] = absent.usable
            out.pairs[unwritten] = absent.pairs
            out.aggregates[unwritten] = absent.aggregates
            out.missing[unwritten] = absent.missing
        out.skipped = skip_counts(out.usable, n_steps)
        return out

    def table(self) -> PairTable:
        """A copy of the stored rows as a pair table, in arrival order."""
        return self._table(slice(0, self.n), self.outcome_on_unscored)

    def keys(self) -> NDArray[np.uint64]:
        return self.key[: self.n].copy()

    def take_out(self, rows: NDArray[np.bool_]) -> tuple[PairTable, NDArray[np.uint64], dict[str, int]]:
        """Remove the selected rows (a mask over the n stored ones) and return them as a pair table
        with their keys and unscored outcomes (summary mode folds them into its partial state).
        Costs O(rows removed): each hole below the new end is filled with a kept row from above it."""
        n = self.n
        idx = np.flatnonzero(rows[:n])
        new_n = n - idx.size
        unscored = {}
        for i in idx.tolist():
            y = self.unscored_outcome.pop(self.ids[i], None)
            if y is not None:
                unscored[self.ids[i]] = y
        taken = self._table(idx, len(unscored))
        keys = self.key[idx]
        holes = idx[idx < new_n]
        movers = np.flatnonzero(~rows[new_n:n]) + new_n  # kept rows above the new end, as many as holes
        for a in self._columns():
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
            col.missing[freed] = 0.0
            col.written[freed] = False
        self.n = new_n
        return taken, keys, unscored

    def resolve(self, tid: str, row: int, y: int | None, q: float | None) -> tuple[str, dict[str, Any]]:
        """A late outcome / q_Z for a stored row: (status, fields newly set). The same value twice is
        a no-op, a different one a conflict."""
        clean = self.stop_code[row] == _CLEAN_CODE
        old_y = self.outcome[row] if clean else self.unscored_outcome.get(tid, _NAN)
        old_q = self.q_z[row]
        if (y is not None and not math.isnan(old_y) and old_y != y) or (
            q is not None and not math.isnan(old_q) and old_q != q
        ):
            return "conflicting_resolution", {}
        written: dict[str, Any] = {}
        if y is not None and math.isnan(old_y):
            written["outcome"] = y
            if clean:
                self.outcome[row] = y
            else:  # kept only to detect conflicts; ignored by scoring, counted as in batch
                self.unscored_outcome[tid] = y
        if q is not None and math.isnan(old_q):
            written["q_z"] = q
            self.q_z[row] = q
        return "ok", written

    def score_of(self, tid: str, row: int, policy: CensoringPolicy, metadata: Mapping[str, Any]) -> TrajectoryScore:
        """A stored row as the TrajectoryScore listeners receive."""
        reason = StopReason(STOP_REASONS[int(self.stop_code[row])])
        y, q = self.outcome[row], self.q_z[row]
        pairs: dict[tuple[str, str, str], tuple[float, float]] = {}
        for name, col in self.predictors.items():
            if not col.usable[row]:
                continue
            for i, rule in enumerate(self.rules):
                for j, sched in enumerate(self.schedules):
                    pairs[(name, rule.name, sched.name)] = (
                        float(col.pairs[row, i, j, 0]),
                        float(col.pairs[row, i, j, 1]),
                    )
        return TrajectoryScore(
            trajectory_id=tid,
            stop_reason=reason,
            role=policy.role(reason),
            outcome=None if math.isnan(y) else int(y),
            q_z=None if math.isnan(q) else float(q),
            n_steps=int(self.n_steps[row]),
            horizon=int(self.horizon[row]),
            pairs=pairs,
            metadata=metadata,
        )

    def nbytes(self) -> int:
        """Bytes held by the arrays (capacity included), for memory reporting."""
        return sum(a.nbytes for a in self._columns())
