"""An accumulator's state: what `state()` writes, `from_state()` reads and `merge()` moves between
two accumulators in one process, by one path (`_Parts`: taken from one accumulator, added to another).

Merging is exact: rows travel with their bootstrap keys, live trajectories arrive live (their
idle clock restarts), summaries merge as PartialStates, and an id on both sides is a counted
duplicate_id. A run re-using an id the other side folded is a repeat here too, and a stored or
live run here under an id the other folded is counted (duplicate_folded_id: both copies are in
the sums, which can no longer be split by id).

Format (version 1): the 8-byte magic ``b"TPSACC\\x00\\x01"`` (the last byte is the version),
then UTF-8 JSON. Arrays travel as {"dtype", "shape", "b64"} (raw little-endian bytes, so
every float is bit-exact; NaN marks an unobserved outcome or q_Z). Nothing is pickled:
decoding never runs code from the payload, and rules and schedules are named (custom
objects do not round-trip; the receiver's must carry the same names).

What a state holds:
- settings: rules, schedules, mode, bootstrap, seed, censoring roles;
- the finished rows still stored (all of them in row mode; in summary mode only the clean
  stops waiting for their outcome), their ids and the outcomes of unscored stops (kept to
  detect conflicts);
- in summary mode, the folded `PartialState` (`PartialState.to_dict`) and the 64-bit keys of
  the folded ids ("folded_ids", online/folded_ids.py), so a run re-using one after a merge is
  still a repeat; a state without this key reads as having none;
- the live trajectories: their steps and any outcome / q_Z already known. They arrive as
  live trajectories of the receiver (their idle clock restarts there), so a run split across
  replicas is not lost; an id live or finished on both sides is a counted duplicate_id;
- repeats (online/accumulator.py, "Repeated ids"): the ids of live ones ("live_repeats") and
  of recorded ones ("repeated", whose later resolutions are set aside); a state without these
  keys reads as having none;
- the health ledger's counts (added to the receiver's).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.evaluation.pairs import PairTable, PredictorPairs
from tps_tracer.evaluation.partial_state import PartialState
from tps_tracer.health import CATEGORIES, HealthLedger
from tps_tracer.online.live_run import _Live
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason

if TYPE_CHECKING:
    from tps_tracer.online.accumulator import Accumulator

MAGIC = b"TPSACC\x00"
VERSION = 1
_ALLOWED_DTYPES = frozenset({"<f8", "<i8", "|i1", "|b1", "<u8"})
_NO_KEYS = np.zeros(0, dtype=np.uint64)
_ROW_FIELDS = ("stop_code", "outcome", "q_z", "n_steps", "weight_mass")  # the pair table's arrays, as they are


@dataclass
class _Parts:
    """What one accumulator hands another (directly, or as the bytes of `state()`)."""

    table: PairTable  # the finished rows still stored
    keys: NDArray[np.uint64]  # their bootstrap keys
    unscored: dict[str, int]  # outcomes given on their non-clean stops
    known: list[str]  # predictor names, first-seen order
    live: list[tuple[str, _Live]]
    repeated: set[str]  # ids with a repeat's record written
    summary: PartialState | None  # summary mode: the folded state, folds under way included
    folded_ids: NDArray[np.uint64]  # summary mode: the keys of the ids folded away


def take(acc: Accumulator) -> _Parts:
    """A copy of what `acc` holds (the caller has flushed it)."""
    with acc._lock:
        table = acc._rows.table()
        keys = acc._rows.keys()
        live = [
            (tid, _Live(list(lv.steps), lv.last_seen, lv.outcome, lv.q_z, repeat=lv.repeat))
            for tid, lv in acc._store.live.items()
        ]
        repeated = set(acc._repeated)
        unscored = dict(acc._rows.unscored_outcome)
        known = list(acc._known)
        folded = acc._summaries.folded_ids.keys() if acc.mode == "summary" else _NO_KEYS
        seen = acc._summaries.settled()
    summary = acc._summaries.settled_state(seen)  # rows being folded travel as folded
    return _Parts(table, keys, unscored, known, live, repeated, summary, folded)


def add(acc: Accumulator, parts: _Parts, health: HealthLedger | None = None, fold: bool = True) -> None:
    """Add `parts` (and the `health` counts they came with) to `acc`; an id it holds already is a
    counted duplicate_id. `fold`: let a summary-mode accumulator fold what settled (not while it is
    being built from a state)."""
    table = parts.table
    duplicates: list[str] = []
    folded_twice = 0
    settled = merging = None
    summaries = acc._summaries
    with acc._lock:
        if acc.mode == "summary":
            # Runs stored or live here, by key, before the others arrive: to count those folded twice.
            here = np.union1d(acc._rows.keys(), np.array([acc._key(t) for t in acc._store.live], dtype=np.uint64))
            folded_twice = _carry_folded_ids(acc, parts.folded_ids, here)
        for name in parts.known:
            acc._known.setdefault(name, None)
            if name not in acc._rows.predictors:
                acc._rows.add_predictor(name)
        take_ids: set[str] = set()
        take_rows = []
        for i, tid in enumerate(table.ids):
            if tid in acc._rows.row_of or tid in acc._store.live or tid in take_ids or _was_folded(acc, tid):
                duplicates.append(tid)
            else:
                take_rows.append(i)
                take_ids.add(tid)
        idx = np.array(take_rows, dtype=np.int64)
        acc._rows.append_table(
            table.reordered(idx), parts.keys[idx], {t: y for t, y in parts.unscored.items() if t in take_ids}
        )
        for tid, live in parts.live:
            if tid in acc._store.live or (not live.repeat and (tid in acc._rows.row_of or _was_folded(acc, tid))):
                duplicates.append(tid)
            else:  # a repeat stays one if its id is stopped here (its first run came along, or was here)
                live.repeat = live.repeat and acc._store.stopped(tid)
                acc._store.live[tid] = live
        acc._repeated |= parts.repeated
        if parts.summary is not None:  # merged outside the lock, counted as folding until then
            merging = summaries.start_merge(parts.summary)
        if fold and acc.mode == "summary":
            settled = summaries.take()
    if merging is not None:
        summaries.finish(merging)
    if settled is not None:
        summaries.finish(settled)
    if health is not None:
        acc.health.merge(health)
    for tid in duplicates:
        acc._reject("duplicate_id", f"merge: {tid!r} is in both accumulators; the other's copy is ignored")
    if folded_twice:  # only keys are left of these runs: both copies stay in the sums, counted one a run
        message = (
            f"merge: {folded_twice} ids were finished in both accumulators and already folded on "
            "at least one side (only their keys are kept): both copies stay in the folded sums"
        )
        if acc.strict:
            acc._reject("duplicate_folded_id", message)  # raises
        acc.health.count("rejected", "duplicate_folded_id", message, n=folded_twice)


def _was_folded(acc: Accumulator, tid: str) -> bool:
    return acc.mode == "summary" and tid in acc._summaries.folded_ids


def _carry_folded_ids(acc: Accumulator, other_folded: NDArray[np.uint64], here: NDArray[np.uint64]) -> int:
    """Under the lock, summary mode: add the other's folded keys to ours. Returns how many of
    them were also finished or live here (`here`: their keys before the merge) or folded here:
    such a run's two copies can no longer be told apart in the sums. (A run folded here and
    stored or live in the other is a plain duplicate_id: the other's copy is left out.)"""
    if other_folded.size == 0:
        return 0
    ours = acc._summaries.folded_ids
    twice = np.union1d(np.intersect1d(ours.keys(), other_folded), np.intersect1d(here, other_folded))
    ours.add(int(k) for k in other_folded.tolist())
    return int(twice.size)


