"""The accumulator's runs by stage: live (`LiveStore`), *reserved* (RESERVED in `row_of` while scored),
finished (`RowStore`: pair-table columns). A *repeat* (a new run under a stopped id) is live but never
scored. Not thread-safe: used under the accumulator's lock."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_MISSING
from tps_tracer.evaluation.bootstrap import trajectory_keys
from tps_tracer.evaluation.pairs import PairTable, PredictorPairs, skip_counts
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES, ScoredRows
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.open_runs import OpenRuns
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import CensoringPolicy, StopReason
from tps_tracer.scoring import FloatArray, ScoreRule, WeightSchedule

RESERVED = -1  # row_of value while a stopped trajectory is being scored outside the lock


@dataclass
class _Live:
    steps: list[dict[str, float | None]] = field(default_factory=list)
    last_seen: float = 0.0
    outcome: int | None = None
    q_z: float | None = None
    reason: StopReason = StopReason.OTHER  # set at stop
    horizon: int = 0
    written: bool = False  # its record is in the sink: later resolutions are appended as lines
    repeat: bool = False  # a new run under a stopped id: written, never scored


def settle(held_y: float | None, held_q: float | None, y: int | None, q: float | None) -> tuple[str, dict[str, Any]]:
    """A late outcome / q_Z against a run's values (None: not known): (status, the fields newly set). The
    same value twice is a no-op, a different one a conflict that sets nothing."""
    if (y is not None and held_y not in (None, y)) or (q is not None and held_q not in (None, q)):
        return "conflicting_resolution", {}
    newly: dict[str, Any] = {}
    if y is not None and held_y is None:
        newly["outcome"] = y
    if q is not None and held_q is None:
        newly["q_z"] = q
    return "ok", newly


_NONE_EVICTED: list[tuple[str, _Live]] = []  # shared, never appended to: a step of a live run evicts nothing


class LiveStore:
    """Live runs, least recently active first, and the reserved ones. Idle runs end by OpenRuns' rule
    (remembered as gone: a late step is rejected); past `max_live` the least recently active is evicted."""

    def __init__(
        self, idle_timeout: float | None, max_live: int, row_of: dict[str, int], folded: Container[str] | None = None
    ):
        self.lifetimes: OpenRuns[_Live] = OpenRuns(idle_timeout)
        self.max_live = max_live
        self.live: OrderedDict[str, _Live] = OrderedDict()
        self.finishing: dict[str, _Live] = {}  # reserved: stopped, not yet a row
        self._row_of = row_of  # the row store's (shared)
        self._folded = folded  # summary mode: the ids folded away (no longer in row_of)

    def stopped(self, tid: str) -> bool:
        """A row, reserved, folded, or finished early and still remembered as gone."""
        return tid in self._row_of or tid in self.lifetimes.gone or (self._folded is not None and tid in self._folded)

    def step(self, tid: str, step: dict[str, float | None], now: float, evict: bool) -> list[tuple[str, _Live]] | None:
        """Append a step to `tid` (opened on first sight); the runs evicted to keep max_live, or None
        (nothing appended) when `tid` is `stopped`."""
        live = self.live.get(tid)
        evicted = _NONE_EVICTED
        if live is None:
            if self.stopped(tid):  # only a run's first step pays this call
                return None
            live = self.live[tid] = _Live()
            evicted = []
            while evict and len(self.live) > self.max_live:
                evicted.append(self.take_oldest(now))
        else:
            self.live.move_to_end(tid)
        live.steps.append(step)
        live.last_seen = now
        return evicted

    def begin_repeat(self, tid: str, now: float) -> bool:
        """Open a repeat of `tid` if it is stopped and not live; True when one was opened."""
        if tid in self.live or not self.stopped(tid):
            return False
        self.live[tid] = _Live(last_seen=now, repeat=True)
        return True

    def reserve(self, tid: str, live: _Live) -> _Live:
        """Take `live` out of the live ones for finishing (a repeat just leaves: never scored)."""
        self.live.pop(tid, None)
        if live.repeat:
            return live
        self._row_of[tid] = RESERVED
        self.finishing[tid] = live
        return live

    def take_oldest(self, now: float) -> tuple[str, _Live]:
        """Reserve the least recently active run, finished early: its late steps are rejected."""
        tid, live = self.live.popitem(last=False)
        self.lifetimes.remember_gone((tid,), now)
        return tid, self.reserve(tid, live)

    def take_idle(self, now: float) -> list[tuple[str, _Live]]:
        """Reserve every run idle at `now` by OpenRuns' rule."""
        idle = []
        while self.live and self.lifetimes.idle(next(iter(self.live.values())).last_seen, now):
            idle.append(self.take_oldest(now))
        self.lifetimes.expire(now)
        return idle


