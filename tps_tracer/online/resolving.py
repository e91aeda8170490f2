"""Late outcomes and q_Z: a resolution applied to a live, finishing or scored trajectory.

A mixin of `Accumulator` (online/accumulator.py). The same value twice is a no-op, a different
one a conflict (counted by the caller). Before a trajectory's record is written the values go out
with the record; after, the caller appends them as a resolution line (online/record_writing.py).
An outcome on a non-clean stop is kept only to detect conflicts: scoring ignores it, and it is
counted as in the batch report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tps_tracer.online.live_store import RESERVED, LiveStore
from tps_tracer.online.row_store import RowStore
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import StopReason

_NAN = float("nan")
_CLEAN_CODE = STOP_REASONS.index(StopReason.CLEAN)


class Resolving:
    # Owned by Accumulator (see its __init__); declared here for the type checker.
    _rows: RowStore
    _store: LiveStore
    _unscored_outcome: dict[str, int]
    _clock: Callable[[], float]

    def _apply_resolution(self, tid: str, y: int | None, q: float | None) -> tuple[str, dict[str, Any]]:
        """Under the lock: (status, fields newly set). Same value twice is a no-op; a different one a conflict."""
        row = self._rows.row_of.get(tid)
        if row is not None and row != RESERVED:
            return self._resolve_row(tid, row, y, q)
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
        # Before the record is written, the values go out with it; after, as a resolution line.
        return "ok", newly if target.written else {}

    def _resolve_row(self, tid: str, row: int, y: int | None, q: float | None) -> tuple[str, dict[str, Any]]:
        rows = self._rows
        clean = rows.stop_code[row] == _CLEAN_CODE
        old_y = rows.outcome[row] if clean else self._unscored_outcome.get(tid, _NAN)
        old_q = rows.q_z[row]
        if (y is not None and not math.isnan(old_y) and old_y != y) or (
            q is not None and not math.isnan(old_q) and old_q != q
        ):
            return "conflicting_resolution", {}
        written: dict[str, Any] = {}
        if y is not None and math.isnan(old_y):
            written["outcome"] = y
            if clean:
                rows.outcome[row] = y
            else:  # kept only to detect conflicts; ignored by scoring, counted as in batch
                self._unscored_outcome[tid] = y
                rows.outcome_on_unscored += 1
        if q is not None and math.isnan(old_q):
            written["q_z"] = q
            rows.q_z[row] = q
        return "ok", written
