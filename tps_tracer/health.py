"""One health ledger for the capture path: what tps-tracer refused, dropped, cut short or could not read
(`Accumulator.snapshot()["online"]["health"]`); the first count of each (category, kind) logs one WARNING."""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict

logger = logging.getLogger("tps_tracer")

# rejected: input refused, the run kept; abandoned: runs finished before their end was seen; dropped: events
# lost; malformed: unreadable model output (signal None); error: an internal failure the agent never sees;
# ignored: events deliberately not scored; set_aside: runs recorded, not scored (the file reader's names).
CATEGORIES = ("rejected", "abandoned", "dropped", "malformed", "error", "ignored", "set_aside")
_QUIET = frozenset({"ignored", "abandoned"})  # expected in normal use: counted, not logged


class HealthLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: defaultdict[str, Counter[str]] = defaultdict(Counter, {c: Counter() for c in CATEGORIES})

    def count(self, category: str, kind: str, message: str | None = None, n: int = 1) -> bool:
        """Add n to (category, kind); True the first time that pair is counted (`message` is then logged)."""
        with self._lock:
            bucket = self._counts[category]
            first = kind not in bucket
            bucket[kind] += n
        if first and message is not None and category not in _QUIET:
            logger.warning("tps-tracer %s (%s): %s; further ones are only counted", category, kind, message)
        return first

    def get(self, category: str, kind: str | None = None) -> int:
        """One count, or a category's total when kind is None."""
        with self._lock:
            bucket = self._counts.get(category, Counter())
            return bucket[kind] if kind is not None else sum(bucket.values())

    def category(self, category: str) -> dict[str, int]:
        return self.snapshot().get(category, {})

    def snapshot(self) -> dict[str, dict[str, int]]:
        """{category: {kind: count}} for every category (empty ones included, so the shape is fixed)."""
        with self._lock:
            return {c: dict(sorted(b.items())) for c, b in self._counts.items()}

    def __repr__(self) -> str:
        counts = {c: kinds for c, kinds in self.snapshot().items() if kinds}
        return f"HealthLedger({counts})"

    def merge(self, other: HealthLedger) -> None:
        if other is self:
            return
        theirs = other.snapshot()
        with self._lock:
            for cat, kinds in theirs.items():
                self._counts[cat].update(kinds)
