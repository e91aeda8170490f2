"""Summary mode's folds: settled rows leave the accumulator's row store for one PartialState.

Summary mode (`mode="summary"`): instead of a row per finished trajectory, settled rows
are folded into one `PartialState` (evaluation/partial_state.py: the per-column sums and
bootstrap replicate sums, plus the four Phi summaries and the outcome of each complete
usable trajectory per predictor, which the rank diagnostics need). A trajectory is settled
once its role cannot change: every non-clean stop, and a clean stop with its outcome. A
clean stop still waiting for its outcome stays a row in the pending table, so a late
`resolve` works as in row mode; at most `max_pending` rows wait (beyond that the oldest is
folded as pending, counted as ignored/pending_folded, and its outcome can no longer
arrive). Folded rows are forgotten: a later resolve of one is a counted resolve_unknown; only
their ids' 64-bit keys are kept (online/folded_ids.py, 8 bytes a run), so a new run under a
folded id is a repeat, set aside and counted as in row mode.
q_Z must arrive before or with the stop (`stop(..., q_z=...)`): a censored stop is settled
at once. The snapshot equals row mode's (every mean and CI <= 1e-12); the censoring
policy, bootstrap and seed are fixed at construction (a snapshot asking for others raises).

The caller of `stop` / `resolve` never scores or folds in summary mode: each batch of 64 stops
is scored, and its settled rows folded, on the accumulator's own background thread
(online/background_work.py; when 64 such jobs are already waiting, the caller waits, blocked
and using no CPU, until the thread takes one: backpressure, never loss, never the work).
`flush()`, and so snapshots, `state()`, merges and `close()`, wait for that work first.
Listeners are then called from that thread.

A fold never makes the agent wait: under the lock it only takes the settled rows out of the
store (O(rows taken)); their PartialState (bootstrap weights, B x rows) is built outside it
and merged under a short lock, appending to the summary's per-trajectory arrays in place
(O(rows), however many runs were folded before; a full buffer is regrown before the lock is
taken). Meanwhile the rows are in `_folding`, which snapshots, `state()`, `partial_state()`
and `merge` count as folded; a resolve for one of them is a resolve_unknown, as for any
folded id.

A mixin of `Accumulator` (online/accumulator.py), which owns the state named below. Here:
taking a batch of settled rows out of the store (under the lock),
building and merging their state (outside it), and the snapshot of the folded state plus the
rows still stored.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from tps_tracer.errors import InputError
from tps_tracer.evaluation.pairs import PairTable
from tps_tracer.evaluation.partial_state import PartialState, StateSpec, merge_states
from tps_tracer.evaluation.report import ReportOptions
from tps_tracer.evaluation.report_builder import report_from_state
from tps_tracer.health import HealthLedger
from tps_tracer.online.folded_ids import FoldedIds
from tps_tracer.online.row_store import RowStore
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import CensoringPolicy, StopReason
from tps_tracer.scoring.rules import ScoreRule
from tps_tracer.scoring.schedules import WeightSchedule

_CLEAN_CODE = STOP_REASONS.index(StopReason.CLEAN)


@dataclass
class _Fold:
    """Settled runs on their way into the summary, outside the lock: rows taken out of the store
    (their state is built, then merged), or another accumulator's summary (merged)."""

    token: int
    table: PairTable | None  # the rows taken out (None: `part` came from another accumulator)
    keys: list[int]  # their bootstrap keys, to put the rows back if building fails
    unscored: dict[str, int]  # outcomes given on their non-clean stops (moved out of _unscored_outcome)
    first_seen: dict[str, tuple[int, ...]]
    part: PartialState | None = None  # their state, once built

    @property
    def n(self) -> int:
        return self.part.n if self.part is not None else (0 if self.table is None else self.table.n)