# ---------------------------------------------------------------------- bytes


def dump(acc: Accumulator, parts: _Parts) -> bytes:
    """`acc`'s settings and `parts` as versioned bytes."""
    table = parts.table
    body = {
        "settings": {
            "rules": [r.name for r in acc.rules],
            "schedules": [s.name for s in acc.schedules],
            "mode": acc.mode,
            "bootstrap": acc.bootstrap,
            "seed": acc.seed,
            "roles": {r.value: acc.policy.role(r).value for r in STOP_REASONS},
            "predictors": acc.predictors,
        },
        "known": parts.known,
        "rows": {
            "ids": table.ids,
            **{f: encode_array(getattr(table, f)) for f in _ROW_FIELDS[:4]},
            "horizon": encode_array(table.horizon.astype(np.int64)),
            "weight_mass": encode_array(table.weight_mass),
            "predictors": {
                name: {
                    "usable": encode_array(c.usable),
                    "pairs": encode_array(c.pairs),
                    "aggregates": encode_array(c.aggregates),
                    "clipped": encode_array(c.clipped if c.clipped is not None else np.zeros(len(c.usable), np.int64)),
                }
                for name, c in table.predictors.items()
            },
        },
        "unscored_outcome": parts.unscored,
        # Repeats (online/accumulator.py, "Repeated ids"): named apart, so a reader of an older
        # state, which has neither key, reads it as before.
        "live": [[tid, lv.steps, lv.outcome, lv.q_z] for tid, lv in parts.live],
        "live_repeats": [tid for tid, lv in parts.live if lv.repeat],
        "repeated": sorted(parts.repeated),
        "summary": None if parts.summary is None else parts.summary.to_dict(),
        "folded_ids": encode_array(parts.folded_ids),  # summary mode: the folded ids' keys (none: none)
        "health": acc.health.snapshot(),
    }
    return MAGIC + bytes([VERSION]) + json.dumps(body, separators=(",", ":")).encode("utf-8")


