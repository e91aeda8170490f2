"""The online TPS accumulator: `observe` each step, `stop` a run, `resolve` its outcome, `snapshot` the
report; a facade over a live store, a rows store and a summary store (docs/design.md, "the branch pair")."""

from __future__ import annotations

import inspect
import json
import math
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tps_tracer import at_exit
from tps_tracer.constants import DEFAULT_MISSING, MAX_HORIZON
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED, trajectory_keys
from tps_tracer.evaluation.diagnostics import DEFAULT_ECE_BINS
from tps_tracer.evaluation.partial_state import PartialState, StateSpec
from tps_tracer.evaluation.report import report_from_table
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.rows import BatchScorer, check_missing_policy
from tps_tracer.health import CATEGORIES, HealthLedger
from tps_tracer.online import accumulator_state
from tps_tracer.online.jsonl_sink import JsonlSink, RecordWriter
from tps_tracer.online.row_store import RESERVED, LiveStore, RowStore, _Live, settle
from tps_tracer.online.summary_store import BackgroundWork, SummaryStore
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.records.record_shape import InvalidOutcome, as_outcome, id_problem, record_object
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.scoring import ScoreRule, WeightSchedule, get_rule, get_schedule
from tps_tracer.validity import horizon as valid_horizon
from tps_tracer.validity import probability

DEFAULT_IDLE_TIMEOUT = 3600.0
DEFAULT_MAX_LIVE = 100_000
DEFAULT_MAX_PENDING = 100_000
MODES = ("rows", "summary")
FOLD_THREAD_NAME = "tps-accumulator-fold"  # summary mode's background thread (scoring and folds)


def _json_safe(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth < 8 and isinstance(value, Mapping):
        return {str(k): _json_safe(v, depth + 1) for k, v in value.items()}
    if depth < 8 and isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value]
    return repr(value)[:200]


def _weak(fn: Callable[..., Any]) -> Callable[[], Any]:
    """A reference that does not keep a dropped adapter alive."""
    return weakref.WeakMethod(fn) if inspect.ismethod(fn) else lambda: fn


