"""The online TPS accumulator: steps in, the report out, one trajectory at a time.

    acc = Accumulator(predictors=["verbal", "token_prob"], sink="runs.jsonl")
    acc.observe("task-17", {"verbal": 0.8, "token_prob": 0.71})     # every ReAct step
    acc.stop("task-17", "clean")                                    # or "max_steps", horizon=budget
    acc.resolve("task-17", outcome=1)                               # whenever the grade arrives
    acc.snapshot()                                                  # same object as `report --json`

Life of a trajectory. `observe` appends a step to a live trajectory (created on first
sight). `stop` writes its record to the sink (if any) and queues it; queued trajectories
are scored in vectorised batches (every `batch_size` stops, and before any snapshot,
merge or close) into rows of the pair table: per predictor the branch pairs (s1, s0) for
every rule x schedule, four scalar summaries and the truncated weight mass (docs/design.md,
"the branch pair"). The steps are then dropped, so a finished trajectory costs a fixed
~1.5 KB whatever its length. The stop reason's role (complete / censored / excluded) and
the outcome or q_Z only pick eta at snapshot time, which is why outcomes may arrive long
after `stop`, and why a snapshot may use another censoring policy (the paper's
contra-assumption check) without rescoring.

Snapshots compute means and Poisson-bootstrap CIs from the rows with the batch code
(`report_from_table`), over rows sorted by the id-derived key: identical numbers however
trajectories were interleaved across threads or split across merged accumulators, and
identical bootstrap replicates to `tps-tracer report` on the sink. A snapshot costs what
a batch report of the finished rows costs (lower `bootstrap` for very large n).

Safety: nothing raises into the caller's agent loop unless `strict=True`. Bad input
(NaN or out-of-range forecasts, unknown stop reasons, steps after stop, duplicate stops,
resolves of unknown ids, conflicting outcomes) is rejected, counted by kind in
`snapshot()["online"]["rejected"]`, and logged once per kind. A live trajectory with no
event for `idle_timeout` seconds, or the oldest one when more than `max_live` are live,
is stopped as capture_lost (abandoned, counted) so memory stays bounded, unless an adapter
owns the runs' lifetimes (`leave_lifetimes_to`: the handler and the span processor do).

Repeated ids. A run that starts under an id already stopped (the adapters call `begin` when
they see a new root run or trace; a script re-run with the same ids) is a *repeat*: its steps
go to a run of its own, its record is appended to the sink, and it is never scored: the first
run's row stays the one scored, exactly as `tps-tracer report` keeps a file's first record of an
id and sets later ones aside (records/set_aside.py). It is counted where the report counts it:
`snapshot()["online"]["set_aside"]["duplicate_id"]` (health category set_aside), and a
resolution arriving after a repeat's record belongs to the repeat (the nearest record above it,
as the reader decides), so it is appended as a line and counted as duplicate_resolution, never
applied to the first run. Late events of a stopped run that no `begin` announced are still
rejected (step_after_stop, duplicate_stop).

Summary mode (`mode="summary"`) folds settled trajectories into one PartialState instead of
keeping their rows (constant memory; when a run is settled, and why the caller of stop/resolve
never scores or folds: online/summary_store.py). Batches are scored here (`_score_rows`), on the
accumulator's background thread in summary mode (online/background_work.py).

The facade over its parts: the live store (online/live_store.py), the rows store
(online/row_store.py), the summary store (online/summary_store.py), the record writer, the
batch scorer. State across processes: `state()` is versioned bytes and `merge_state(bytes)`
adds them to this accumulator, exactly as `merge` does (online/accumulator_state.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tps_tracer import at_exit
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED, trajectory_key
from tps_tracer.evaluation.diagnostics import DEFAULT_ECE_BINS
from tps_tracer.evaluation.partial_state import PartialState, StateSpec
from tps_tracer.evaluation.report import report_from_table
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.health import HealthLedger
from tps_tracer.online import accumulator_state
from tps_tracer.online.background_work import BackgroundWork
from tps_tracer.online.batch_scorer import BatchScorer
from tps_tracer.online.input_checks import InputChecks
from tps_tracer.online.jsonl_sink import JsonlSink, RecordWriter
from tps_tracer.online.live_store import RESERVED, LiveStore, _Live
from tps_tracer.online.row_store import RowStore
from tps_tracer.online.summary_store import SummaryStore, _Fold
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.records.record_shape import record_object
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.scoring.missing_forecasts import DEFAULT_MISSING, check_missing_policy
from tps_tracer.scoring.rules import ScoreRule, get_rule
from tps_tracer.scoring.schedules import WeightSchedule, get_schedule

DEFAULT_IDLE_TIMEOUT = 3600.0
DEFAULT_MAX_LIVE = 100_000
DEFAULT_MAX_PENDING = 100_000
MODES = ("rows", "summary")


FOLD_THREAD_NAME = "tps-accumulator-fold"  # summary mode's background thread (scoring and folds)


class AccumulatorError(InputError):
    """Bad input to the accumulator (raised only in strict mode; otherwise counted)."""


class AccumulatorClosedError(AccumulatorError):
    """`resolve()` on a closed accumulator: its sink is closed, so the outcome could not be kept."""


class Accumulator:
    def __init__(
        self,
        predictors: Sequence[str] | None = None,
        rules: Sequence[str | ScoreRule] = ("log", "brier", "beta(2,4)"),
        weights: Sequence[str | WeightSchedule] = ("linear-front",),
        bootstrap: int = DEFAULT_REPLICATES,
        seed: int = DEFAULT_SEED,
        policy: CensoringPolicy | None = None,
        sink: str | os.PathLike[str] | JsonlSink | None = None,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        max_live: int = DEFAULT_MAX_LIVE,
        strict: bool = False,
        base_rate: bool = True,
        ece_bins: int = DEFAULT_ECE_BINS,
        clock: Callable[[], float] = time.monotonic,
        batch_size: int = 64,
        health: HealthLedger | None = None,
        mode: str = "rows",
        max_pending: int = DEFAULT_MAX_PENDING,
        missing: str = DEFAULT_MISSING,
    ):
        """predictors=None discovers predictor names from the steps; otherwise other names are rejected.
        health: the ledger counting rejected input, abandoned runs and errors (adapters built on this
        accumulator count into the same one).
        mode: "rows" keeps a row per finished trajectory; "summary" folds settled ones into a
        partial state (constant memory, see the module docstring); max_pending bounds the
        clean stops waiting for their outcome in summary mode.
        missing: the policy for steps without a forecast (scoring/missing_forecasts.py)."""
        if mode not in MODES:
            raise InputError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.max_pending = max(1, int(max_pending))
        self.rules = [get_rule(r) for r in rules]
        self.schedules = [get_schedule(s) for s in weights]
        if not self.rules or not self.schedules:
            raise InputError("need at least one rule and one weight schedule")
        self.predictors: list[str] | None = list(predictors) if predictors is not None else None
        self._predictor_set = frozenset(self.predictors) if self.predictors is not None else None
        self._checks = InputChecks(self._reject, self._predictor_set)
        self.bootstrap = bootstrap
        self.seed = seed
        self.policy = policy or CensoringPolicy()
        self.missing = check_missing_policy(missing)
        self.base_rate = base_rate
        self.ece_bins = ece_bins
        self.idle_timeout = idle_timeout
        self.max_live = max_live
        self.strict = strict
        self._clock = clock
        self._scorer = BatchScorer(self.rules, self.schedules, self.missing)
        self.batch_size = max(1, batch_size)
        self._queue: list[str] = []  # stopped, reserved, waiting to be scored (at most batch_size)
        self._lock = threading.Lock()
        self._repeated: set[str] = set()  # ids with a repeat's record written: their resolutions are set aside
        self._rows = RowStore(self.rules, self.schedules, self.missing)
        self._known: dict[str, None] = dict.fromkeys(self.predictors or ())  # predictor names, first-seen order
        for name in self._known:
            self._rows.add_predictor(name)
        self.health = health if health is not None else HealthLedger()
        spec = StateSpec(
            tuple(self.rules), tuple(self.schedules), self.policy, self.bootstrap, self.seed, missing=self.missing
        )
        self._summaries = SummaryStore(
            spec, self._lock, self._rows, self._known, self.health, self.batch_size, self.max_pending, self._internal
        )
        # Live and finishing trajectories; when one is idle or evicted: online/live_store.py (OpenRuns).
        # Summary mode: the keys of the ids folded away, so a new run under one is still a repeat.
        folded = self._summaries.folded_ids if mode == "summary" else None
        self._store = LiveStore(idle_timeout, max_live, self._rows.row_of, folded)
        self._writer = RecordWriter(JsonlSink(sink) if isinstance(sink, (str, os.PathLike)) else sink, self.health)
        # Exporters called with each trajectory's scores as they become known (add_listener).
        self._listeners: list[Callable[[TrajectoryScore], None]] = []
        self._listener_meta: OrderedDict[str, Mapping[str, Any]] = OrderedDict()  # stop metadata, for late scores
        self._last_sweep = clock()
        self._sweep_every = 1.0 if idle_timeout is None else max(1e-3, min(1.0, idle_timeout / 4))
        self.lifetime_owner: str | None = None  # see leave_lifetimes_to
        self._drains: list[Callable[[], Callable[[], Any] | None]] = []  # see leave_lifetimes_to
        self._finishers: list[Callable[[], Callable[[str], Any] | None]] = []  # see finish_on_close
        # Summary mode: batch scoring and folds run here, never on the thread calling stop/resolve.
        self._background = BackgroundWork(FOLD_THREAD_NAME) if mode == "summary" else None
        self._scoring = 0  # batches handed to the background and not yet rows
        self._scoring_done = threading.Condition()
        self._closed = False  # see close(): later steps and stops are refused, a resolve raises
        if self._writer.sink is not None:  # a script that never closes still gets its file whole
            at_exit.register_accumulator(self)

    # ------------------------------------------------------------------ errors

    @property
    def sink(self) -> Any:
        """Where records go (a JsonlSink, or any object with write/close), or None."""
        return self._writer.sink

    @property
    def rejected(self) -> dict[str, int]:
        """Rejected inputs by kind (the health ledger's "rejected" category)."""
        return self.health.category("rejected")

    @property
    def abandoned(self) -> dict[str, int]:
        """Runs finished before their end was seen, by why (idle, evicted, closed, ...)."""
        return self.health.category("abandoned")

    def _reject(self, kind: str, message: str) -> None:
        """Count a rejected input; raise in strict mode; log the first of each kind."""
        if self.strict:
            self.health.count("rejected", kind)
            raise AccumulatorError(message)
        self.health.count("rejected", kind, message)

    def _internal(self, where: str, exc: BaseException) -> None:
        if isinstance(exc, AccumulatorError) or self.strict:
            raise exc
        self.health.count("error", f"accumulator.{where}", f"{type(exc).__name__}: {exc}")

    def begin(self, trajectory_id: str) -> bool:
        """A new run of `trajectory_id` starts (the adapters call this before the run's first step or
        stop). If the id was already stopped, the new run is a repeat (see "Repeated ids" above):
        True. Otherwise nothing changes (its first step opens it, as without this call)."""
        try:
            if type(trajectory_id) is not str:
                return False  # its step or stop will reject it, counted once there
            with self._lock:
                return self._store.begin_repeat(trajectory_id, self._clock())
        except Exception as exc:
            self._internal("begin", exc)
            return False

    def observe(self, trajectory_id: str, forecasts: Mapping[str, float | None]) -> bool:
        """Record one step's forecasts {predictor: probability or None}; False if rejected."""
        if self._closed:
            return self._refuse_closed("observe", trajectory_id)
        try:
            # Exact-type checks first: this runs on every step, and ABC isinstance checks are slow.
            if not (
                type(trajectory_id) is str and trajectory_id and trajectory_id.isascii()
            ) and not self._checks.valid_id(trajectory_id):
                return False
            if type(forecasts) is not dict and not isinstance(forecasts, Mapping):
                self._reject(
                    "invalid_step", f"{trajectory_id!r}: forecasts must be a mapping, got {type(forecasts).__name__}"
                )
                return False
            step = self._checks.step(trajectory_id, forecasts)
            now = self._clock()
            with self._lock:
                evicted = self._store.step(trajectory_id, step, now, evict=self.lifetime_owner is None)
            if evicted is None:
                self._reject("step_after_stop", f"{trajectory_id!r} already stopped; step ignored")
                return False
            for tid, old in evicted:
                self._close(tid, old, StopReason.CAPTURE_LOST, None, {"tps_abandoned": "evicted"}, "evicted")
            self._maybe_sweep(now)
            return True
        except Exception as exc:
            self._internal("observe", exc)
            return False

    def stop(
        self,
        trajectory_id: str,
        reason: str | StopReason,
        horizon: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        q_z: float | None = None,
        outcome: int | bool | None = None,
    ) -> bool:
        """Finish a trajectory: write its record and queue it for scoring (its role applies at snapshot).

        `horizon` is the step budget T for max_steps stops (defaults to the number of steps).
        `q_z` is as `resolve(q_z=...)` before the stop (summary mode needs q_Z by the stop).
        `outcome` is as `resolve(outcome=...)` before the stop: an outcome already known is
        written with the record, so no resolution line follows it.
        A stop for an id never observed is a zero-step trajectory (e.g. a run that failed
        before its first model call): counted in the audit, scored for no predictor.
        """
        if self._closed:
            return self._refuse_closed("stop", trajectory_id)
        try:
            if not self._checks.valid_id(trajectory_id):
                return False
            try:
                stop_reason = StopReason(reason)
            except ValueError:
                self._reject("invalid_stop_reason", f"{trajectory_id!r}: unknown stop reason {reason!r}; using 'other'")
                stop_reason = StopReason.OTHER
            q = self._checks.q_z(trajectory_id, q_z)
            y = None if outcome is None else self._checks.outcome(trajectory_id, outcome)
            conflict = False
            with self._lock:
                found = self._store.live.get(trajectory_id)
                # A repeat (a new run of an id already stopped, see begin) is stopped like any run.
                duplicate = (found is None or not found.repeat) and self._store.stopped(trajectory_id)
                if not duplicate:
                    live = found or _Live()
                    if q is not None:
                        conflict = live.q_z not in (None, q)
                        live.q_z = live.q_z if conflict else q
                    if y is not None:
                        clash = live.outcome not in (None, y)
                        conflict = conflict or clash
                        live.outcome = live.outcome if clash else y
                    # Checked before the trajectory leaves the live ones, so a strict-mode error leaves it intact.
                    if horizon is not None and not self._checks.horizon_ok(trajectory_id, horizon, len(live.steps)):
                        horizon = None
                    self._store.reserve(trajectory_id, live)
            if duplicate:
                self._reject("duplicate_stop", f"{trajectory_id!r} was already stopped")
                return False
            if conflict:
                self._reject(
                    "conflicting_resolution", f"{trajectory_id!r}: {_RESOLVE_MESSAGES['conflicting_resolution']}"
                )
            self._close(trajectory_id, live, stop_reason, horizon, self._checks.metadata(trajectory_id, metadata), None)
            self._maybe_sweep(self._clock())
            return True
        except Exception as exc:
            self._internal("stop", exc)
            return False

    def finished(
        self,
        trajectory_id: str,
        steps: Sequence[Mapping[str, float | None]],
        reason: str | StopReason,
        horizon: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        q_z: float | None = None,
        outcome: int | bool | None = None,
        resolved: tuple[int | None, float | None] = (None, None),
    ) -> bool:
        """A run an adapter saw whole, in one call: as `begin`, `observe` for each step, `resolve` with
        the values recorded while it ran (`resolved`: outcome, q_z), then `stop`."""
        if self._closed:
            return self._refuse_closed("stop", trajectory_id)
        self.begin(trajectory_id)
        for step in steps:
            self.observe(trajectory_id, step)
        if resolved != (None, None):
            self.resolve(trajectory_id, outcome=resolved[0], q_z=resolved[1])
        return self.stop(trajectory_id, reason, horizon=horizon, metadata=metadata, q_z=q_z, outcome=outcome)

    def resolve(self, trajectory_id: str, outcome: int | bool | None = None, q_z: float | None = None) -> bool:
        """Attach a late outcome (0/1) and/or q_Z to a live or finished trajectory; False if rejected.

        After `close()` it raises AccumulatorClosedError: the outcome could reach neither the
        snapshot nor the sink, and it is the grader's call, never the agent's path."""
        if self._closed:
            self.health.count("rejected", "resolve_after_close")
            raise AccumulatorClosedError(
                f"resolve({trajectory_id!r}): the accumulator is closed; resolve before close(), or append the "
                "outcome to the file with JsonlSink(path).resolve(...)"
            )
        try:
            if not self._checks.valid_id(trajectory_id):
                return False
            y = self._checks.outcome(trajectory_id, outcome)
            q = self._checks.q_z(trajectory_id, q_z)
            if y is None and q is None:
                if outcome is None and q_z is None:
                    self._reject("empty_resolution", f"{trajectory_id!r}: resolve() needs an outcome or a q_z")
                return False
            scores: list[TrajectoryScore] = []
            fold_due = False
            with self._lock:
                repeat = self._repeat_resolution(trajectory_id, y, q)
                if repeat is None:
                    status, written = self._apply_resolution(trajectory_id, y, q)
                    row = self._rows.row_of.get(trajectory_id, RESERVED)
                    if written and self._listeners and row != RESERVED:
                        score = self._rows.score_of(
                            trajectory_id, row, self.policy, self._listener_meta.get(trajectory_id, {})
                        )
                        # Only what changes a score is news: an outcome for an excluded or censored run
                        # (counted, ignored by scoring) would re-send an unchanged score to every exporter.
                        if ("outcome" in written and score.role is Role.COMPLETE) or (
                            "q_z" in written and score.role is Role.CENSORED
                        ):
                            scores.append(score)
                    if self.mode == "summary" and written and row != RESERVED:
                        self._summaries.resolved_rows += 1  # a waiting row settled: fold once a batch has
                        if self._summaries.resolved_rows >= self.batch_size:
                            self._summaries.resolved_rows = 0
                            fold_due = True
            if repeat is not None:
                if repeat:  # after the repeat's record: a line the reader sets aside with it
                    self._writer.write_resolution(trajectory_id, repeat)
                    self.health.count(
                        "set_aside", "duplicate_resolution", f"{trajectory_id!r}: resolves a repeat; not scored"
                    )
                return True
            if fold_due:  # even taking the rows out (O(rows stored)) is the background's work
                self._off_caller(self._fold_settled, None)
            if status != "ok":
                self._reject(status, f"{trajectory_id!r}: {_RESOLVE_MESSAGES[status]}")
                return False
            if written:
                self._writer.write_resolution(trajectory_id, written)
            self._notify(scores)
            return True
        except Exception as exc:
            self._internal("resolve", exc)
            return False

    def _repeat_resolution(self, tid: str, y: int | None, q: float | None) -> dict[str, Any] | None:
        """Under the lock: a resolution that belongs to a repeat of `tid` (the nearest run above it,
        as the JSON Lines reader decides). A live repeat takes the values (they go out with its
        record): {}. After a repeat's record: the values, to append as a line. None: not a repeat's."""
        live = self._store.live.get(tid)
        if live is not None and live.repeat:
            live.outcome = live.outcome if y is None or live.outcome is not None else y
            live.q_z = live.q_z if q is None or live.q_z is not None else q
            return {}
        if tid in self._repeated:
            return {k: v for k, v in (("outcome", y), ("q_z", q)) if v is not None}
        return None

    def _apply_resolution(self, tid: str, y: int | None, q: float | None) -> tuple[str, dict[str, Any]]:
        """Under the lock: (status, fields newly set). The same value twice is a no-op, a different one
        a conflict. Before a trajectory's record is written the values go out with it; after, the
        caller appends them as a resolution line."""
        row = self._rows.row_of.get(tid)
        if row is not None and row != RESERVED:
            return self._rows.resolve(tid, row, y, q)
        target = self._store.target(tid)
        if target is None:
            return "resolve_unknown", {}
        if (y is not None and target.outcome not in (None, y)) or (q is not None and target.q_z not in (None, q)):
            return "conflicting_resolution", {}
        newly: dict[str, Any] = {}
        if y is not None and target.outcome is None:
            target.outcome = newly["outcome"] = y
        if q is not None and target.q_z is None:
            target.q_z = newly["q_z"] = q
        target.last_seen = self._clock()
        return "ok", newly if target.written else {}

    # ------------------------------------------------------------------ finishing

    def _close(
        self,
        tid: str,
        live: _Live,
        reason: StopReason,
        horizon: int | None,
        metadata: Mapping[str, Any] | None,
        abandoned: str | None,
    ) -> None:
        """A reserved trajectory has stopped: write its record, queue it for scoring (horizon already checked)."""
        n_steps = len(live.steps)
        record: dict[str, Any] | None = None
        with self._lock:
            live.reason = reason
            live.horizon = int(horizon) if horizon is not None else n_steps
            if self.sink is not None:
                record = record_object(
                    tid,
                    reason.value,
                    outcome=live.outcome,
                    horizon=None if horizon is None else int(horizon),
                    q_z=live.q_z,
                    steps=live.steps,
                    metadata=metadata,
                    outcome_pending=reason is StopReason.CLEAN and live.outcome is None,
                )
                live.written = True
                # Taken before the trajectory lock is released: a resolve that sees `written` then
                # waits for this record's write, and writes no line if it failed (write_resolution).
                self._writer.lock.acquire()
            if live.repeat:  # written, never scored: the first run of the id is (see "Repeated ids")
                self._repeated.add(tid)
                batch = None
            else:
                batch = self._queue_stopped(tid, live, metadata)
        if record is not None:
            try:
                self._writer.write_record(tid, record)
            finally:
                self._writer.lock.release()
        if abandoned is not None:
            self.health.count("abandoned", abandoned)
        if live.repeat:
            self.health.count(
                "set_aside",
                "duplicate_id",
                f"{tid!r}: a new run under an id already finished; its record is written, not scored "
                "(the first run's is, as `tps-tracer report` keeps a file's first record of an id)",
            )
        if batch:
            self._score_off_caller(batch)

    def _queue_stopped(self, tid: str, live: _Live, metadata: Mapping[str, Any] | None) -> list[str] | None:
        """Under the lock: queue a stopped trajectory for scoring; the batch to score now, if one is due."""
        self._queue.append(tid)
        if self.predictors is None:  # first-seen order is stop order, however batches are scored
            for step in live.steps:
                for name in step:
                    if name not in self._known:
                        self._known[name] = None
        if self._listeners:
            self._listener_meta[tid] = dict(metadata or {})
            while len(self._listener_meta) > self.max_live:
                self._listener_meta.popitem(last=False)
        return self._take_queue() if len(self._queue) >= self.batch_size or self._listeners else None

    def _take_queue(self) -> list[str]:
        batch, self._queue = self._queue, []
        return batch

    # ------------------------------------------------------------------ scoring

    def _off_caller(self, job: Callable[[Any], None], arg: Any) -> None:
        """Summary mode: run a fold on the background thread (on the caller only when waiting could be
        forever, see BackgroundWork.submit); row mode: inline."""
        if self._background is None or not self._background.submit(job, arg):
            job(arg)

    def _fold_settled(self, _: Any = None) -> None:
        """Summary mode, as a background job: fold the settled rows (after resolves settled a batch)."""
        with self._lock:
            fold = self._summaries.take()
        if fold is not None:
            self._summaries.finish(fold)

    def _score_off_caller(self, batch: list[str]) -> None:
        if self._background is None:
            self._score(batch)
            return
        with self._scoring_done:
            self._scoring += 1
        if not self._background.submit(self._score, batch, True):
            self._score(batch, True)

    def _score(self, batch: list[str], counted: bool = False) -> None:
        """Turn queued trajectories into rows (the heavy part, outside the lock); in summary mode,
        fold the rows that settled. `counted`: a background job, counted in `_scoring` until its
        rows are in the store (a snapshot waits for that: until then the batch is in no table), not
        while its fold runs (a fold in flight is in the summary store's `folding`, which snapshots
        count)."""
        try:
            fold, scores = self._score_rows(batch)
        finally:
            if counted:
                with self._scoring_done:
                    self._scoring -= 1
                    self._scoring_done.notify_all()
        if fold is not None:
            self._summaries.finish(fold)
        self._notify(scores)

    def _score_rows(self, batch: list[str]) -> tuple[_Fold | None, list[TrajectoryScore]]:
        with self._lock:
            lives = [self._store.finishing[tid] for tid in batch]
        names = self._names_in(lives)
        scored = self._scorer.score_safely(
            [lv.steps for lv in lives], [lv.horizon for lv in lives], names, self._internal
        )
        keys = [self._key(tid) for tid in batch]
        rows = self._rows
        with self._lock:
            for tid in batch:
                self._store.scored(tid)
            rows.add_scored(batch, keys, lives, scored, names)
            scores = (
                [rows.score_of(tid, rows.row_of[tid], self.policy, self._listener_meta.get(tid, {})) for tid in batch]
                if self._listeners
                else []
            )
            fold = self._summaries.take() if self.mode == "summary" else None
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

    def add_listener(self, listener: Callable[[TrajectoryScore], None]) -> None:
        """Call `listener(TrajectoryScore)` whenever a trajectory's scores become known or change.

        That is when a stopped trajectory is scored (a clean stop once its outcome is known)
        and when a late outcome or q_Z resolves it. With a listener, each stop is scored at
        once instead of in batches, so exports are timely. Listeners run in the thread that
        called stop/resolve (the capture worker, for the adapters); their errors are counted
        as `listener_error`, never raised.
        """
        self._listeners.append(listener)

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
            # background thread (not for its fold: `folding` shows it). Never on that thread itself.
            self._background.run_queued_here()
            if not self._background.on_worker_thread():
                with self._scoring_done:
                    self._scoring_done.wait_for(lambda: self._scoring == 0)

    # ------------------------------------------------------------------ lifetimes: its own, or an adapter's
    # Used on its own, the accumulator finishes a run early by OpenRuns' rules through its live store:
    # idle for `idle_timeout` seconds, or the least recently active past `max_live`. An adapter that
    # knows more (a run paused by an interrupt, or busy behind a backlog of queued steps) takes that
    # over with `leave_lifetimes_to`; its own OpenRuns decides, bounded by `idle_timeout` as well.

    def leave_lifetimes_to(self, owner: str, drain: Callable[[], Any] | None = None) -> None:
        """Let an adapter (the LangChain handler, the span processor) decide when its runs end.

        The adapter knows what the accumulator cannot: that a run is paused by an interrupt
        and will resume, or still busy behind a backlog of queued steps. So this accumulator
        no longer idles out or evicts live trajectories (`sweep()` does nothing); the
        adapter's idle rule (its own `sweep`, with this accumulator's idle_timeout if tighter)
        bounds memory instead.

        drain: applies the events the adapter has queued (its capture worker's flush). flush(),
        and so snapshot/state/close, call it first: a user who closes the accumulator straight
        after `agent.invoke()` returns would otherwise close runs whose last steps and stop were
        still in the adapter's queue, and record them capture_lost although nothing was lost.
        Held weakly: an accumulator does not keep a dropped handler alive."""
        self.lifetime_owner = owner
        if drain is not None:
            self._drains.append(weakref.WeakMethod(drain) if inspect.ismethod(drain) else lambda: drain)

    def finish_on_close(self, finish: Callable[[str], Any]) -> None:
        """`finish(why)` records an adapter's runs still open as abandoned (`why`: closed, exit);
        close() calls it before it drains, so a run still in flight when the accumulator closes
        leaves its capture_lost record (its last model output may still be held by the adapter,
        never observed here, so the accumulator alone would lose it). Held weakly."""
        self._finishers.append(weakref.WeakMethod(finish) if inspect.ismethod(finish) else lambda: finish)

    def _finish_adapters(self, why: str) -> None:
        """Record the attached adapters' open runs as abandoned (see finish_on_close); never under the lock."""
        for ref in list(self._finishers):
            finish = ref()
            if finish is None:
                continue
            try:
                finish(why)
            except Exception as exc:  # as a failed drain: counted, never raised
                self._internal("finish", exc)

    def _drain_adapters(self) -> None:
        """Apply what attached adapters have queued (see leave_lifetimes_to). Never under the lock:
        the adapter's worker calls back into this accumulator."""
        for ref in list(self._drains):
            drain = ref()
            if drain is None:
                continue
            try:
                drain()
            except Exception as exc:  # an adapter's failure to drain is counted, never raised
                self._internal("drain", exc)

    def _maybe_sweep(self, now: float) -> None:
        if self.lifetime_owner is not None:
            return
        if self.idle_timeout is not None and now - self._last_sweep >= self._sweep_every:
            self.sweep(now)

    def sweep(self, now: float | None = None) -> int:
        """Stop as capture_lost (abandoned: idle) every live trajectory idle for idle_timeout; returns how many.

        Nothing when an adapter owns the runs' lifetimes (`leave_lifetimes_to`)."""
        if self.idle_timeout is None or self.lifetime_owner is not None:
            return 0
        now = self._clock() if now is None else now
        with self._lock:
            self._last_sweep = now
            idle = self._store.take_idle(now)
        for tid, live in idle:
            self._close(tid, live, StopReason.CAPTURE_LOST, None, {"tps_abandoned": "idle"}, "idle")
        return len(idle)

    # ------------------------------------------------------------------ lifecycle

    def close(self, stop_live: bool = True) -> None:
        """Stop every live trajectory as capture_lost (abandoned: 'closed') and close the sink.

        Events an attached adapter has queued are applied first, so a run that ended before
        close() is recorded as it ended; only runs still in flight are capture_lost. Closing
        twice does nothing. Afterwards steps and stops are refused (counted: after_close) and
        resolve() raises AccumulatorClosedError; snapshots still work."""
        self._shut(stop_live, "closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def _forget_at_fork(self) -> None:
        """In a forked child (tps_tracer/at_exit.py): the trajectories live at the fork are the
        parent's, which finishes them; this copy forgets them (counted), so the child's close()
        or exit does not record them again. Fresh locks: a parent thread may have held one."""
        self._lock = self._summaries.lock = threading.Lock()
        self._writer.lock = threading.Lock()
        after_fork = getattr(self._writer.sink, "_after_fork_in_child", None)
        if after_fork is not None:
            after_fork()
        n = len(self._store.live)
        self._store.live.clear()
        if n:
            self.health.count("ignored", "live_at_fork", n=n)

    def _close_at_exit(self) -> int:
        """At interpreter exit (tps_tracer/at_exit.py): close unless closed; live runs recorded."""
        return 0 if self._closed else self._shut(True, at_exit.ABANDONED_AT_EXIT)

    def _shut(self, stop_live: bool, why: str) -> int:
        """close(): how many live trajectories were recorded as abandoned (`why`)."""
        if self._closed:
            return 0
        self._finish_adapters(why)  # the adapters' runs still in flight, then everything they queued
        self._drain_adapters()
        self._closed = True  # after the drain: the adapters' queued events are still applied
        leftover: list[tuple[str, _Live]] = []
        if stop_live:
            with self._lock:
                leftover = self._store.take_all(self._clock())
            for tid, live in leftover:
                self._close(tid, live, StopReason.CAPTURE_LOST, None, {"tps_abandoned": why}, why)
        self.flush()
        if self._background is not None:
            self._background.wait_idle()  # the folds in flight too: nothing runs after close
        self._writer.close()
        return len(leftover)

    def _refuse_closed(self, what: str, tid: Any) -> bool:
        """A step or stop after close(): counted and logged (raised in strict mode), never written."""
        self._reject("after_close", f"{what}({tid!r}) after close(): the accumulator is closed; ignored")
        return False

    @property
    def n_live(self) -> int:
        return len(self._store)

    @property
    def n_finished(self) -> int:
        """Stopped trajectories (scored, or queued for scoring)."""
        with self._lock:
            # finishing: stopped and not yet a row (queued, or being scored, maybe in the background)
            return self._rows.n + len(self._store.finishing) + self._summaries.n

    # ------------------------------------------------------------------ results

    def snapshot(
        self,
        policy: CensoringPolicy | None = None,
        bootstrap: int | None = None,
        seed: int | None = None,
        predictors: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """The report of the finished trajectories (schema of `tps-tracer report --json`) plus an "online" section."""
        self.flush()
        with self._lock:
            table = self._rows.table()
            keys = self._rows.keys()
            n_live = len(self._store)
            known = list(self._known)
        health = self.health.snapshot()
        table = table.reordered(np.argsort(keys, kind="stable"))  # canonical order: arrival order never matters
        names = list(predictors) if predictors is not None else [p for p in known if p in table.predictors]
        options = ReportOptions(
            predictors=names,
            rules=self.rules,
            schedules=self.schedules,
            bootstrap=self.bootstrap if bootstrap is None else bootstrap,
            seed=self.seed if seed is None else seed,
            policy=policy or self.policy,
            base_rate=self.base_rate,
            ece_bins=self.ece_bins,
            missing=self.missing,
        )
        if self.mode == "summary":
            report, finished, pending = self._summaries.snapshot(dataclasses.replace(options, predictors=names))
        else:
            report = report_from_table(table, options, allow_empty=True)
            finished, pending = table.n, int(table.pending.sum())
        report["online"] = {
            "finished": finished,
            "live": n_live,
            "pending_outcome": pending,
            "abandoned": health["abandoned"],
            "rejected": health["rejected"],
            "set_aside": health["set_aside"],  # repeated ids: recorded, not scored (as the file report)
            "health": health,
            "sink": self._writer.counts(),
        }
        return report

    # ------------------------------------------------------------------ state across processes

    def partial_state(self) -> PartialState:
        """The finished trajectories as one `PartialState` (either mode), for
        `tps_tracer.distributed.evaluate` or `merge_states`; clean stops still waiting for their
        outcome are in it as pending. Computed with this accumulator's policy, bootstrap and seed."""
        self.flush()
        return self._summaries.whole_state()

    def state(self) -> bytes:
        """This accumulator's state as versioned bytes (see accumulator_state.py); `merge_state` reads it."""
        self.flush()
        settings = {
            "rules": self.rules,
            "weights": self.schedules,
            "mode": self.mode,
            "bootstrap": self.bootstrap,
            "seed": self.seed,
            "policy": self.policy,
            "predictors": self.predictors,
            "missing": self.missing,
        }
        return accumulator_state.dump(settings, self._parts(), self.health.snapshot())

    @classmethod
    def from_state(cls, data: bytes, **kwargs: Any) -> Accumulator:
        """A new accumulator holding a state (no sink, no idle sweep unless given in kwargs)."""
        body = accumulator_state.read(data)
        with accumulator_state.corrupt_state():
            kwargs.setdefault("idle_timeout", None)
            acc = cls(**accumulator_state.settings(body), **kwargs)
            acc._add(accumulator_state.parts(body, acc.rules, acc.schedules, acc._key, acc._clock()), fold=False)
            accumulator_state.count_health(body, acc.health)
        return acc

    def merge_state(self, data: bytes) -> None:
        """Add the trajectories (finished and live) and health counts of another accumulator's `state()`."""
        self.merge(type(self).from_state(data))

    def merge(self, other: Accumulator) -> None:
        """Add another accumulator's trajectories (finished and live) to this one, exactly.

        Both must use the same rules and schedules. Ids already present here are rejected
        (counted as duplicate_id). The other's sink is not rewritten into ours: each worker's
        sink holds its own trajectories, and `tps-tracer report` reads them concatenated.
        """
        if [r.name for r in self.rules] != [r.name for r in other.rules] or [s.name for s in self.schedules] != [
            s.name for s in other.schedules
        ]:
            raise InputError("cannot merge accumulators with different rules or weight schedules")
        if self.missing != other.missing:
            raise InputError(
                f"cannot merge accumulators with different missing-forecast policies ({self.missing}, {other.missing})"
            )
        if other._summaries.summary is not None or other.mode == "summary":
            if self.mode != "summary":
                raise InputError("a summary-mode accumulator merges only into a summary-mode one (its rows are gone)")
            if other._summaries.spec.signature() != self._summaries.spec.signature():
                raise InputError("cannot merge summary states with different censoring policy, bootstrap or seed")
        self.flush()
        other.flush()
        self._add(other._parts(), other.health)

    def _parts(self) -> accumulator_state.Parts:
        """A copy of what this accumulator holds, for another or for `state()` (the caller flushed it)."""
        with self._lock:
            table = self._rows.table()
            keys = self._rows.keys()
            live = [
                (tid, _Live(list(lv.steps), lv.last_seen, lv.outcome, lv.q_z, repeat=lv.repeat))
                for tid, lv in self._store.live.items()
            ]
            repeated = set(self._repeated)
            unscored = dict(self._rows.unscored_outcome)
            known = list(self._known)
            folded = self._summaries.folded_ids.keys() if self.mode == "summary" else accumulator_state.NO_KEYS
            seen = self._summaries.settled()
        summary = self._summaries.settled_state(seen)  # rows being folded travel as folded
        return accumulator_state.Parts(table, keys, unscored, known, live, repeated, summary, folded)

    def _add(self, parts: accumulator_state.Parts, health: HealthLedger | None = None, fold: bool = True) -> None:
        """Add `parts` (and the `health` counts they came with) to this accumulator; an id it holds already is a
        counted duplicate_id. `fold`: let a summary-mode accumulator fold what settled (not while it is
        being built from a state)."""
        table = parts.table
        duplicates: list[str] = []
        folded_twice = 0
        settled = merging = None
        summaries = self._summaries
        with self._lock:
            if self.mode == "summary":
                # Runs stored or live here, by key, before the others arrive: to count those folded twice.
                here = np.union1d(
                    self._rows.keys(), np.array([self._key(t) for t in self._store.live], dtype=np.uint64)
                )
                folded_twice = summaries.carry_folded_ids(parts.folded_ids, here)
            for name in parts.known:
                self._known.setdefault(name, None)
                if name not in self._rows.predictors:
                    self._rows.add_predictor(name)
            take_ids: set[str] = set()
            take_rows = []
            for i, tid in enumerate(table.ids):
                if tid in self._rows.row_of or tid in self._store.live or tid in take_ids or self._was_folded(tid):
                    duplicates.append(tid)
                else:
                    take_rows.append(i)
                    take_ids.add(tid)
            idx = np.array(take_rows, dtype=np.int64)
            self._rows.append_table(
                table.reordered(idx), parts.keys[idx], {t: y for t, y in parts.unscored.items() if t in take_ids}
            )
            for tid, live in parts.live:
                if tid in self._store.live or (not live.repeat and (tid in self._rows.row_of or self._was_folded(tid))):
                    duplicates.append(tid)
                else:  # a repeat stays one if its id is stopped here (its first run came along, or was here)
                    live.repeat = live.repeat and self._store.stopped(tid)
                    self._store.live[tid] = live
            self._repeated |= parts.repeated
            if parts.summary is not None:  # merged outside the lock, counted as folding until then
                merging = summaries.start_merge(parts.summary)
            if fold and self.mode == "summary":
                settled = summaries.take()
        if merging is not None:
            summaries.finish(merging)
        if settled is not None:
            summaries.finish(settled)
        if health is not None:
            self.health.merge(health)
        for tid in duplicates:
            self._reject("duplicate_id", f"merge: {tid!r} is in both accumulators; the other's copy is ignored")
        if folded_twice:  # only keys are left of these runs: both copies stay in the sums, counted one a run
            message = (
                f"merge: {folded_twice} ids were finished in both accumulators and already folded on "
                "at least one side (only their keys are kept): both copies stay in the folded sums"
            )
            if self.strict:
                self._reject("duplicate_folded_id", message)  # raises
            self.health.count("rejected", "duplicate_folded_id", message, n=folded_twice)

    def _was_folded(self, tid: str) -> bool:
        return self.mode == "summary" and tid in self._summaries.folded_ids


_RESOLVE_MESSAGES = {
    "resolve_unknown": "no live or finished trajectory with this id",
    "conflicting_resolution": "already resolved with a different value; ignored",
}
