"""The summary store: summary mode's folded state, which settled rows leave the row store for.

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
taken). Meanwhile the rows are in `folding`, which snapshots, `state()`, `partial_state()`
and `merge` count as folded; a resolve for one of them is a resolve_unknown, as for any
folded id.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tps_tracer.errors import InputError
from tps_tracer.evaluation.pairs import PairTable
from tps_tracer.evaluation.partial_state import PartialState, StateSpec, merge_states
from tps_tracer.evaluation.report import report_from_state
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.health import HealthLedger
from tps_tracer.online.folded_ids import FoldedIds
from tps_tracer.online.row_store import RowStore
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import StopReason

_CLEAN_CODE = STOP_REASONS.index(StopReason.CLEAN)


@dataclass
class _Fold:
    """Settled runs on their way into the summary, outside the lock: rows taken out of the store
    (their state is built, then merged), or another accumulator's summary (merged)."""

    token: int
    table: PairTable | None  # the rows taken out (None: `part` came from another accumulator)
    keys: np.ndarray  # their bootstrap keys, to put the rows back if building fails
    unscored: dict[str, int]  # outcomes given on their non-clean stops (moved out of the row store)
    first_seen: dict[str, tuple[int, ...]]
    part: PartialState | None = None  # their state, once built

    @property
    def n(self) -> int:
        return self.part.n if self.part is not None else (0 if self.table is None else self.table.n)


