"""An accumulator's state, as `state()` writes it and `from_state()` / `merge()` read it (`Parts`): the magic
``b"TPSACC\\x00\\x01"``, then UTF-8 JSON, arrays as bit-exact base64, nothing pickled; keys an older
state lacks read as none."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DROP_RUN
from tps_tracer.errors import InputError
from tps_tracer.evaluation.pairs import PairTable, PredictorPairs
from tps_tracer.evaluation.partial_state import PartialState
from tps_tracer.online.row_store import _Live
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.scoring import ScoreRule, WeightSchedule

MAGIC = b"TPSACC\x00"
VERSION = 1
_ALLOWED_DTYPES = frozenset({"<f8", "<i8", "|i1", "|b1", "<u8"})
_ROW_FIELDS = ("stop_code", "outcome", "q_z", "n_steps", "horizon", "weight_mass")  # the pair table's arrays
_COLUMN_FIELDS = ("usable", "pairs", "aggregates", "clipped", "missing")  # a predictor's (the last two: optional)


@dataclass
class Parts:
    """What one accumulator hands another: live runs arrive live (their idle clock restarts)."""

    table: PairTable  # the finished rows still stored
    unscored: dict[str, int]  # outcomes given on their non-clean stops
    known: list[str]  # predictor names, first-seen order
    live: list[tuple[str, _Live]]
    repeated: set[str]  # ids with a repeat's record written
    summary: PartialState | None  # summary mode: the folded state, folds under way included
    folded_ids: NDArray[np.uint64]  # summary mode: the keys of the ids folded away


def dump(acc: Any, parts: Parts, health: dict[str, dict[str, int]]) -> bytes:
    """An accumulator's settings (as `settings` reads them back), `parts` and health counts."""
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
            "missing": acc.missing,
        },
        "known": parts.known,
        "rows": {
            "ids": table.ids,
            **{f: encode_array(getattr(table, f)) for f in _ROW_FIELDS},
            "horizon": encode_array(table.horizon.astype(np.int64)),  # saved as integers (format version 1)
            "predictors": {  # the row store's tables always hold clipped and missing
                name: {f: encode_array(getattr(c, f)) for f in _COLUMN_FIELDS} for name, c in table.predictors.items()
            },
        },
        "unscored_outcome": parts.unscored,
        "live": [[tid, lv.steps, lv.outcome, lv.q_z] for tid, lv in parts.live],
        "live_repeats": [tid for tid, lv in parts.live if lv.repeat],
        "repeated": sorted(parts.repeated),
        "summary": None if parts.summary is None else parts.summary.to_dict(),
        "folded_ids": encode_array(parts.folded_ids),
        "health": health,
    }
    return MAGIC + bytes([VERSION]) + json.dumps(body, separators=(",", ":")).encode("utf-8")


def settings(body: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments of the accumulator a state came from."""
    st = body["settings"]
    return {
        "predictors": st["predictors"],
        "rules": st["rules"],
        "weights": st["schedules"],
        "bootstrap": int(st["bootstrap"]),
        "seed": int(st["seed"]),
        "policy": CensoringPolicy({StopReason(k): Role(v) for k, v in st["roles"].items()}),
        "mode": st["mode"],
        "missing": st.get("missing", DROP_RUN),  # a state written before the policy scored rows that way
    }


def parts(
    body: dict[str, Any],
    rules: Sequence[ScoreRule],
    schedules: Sequence[WeightSchedule],
    now: float,
) -> Parts:
    """A state's parts, for an accumulator with these rules and schedules (live runs' idle clock
    restarts at `now`)."""
    rows = body["rows"]
    ids = [str(t) for t in rows["ids"]]
    table = PairTable(
        ids=ids,
        **{f: decode_array(rows[f]) for f in _ROW_FIELDS},  # type: ignore[arg-type]
        rules=list(rules),
        schedules=list(schedules),
        predictors={
            name: PredictorPairs(
                **{f: decode_array(c[f]) for f in _COLUMN_FIELDS if f in c or f in _COLUMN_FIELDS[:3]}  # type: ignore[arg-type]
            )
            for name, c in rows["predictors"].items()
        },
    )
    repeats = {str(tid) for tid in body.get("live_repeats", [])}
    live = [
        (str(t), _Live([dict(step) for step in steps], now, y, q, repeat=str(t) in repeats))
        for t, steps, y, q in body["live"]
    ]
    if repeats - {tid for tid, _ in live}:
        raise KeyError("a live repeat that is not live")
    folded_ids = decode_array(body["folded_ids"]).astype(np.uint64) if "folded_ids" in body else np.zeros(0, np.uint64)
    if folded_ids.size and body["settings"]["mode"] != "summary":
        raise KeyError("folded_ids in a row-mode state")
    return Parts(
        table,
        {str(tid): int(y) for tid, y in body["unscored_outcome"].items()},
        [str(name) for name in body["known"]],
        live,
        {str(tid) for tid in body.get("repeated", [])},
        None if body["summary"] is None else PartialState.from_dict(body["summary"]),
        folded_ids,
    )


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


def read(data: bytes) -> dict[str, Any]:
    """The body of a state; a clear InputError for anything else."""
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
