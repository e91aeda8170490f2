"""Backend writes delivered off the agent's threads, retried with backoff, never silently lost.

A backend exporter subclasses `RetryingDelivery`: `items(score, link)` turns a score into backend
records, `_send(batch)` writes them and returns why records the backend refused for good were refused
(counted in `gave_up`, logged, not retried). A record whose trace the backend has not stored yet
(`_not_stored_yet(exc)`: spans travel by another exporter) waits on its own schedule, up to
`not_stored_timeout`. Nothing is dropped unless more than `max_pending` records wait. The durable
record of every score is the accumulator's JSON Lines sink, not this queue.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tps_tracer.constants import HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel.score_names import Row, SentScores, backend_rows
from tps_tracer.otel.trace_links import TraceLinks

logger = logging.getLogger("tps_tracer")

DEFAULT_MAX_PENDING = 100_000
DEFAULT_NOT_STORED_TIMEOUT = 120.0


class Options(TypedDict, total=False):
    """What every backend exporter takes: which scores (score_names.py) and how they are retried."""

    predictor: str  # the headline, fixed: a name means one predictor on every run
    weights: str | None  # default: the accumulator's first schedule
    censoring: str | Sequence[str]  # ("simple", "exact") sends both, the exact one once q_Z is known
    retry_initial: float  # backoff doubling up to retry_max while the backend is down
    retry_max: float
    max_pending: int


@dataclass(order=True)
class _Waiting:
    """A record whose trace the backend has not stored yet, due for another try at `due`."""

    due: float
    seq: int
    first_failed: float = field(compare=False)
    delay: float = field(compare=False)
    item: Any = field(compare=False)


class RetryingDelivery:
    backend = "backend"  # in log lines and the worker thread's name

    def __init__(
        self,
        links: TraceLinks | None = None,
        *,
        predictor: str = HEADLINE_PREDICTOR,
        weights: str | None = None,
        censoring: str | Sequence[str] = SIMPLE,
        batch_size: int = 200,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        max_pending: int = DEFAULT_MAX_PENDING,
        not_stored_timeout: float = DEFAULT_NOT_STORED_TIMEOUT,
    ):
        self.links = links if links is not None else TraceLinks()
        self.predictor, self.weights, self.censoring = predictor, weights, censoring
        self.sent_scores = SentScores()
        self.batch_size = batch_size
        self.retry_initial, self.retry_max = retry_initial, retry_max
        self.max_pending = max_pending
        self.not_stored_timeout = not_stored_timeout
        self._queue: deque[Any] = deque()
        self._waiting: list[_Waiting] = []  # heap by due time
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.sent = 0
        self.failed_attempts = 0
        self.dropped = 0
        self.gave_up = 0
        self.outages = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"tps-tracer-{self.backend.lower()}", daemon=True)
        self._thread.start()

    def rows(self, score: TrajectoryScore) -> list[Row]:
        return backend_rows(score, self.predictor, self.weights, self.censoring)

    def items(self, score: TrajectoryScore, link: Any) -> list[Any]:
        raise NotImplementedError

    def _send(self, batch: Sequence[Any]) -> list[str] | None:
        raise NotImplementedError

    def _not_stored_yet(self, exc: Exception) -> bool:
        return False

    def __call__(self, score: TrajectoryScore) -> None:
        self.links.for_metadata(score.trajectory_id, score.metadata, lambda link: self._enqueue(score, link))

    def identity(self, record: Any) -> tuple[Hashable, Hashable]:
        """(name, signature): a later notification re-sends a record only when its signature changed."""
        raise NotImplementedError

    def new_records(self, score: TrajectoryScore, link: Any) -> list[Any]:
        return [r for r in self.items(score, link) if self.sent_scores.is_new(score.trajectory_id, *self.identity(r))]

    def _enqueue(self, score: TrajectoryScore, link: Any) -> None:
        records = self.new_records(score, link)
        if not records:
            return
        with self._cond:
            self._queue.extend(records)
            while len(self._queue) > self.max_pending:
                self._queue.popleft()
                self.dropped += 1
            self._cond.notify_all()

    def _next_batch(self) -> tuple[list[Any], _Waiting | None] | None:
        """Block until something is due; None when closed and nothing is due."""
        with self._cond:
            while True:
                now = time.monotonic()
                if self._waiting and self._waiting[0].due <= now:
                    waiting = heapq.heappop(self._waiting)
                    self._in_flight = 1
                    return [waiting.item], waiting
                if self._queue:
                    n = min(self.batch_size, len(self._queue))
                    batch = [self._queue.popleft() for _ in range(n)]
                    self._in_flight = n
                    return batch, None
                if self._closed:
                    return None
                self._cond.wait(timeout=self._waiting[0].due - now if self._waiting else None)

    def _run(self) -> None:
        delay = self.retry_initial
        while (taken := self._next_batch()) is not None:
            batch, waiting = taken
            try:
                refused = self._send(batch) or []
            except Exception as exc:
                if len(batch) == 1 and self._not_stored_yet(exc):
                    self._wait_for_trace(batch[0], waiting, exc)
                    continue
                if not self._outage(batch, waiting, exc, first=delay == self.retry_initial):
                    return  # closing: what is left stays counted as pending
                time.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            if refused:  # logged before flush() can return
                logger.warning("tps-tracer: %s refused %d records: %s", self.backend, len(refused), "; ".join(refused))
            with self._cond:
                self.sent += len(batch) - len(refused)
                self.gave_up += len(refused)
                self.last_error = "; ".join(refused) if refused else self.last_error
                self._in_flight = 0
                self._cond.notify_all()
            if delay != self.retry_initial:
                logger.warning(
                    "tps-tracer: %s delivered again after %d failed attempts", self.backend, self.failed_attempts
                )
            delay = self.retry_initial

    def _outage(self, batch: list[Any], waiting: _Waiting | None, exc: Exception, *, first: bool) -> bool:
        """Keep a failed batch for the next try; False when closing."""
        with self._cond:
            if waiting is not None:
                heapq.heappush(self._waiting, waiting)  # still due: tried first when the backend is back
            else:
                self._queue.extendleft(reversed(batch))  # back at the front, in order
            self._in_flight = 0
            self.failed_attempts += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            if first:
                self.outages += 1
            pending = len(self._queue) + len(self._waiting)
            closed = self._closed
        if first:
            logger.warning(
                "tps-tracer: %s writes failed (%s); %d pending, retrying with backoff",
                self.backend,
                self.last_error,
                pending,
            )
        return not closed

    def _wait_for_trace(self, item: Any, waiting: _Waiting | None, exc: Exception) -> None:
        now = time.monotonic()
        if waiting is None:
            waiting = _Waiting(0.0, 0, now, self.retry_initial / 2, item)
        with self._cond:
            self._in_flight = 0
            if now - waiting.first_failed >= self.not_stored_timeout:
                self.gave_up += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._cond.notify_all()
                give_up = True
            else:
                waiting.delay = min(waiting.delay * 2, self.retry_max)
                waiting.due, waiting.seq = now + waiting.delay, next(self._seq)
                heapq.heappush(self._waiting, waiting)
                give_up = False
        if give_up and self.gave_up & (self.gave_up - 1) == 0:  # the 1st, 2nd, 4th, 8th, ...: no log flood
            logger.warning(
                "tps-tracer: %s never stored the trace of a score after %.0f s; %d given up so far (%s)",
                self.backend,
                self.not_stored_timeout,
                self.gave_up,
                self.last_error,
            )

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "sent": self.sent,
                "pending": len(self._queue) + len(self._waiting) + self._in_flight,
                "waiting_for_trace": len(self._waiting),
                "failed_attempts": self.failed_attempts,
                "outages": self.outages,
                "dropped": self.dropped,
                "gave_up": self.gave_up,
                "last_error": self.last_error,
                "waiting_for_link": self.links.n_waiting,
            }

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued record is delivered (or given up); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._waiting or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(timeout=0.05 if left is None else min(0.05, left))
        return True

    def close(self, timeout: float | None = 10.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)


class DeliveryCount(SpanExporter):
    """Counts what an OTLP endpoint took (`export --to otlp`): the batch processor's `force_flush`
    returns True also when the endpoint refused an export or it failed after its retries."""

    def __init__(self, inner: SpanExporter):
        self.inner = inner
        self.delivered = 0
        self.gave_up = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.delivered += len(spans)
        else:
            self.gave_up += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))
