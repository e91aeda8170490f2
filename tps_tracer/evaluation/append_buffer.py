"""Concatenation that appends in place, so merging a small state into a big one copies only the small one.

`PartialState.merge` keeps, per predictor, the four summaries and the outcome of every complete
trajectory merged so far (the rank diagnostics are not sums). Concatenating those afresh copies
everything merged so far on every merge: over the life of a long-running summary-mode
accumulator, or a chunked read of a large file, the copying is quadratic in the number of
trajectories (10M folded runs: ~400 MB copied per fold).

`concat_rows(a, b)` returns what `np.concatenate([a, b])` returns, as a read-only view of a
buffer with spare capacity. When `a` is the newest prefix of such a buffer, `b`'s rows are
written after it and the longer prefix is returned: O(len(b)), and O(1) amortised per row as
the capacity grows by half when full. `a` itself never changes (rows below a prefix's end are
never written again), so merge keeps its value semantics; a second append onto the same `a`
(a branch: `s.merge(x)` and `s.merge(y)`) finds the tail taken and copies, as before.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

import numpy as np
from numpy.typing import NDArray

GROWTH = 1.5  # capacity factor when a buffer is full: at most a third of a buffer is slack
MIN_CAPACITY = 64
COPY_SLICE_BYTES = 1 << 21  # ~0.3 ms of copying between two chances for other threads to run


class _Tail:
    """How many rows of a buffer are handed out (rows below are immutable, rows above are free)."""

    __slots__ = ("buffer", "used")

    def __init__(self, buffer: NDArray[Any], used: int):
        self.buffer = weakref.ref(buffer)
        self.used = used


_lock = threading.RLock()  # guards the tails (re-entrant: a buffer freed by GC inside it calls _forget)
_tails: dict[int, _Tail] = {}  # id(buffer) -> its tail; entries leave with their buffer


def _tail_of(a: NDArray[Any]) -> _Tail | None:
    """Under _lock: the tail of the buffer `a` is a prefix of, if `a` is a prefix of one of ours."""
    buf = a.base
    if buf is None or not isinstance(buf, np.ndarray):
        return None
    tail = _tails.get(id(buf))
    if tail is None or tail.buffer() is not buf:
        return None
    if a.dtype != buf.dtype or a.shape[1:] != buf.shape[1:] or a.strides != buf.strides:
        return None
    if a.size and a.ctypes.data != buf.ctypes.data:
        return None
    return tail


def _view(buf: NDArray[Any], n: int) -> NDArray[Any]:
    out = buf[:n]
    out.flags.writeable = False  # shared with longer prefixes: nobody may write into it
    return out


def _forget(key: int) -> None:
    with _lock:
        _tails.pop(key, None)


def _copy_yielding(buf: NDArray[Any], a: NDArray[Any]) -> None:
    """buf[:len(a)] = a, in slices of COPY_SLICE_BYTES with the GIL released between them: numpy
    holds the GIL through a copy, and a 10M-row buffer takes ~100 ms to copy, which would stall
    every other thread of the host (the agent's) for as long."""
    m = a.shape[0]
    step = max(1, COPY_SLICE_BYTES // max(1, a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))))
    if m <= step:
        buf[:m] = a
        return
    for i in range(0, m, step):
        j = min(m, i + step)
        buf[i:j] = a[i:j]
        time.sleep(0)  # let a thread waiting for the GIL run now, not after the 5 ms switch interval


def _fresh(a: NDArray[Any], b: NDArray[Any] | None, extra: int, dtype: Any) -> NDArray[Any]:
    """A new buffer holding a (and b), with room; private until registered, so the O(len(a))
    copy runs without the lock."""
    m, k = a.shape[0], 0 if b is None else b.shape[0]
    cap = max(MIN_CAPACITY, int((m + max(k, extra)) * GROWTH))
    buf = np.empty((cap, *a.shape[1:]), dtype=dtype)
    _copy_yielding(buf, a)
    if b is not None:
        buf[m : m + k] = b
    with _lock:
        _tails[id(buf)] = _Tail(buf, m + k)
    weakref.finalize(buf, _forget, id(buf))
    return _view(buf, m + k)


def reserve_rows(a: NDArray[Any], extra: int) -> NDArray[Any]:
    """`a` itself if `extra` rows can be appended to it in place, else a copy of `a` in a buffer with
    room: a caller that must append under a lock does the possibly O(len(a)) part here, before."""
    with _lock:
        tail = _tail_of(a)
        if tail is not None and tail.used == a.shape[0]:
            buf = tail.buffer()
            if buf is not None and a.shape[0] + extra <= buf.shape[0]:
                return a
    return _fresh(a, None, extra, a.dtype)


def concat_rows(a: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
    """`np.concatenate([a, b])` along the first axis, appending in place when `a` allows it (see module)."""
    if a.shape[1:] != b.shape[1:] or a.ndim == 0:
        return np.concatenate([a, b])  # raises as concatenate does
    m, k = a.shape[0], b.shape[0]
    dtype = np.result_type(a, b)
    with _lock:
        tail = _tail_of(a)
        if tail is not None and tail.used == m and a.dtype == dtype:
            buf = tail.buffer()
            assert buf is not None  # _tail_of checked it is alive
            if m + k <= buf.shape[0]:
                buf[m : m + k] = b
                tail.used = m + k
                return _view(buf, m + k)
    return _fresh(a, b, k, dtype)
