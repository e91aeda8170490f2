"""Summary mode: settled runs (non-clean stops, clean stops with their outcome) leave the row store for
one `PartialState` (the snapshot equals row mode's, <= 1e-12); scoring and folds run on its own thread."""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import trajectory_key
from tps_tracer.evaluation.pairs import PairTable
from tps_tracer.evaluation.partial_state import PartialState, StateSpec, merge_states
from tps_tracer.evaluation.report import report_from_state
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.health import HealthLedger
from tps_tracer.online.row_store import RowStore
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import StopReason

_CLEAN_CODE = STOP_REASONS.index(StopReason.CLEAN)
_RECENT = 4096  # folded keys kept in a set before they are sorted into an array


class FoldedIds:
    """The keys of the ids folded away (8 bytes a run; two ids share one with probability ~n^2 / 2^65,
    such a run counted as a repeat): recent keys in a set, older ones in sorted arrays of halving sizes."""

    def __init__(self) -> None:
        self._recent: set[int] = set()
        self._sorted: list[NDArray[np.uint64]] = []  # largest first

    def add(self, keys: Iterable[int]) -> None:
        self._recent.update(keys)
        if len(self._recent) < _RECENT:
            return
        run = np.array(sorted(self._recent), dtype=np.uint64)
        self._recent = set()
        while self._sorted and self._sorted[-1].size <= run.size:
            run = np.union1d(self._sorted.pop(), run)
        self._sorted.append(run)

    def __contains__(self, tid: object) -> bool:
        if not isinstance(tid, str) or not (self._recent or self._sorted):
            return False  # nothing folded yet: no hashing
        key = trajectory_key(tid)
        if key in self._recent:
            return True
        k = np.uint64(key)
        for keys in self._sorted:
            i = int(keys.searchsorted(k))
            if i < keys.size and keys[i] == k:
                return True
        return False

    def keys(self) -> NDArray[np.uint64]:
        """Every key, sorted (what a merge or a saved state carries)."""
        recent = np.array(sorted(self._recent), dtype=np.uint64)
        return np.sort(np.concatenate([*self._sorted, recent])) if self._sorted else recent

    def __len__(self) -> int:
        return len(self._recent) + sum(a.size for a in self._sorted)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._sorted) + 8 * len(self._recent)


@dataclass
class _Fold:
    """Settled runs on their way into the summary: rows taken out, or another accumulator's summary."""

    token: int
    table: PairTable | None  # the rows taken out (None: `part` came from another accumulator)
    unscored: dict[str, int]  # outcomes given on their non-clean stops
    first_seen: dict[str, tuple[int, ...]]
    part: PartialState | None = None  # their state, once built

    @property
    def n(self) -> int:
        return self.part.n if self.part is not None else (0 if self.table is None else self.table.n)


@dataclass(eq=False)
class SummaryStore:
    """The folded state and the folds under way (empty in row mode), under the accumulator's lock."""

    spec: StateSpec
    lock: threading.Lock
    rows: RowStore
    known: dict[str, None]
    health: HealthLedger
    batch_size: int
    max_pending: int
    internal: Callable[[str, BaseException], None]  # counts (or raises, strict) an internal error
    summary: PartialState | None = None
    folding: dict[int, _Fold] = dataclasses.field(default_factory=dict)
    _fold_count: int = 0
    resolved_rows: int = 0  # stored rows resolved since the last fold
    folded_ids: FoldedIds = dataclasses.field(default_factory=FoldedIds)

    @property
    def n(self) -> int:
        """Runs folded, or on their way (under the lock)."""
        return sum(f.n for f in self.folding.values()) + (self.summary.n if self.summary is not None else 0)

    def first_seen(self) -> dict[str, tuple[int, ...]]:
        return {p: (i,) for i, p in enumerate(self.known)}

    def take(self) -> _Fold | None:
        """Under the lock: take the settled rows out if a batch is there (or clean stops waiting for
        their outcome overflow max_pending); the caller runs `finish` outside the lock."""
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
        if overflow:  # the oldest waiting clean stops are folded as pending
            waiting = np.flatnonzero(pending)
            if overflow < waiting.size:
                waiting = waiting[np.argpartition(rows.seq[waiting], overflow - 1)[:overflow]]
            settled[waiting] = True
            self.health.count("ignored", "pending_folded", n=overflow)
        table, keys, unscored = rows.take_out(settled)
        self.folded_ids.add(keys.tolist())
        return self.start(table, unscored, None)

    def start(self, table: PairTable | None, unscored: dict[str, int], part: PartialState | None) -> _Fold:
        """Under the lock: a fold under way, counted as folded until `finish` merges it."""
        self._fold_count += 1
        fold = _Fold(self._fold_count, table, unscored, self.first_seen(), part)
        self.folding[fold.token] = fold
        return fold

    def carry_folded_ids(self, other_folded: np.ndarray, here: np.ndarray) -> int:
        """Under the lock: add another accumulator's folded keys; how many were also here (`here`: stored
        or live) or folded here: two copies that can no longer be told apart."""
        if other_folded.size == 0:
            return 0
        ours = self.folded_ids
        twice = np.union1d(np.intersect1d(ours.keys(), other_folded), np.intersect1d(here, other_folded))
        ours.add(int(k) for k in other_folded.tolist())
        return int(twice.size)

    def finish(self, fold: _Fold) -> None:
        """Outside the lock: build the taken rows' state (on failure the rows go back, counted) and merge it,
        then swap it in under the lock unless another fold swapped meanwhile (then again): the lock is held
        for a check and an assignment."""
        part = fold.part
        if part is None and fold.table is not None:
            try:
                part = fold.part = PartialState.from_table(fold.table, self.spec, fold.first_seen)
            except Exception as exc:
                with self.lock:
                    del self.folding[fold.token]
                    self.rows.append_table(fold.table, fold.unscored)
                self.internal("fold", exc)
                return
        assert part is not None
        while True:  # a retry means another fold was merged: some fold always progresses
            with self.lock:
                summary = self.summary
            merged = part if summary is None else summary.merge(part)
            with self.lock:
                if self.summary is summary:
                    self.summary = merged
                    del self.folding[fold.token]
                    return

    def settled(self) -> tuple[PartialState | None, list[_Fold], dict[str, tuple[int, ...]]]:
        """Under the lock: what `settled_state` merges (the summary, the folds under way)."""
        return self.summary, list(self.folding.values()), self.first_seen()

    def settled_state(
        self, seen: tuple[PartialState | None, list[_Fold], dict[str, tuple[int, ...]]]
    ) -> PartialState | None:
        """Outside the lock: the folded state plus the folds under way (the summary merged last, so its
        buffers' free rows stay for the next fold)."""
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
        asked = dataclasses.replace(
            self.spec, policy=options.policy, bootstrap=options.bootstrap, seed=options.seed, missing=options.missing
        )
        if asked.signature() != self.spec.signature():
            raise InputError(
                "a summary-mode accumulator reports with the censoring policy, bootstrap and seed it was built "
                "with (its sums are already weighted); use mode='rows' to change them at snapshot time"
            )
        state = self.whole_state()
        return report_from_state(state, options, allow_empty=True), state.n, state.pending

    def whole_state(self) -> PartialState:
        """The rows still stored, the folded state and the folds under way, as one state."""
        with self.lock:
            table = self.rows.table()
            seen = self.settled()
        rows = PartialState.from_table(table, self.spec, seen[2])
        settled = self.settled_state(seen)
        return rows if settled is None else rows.merge(settled)


