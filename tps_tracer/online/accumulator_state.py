"""An accumulator's state as bytes, to merge the accumulators of several processes exactly.

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
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError

MAGIC = b"TPSACC\x00"
VERSION = 1
_ALLOWED_DTYPES = frozenset({"<f8", "<i8", "|i1", "|b1", "<u8"})


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


def dump(body: dict[str, Any]) -> bytes:
    return MAGIC + bytes([VERSION]) + json.dumps(body, separators=(",", ":")).encode("utf-8")


def load(data: bytes) -> dict[str, Any]:
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
