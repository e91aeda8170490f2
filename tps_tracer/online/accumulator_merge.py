"""An accumulator's state across processes: `state()` / `from_state()` / `merge_state()` / `merge()`.

A mixin of `Accumulator` (online/accumulator.py), which owns the live store, the row store and
the summary named here; the bytes format is accumulator_state.py's. Merging is exact: rows
travel with their bootstrap keys, live trajectories arrive live (their idle clock restarts),
summaries merge as PartialStates, and an id on both sides is a counted duplicate_id.

Summary mode keeps only the keys of the ids it folded away (online/folded_ids.py); a merge
and a state carry them, so a run re-using an id the other side folded is a repeat here too,
and a stored or live run here under an id the other folded is counted (duplicate_folded_id:
both copies are in the sums, which can no longer be split by id).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.evaluation.partial_state import PartialState
from tps_tracer.health import CATEGORIES
from tps_tracer.online import accumulator_state
from tps_tracer.online.live_run import _Live
from tps_tracer.online.live_store import LiveStore
from tps_tracer.online.summary_folding import SummaryFolding, _Fold
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason

if TYPE_CHECKING:
    from tps_tracer.online.accumulator import Accumulator

_NO_KEYS = np.zeros(0, dtype=np.uint64)


class StateMerging(SummaryFolding):
    # Owned by Accumulator (see its __init__); declared here for the type checker.
    mode: str
    predictors: list[str] | None
    _store: LiveStore
    _clock: Callable[[], float]
    _repeated: set[str]
    strict: bool

    def flush(self) -> None:
        raise NotImplementedError  # Accumulator's: wait for queued scoring and folds

    def _key(self, tid: str) -> int:
        raise NotImplementedError  # Accumulator's: the id-derived bootstrap key

    def _reject(self, kind: str, message: str) -> None:
        raise NotImplementedError  # Accumulator's: count (or raise, strict) bad input

    def partial_state(self) -> PartialState:
        """The finished trajectories as one `PartialState` (either mode), for
        `tps_tracer.distributed.evaluate` or `merge_states`; clean stops still waiting for their
        outcome are in it as pending. Computed with this accumulator's policy, bootstrap and seed."""
        self.flush()
        return self._whole_state()

    def state(self) -> bytes:
        """This accumulator's state as versioned bytes (see accumulator_state.py); `merge_state` reads it."""
        self.flush()
        with self._lock:
            table = self._rows.table()
            live = [[tid, lv.steps, lv.outcome, lv.q_z] for tid, lv in self._store.live.items()]
            # Repeats (online/accumulator.py, "Repeated ids"): named apart, so a reader of an older
            # state, which has neither key, reads it as before.
            live_repeats = [tid for tid, lv in self._store.live.items() if lv.repeat]
            repeated = sorted(self._repeated)
            unscored = dict(self._unscored_outcome)
            known = list(self._known)
            summary = self._summary
            folded_ids = self._folded_ids.keys() if self._folded_ids is not None else _NO_KEYS
            folding = self._in_flight()
            first_seen = self._first_seen()
        summary = self._settled_state(summary, folding, first_seen)  # rows being folded travel as folded
        enc = accumulator_state.encode_array
        body = {
            "settings": {
                "rules": [r.name for r in self.rules],
                "schedules": [s.name for s in self.schedules],
                "mode": self.mode,
                "bootstrap": self.bootstrap,
                "seed": self.seed,
                "roles": {r.value: self.policy.role(r).value for r in STOP_REASONS},
                "predictors": self.predictors,
            },
            "known": known,
            "rows": {
                "ids": table.ids,
                "stop_code": enc(table.stop_code),
                "outcome": enc(table.outcome),
                "q_z": enc(table.q_z),
                "n_steps": enc(table.n_steps),
                "horizon": enc(table.horizon.astype(np.int64)),
                "weight_mass": enc(table.weight_mass),
                "predictors": {
                    name: {
                        "usable": enc(c.usable),
                        "pairs": enc(c.pairs),
                        "aggregates": enc(c.aggregates),
                        "clipped": enc(c.clipped if c.clipped is not None else np.zeros(len(c.usable), np.int64)),
                    }
                    for name, c in table.predictors.items()
                },
            },
            "unscored_outcome": unscored,
            "live": live,
            "live_repeats": live_repeats,
            "repeated": repeated,
            "summary": None if summary is None else summary.to_dict(),
            "folded_ids": enc(folded_ids),  # summary mode: the folded ids' keys (a state without them: none)
            "health": self.health.snapshot(),
        }
        return accumulator_state.dump(body)

    @classmethod
    def from_state(cls, data: bytes, **kwargs: Any) -> Accumulator:
        """A new accumulator holding a state (no sink, no idle sweep unless given in kwargs)."""
        body = accumulator_state.load(data)
        try:
            st = body["settings"]
            policy = CensoringPolicy({StopReason(k): Role(v) for k, v in st["roles"].items()})
            kwargs.setdefault("idle_timeout", None)
            make: Any = cls  # Accumulator's constructor (this mixin has none)
            acc: Accumulator = make(
                predictors=st["predictors"],
                rules=st["rules"],
                weights=st["schedules"],
                bootstrap=int(st["bootstrap"]),
                seed=int(st["seed"]),
                policy=policy,
                mode=st["mode"],
                **kwargs,
            )
            dec = accumulator_state.decode_array
            rows = body["rows"]
            ids = [str(t) for t in rows["ids"]]
            for name in body["known"]:
                acc._known.setdefault(str(name), None)
                if name not in acc._rows.predictors:
                    acc._rows.add_predictor(str(name))
            acc._rows.append_many(
                ids,
                dec(rows["stop_code"]).tolist(),
                dec(rows["outcome"]).tolist(),
                dec(rows["q_z"]).tolist(),
                dec(rows["n_steps"]).tolist(),
                dec(rows["horizon"]).tolist(),
                dec(rows["weight_mass"]).reshape(len(ids), len(acc.schedules)),
                {
                    name: (
                        dec(c["usable"]),
                        dec(c["pairs"]),
                        dec(c["aggregates"]),
                        dec(c["clipped"]) if "clipped" in c else None,  # an older state: none counted
                    )
                    for name, c in rows["predictors"].items()
                },
            )
            acc._keys = [acc._key(tid) for tid in ids]
            for tid, y in body["unscored_outcome"].items():
                acc._unscored_outcome[tid] = int(y)
                acc._rows.outcome_on_unscored += 1
            now = acc._clock()
            for tid, steps, y, q in body["live"]:
                acc._store.live[str(tid)] = _Live([dict(step) for step in steps], now, y, q)
            for tid in body.get("live_repeats", []):
                acc._store.live[str(tid)].repeat = True
            acc._repeated.update(str(tid) for tid in body.get("repeated", []))
            if body["summary"] is not None:
                acc._summary = PartialState.from_dict(body["summary"])
            folded_ids = dec(body["folded_ids"]) if "folded_ids" in body else _NO_KEYS
            if folded_ids.size:
                if acc._folded_ids is None:
                    raise KeyError("folded_ids in a row-mode state")  # reported as a corrupt state below
                acc._folded_ids.add(int(k) for k in folded_ids.astype(np.uint64).tolist())
            for cat, kinds in body["health"].items():
                if cat in CATEGORIES:
                    for kind, n in kinds.items():
                        acc.health.count(cat, str(kind), n=int(n))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"corrupt accumulator state: {type(exc).__name__}: {exc}") from None
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
        if other._summary is not None or other.mode == "summary":
            if self.mode != "summary":
                raise InputError("a summary-mode accumulator merges only into a summary-mode one (its rows are gone)")
            if other._spec().signature() != self._spec().signature():
                raise InputError("cannot merge summary states with different censoring policy, bootstrap or seed")
        self.flush()
        other.flush()
        with other._lock:
            table = other._rows.table()
            keys = list(other._keys)
            live_items = [
                (tid, _Live(list(lv.steps), lv.last_seen, lv.outcome, lv.q_z, repeat=lv.repeat))
                for tid, lv in other._store.live.items()
            ]
            repeated = set(other._repeated)
            unscored = dict(other._unscored_outcome)
            known = list(other._known)
            other_summary = other._summary
            # The ids the other folded away (kept as keys only): a new run under one is a repeat here too.
            other_folded = other._folded_ids.keys() if other._folded_ids is not None else _NO_KEYS
            other_folding = other._in_flight()
            other_first_seen = other._first_seen()
        other_summary = other._settled_state(other_summary, other_folding, other_first_seen)
        duplicates: list[str] = []
        folded_twice = 0
        fold: _Fold | None = None
        merging: _Fold | None = None
        take_ids: set[str] = set()
        with self._lock:
            # Runs stored or live here, by key, before the other's arrive: to count those it folded.
            here = _NO_KEYS
            if self.mode == "summary":
                here = np.array(sorted({*self._keys, *map(self._key, self._store.live)}), dtype=np.uint64)
            for name in known:
                self._known.setdefault(name, None)
                if name not in self._rows.predictors:
                    self._rows.add_predictor(name)
            take = []
            for i, tid in enumerate(table.ids):
                if tid in self._rows.row_of or tid in self._store.live or tid in take_ids or self._was_folded(tid):
                    duplicates.append(tid)
                else:
                    take.append(i)
                    take_ids.add(tid)
            idx = np.array(take, dtype=np.int64)
            ids = [table.ids[i] for i in take]
            self._rows.append_many(
                ids,
                table.stop_code[idx].tolist(),
                table.outcome[idx].tolist(),
                table.q_z[idx].tolist(),
                table.n_steps[idx].tolist(),
                table.horizon[idx].astype(np.int64).tolist(),
                table.weight_mass[idx],
                {
                    name: (
                        col.usable[idx],
                        col.pairs[idx],
                        col.aggregates[idx],
                        None if col.clipped is None else col.clipped[idx],
                    )
                    for name, col in table.predictors.items()
                },
            )
            self._keys.extend(keys[i] for i in take)
            for tid in ids:
                if tid in unscored:
                    self._unscored_outcome[tid] = unscored[tid]
                    self._rows.outcome_on_unscored += 1
            for tid, live in live_items:
                if tid in self._store.live or (not live.repeat and (tid in self._rows.row_of or self._was_folded(tid))):
                    duplicates.append(tid)
                else:  # a repeat stays one if its id is stopped here (its first run came along, or was here)
                    live.repeat = live.repeat and self._store.stopped(tid)
                    self._store.live[tid] = live
            self._repeated |= repeated
            if self.mode == "summary":
                folded_twice = self._carry_folded_ids(other_folded, here)
                if other_summary is not None:  # merged outside the lock, counted as folding until then
                    self._fold_count += 1
                    merging = _Fold(self._fold_count, None, [], {}, {}, part=other_summary)
                    self._folding[merging.token] = merging
                fold = self._take_fold()
        if merging is not None:
            self._merge_folded(merging)
        if fold is not None:
            self._finish_fold(fold)
        self.health.merge(other.health)
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
        return self._folded_ids is not None and tid in self._folded_ids

    def _carry_folded_ids(self, other_folded: NDArray[np.uint64], here: NDArray[np.uint64]) -> int:
        """Under the lock, summary mode: add the other's folded keys to ours. Returns how many of
        them were also finished or live here (`here`: their keys before the merge) or folded here:
        such a run's two copies can no longer be told apart in the sums. (A run folded here and
        stored or live in the other is a plain duplicate_id: the other's copy is left out.)"""
        assert self._folded_ids is not None  # summary mode
        if other_folded.size == 0:
            return 0
        twice = np.union1d(np.intersect1d(self._folded_ids.keys(), other_folded), np.intersect1d(here, other_folded))
        self._folded_ids.add(int(k) for k in other_folded.tolist())
        return int(twice.size)