def load(cls: type[Accumulator], data: bytes, **kwargs: Any) -> Accumulator:
    """A new accumulator holding the state `data` (no sink, no idle sweep unless given in kwargs)."""
    body = _body(data)
    try:
        st = body["settings"]
        policy = CensoringPolicy({StopReason(k): Role(v) for k, v in st["roles"].items()})
        kwargs.setdefault("idle_timeout", None)
        acc = cls(
            predictors=st["predictors"],
            rules=st["rules"],
            weights=st["schedules"],
            bootstrap=int(st["bootstrap"]),
            seed=int(st["seed"]),
            policy=policy,
            mode=st["mode"],
            **kwargs,
        )
        rows = body["rows"]
        ids = [str(t) for t in rows["ids"]]
        table = PairTable(
            ids=ids,
            **{f: decode_array(rows[f]) for f in _ROW_FIELDS},  # type: ignore[arg-type]
            horizon=decode_array(rows["horizon"]),
            rules=acc.rules,
            schedules=acc.schedules,
            predictors={
                name: PredictorPairs(
                    decode_array(c["usable"]),
                    decode_array(c["pairs"]),
                    decode_array(c["aggregates"]),
                    {},
                    decode_array(c["clipped"]) if "clipped" in c else None,  # an older state: none counted
                )
                for name, c in rows["predictors"].items()
            },
        )
        now = acc._clock()
        live = [(str(tid), _Live([dict(step) for step in steps], now, y, q)) for tid, steps, y, q in body["live"]]
        repeats = {str(tid) for tid in body.get("live_repeats", [])}
        for tid, lv in live:
            lv.repeat = tid in repeats
        if repeats - {tid for tid, _ in live}:
            raise KeyError("a live repeat that is not live")
        folded_ids = decode_array(body["folded_ids"]).astype(np.uint64) if "folded_ids" in body else _NO_KEYS
        if folded_ids.size and acc.mode != "summary":
            raise KeyError("folded_ids in a row-mode state")  # reported as a corrupt state below
        parts = _Parts(
            table,
            np.array([acc._key(tid) for tid in ids], dtype=np.uint64),
            {str(tid): int(y) for tid, y in body["unscored_outcome"].items()},
            [str(name) for name in body["known"]],
            live,
            {str(tid) for tid in body.get("repeated", [])},
            None if body["summary"] is None else PartialState.from_dict(body["summary"]),
            folded_ids,
        )
        add(acc, parts, fold=False)
        for cat, kinds in body["health"].items():
            if cat in CATEGORIES:
                for kind, n in kinds.items():
                    acc.health.count(cat, str(kind), n=int(n))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"corrupt accumulator state: {type(exc).__name__}: {exc}") from None
    return acc


def encode_array(a: NDArray[Any]) -> dict[str, Any]:
    arr = np.ascontiguousarray(a)
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    arr = arr.astype(dtype, copy=False)
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "b64": base64.b64encode(arr.tobytes()).decode("ascii")}


def decode_array(d: dict[str, Any]) -> NDArray[Any]:
    if d.get("dtype") not in _ALLOWED_DTYPES:
        raise InputError(f"accumulator state: unsupported array dtype {d.get('dtype')!r}")
    raw = base64.b64decode(d["b64"], validate=True)
    arr = np.frombuffer(raw, dtype=np.dtype(d["dtype"])).copy()
    return arr.reshape([int(x) for x in d["shape"]])


def _body(data: bytes) -> dict[str, Any]:
    """The body of a state; a clear ValueError for anything that is not a state of a known version."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InputError(f"accumulator state must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < len(MAGIC) + 1 or not data.startswith(MAGIC):
        raise InputError("not a tps-tracer accumulator state (bad magic)")
    version = data[len(MAGIC)]
    if version != VERSION:
        raise InputError(f"unsupported accumulator state version {version} (this tps-tracer reads {VERSION})")
    try:
        body = json.loads(data[len(MAGIC) + 1 :].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"corrupt accumulator state: {exc}") from None
    if not isinstance(body, dict):
        raise InputError("corrupt accumulator state: the body is not an object")
    return body