@dataclass(eq=False)
class SummaryStore:
    """The folded state of a summary-mode accumulator and the folds on their way into it (a row-mode
    one keeps it empty). It shares the accumulator's lock, row store, health ledger and predictor
    order (`known`)."""

    spec: StateSpec
    lock: threading.Lock
    rows: RowStore
    known: dict[str, None]
    health: HealthLedger
    batch_size: int
    max_pending: int
    internal: Callable[[str, BaseException], None]  # counts (or raises, strict) an internal error
    summary: PartialState | None = None  # the folded settled trajectories
    # Rows taken out of the store whose PartialState is being built outside the lock;
    # snapshots, state() and merges count them as folded meanwhile.
    folding: dict[int, _Fold] = dataclasses.field(default_factory=dict)
    _fold_count: int = 0
    resolved_rows: int = 0  # stored rows resolved since the last fold
    # The keys of the ids folded away: a new run under one is a repeat.
    folded_ids: FoldedIds = dataclasses.field(default_factory=FoldedIds)

    @property
    def n(self) -> int:
        """Runs folded, or on their way (under the lock)."""
        return sum(f.n for f in self.folding.values()) + (self.summary.n if self.summary is not None else 0)

    def first_seen(self) -> dict[str, tuple[int, ...]]:
        return {p: (i,) for i, p in enumerate(self.known)}

    def take(self) -> _Fold | None:
        """Under the lock: take the settled rows out of the store, if a batch of them is there (or
        waiting clean stops overflow max_pending). O(rows taken); the caller builds their state
        with `finish` after releasing the lock."""
        rows = self.rows
        n = rows.n
        if n == 0:
            return None
        pending = (rows.stop_code[:n] == _CLEAN_CODE) & np.isnan(rows.outcome[:n])
        n_pending = int(pending.sum())
        overflow = max(0, n_pending - self.max_pending)
        if not overflow and n - n_pending < self.batch_size:
            return None
        settled = ~pending
        self.resolved_rows = 0
        if overflow:  # the oldest waiting clean stops are folded as pending: their outcome can no longer arrive
            waiting = np.flatnonzero(pending)
            if overflow < waiting.size:
                waiting = waiting[np.argpartition(rows.seq[waiting], overflow - 1)[:overflow]]
            settled[waiting] = True
            self.health.count("ignored", "pending_folded", n=overflow)
        table, keys, unscored = rows.take_out(settled)
        self.folded_ids.add(keys.tolist())  # their ids leave row_of: a new run under one is still a repeat
        return self._start(table, keys, unscored, None)

    def _start(
        self, table: PairTable | None, keys: np.ndarray, unscored: dict[str, int], part: PartialState | None
    ) -> _Fold:
        """Under the lock: a fold under way, counted as folded until it is merged."""
        self._fold_count += 1
        fold = _Fold(self._fold_count, table, keys, unscored, self.first_seen(), part)
        self.folding[fold.token] = fold
        return fold

    def carry_folded_ids(self, other_folded: np.ndarray, here: np.ndarray) -> int:
        """Under the lock: add another accumulator's folded keys to ours. Returns how many of them
        were also finished or live here (`here`: their keys before the merge) or folded here: such
        a run's two copies can no longer be told apart in the sums. (A run folded here and stored
        or live in the other is a plain duplicate_id: the other's copy is left out.)"""
        if other_folded.size == 0:
            return 0
        ours = self.folded_ids
        twice = np.union1d(np.intersect1d(ours.keys(), other_folded), np.intersect1d(here, other_folded))
        ours.add(int(k) for k in other_folded.tolist())
        return int(twice.size)

    def start_merge(self, part: PartialState) -> _Fold:
        """Under the lock: another accumulator's folded state on its way in (`finish` merges it)."""
        return self._start(None, np.zeros(0, np.uint64), {}, part)

    def finish(self, fold: _Fold) -> None:
        """Outside the lock: build the taken rows' PartialState (the bootstrap work, B x rows), then
        merge it into the summary. If building fails the rows go back to the store, so nothing is
        lost; counted as an error."""
        if fold.part is None and fold.table is not None:
            try:
                fold.part = PartialState.from_table(fold.table, self.spec, fold.first_seen)
            except Exception as exc:
                with self.lock:
                    del self.folding[fold.token]
                    self.rows.append_table(fold.table, fold.keys, fold.unscored)
                self.internal("fold", exc)
                return
        self._merge(fold)

    def _merge(self, fold: _Fold) -> None:
        """Merge a fold's state into the summary, outside the lock: merge the summary seen, then swap
        it in under the lock if no other fold swapped meanwhile (else again). Appending costs what the
        fold holds (partial_state.py's append buffer; a full buffer is regrown by with_room_for, also out here), so
        the lock is held for a check and an assignment. Until the swap the fold stays in `folding`,
        where snapshots find it."""
        part = fold.part
        assert part is not None
        for _ in range(8):
            with self.lock:
                summary = self.summary
            try:
                merged = part if summary is None else summary.with_room_for(part).merge(part)
            except Exception as exc:  # never expected; the merge under the lock below does without
                self.health.count("error", "accumulator.fold", f"{type(exc).__name__}: {exc}")
                break
            with self.lock:
                if self.summary is summary:
                    self.summary = merged
                    del self.folding[fold.token]
                    return
        with self.lock:  # folds racing each other every time: merge under the lock
            self.summary = part if self.summary is None else self.summary.merge(part)
            del self.folding[fold.token]

    def settled(self) -> tuple[PartialState | None, list[_Fold], dict[str, tuple[int, ...]]]:
        """Under the lock: what `settled_state` merges (the summary, the folds under way)."""
        return self.summary, list(self.folding.values()), self.first_seen()

    def settled_state(
        self, seen: tuple[PartialState | None, list[_Fold], dict[str, tuple[int, ...]]]
    ) -> PartialState | None:
        """Outside the lock: the folded state plus the folds under way (their state if built, else
        their rows). The summary is merged last, into a fresh state, so its buffers' free rows stay
        for the next fold."""
        summary, folding, first_seen = seen
        parts = []
        for fold in folding:
            part = fold.part
            if part is None and fold.table is not None:
                part = PartialState.from_table(fold.table, self.spec, first_seen)
            if part is not None:
                parts.append(part)
        if not parts:
            return summary
        state = merge_states(parts)
        return state if summary is None else state.merge(summary)

    def snapshot(self, options: ReportOptions) -> tuple[dict[str, Any], int, int]:
        """(report, finished, pending) from the folded state plus the rows still stored."""
        asked = StateSpec(
            self.spec.rules,
            self.spec.schedules,
            options.policy,
            options.bootstrap,
            options.seed,
            missing=options.missing,
        )
        if asked.signature() != self.spec.signature():
            raise InputError(
                "a summary-mode accumulator reports with the censoring policy, bootstrap and seed it was built "
                "with (its sums are already weighted); use mode='rows' to change them at snapshot time"
            )
        state = self.whole_state()
        opts = dataclasses.replace(options, predictors=list(options.predictors or []))
        return report_from_state(state, opts, allow_empty=True), state.n, state.pending

    def whole_state(self) -> PartialState:
        """The rows still stored, plus the folded state and the folds under way, as one state (row
        mode: the rows alone)."""
        with self.lock:
            table = self.rows.table()
            seen = self.settled()
        rows = PartialState.from_table(table, self.spec, seen[2])
        settled = self.settled_state(seen)
        return rows if settled is None else rows.merge(settled)
