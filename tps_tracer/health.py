"""One health ledger: what tps-tracer refused, dropped, cut short or could not read.

Every part of the capture path (the accumulator, the trajectory core, the LangChain
handler, the span processor, the capture worker, the signal extractor) counts its
trouble in one `HealthLedger`, shared by all of them, so a user reads it in one place:
`Accumulator.snapshot()["online"]["health"]` (or `ledger.snapshot()`).

One vocabulary, a category and a kind per count:

- rejected: input refused, the rest of the run kept (invalid_forecast, invalid_horizon,
  invalid_metadata, invalid_outcome_label, invalid_verbal_scale, an ambiguous stated
  confidence under its reason: confidence_undeclared_scale, confidence_wide_range, ...);
- abandoned: runs finished before their end was seen, recorded with stop reason "other"
  (idle, evicted, closed, shutdown, exit, queue_full);
- dropped: events lost before they were applied (queue_full, after_close);
- malformed: model output or payload that could not be read; the signal is None
  (logprobs, confidence, confidence_clipped);
- error: an internal failure caught so the agent never sees it (on_llm_end, worker.step,
  accumulator.score, sink, listener);
- ignored: well-formed events deliberately not scored (runs_without_model_calls,
  unattached_model_call, late_spans; in a forked child, the parent's runs open at the fork:
  open_at_fork, live_at_fork);
- set_aside: whole runs recorded but not scored, under the file reader's names
  (records/limits.py): duplicate_id (a new run under an id already finished) and
  duplicate_resolution (a resolution of such a run).

Counting is thread-safe and cheap (one lock, a dict increment); the first occurrence of
each (category, kind) is logged once at WARNING, later ones are only counted.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

logger = logging.getLogger("tps_tracer")

CATEGORIES = ("rejected", "abandoned", "dropped", "malformed", "error", "ignored", "set_aside")
_QUIET = frozenset({"ignored", "abandoned"})  # expected in normal use: counted, not logged


class HealthLedger:
    """Thread-safe counts by (category, kind), each logged once at its first occurrence."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {c: Counter() for c in CATEGORIES}

    def count(self, category: str, kind: str, message: str | None = None, n: int = 1) -> bool:
        """Add n to (category, kind); returns True the first time that pair is counted.

        `message` (what happened, with the id involved) is logged on the first occurrence
        for the loud categories (rejected, dropped, malformed, error)."""
        with self._lock:
            bucket = self._counts.get(category)
            if bucket is None:
                bucket = self._counts[category] = Counter()
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
        with self._lock:
            return dict(sorted(self._counts.get(category, Counter()).items()))

    def snapshot(self) -> dict[str, dict[str, int]]:
        """{category: {kind: count}} for every category (empty ones included, so the shape is fixed)."""
        with self._lock:
            return {c: dict(sorted(b.items())) for c, b in self._counts.items()}

    def __repr__(self) -> str:
        # What `print(handler.health)` shows: the non-zero counts (an empty ledger: "{}"), not an address.
        counts = {c: kinds for c, kinds in self.snapshot().items() if kinds}
        return f"HealthLedger({counts})"

    def merge(self, other: HealthLedger) -> None:
        """Add another ledger's counts (merging accumulators of several workers)."""
        if other is self:
            return
        theirs = other.snapshot()
        with self._lock:
            for cat, kinds in theirs.items():
                self._counts.setdefault(cat, Counter()).update(kinds)