# -- finished rows

_INITIAL_CAPACITY = 256
_GROWTH = 1.25  # arrays grow by 25 %: little slack
_NAN = float("nan")
_CLEAN_CODE = STOP_REASONS.index(StopReason.CLEAN)
# Per-row arrays and their fills (`seq`: arrival number; `key`: the bootstrap key, the canonical order).
_ROW_FILLS = dict(stop_code=0, n_steps=0, horizon=0, seq=0, key=0, outcome=_NAN, q_z=_NAN, weight_mass=0.0)
# Per predictor; `written`: rows whose batch scored it (others never mention it).
_COLUMN_FILLS = dict(usable=False, pairs=_NAN, aggregates=_NAN, clipped=0, missing=0.0, written=False)


@dataclass
class _PredictorColumns:
    usable: NDArray[np.bool_]
    pairs: FloatArray
    aggregates: FloatArray
    clipped: NDArray[np.int64]  # forecasts the log rule clipped
    missing: FloatArray
    written: NDArray[np.bool_]


class RowStore:
    """Finished runs as pair-table columns; a predictor first seen late gets a new column. An outcome on
    a non-clean stop is kept only to detect a conflict (`unscored_outcome`)."""

    def __init__(self, rules: list[ScoreRule], schedules: list[WeightSchedule], missing: str = DEFAULT_MISSING):
        self.rules = rules
        self.schedules = schedules
        self.missing = missing
        self.n = 0
        self._keyed = 0  # rows [0, _keyed) have their key
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.unscored_outcome: dict[str, int] = {}
        self._cap = 0
        self.stop_code = np.zeros(0, dtype=np.int8)
        self.outcome = np.zeros(0)
        self.q_z = np.zeros(0)
        self.n_steps = np.zeros(0, dtype=np.int64)
        self.horizon = np.zeros(0)
        self.seq = np.zeros(0, dtype=np.int64)
        self.key = np.zeros(0, dtype=np.uint64)
        self._next_seq = 0
        self.weight_mass = np.zeros((0, len(schedules)))
        self.predictors: dict[str, _PredictorColumns] = {}
        self._grow(_INITIAL_CAPACITY)

    def _arrays(self) -> list[tuple[Any, str, float]]:
        """(owner, attribute, fill) of every per-row array."""
        out: list[tuple[Any, str, float]] = [(self, name, fill) for name, fill in _ROW_FILLS.items()]
        for col in self.predictors.values():
            out += [(col, name, fill) for name, fill in _COLUMN_FILLS.items()]
        return out

    def _grow(self, cap: int) -> None:
        for owner, name, fill in self._arrays():
            a = getattr(owner, name)
            grown = np.full((cap, *a.shape[1:]), fill, dtype=a.dtype)
            grown[: self.n] = a[: self.n]
            setattr(owner, name, grown)
        self._cap = cap

    def add_predictor(self, name: str) -> _PredictorColumns:
        """A new column; each array's dtype is its fill's (bool, int64, float64)."""
        rs = (len(self.rules), len(self.schedules), 2)
        shapes = {"pairs": rs, "aggregates": (len(AGGREGATOR_NAMES),), "missing": (4,)}  # the rest: (n,)
        arrays = {f: np.full((self._cap, *shapes.get(f, ())), fill) for f, fill in _COLUMN_FILLS.items()}
        col = self.predictors[name] = _PredictorColumns(**arrays)
        return col

    def append_many(
        self,
        ids: list[str],
        rows: Mapping[str, Any],
        predictors: Mapping[str, tuple[Any, Any, Any, Any, Any]],
    ) -> None:
        """Store k finished runs. rows: stop_code, outcome, q_z, n_steps, horizon, weight_mass; predictors:
        name -> (usable, pairs, aggregates, clipped, missing)."""
        k = len(ids)
        while self.n + k > self._cap:
            self._grow(max(self.n + k, int(self._cap * _GROWTH)))
        sl = slice(self.n, self.n + k)
        for j, tid in enumerate(ids):
            self.row_of[tid] = self.n + j
        self.ids.extend(ids)
        for name, values in rows.items():
            getattr(self, name)[sl] = values
        self.seq[sl] = np.arange(self._next_seq, self._next_seq + k)
        self._next_seq += k
        for name, (usable, pairs, aggs, clipped, missing) in predictors.items():
            col = self.predictors.get(name) or self.add_predictor(name)
            col.usable[sl] = usable
            col.pairs[sl] = pairs
            col.aggregates[sl] = aggs
            col.clipped[sl] = 0 if clipped is None else clipped  # None: an older state's, none counted
            col.missing[sl] = 0.0 if missing is None else missing
            col.written[sl] = True
        self.n += k

    def add_scored(self, ids: list[str], lives: Sequence[_Live], scored: ScoredRows, names: Sequence[str]) -> None:
        """Reserved runs, their steps scored as `scored`, as rows."""
        outcome, q_z = [], []
        for tid, lv in zip(ids, lives, strict=True):
            del self.row_of[tid]
            clean = lv.reason is StopReason.CLEAN
            if lv.outcome is not None and not clean:
                self.unscored_outcome[tid] = lv.outcome
            outcome.append(float(lv.outcome) if clean and lv.outcome is not None else _NAN)
            q_z.append(_NAN if lv.q_z is None else lv.q_z)
        rows = {
            "stop_code": [STOP_REASONS.index(lv.reason) for lv in lives],
            "outcome": outcome,
            "q_z": q_z,
            "n_steps": [len(lv.steps) for lv in lives],
            "horizon": [lv.horizon for lv in lives],
            "weight_mass": scored.weight_mass,
        }
        columns = zip(scored.usable, scored.pairs, scored.aggregates, scored.clipped, scored.missing, strict=False)
        self.append_many(ids, rows, dict(zip(names, columns, strict=False)))

    def append_table(self, table: PairTable, unscored: Mapping[str, int]) -> None:
        """Store a pair table's rows (another accumulator's, a state's, a failed fold's)."""
        rows = {f: getattr(table, f) for f in ("stop_code", "outcome", "q_z", "n_steps", "horizon", "weight_mass")}
        columns = {
            name: (c.usable, c.pairs, c.aggregates, c.clipped, c.missing) for name, c in table.predictors.items()
        }
        self.append_many(table.ids, rows, columns)
        self.unscored_outcome.update(unscored)

    def _table(self, sel: slice | NDArray[np.int64], outcome_on_unscored: int) -> PairTable:
        """The selected rows as a pair table of their own (copied: safe once the lock is released)."""
        pick = (lambda a: a[sel].copy()) if isinstance(sel, slice) else (lambda a: a[sel])
        n_steps = pick(self.n_steps)
        weight_mass = pick(self.weight_mass)
        ids = self.ids[sel] if isinstance(sel, slice) else [self.ids[i] for i in sel.tolist()]
        return PairTable(
            ids=list(ids),
            **{f: pick(getattr(self, f)) for f in ("stop_code", "outcome", "q_z", "horizon")},
            n_steps=n_steps,
            rules=self.rules,
            schedules=self.schedules,
            weight_mass=weight_mass,
            predictors={name: self._column(col, pick, n_steps, weight_mass) for name, col in self.predictors.items()},
            outcome_on_unscored=outcome_on_unscored,
        )

    def _column(self, col: _PredictorColumns, pick: Any, n_steps: Any, weight_mass: FloatArray) -> PredictorPairs:
        """One predictor's rows; rows that never mentioned it are all gaps, as the batch path scores them."""
        out = PredictorPairs(pick(col.usable), pick(col.pairs), pick(col.aggregates), {}, pick(col.clipped))
        out.missing = pick(col.missing)
        unwritten = ~pick(col.written)
        if unwritten.any():
            absent = PredictorPairs.never_stated(
                n_steps[unwritten], weight_mass[unwritten], self.rules, out.aggregates.shape[1], self.missing
            )
            for f in ("usable", "pairs", "aggregates", "missing"):
                getattr(out, f)[unwritten] = getattr(absent, f)
        out.skipped = skip_counts(out.usable, n_steps)
        return out

    def table(self) -> PairTable:
        """A copy of the stored rows as a pair table, in arrival order."""
        return self._table(slice(0, self.n), len(self.unscored_outcome))

    def keys(self) -> NDArray[np.uint64]:
        """The rows' bootstrap keys, hashed here for the rows stored since the last call."""
        if self._keyed < self.n:
            self.key[self._keyed : self.n] = trajectory_keys(self.ids[self._keyed : self.n])
            self._keyed = self.n
        return self.key[: self.n].copy()

    def take_out(self, rows: NDArray[np.bool_]) -> tuple[PairTable, NDArray[np.uint64], dict[str, int]]:
        """Remove the masked rows; return them with their keys and unscored outcomes. O(rows removed):
        each hole below the new end takes a kept row from above."""
        n = self.n
        keys = self.keys()
        idx = np.flatnonzero(rows[:n])
        new_n = n - idx.size
        unscored = {}
        for i in idx.tolist():
            y = self.unscored_outcome.pop(self.ids[i], None)
            if y is not None:
                unscored[self.ids[i]] = y
        taken = self._table(idx, len(unscored))
        holes = idx[idx < new_n]
        movers = np.flatnonzero(~rows[new_n:n]) + new_n  # kept rows above the new end, as many as holes
        for owner, name, _ in self._arrays():
            a = getattr(owner, name)
            a[holes] = a[movers]
        for tid in taken.ids:
            del self.row_of[tid]
        for h, m in zip(holes.tolist(), movers.tolist(), strict=True):
            tid = self.ids[m]
            self.ids[h] = tid
            self.row_of[tid] = h
        del self.ids[new_n:]
        # Freed slots back to their fills: append_many writes only the predictors a batch mentions.
        for owner, name, fill in self._arrays():
            getattr(owner, name)[new_n:n] = fill
        self.n = self._keyed = new_n
        return taken, keys[idx], unscored

    def resolve(self, tid: str, row: int, y: int | None, q: float | None) -> tuple[str, dict[str, Any]]:
        """`settle` on a stored row (NaN: not known)."""
        clean = self.stop_code[row] == _CLEAN_CODE
        held_y = self.outcome[row] if clean else self.unscored_outcome.get(tid, _NAN)
        held_q = self.q_z[row]
        status, newly = settle(None if math.isnan(held_y) else held_y, None if math.isnan(held_q) else held_q, y, q)
        if "outcome" in newly and clean:
            self.outcome[row] = newly["outcome"]
        elif "outcome" in newly:  # kept only to detect a conflict
            self.unscored_outcome[tid] = newly["outcome"]
        if "q_z" in newly:
            self.q_z[row] = newly["q_z"]
        return status, newly

    def score_of(self, tid: str, row: int, policy: CensoringPolicy, metadata: Mapping[str, Any]) -> TrajectoryScore:
        """A stored row as the TrajectoryScore listeners receive."""
        reason = StopReason(STOP_REASONS[int(self.stop_code[row])])
        y, q = self.outcome[row], self.q_z[row]
        pairs: dict[tuple[str, str, str], tuple[float, float]] = {}
        gaps: dict[str, int] = {}
        for name, col in self.predictors.items():
            # A row that never named the predictor is all gaps, as `_column` scores it.
            gaps[name] = int(col.missing[row, 0]) if col.written[row] else int(self.n_steps[row])
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
            gaps=gaps,
        )

    def nbytes(self) -> int:
        """Bytes held by the arrays, capacity included."""
        return sum(getattr(owner, name).nbytes for owner, name, _ in self._arrays())