class SummaryFolding:
    # Owned by Accumulator (see its __init__); declared here for the type checker.
    rules: list[ScoreRule]
    schedules: list[WeightSchedule]
    policy: CensoringPolicy
    bootstrap: int
    seed: int
    max_pending: int
    batch_size: int
    health: HealthLedger
    _lock: threading.Lock
    _rows: RowStore
    _keys: list[int]
    _known: dict[str, None]
    _unscored_outcome: dict[str, int]
    _summary: PartialState | None
    _folding: dict[int, _Fold]
    _fold_count: int
    _resolved_rows: int
    _folded_ids: FoldedIds | None

    def _internal(self, where: str, exc: BaseException) -> None:
        raise NotImplementedError  # Accumulator's: count an internal error

    def _spec(self) -> StateSpec:
        return StateSpec(tuple(self.rules), tuple(self.schedules), self.policy, self.bootstrap, self.seed)

    def _first_seen(self) -> dict[str, tuple[int, ...]]:
        return {p: (i,) for i, p in enumerate(self._known)}

    def _take_fold(self) -> _Fold | None:
        """Under the lock, summary mode: take the settled rows out of the store, if a batch of them
        is there (or waiting clean stops overflow max_pending). O(rows taken); the caller builds
        their state with `_finish_fold` after releasing the lock."""
        rows = self._rows
        n = rows.n
        if n == 0:
            return None
        pending = (rows.stop_code[:n] == _CLEAN_CODE) & np.isnan(rows.outcome[:n])
        n_pending = int(pending.sum())
        overflow = max(0, n_pending - self.max_pending)
        if not overflow and n - n_pending < self.batch_size:
            return None
        settled = ~pending
        self._resolved_rows = 0
        if overflow:  # the oldest waiting clean stops are folded as pending: their outcome can no longer arrive
            waiting = np.flatnonzero(pending)
            if overflow < waiting.size:
                waiting = waiting[np.argpartition(rows.seq[waiting], overflow - 1)[:overflow]]
            settled[waiting] = True
            self.health.count("ignored", "pending_folded", n=overflow)
        unscored = {}
        for i in np.flatnonzero(settled).tolist():
            y = self._unscored_outcome.pop(rows.ids[i], None)
            if y is not None:
                unscored[rows.ids[i]] = y
        keys = [self._keys[i] for i in np.flatnonzero(settled).tolist()]
        if self._folded_ids is not None:  # their ids leave row_of: a new run under one is still a repeat
            self._folded_ids.add(keys)
        table, holes, movers = rows.take_out(settled, len(unscored))
        for h, m in zip(holes.tolist(), movers.tolist(), strict=True):
            self._keys[h] = self._keys[m]
        del self._keys[rows.n :]
        self._fold_count += 1
        fold = _Fold(self._fold_count, table, keys, unscored, self._first_seen())
        self._folding[fold.token] = fold
        return fold

    def _finish_fold(self, fold: _Fold) -> None:
        """Outside the lock: build the taken rows' PartialState (the bootstrap work, B x rows), then
        merge it into the summary. If building fails the rows go back to the store, so nothing is
        lost; counted as an error."""
        if fold.part is None and fold.table is not None:
            try:
                fold.part = PartialState.from_table(fold.table, self._spec(), fold.first_seen)
            except Exception as exc:
                t = fold.table
                with self._lock:
                    del self._folding[fold.token]
                    self._rows.append_many(
                        t.ids,
                        t.stop_code.tolist(),
                        t.outcome.tolist(),
                        t.q_z.tolist(),
                        t.n_steps.tolist(),
                        t.horizon.astype(np.int64).tolist(),
                        t.weight_mass,
                        {name: (c.usable, c.pairs, c.aggregates, c.clipped) for name, c in t.predictors.items()},
                    )
                    self._keys.extend(fold.keys)
                    self._unscored_outcome.update(fold.unscored)
                    self._rows.outcome_on_unscored += len(fold.unscored)
                self._internal("fold", exc)
                return
        self._merge_folded(fold)

    def _merge_folded(self, fold: _Fold) -> None:
        """Merge a fold's state into the summary, outside the lock: merge the summary seen, then swap
        it in under the lock if no other fold swapped meanwhile (else again). Appending costs what the
        fold holds (append_buffer.py; a full buffer is regrown by with_room_for, also out here), so
        the lock is held for a check and an assignment. Until the swap the fold stays in _folding,
        where snapshots find it."""
        part = fold.part
        assert part is not None
        for _ in range(8):
            with self._lock:
                summary = self._summary
            try:
                merged = part if summary is None else summary.with_room_for(part).merge(part)
            except Exception as exc:  # never expected; the merge under the lock below does without
                self.health.count("error", "accumulator.fold", f"{type(exc).__name__}: {exc}")
                break
            with self._lock:
                if self._summary is summary:
                    self._summary = merged
                    del self._folding[fold.token]
                    return
        with self._lock:  # folds racing each other every time: merge under the lock
            self._summary = part if self._summary is None else self._summary.merge(part)
            del self._folding[fold.token]

    def _in_flight(self) -> list[tuple[PairTable | None, PartialState | None]]:
        """Under the lock: what the folds under way hold (their state if built, else their rows)."""
        return [(f.table, f.part) for f in self._folding.values()]

    def _settled_state(
        self,
        summary: PartialState | None,
        folding: list[tuple[PairTable | None, PartialState | None]],
        first_seen: dict[str, tuple[int, ...]],
    ) -> PartialState | None:
        """Outside the lock: the folded state plus the folds under way. The summary is merged last,
        into a fresh state, so its buffers' free rows stay for the next fold."""
        parts = []
        for table, part in folding:
            if part is None and table is not None:
                part = PartialState.from_table(table, self._spec(), first_seen)
            if part is not None:
                parts.append(part)
        if not parts:
            return summary
        state = merge_states(parts)
        return state if summary is None else state.merge(summary)

    def _whole_state(self) -> PartialState:
        """The rows still stored, plus the folded state and the folds under way, as one state."""
        with self._lock:
            table = self._rows.table()
            summary = self._summary
            folding = self._in_flight()
            first_seen = self._first_seen()
        rows = PartialState.from_table(table, self._spec(), first_seen)
        settled = self._settled_state(summary, folding, first_seen)
        return rows if settled is None else rows.merge(settled)

    def _summary_snapshot(self, options: ReportOptions) -> tuple[dict[str, Any], int, int]:
        """(report, finished, pending) from the folded state plus the rows still stored."""
        asked = StateSpec(tuple(self.rules), tuple(self.schedules), options.policy, options.bootstrap, options.seed)
        if asked.signature() != self._spec().signature():
            raise InputError(
                "a summary-mode accumulator reports with the censoring policy, bootstrap and seed it was built "
                "with (its sums are already weighted); use mode='rows' to change them at snapshot time"
            )
        state = self._whole_state()
        opts = dataclasses.replace(options, predictors=list(options.predictors or []))
        return report_from_state(state, opts, allow_empty=True), state.n, state.pending
