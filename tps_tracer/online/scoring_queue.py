"""Stopped trajectories to rows: the scoring queue, its batches, and the scores listeners get.

A mixin of `Accumulator` (online/accumulator.py), which owns the state named below. A stop
reserves its trajectory in the live store and queues its id here; every `batch_size` stops (each
stop, with listeners) the batch is scored, vectorised (online/batch_scorer.py), into rows of the
row store. In row mode that runs where the batch filled; in summary mode always on the
accumulator's background thread (online/background_work.py), which also folds the rows that
settled (online/summary_folding.py): the thread calling stop() or resolve() never scores or
folds, it at most waits while that thread is far behind (backpressure, issue 28).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tps_tracer.evaluation.bootstrap import trajectory_key
from tps_tracer.online.accumulator_merge import StateMerging
from tps_tracer.online.background_work import BackgroundWork
from tps_tracer.online.batch_scorer import BatchScorer, ScoredBatch
from tps_tracer.online.live_run import _Live
from tps_tracer.online.live_store import LiveStore
from tps_tracer.online.summary_folding import _Fold
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import Role, StopReason

_NAN = float("nan")


class ScoringQueue(StateMerging):
    # Owned by Accumulator (see its __init__); declared here for the type checker.
    _store: LiveStore
    _scorer: BatchScorer
    _queue: list[str]
    _background: BackgroundWork | None
    _scoring: int
    _scoring_done: threading.Condition
    _listeners: list[Callable[[TrajectoryScore], None]]
    _listener_meta: OrderedDict[str, Mapping[str, Any]]

    def _drain_adapters(self) -> None:
        raise NotImplementedError  # Accumulator's (online/lifetimes.py): apply what adapters queued

    def _take_queue(self) -> list[str]:
        batch, self._queue = self._queue, []
        return batch

    def _off_caller(self, job: Callable[[Any], None], arg: Any) -> None:
        """Summary mode: run a fold on the background thread (inline when it is `max_pending` jobs
        behind: backpressure); row mode: inline, as always."""
        if self._background is None or not self._background.submit(job, arg):
            job(arg)

    def _fold_settled(self, _: Any = None) -> None:
        """Summary mode, as a background job: fold the settled rows (after resolves settled a batch)."""
        with self._lock:
            fold = self._take_fold()
        if fold is not None:
            self._finish_fold(fold)

    def _score_off_caller(self, batch: list[str]) -> None:
        if self._background is None:
            self._score(batch)
            return
        with self._scoring_done:
            self._scoring += 1
        if not self._background.submit(self._score_job, batch):
            self._score_job(batch)

    def _score_safely(self, lives: list[_Live], names: list[str]) -> ScoredBatch:
        """Score a batch; if that fails, one by one, so one bad trajectory cannot take others down.

        A trajectory that cannot be scored still gets its row (no usable predictor), so it
        stays in the termination audit, and the failure is counted as an internal error.
        """
        try:
            return self._scorer.score([lv.steps for lv in lives], [lv.horizon for lv in lives], names)
        except Exception as exc:
            self._internal("score", exc)
        parts = []
        for lv in lives:
            try:
                parts.append(self._scorer.score([lv.steps], [lv.horizon], names))
            except Exception as exc:
                self._internal("score", exc)
                parts.append(self._scorer.score([[]], [0], names))
        return ScoredBatch(
            np.concatenate([p.pairs for p in parts]),
            np.concatenate([p.aggregates for p in parts]),
            np.concatenate([p.usable for p in parts]),
            np.concatenate([p.weight_mass for p in parts]),
            np.concatenate([p.clipped for p in parts]),
        )

    def _score(self, batch: list[str]) -> None:
        """Turn queued trajectories into rows of the pair table (the heavy part, outside the lock);
        in summary mode, fold the rows that settled."""
        fold, scores = self._score_rows(batch)
        if fold is not None:
            self._finish_fold(fold)
        self._notify(scores)

    def _score_job(self, batch: list[str]) -> None:
        """`_score` as a background job: counted in `_scoring` until its rows are in the store (a
        snapshot waits for that: until then the batch is in no table), not while its fold runs (a
        fold in flight is in `_folding`, which snapshots already count)."""
        try:
            fold, scores = self._score_rows(batch)
        finally:
            with self._scoring_done:
                self._scoring -= 1
                self._scoring_done.notify_all()
        if fold is not None:
            self._finish_fold(fold)
        self._notify(scores)

    def _score_rows(self, batch: list[str]) -> tuple[_Fold | None, list[TrajectoryScore]]:
        with self._lock:
            lives = [self._store.finishing[tid] for tid in batch]
        names = self._names_in(lives)
        scored = self._score_safely(lives, names)
        keys = [self._key(tid) for tid in batch]
        with self._lock:
            outcome, q_z = [], []
            for tid, lv in zip(batch, lives, strict=True):
                self._store.scored(tid)
                del self._rows.row_of[tid]
                clean = lv.reason is StopReason.CLEAN
                if lv.outcome is not None and not clean:  # ignored by scoring, counted as in batch
                    self._rows.outcome_on_unscored += 1
                    self._unscored_outcome[tid] = lv.outcome
                outcome.append(float(lv.outcome) if clean and lv.outcome is not None else _NAN)
                q_z.append(_NAN if lv.q_z is None else lv.q_z)
            self._rows.append_many(
                batch,
                [STOP_REASONS.index(lv.reason) for lv in lives],
                outcome,
                q_z,
                [len(lv.steps) for lv in lives],
                [lv.horizon for lv in lives],
                scored.weight_mass,
                {
                    name: (scored.usable[:, j], scored.pairs[:, j], scored.aggregates[:, j], scored.clipped[:, j])
                    for j, name in enumerate(names)
                },
            )
            self._keys.extend(keys)
            scores = [self._score_of(tid, self._rows.row_of[tid]) for tid in batch] if self._listeners else []
            fold = self._take_fold() if self.mode == "summary" else None
        return fold, scores

    def _key(self, tid: str) -> int:
        """The id-derived bootstrap key; an id that cannot be hashed never takes its batch down."""
        try:
            return trajectory_key(tid)
        except Exception as exc:
            self._internal("key", exc)
            return 0

    def _names_in(self, lives: list[_Live]) -> list[str]:
        """Predictors to score: the configured ones, or every name the steps mention."""
        if self.predictors is not None:
            return self.predictors
        seen: dict[str, None] = {}
        for live in lives:
            for step in live.steps:
                seen.update(dict.fromkeys(step))
        with self._lock:
            for name in seen:
                self._known.setdefault(name, None)
        return list(seen)

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: Callable[[TrajectoryScore], None]) -> None:
        """Call `listener(TrajectoryScore)` whenever a trajectory's scores become known or change.

        That is when a stopped trajectory is scored (a clean stop once its outcome is known)
        and when a late outcome or q_Z resolves it. With a listener, each stop is scored at
        once instead of in batches, so exports are timely. Listeners run in the thread that
        called stop/resolve (the capture worker, for the adapters); their errors are counted
        as `listener_error`, never raised.
        """
        self._listeners.append(listener)

    def _score_of(self, tid: str, row: int) -> TrajectoryScore:
        """Under the lock: a finished row as a TrajectoryScore."""
        rows = self._rows
        reason = StopReason(STOP_REASONS[int(rows.stop_code[row])])
        y, q = rows.outcome[row], rows.q_z[row]
        pairs: dict[tuple[str, str, str], tuple[float, float]] = {}
        for name, col in rows.predictors.items():
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
            role=self.policy.role(reason),
            outcome=None if math.isnan(y) else int(y),
            q_z=None if math.isnan(q) else float(q),
            n_steps=int(rows.n_steps[row]),
            horizon=int(rows.horizon[row]),
            pairs=pairs,
            metadata=self._listener_meta.get(tid, {}),
        )

    def _notify(self, scores: list[TrajectoryScore]) -> None:
        for score in scores:
            if score.role is Role.COMPLETE and score.outcome is None:
                continue  # a clean stop is scored when its outcome arrives
            for listener in self._listeners:
                try:
                    listener(score)
                except Exception as exc:
                    self.health.count(
                        "error", "listener", f"{getattr(listener, '__name__', listener)!r} failed: {exc!r}"
                    )

    def flush(self) -> None:
        """Score every queued stopped trajectory now, and wait for the background scoring and folds
        (summary mode) to finish: snapshot, state, merge and close do this first. Events an
        attached adapter still holds in its queue are applied first (`leave_lifetimes_to`)."""
        self._drain_adapters()
        with self._lock:
            batch = self._take_queue()
        if batch:
            self._score(batch)
        if self._background is not None:
            # Jobs not started yet run here, now; then wait for a batch being scored on the
            # background thread (not for its fold: `_folding` shows it). Never on that thread itself.
            self._background.run_queued_here()
            if not self._background.on_worker_thread():
                with self._scoring_done:
                    self._scoring_done.wait_for(lambda: self._scoring == 0)