# A stop checked outside the lock: reason, q_z, outcome, metadata and why the metadata was cleaned.
_Stop = tuple[StopReason, float | None, int | None, dict[str, Any], str | None]
# A stop decided under the lock (`_closing`): id, run, record, why abandoned, the batch due for scoring.
_Closing = tuple[str, _Live, dict[str, Any] | None, str | None, list[tuple[str, _Live]] | None]
# A resolution applied under the lock (`_resolve_locked`).
_Resolution = tuple[dict[str, Any] | None, str, dict[str, Any], list[TrajectoryScore], bool]


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
        """predictors=None discovers names from the steps. Bad input is counted in `health` (raised when
        strict); runs idle for `idle_timeout` or past `max_live` are stopped as capture_lost unless an
        adapter owns their lifetimes. mode "summary" folds settled runs away; max_pending bounds its
        clean stops waiting for an outcome."""
        if mode not in MODES:
            raise InputError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.max_pending = max(1, int(max_pending))
        self.rules = [get_rule(r) for r in rules]
        self.schedules = [get_schedule(s) for s in weights]
        if not self.rules or not self.schedules:
            raise InputError("need at least one rule and one weight schedule")
        self.predictors: list[str] | None = list(predictors) if predictors is not None else None
        self._allowed = None if predictors is None else frozenset(self.predictors or ())  # names accepted
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
        self._queue: list[tuple[str, _Live]] = []  # stopped, reserved, waiting to be scored
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
        folded = self._summaries.folded_ids if mode == "summary" else None
        self._store = LiveStore(idle_timeout, max_live, self._rows.row_of, folded)
        self._writer = RecordWriter(JsonlSink(sink) if isinstance(sink, (str, os.PathLike)) else sink, self.health)
        self._listeners: list[Callable[[TrajectoryScore], None]] = []
        self._listener_meta: OrderedDict[str, Mapping[str, Any]] = OrderedDict()  # stop metadata, for late scores
        self._last_sweep = clock()
        self._sweep_every = 1.0 if idle_timeout is None else max(1e-3, min(1.0, idle_timeout / 4))
        self.lifetime_owner: str | None = None  # see leave_lifetimes_to
        self._drains: list[Callable[[], Any]] = []  # see leave_lifetimes_to
        self._finishers: list[Callable[[], Any]] = []  # see finish_on_close
        self._background = BackgroundWork(FOLD_THREAD_NAME) if mode == "summary" else None
        self._scoring = 0  # batches handed to the background and not yet rows
        self._scoring_done = threading.Condition()
        self.closed = False  # see close(): later steps and stops are refused, a resolve raises
        if self._writer.sink is not None:  # a script that never closes still gets its whole file
            at_exit.register(self, adapter=False)

    @property
    def sink(self) -> Any:
        return self._writer.sink  # a JsonlSink, any object with write/close, or None

    @property
    def rejected(self) -> dict[str, int]:
        return self.health.category("rejected")

    @property
    def abandoned(self) -> dict[str, int]:
        return self.health.category("abandoned")  # runs finished before their end was seen, by why

    def _reject(self, kind: str, message: str) -> None:
        if self.strict:
            self.health.count("rejected", kind)
            raise AccumulatorError(message)
        self.health.count("rejected", kind, message)

    def _internal(self, where: str, exc: BaseException) -> None:
        if isinstance(exc, AccumulatorError) or self.strict:
            raise exc
        self.health.count("error", f"accumulator.{where}", f"{type(exc).__name__}: {exc}")

    # -- what the accumulator accepts: each check returns the cleaned value (None / False if refused)

    def _valid_id(self, trajectory_id: Any) -> bool:
        """The reader's rule (records/record_shape.py): an id written is an id read back."""
        if type(trajectory_id) is str and trajectory_id and trajectory_id.isascii():
            return True  # id_problem's common case, without the call
        problem = id_problem(trajectory_id)
        if problem is not None:
            self._reject("invalid_id", problem)
        return problem is None

    def _check_outcome(self, trajectory_id: str, outcome: Any) -> int | None:
        try:
            return as_outcome(outcome, allow_strings=False)
        except InvalidOutcome as exc:
            self._reject("invalid_outcome", f"{trajectory_id!r}: {exc}")
            return None

    def _check_q_z(self, trajectory_id: str, q_z: Any) -> float | None:
        q = None if q_z is None else probability(q_z)
        if q is None and q_z is not None:
            self._reject("invalid_q_z", f"{trajectory_id!r}: q_z must be a probability in [0, 1], got {q_z!r}")
        return q

    def _horizon_ok(self, tid: str, horizon: Any, n_steps: int) -> bool:
        if valid_horizon(horizon, at_least=n_steps) is not None:
            return True
        self._reject(
            "invalid_horizon",
            f"{tid!r}: horizon {str(horizon)[:40]!r} is not an integer in [{max(n_steps, 1)}, {MAX_HORIZON}] "
            "(the steps taken, the largest budget accepted); using the steps taken",
        )
        return False

    def _check_metadata(self, tid: str, metadata: Any) -> tuple[dict[str, Any], str | None]:
        """The metadata as strict JSON (NaN/inf -> null, other values -> repr) and why it was not."""
        if metadata is None:
            return {}, None
        if not isinstance(metadata, Mapping):
            return {}, f"{tid!r}: metadata must be a mapping, got {type(metadata).__name__}"
        md = dict(metadata)
        try:
            json.dumps(md, allow_nan=False)
            if all(type(k) is str for k in md):
                return md, None
        except (TypeError, ValueError, RecursionError):
            pass
        problem = f"{tid!r}: metadata is not strict JSON; bad values written as null / repr"
        return {str(k): _json_safe(v, 0) for k, v in md.items()}, problem

    def begin(self, trajectory_id: str) -> bool:
        """A new run of `trajectory_id` starts (adapters call this at a new root run or trace). True if
        the id was already stopped: the run is a *repeat*, recorded in the sink and counted
        (set_aside/duplicate_id) but never scored, as the file report keeps an id's first record."""
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
        if self.closed:
            return self._refuse_closed("observe", trajectory_id)
        try:
            step = self._step_checked(trajectory_id, forecasts)
            if step is None:
                return False
            now = self._clock()
            with self._lock:
                evicted = self._store.step(trajectory_id, step, now, evict=self.lifetime_owner is None)
            if evicted is None:
                self._reject("step_after_stop", f"{trajectory_id!r} already stopped; step ignored")
                return False
            for tid, old in evicted:
                self._abandon(tid, old, "evicted")
            self._maybe_sweep(now)
            return True
        except Exception as exc:
            self._internal("observe", exc)
            return False

    def _step_checked(self, tid: Any, forecasts: Any) -> dict[str, float | None] | None:
        """observe()'s checks, outside the lock: the step, or None if refused."""
        try:
            # valid_id's first case inlined: every step runs this.
            if not (type(tid) is str and tid and tid.isascii()) and not self._valid_id(tid):
                return None
            if type(forecasts) is not dict and not isinstance(forecasts, Mapping):
                self._reject("invalid_step", f"{tid!r}: forecasts must be a mapping, got {type(forecasts).__name__}")
                return None
            allowed = self._allowed
            out: dict[str, float | None] = {}
            for name, v in forecasts.items():
                if allowed is not None and name not in allowed:
                    self._reject("unconfigured_predictor", f"predictor {name!r} is not one of {sorted(allowed)}")
                    continue
                if type(v) is float and 0.0 <= v <= 1.0:  # probability()'s first case, inlined: every forecast
                    out[name] = v
                elif v is None:
                    out[name] = None
                elif (p := probability(v)) is not None:
                    out[name] = p
                else:
                    self._reject("invalid_forecast", f"{tid!r}: forecast {name}={v!r} is not a number in [0, 1]")
                    out[name] = None
            return out
        except Exception as exc:
            self._internal("observe", exc)
            return None

    def stop(
        self,
        trajectory_id: str,
        reason: str | StopReason,
        horizon: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        q_z: float | None = None,
        outcome: int | bool | None = None,
    ) -> bool:
        """Finish a run: write its record, queue it for scoring (its role picks eta at snapshot time).
        `horizon`: the step budget T (default: the steps taken); `q_z`, `outcome`: as resolve() before
        the stop (written with the record). An id never observed is a zero-step run (audited)."""
        if self.closed:
            return self._refuse_closed("stop", trajectory_id)
        try:
            checked = self._stop_checked(trajectory_id, reason, q_z, outcome, metadata)
            if checked is None:
                return False
            with self._lock:
                stopping = self._stop_locked(trajectory_id, checked, horizon)
            return self._stopped(trajectory_id, checked, stopping)
        except Exception as exc:
            self._internal("stop", exc)
            return False

    def _stop_checked(self, tid: Any, reason: Any, q_z: Any, outcome: Any, metadata: Any) -> _Stop | None:
        """stop()'s checks, outside the lock; None for an invalid id."""
        if not self._valid_id(tid):
            return None
        try:
            stop_reason = StopReason(reason)
        except ValueError:
            self._reject("invalid_stop_reason", f"{tid!r}: unknown stop reason {reason!r}; using 'other'")
            stop_reason = StopReason.OTHER
        q = self._check_q_z(tid, q_z)
        y = None if outcome is None else self._check_outcome(tid, outcome)
        return (stop_reason, q, y, *self._check_metadata(tid, metadata))

    def _stop_locked(self, tid: str, checked: _Stop, horizon: int | None) -> tuple[bool, _Closing] | None:
        """Under the lock: (conflict with the run's own values, the run closed); None if already stopped."""
        reason, q, y, metadata, _ = checked
        found = self._store.live.get(tid)
        if (found is None or not found.repeat) and self._store.stopped(tid):
            return None
        live = found or _Live()
        conflict = False
        if q is not None:
            conflict = live.q_z not in (None, q)
            live.q_z = live.q_z if conflict else q
        if y is not None:
            clash = live.outcome not in (None, y)
            conflict = conflict or clash
            live.outcome = live.outcome if clash else y
        # Checked before the run leaves the live ones: a strict-mode error leaves it intact.
        if horizon is not None and not self._horizon_ok(tid, horizon, len(live.steps)):
            horizon = None
        self._store.reserve(tid, live)
        return conflict, self._closing(tid, live, reason, horizon, metadata, None)

    def _stopped(self, tid: str, checked: _Stop, stopping: tuple[bool, _Closing] | None) -> bool:
        """After the lock: record and score, then reject (a strict-mode raise leaves no run half closed)."""
        if stopping is None:
            self._reject("duplicate_stop", f"{tid!r} was already stopped")
            return False
        conflict, closing = stopping
        self._closed_run(closing)
        if conflict:
            self._reject("conflicting_resolution", f"{tid!r}: {_RESOLVE_MESSAGES['conflicting_resolution']}")
        if checked[4] is not None:
            self._reject("invalid_metadata", checked[4])
        self._maybe_sweep(self._clock())
        return True

    def resolve(self, trajectory_id: str, outcome: int | bool | None = None, q_z: float | None = None) -> bool:
        """Attach a late outcome (0/1) and/or q_Z to a live or finished run; False if rejected. After
        close() it raises AccumulatorClosedError (a grader's call, never the agent's path)."""
        if self.closed:
            self.health.count("rejected", "resolve_after_close")
            raise AccumulatorClosedError(
                f"resolve({trajectory_id!r}): the accumulator is closed; resolve before close(), or append the "
                "outcome to the file with JsonlSink(path).resolve(...)"
            )
        try:
            checked = self._resolution_checked(trajectory_id, outcome, q_z)
            if checked is None:
                return False
            with self._lock:
                resolution = self._resolve_locked(trajectory_id, *checked)
            return self._resolved(trajectory_id, resolution)
        except Exception as exc:
            self._internal("resolve", exc)
            return False

    def _resolution_checked(self, tid: Any, outcome: Any, q_z: Any) -> tuple[int | None, float | None] | None:
        """resolve()'s checks, outside the lock: (outcome, q_z), or None if nothing valid is left."""
        if not self._valid_id(tid):
            return None
        y = self._check_outcome(tid, outcome)
        q = self._check_q_z(tid, q_z)
        if y is None and q is None:
            if outcome is None and q_z is None:
                self._reject("empty_resolution", f"{tid!r}: resolve() needs an outcome or a q_z")
            return None
        return y, q

    def _resolve_locked(self, tid: str, y: int | None, q: float | None) -> _Resolution:
        """Under the lock: a `_Resolution`. The reader's rule: a resolution belongs to the nearest record
        above it, a repeat's included."""
        live = self._store.live.get(tid)
        if live is not None and live.repeat:
            live.outcome = live.outcome if y is None or live.outcome is not None else y
            live.q_z = live.q_z if q is None or live.q_z is not None else q
            return {}, "ok", {}, [], False
        if tid in self._repeated:
            return {k: v for k, v in (("outcome", y), ("q_z", q)) if v is not None}, "ok", {}, [], False
        row = self._rows.row_of.get(tid)
        if row is None or row == RESERVED:  # a live or reserved run: no row to score or fold yet
            run = self._store.finishing[tid] if row == RESERVED else self._store.live.get(tid)
            if run is None:
                return None, "resolve_unknown", {}, [], False
            status, newly = settle(run.outcome, run.q_z, y, q)
            if status == "ok":
                run.outcome = newly.get("outcome", run.outcome)
                run.q_z = newly.get("q_z", run.q_z)
                run.last_seen = self._clock()
            return None, status, newly if run.written else {}, [], False
        status, written = self._rows.resolve(tid, row, y, q)
        scores = []
        if written and self._listeners:
            score = self._rows.score_of(tid, row, self.policy, self._listener_meta.get(tid, {}))
            # Only what changes a score is news to the exporters.
            if ("outcome" in written and score.role is Role.COMPLETE) or (
                "q_z" in written and score.role is Role.CENSORED
            ):
                scores.append(score)
        fold_due = False
        if self.mode == "summary" and written:
            self._summaries.resolved_rows += 1  # fold once a batch of rows settled
            if self._summaries.resolved_rows >= self.batch_size:
                self._summaries.resolved_rows = 0
                fold_due = True
        return None, status, written, scores, fold_due

    def _resolved(self, tid: str, resolution: _Resolution) -> bool:
        """After the lock: a resolution's line, fold, rejection and listeners."""
        repeat, status, written, scores, fold_due = resolution
        if repeat is not None:
            if repeat:  # after the repeat's record: a line the reader sets aside with it
                self._writer.write_resolution(tid, repeat)
                self.health.count("set_aside", "duplicate_resolution", f"{tid!r}: resolves a repeat; not scored")
            return True
        if fold_due:  # even taking the rows out is the background's work
            if self._background is None or not self._background.submit(self._fold_settled):
                self._fold_settled()
        if status != "ok":
            self._reject(status, f"{tid!r}: {_RESOLVE_MESSAGES[status]}")
            return False
        if written:
            self._writer.write_resolution(tid, written)
        self._notify(scores)
        return True

    def finished(
        self,
        trajectory_id: str,
        steps: Sequence[Mapping[str, float | None]],
        reason: str | StopReason,
        resolved: tuple[int | None, float | None] = (None, None),
        horizon: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        q_z: float | None = None,
        outcome: int | bool | None = None,
    ) -> bool:
        """A run an adapter saw whole: `begin`, `observe` each step, `resolve(*resolved)`, `stop`, with
        their rejections, checked first and applied in one hold of the lock. Without an adapter owning
        the lifetimes it is those four calls (a step may evict, a sweep stop, other runs between them)."""
        tid = trajectory_id
        if self.closed:
            return self._refuse_closed("stop", tid)
        if self.lifetime_owner is None:
            self.begin(tid)
            for step in steps:
                self.observe(tid, step)
            if resolved != (None, None):
                self.resolve(tid, *resolved)
            return self.stop(tid, reason, horizon, metadata, q_z, outcome)
        try:
            checked = [self._step_checked(tid, step) for step in steps]
            resolution = None if resolved == (None, None) else self._resolution_checked(tid, *resolved)
            stop = self._stop_checked(tid, reason, q_z, outcome, metadata)
            if stop is None:
                return False
            now = self._clock()
            with self._lock:
                # A stopped id opens a repeat here, so no step below is refused (and none evicts).
                self._store.begin_repeat(tid, now)
                for forecasts in checked:
                    if forecasts is not None:
                        self._store.step(tid, forecasts, now, evict=False)
                applied = None if resolution is None else self._resolve_locked(tid, *resolution)
                stopping = self._stop_locked(tid, stop, horizon)
            done = self._stopped(tid, stop, stopping)
            if applied is not None:
                self._resolved(tid, applied)
            return done
        except Exception as exc:
            self._internal("stop", exc)
            return False

    def _abandon(self, tid: str, live: _Live, why: str) -> None:
        """A reserved run finished early (evicted, idle, closed): stopped as capture_lost."""
        with self._lock:
            closing = self._closing(tid, live, StopReason.CAPTURE_LOST, None, {"tps_abandoned": why}, why)
        self._closed_run(closing)

    def _closing(
        self,
        tid: str,
        live: _Live,
        reason: StopReason,
        horizon: int | None,
        metadata: Mapping[str, Any] | None,
        abandoned: str | None,
    ) -> _Closing:
        """Under the lock: a reserved run's record and the batch due for scoring. The writer's lock is held
        from here until `_closed_run` wrote the record: a resolve that sees `written` waits for it."""
        live.reason = reason
        live.horizon = int(horizon) if horizon is not None else len(live.steps)
        record: dict[str, Any] | None = None
        if self._writer.sink is not None:
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
            self._writer.lock.acquire()
        batch: list[tuple[str, _Live]] | None = None
        if live.repeat:  # written, never scored (see begin)
            self._repeated.add(tid)
        else:  # queued; the batch to score now, if one is due
            self._queue.append((tid, live))
            if self.predictors is None:  # first-seen order is stop order, however batches are scored
                for step in live.steps:
                    for name in step:
                        if name not in self._known:
                            self._known[name] = None
            if self._listeners:
                self._listener_meta[tid] = dict(metadata or {})
                while len(self._listener_meta) > self.max_live:
                    self._listener_meta.popitem(last=False)
            if len(self._queue) >= self.batch_size or self._listeners:
                batch, self._queue = self._queue, []
        return tid, live, record, abandoned, batch

    def _closed_run(self, closing: _Closing) -> None:
        """After the lock: write the record `_closing` made, count, score the batch due."""
        tid, live, record, abandoned, batch = closing
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
        background = self._background
        if batch and background is None:
            self._score(batch)
        elif batch and background is not None:
            with self._scoring_done:
                self._scoring += 1
            if not background.submit(self._score, batch, True):
                self._score(batch, True)

    def _fold_settled(self) -> None:
        """Summary mode, a background job: fold the rows that resolves settled."""
        with self._lock:
            fold = self._summaries.take()
        if fold is not None:
            self._summaries.finish(fold)

    def _score(self, batch: list[tuple[str, _Live]], counted: bool = False) -> None:
        """Turn queued runs into rows outside the lock; in summary mode fold the settled ones. `counted`:
        a background job, counted in `_scoring` until its rows are stored (flush waits for that;
        a fold in flight is in the summary store's `folding`)."""
        try:
            ids = [tid for tid, _ in batch]
            lives = [live for _, live in batch]
            if self.predictors is not None:
                names = self.predictors
            else:  # every name the steps mention (each in `_known` since its stop)
                names = list({name: None for live in lives for step in live.steps for name in step})
            scored = self._scorer.score_safely(
                [lv.steps for lv in lives], [lv.horizon for lv in lives], names, self._internal
            )
            rows = self._rows
            with self._lock:
                for tid in ids:
                    del self._store.finishing[tid]
                rows.add_scored(ids, lives, scored, names)
                scores = [
                    rows.score_of(tid, rows.row_of[tid], self.policy, self._listener_meta.get(tid, {}))
                    for tid in (ids if self._listeners else ())
                ]
                fold = self._summaries.take() if self.mode == "summary" else None
        finally:
            if counted:
                with self._scoring_done:
                    self._scoring -= 1
                    self._scoring_done.notify_all()
        if fold is not None:
            self._summaries.finish(fold)
        self._notify(scores)

    def add_listener(self, listener: Callable[[TrajectoryScore], None]) -> None:
        """Call `listener(TrajectoryScore)` whenever a run's scores become known or change (scored, a
        clean stop once its outcome is known; resolved). With a listener each stop is scored at once.
        Listeners run on the thread that called stop/resolve; their errors are counted, never raised."""
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
        """Apply what attached adapters queued, score every queued run now and wait for the background
        scoring: snapshot, state, merge and close do this first."""
        self._call_adapters(self._drains, "drain")
        if self._queue:  # read without the lock: a stop queued after this read is not this flush's
            with self._lock:
                batch, self._queue = self._queue, []
            if batch:
                self._score(batch)
        if self._background is not None:
            self._background.run_queued_here()
            if not self._background.on_worker_thread():
                with self._scoring_done:
                    self._scoring_done.wait_for(lambda: self._scoring == 0)

    def leave_lifetimes_to(self, owner: str, drain: Callable[[], Any] | None = None) -> None:
        """Let an adapter decide when its runs end (it knows a paused or busy run): no idling out or
        evicting here. `drain` applies the adapter's queued events; flush() calls it first, so a close
        right after `agent.invoke()` loses no run. Held weakly."""
        self.lifetime_owner = owner
        if drain is not None:
            self._drains.append(_weak(drain))

    def finish_on_close(self, finish: Callable[[str], Any]) -> None:
        """`finish(why)` records an adapter's open runs as abandoned; close() calls it first. Held weakly."""
        self._finishers.append(_weak(finish))

    def _call_adapters(self, refs: list[Callable[[], Any]], where: str, *args: Any) -> None:
        """Never under the lock: an adapter's worker calls back into this accumulator."""
        for ref in list(refs):
            call = ref()
            if call is not None:
                try:
                    call(*args)
                except Exception as exc:
                    self._internal(where, exc)

    def _maybe_sweep(self, now: float) -> None:
        if (
            self.lifetime_owner is None
            and self.idle_timeout is not None
            and now - self._last_sweep >= self._sweep_every
        ):
            self.sweep(now)

    def sweep(self, now: float | None = None) -> int:
        """Stop every run idle for idle_timeout as capture_lost (abandoned: idle); how many."""
        if self.idle_timeout is None or self.lifetime_owner is not None:
            return 0
        now = self._clock() if now is None else now
        with self._lock:
            self._last_sweep = now
            idle = self._store.take_idle(now)
        for tid, live in idle:
            self._abandon(tid, live, "idle")
        return len(idle)

    def close(self, stop_live: bool = True) -> None:
        """Stop every live run as capture_lost (abandoned: closed), after the adapters' queued events,
        and close the sink. Later steps and stops are refused (after_close), resolve() raises;
        snapshots still work. Closing twice does nothing."""
        self._shut(stop_live, "closed")

    def _forget_at_fork(self) -> None:
        """In a forked child the live runs are the parent's: forget them (counted); fresh locks."""
        self._lock = self._summaries.lock = threading.Lock()
        self._writer.after_fork()
        n = len(self._store.live)
        self._store.live.clear()
        if n:
            self.health.count("ignored", "live_at_fork", n=n)

    def _close_at_exit(self) -> int:
        return self._shut(True, at_exit.ABANDONED_AT_EXIT)

    def _shut(self, stop_live: bool, why: str) -> int:
        """close(): how many live runs were recorded as abandoned (`why`)."""
        if self.closed:
            return 0
        self._call_adapters(self._finishers, "finish", why)
        self._call_adapters(self._drains, "drain")
        self.closed = True  # after the drain, which still applies the adapters' events
        leftover: list[tuple[str, _Live]] = []
        if stop_live:
            with self._lock:
                now = self._clock()
                leftover = [self._store.take_oldest(now) for _ in range(len(self._store.live))]
            for tid, live in leftover:
                self._abandon(tid, live, why)
        self.flush()
        if self._background is not None:
            self._background.wait_idle()  # the folds in flight too
        self._writer.close()
        return len(leftover)

    def _refuse_closed(self, what: str, tid: Any) -> bool:
        self._reject("after_close", f"{what}({tid!r}) after close(): the accumulator is closed; ignored")
        return False

    @property
    def n_live(self) -> int:
        return len(self._store.live)

    @property
    def n_finished(self) -> int:
        with self._lock:  # rows, stopped runs not yet rows, folded runs
            return self._rows.n + len(self._store.finishing) + self._summaries.n

    def snapshot(
        self,
        policy: CensoringPolicy | None = None,
        bootstrap: int | None = None,
        seed: int | None = None,
        predictors: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """The finished runs' report, as `tps-tracer report --json` gives it, plus an "online" section."""
        self.flush()
        with self._lock:
            table = self._rows.table()
            keys = self._rows.keys()
            n_live = len(self._store.live)
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
            report, finished, pending = self._summaries.snapshot(options)
        else:
            report = report_from_table(table, options, allow_empty=True)
            finished, pending = table.n, int(table.pending.sum())
        report["online"] = {
            "finished": finished,
            "live": n_live,
            "pending_outcome": pending,
            **{category: health[category] for category in ("abandoned", "rejected", "set_aside")},
            "health": health,
            "sink": self._writer.counts(),
        }
        return report

    def partial_state(self) -> PartialState:
        """The finished runs as one `PartialState` (clean stops waiting for an outcome as pending)."""
        self.flush()
        return self._summaries.whole_state()

    def state(self) -> bytes:
        """This accumulator's state as versioned bytes (accumulator_state.py); `merge_state` reads it."""
        self.flush()
        return accumulator_state.dump(self, self._parts(), self.health.snapshot())

    @classmethod
    def from_state(cls, data: bytes, **kwargs: Any) -> Accumulator:
        """A new accumulator holding a state (no sink, no idle sweep unless given in kwargs)."""
        body = accumulator_state.read(data)
        kwargs.setdefault("idle_timeout", None)
        try:
            acc = cls(**accumulator_state.settings(body), **kwargs)
            acc._add(accumulator_state.parts(body, acc.rules, acc.schedules, acc._clock()), fold=False)
            for cat, kinds in body["health"].items():
                if cat in CATEGORIES:
                    for kind, n in kinds.items():
                        acc.health.count(cat, str(kind), n=int(n))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"corrupt accumulator state: {type(exc).__name__}: {exc}") from None
        return acc

    def merge_state(self, data: bytes) -> None:
        """Add another accumulator's `state()`, as `merge` does."""
        self.merge(type(self).from_state(data))

    def merge(self, other: Accumulator) -> None:
        """Add another accumulator's runs (finished and live) and health counts, exactly. Same rules
        and schedules needed; an id on both sides is a counted duplicate_id. Sinks stay apart."""
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
        """A copy of what this accumulator holds (the caller flushed it)."""
        with self._lock:
            table = self._rows.table()
            live = [
                (tid, _Live(list(lv.steps), lv.last_seen, lv.outcome, lv.q_z, repeat=lv.repeat))
                for tid, lv in self._store.live.items()
            ]
            repeated = set(self._repeated)
            unscored = dict(self._rows.unscored_outcome)
            known = list(self._known)
            folded = self._summaries.folded_ids.keys()  # none in row mode
            seen = self._summaries.settled()
        summary = self._summaries.settled_state(seen)
        return accumulator_state.Parts(table, unscored, known, live, repeated, summary, folded)

    def _add(self, parts: accumulator_state.Parts, health: HealthLedger | None = None, fold: bool = True) -> None:
        """Add `parts` and `health` (an id held already is a counted duplicate_id); `fold` what settled."""
        table = parts.table
        duplicates: list[str] = []
        folded_twice = 0
        settled = merging = None
        summaries = self._summaries
        folded_ids = summaries.folded_ids  # empty in row mode
        with self._lock:
            if self.mode == "summary":
                here = np.union1d(self._rows.keys(), trajectory_keys(list(self._store.live)))
                folded_twice = summaries.carry_folded_ids(parts.folded_ids, here)
            for name in parts.known:
                self._known.setdefault(name, None)
                if name not in self._rows.predictors:
                    self._rows.add_predictor(name)
            take: dict[str, int] = {}  # id -> its row in `table`
            for i, tid in enumerate(table.ids):
                if tid in self._rows.row_of or tid in self._store.live or tid in take or tid in folded_ids:
                    duplicates.append(tid)
                else:
                    take[tid] = i
            idx = np.array(list(take.values()), dtype=np.int64)
            self._rows.append_table(table.reordered(idx), {t: y for t, y in parts.unscored.items() if t in take})
            for tid, live in parts.live:
                if tid in self._store.live or (not live.repeat and (tid in self._rows.row_of or tid in folded_ids)):
                    duplicates.append(tid)
                else:  # a repeat stays one if its id is stopped here
                    live.repeat = live.repeat and self._store.stopped(tid)
                    self._store.live[tid] = live
            self._repeated |= parts.repeated
            if parts.summary is not None:  # merged outside the lock
                merging = summaries.start(None, {}, parts.summary)
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
        if folded_twice:  # only keys are left of these runs: both copies stay in the sums
            message = (
                f"merge: {folded_twice} ids were finished in both accumulators and already folded on "
                "at least one side (only their keys are kept): both copies stay in the folded sums"
            )
            if self.strict:
                self._reject("duplicate_folded_id", message)  # raises
            self.health.count("rejected", "duplicate_folded_id", message, n=folded_twice)


_RESOLVE_MESSAGES = {
    "resolve_unknown": "no live or finished trajectory with this id",
    "conflicting_resolution": "already resolved with a different value; ignored",
}