class BackgroundWork:
    """Summary mode's thread: jobs run in order on a thread started on demand and ended after `linger`
    idle seconds; backpressure blocks, and a job runs on the caller only when waiting could be forever."""

    def __init__(
        self,
        name: str,
        max_pending: int = 64,  # jobs of one batch (64 trajectories) each: ~4k trajectories waiting at most
        linger: float = 1.0,
        stall_timeout: float = 30.0,  # seconds a full queue may make no progress before the caller does the job
    ):
        self.name = name
        self.max_pending = max(1, max_pending)
        self.linger = linger
        self.stall_timeout = stall_timeout
        self._jobs: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        lock = threading.Lock()
        self._cv = threading.Condition(lock)  # jobs queued, or all done
        self._room = threading.Condition(lock)  # the queue is down to half
        self._unfinished = 0
        self._thread: threading.Thread | None = None
        self._done = 0  # jobs run to the end (progress, for the stall test)
        self.waits = 0  # submits that blocked because max_pending jobs were waiting (backpressure)
        self.inline_runs = 0  # jobs run where submitted: from the thread itself, or after a stall
        self.failures = 0  # jobs that raised past their own guard

    def submit(self, job: Callable[..., Any], *args: Any) -> bool:
        """Queue job(*args), blocked while `max_pending` jobs wait; False when the caller must run it (on
        the thread itself, or no progress for `stall_timeout` seconds)."""
        with self._cv:
            if self._unfinished >= self.max_pending:
                if self.on_worker_thread():
                    self.inline_runs += 1
                    return False
                self.waits += 1
                # Wait down to half full, woken once: each wake costs the waiting thread CPU.
                low = self.max_pending // 2
                while self._unfinished > low:
                    done = self._done
                    self._room.wait(self.stall_timeout)
                    if self._done == done and self._unfinished > low:
                        if self._unfinished < self.max_pending:
                            break  # a place is free after all: queue it
                        self.inline_runs += 1  # stuck: waiting longer could be waiting forever
                        return False
            self._jobs.append((job, args))
            self._unfinished += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            else:
                self._cv.notify_all()  # all: a wait_idle waiter must not take the thread's wake
        return True

    def on_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every job has run (True) or `timeout` passed; on the thread itself, at once."""
        if self.on_worker_thread():
            return self._unfinished == 0
        with self._cv:
            return self._cv.wait_for(lambda: self._unfinished == 0, timeout)

    def run_queued_here(self) -> int:
        """Run every job not started yet on the calling thread (a flush does its work itself)."""
        ran = 0
        while True:
            with self._cv:
                if not self._jobs:
                    return ran
                job, args = self._jobs.popleft()
            self._run_one(job, args)
            ran += 1

    def _run_one(self, job: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Run a job (one that raises past its own guard is counted); wake waiters only when their wait is over."""
        try:
            job(*args)
        except BaseException:
            with self._cv:
                self.failures += 1
        finally:
            with self._cv:
                self._unfinished -= 1
                self._done += 1
                if self._unfinished == self.max_pending // 2:
                    self._room.notify_all()
                if self._unfinished == 0:
                    self._cv.notify_all()

    @property
    def unfinished(self) -> int:
        return self._unfinished

    def _run(self) -> None:
        while True:
            with self._cv:
                if not self._jobs:
                    self._cv.wait_for(lambda: bool(self._jobs), self.linger)
                if not self._jobs:  # idle for `linger` seconds: end; the next submit starts a thread
                    self._thread = None
                    return
                job, args = self._jobs.popleft()
            self._run_one(job, args)
