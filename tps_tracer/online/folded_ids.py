"""The ids a summary-mode accumulator folded away, kept as 64-bit keys: a new run under one is a repeat.

Summary mode forgets a settled run's row (online/summary_store.py), and with it its id, so
without this an id re-used by a new run after the fold would be scored a second time, while
`tps-tracer report` on the same sink sets the second record aside. Keeping each folded id's
64-bit key (`trajectory_key`, the bootstrap key the row already had) costs 8 bytes per run
(the folded state already keeps about 40 per run and predictor for the rank diagnostics), so
the snapshot and the report of the file count the same repeats.

Two distinct ids share a key with probability about n^2 / 2^65 (3e-6 at 10M runs); such a
new run would be recorded and counted as a repeat (set_aside / duplicate_id), never lost
silently. Keys are kept as a small set of recent ones plus sorted arrays of halving sizes
(merged when a smaller one catches up), so adding is amortised O(log n) and a lookup is a
set probe plus one binary search per array (at most ~log2(n / 4096) arrays).

Not thread-safe on its own: used under the accumulator's lock.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from tps_tracer.evaluation.bootstrap import trajectory_key

_RECENT = 4096  # keys kept in a set before they are sorted into an array


class FoldedIds:
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
        """Whether `tid` (an id) was folded, by its key."""
        if not isinstance(tid, str) or not (self._recent or self._sorted):
            return False  # (the first fold comes after the first batch: until then, no hashing)
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
        """Every key, sorted: what a merge or a saved state carries to another accumulator."""
        recent = np.array(sorted(self._recent), dtype=np.uint64)
        return np.sort(np.concatenate([*self._sorted, recent])) if self._sorted else recent

    def __len__(self) -> int:
        return len(self._recent) + sum(a.size for a in self._sorted)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._sorted) + 8 * len(self._recent)
