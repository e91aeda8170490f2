"""Scores as Arize Phoenix span annotations on each trajectory's agent root span.

    phoenix = PhoenixAnnotations("http://127.0.0.1:6006", processor.links)
    accumulator.add_listener(phoenix)
    ...
    phoenix.flush(); phoenix.status()   # {"sent": ..., "pending": ..., "failed_attempts": ..., ...}

Per trajectory, one annotation per score rule (`tps.log`, `tps.brier`, ...) for the headline
predictor / schedule / censoring mode, with score = the TPS, label = success / failure /
censored, the other `tps.*` facts in metadata, plus `tps.stop_reason` (label only) so runs
can be filtered by why they stopped. Annotations are sent with `sync=False`: Phoenix queues
an annotation whose span it has not stored yet, so a score may arrive before its trace.

Delivery is off every other thread: a worker sends batches and, when Phoenix is down or
answers with an error, keeps them and retries with exponential backoff (0.5 s doubling to
30 s), logging once per outage and once on recovery. Nothing is dropped unless more than
`max_pending` annotations wait; then the oldest go, counted in `status()["dropped"]`. The
durable record of every score is the accumulator's JSON Lines sink, not this queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from tps_tracer.evaluation.tps import SIMPLE
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel.evaluation_spans import explanation
from tps_tracer.otel.trace_links import SpanLink, TraceLinks

logger = logging.getLogger("tps_tracer")

DEFAULT_MAX_PENDING = 100_000
STOP_ANNOTATION = "tps.stop_reason"


class PhoenixAnnotations:
    def __init__(
        self,
        endpoint: str = "http://127.0.0.1:6006",
        links: TraceLinks | None = None,
        *,
        predictor: str | None = None,
        weights: str | None = None,
        censoring: str = SIMPLE,
        client: Any = None,
        batch_size: int = 200,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        max_pending: int = DEFAULT_MAX_PENDING,
    ):
        if client is None:
            from phoenix.client import Client  # the optional `phoenix` extra

            client = Client(base_url=endpoint)
        self.client = client
        self.links = links if links is not None else TraceLinks()
        self.predictor, self.weights, self.censoring = predictor, weights, censoring
        self.batch_size = batch_size
        self.retry_initial, self.retry_max = retry_initial, retry_max
        self.max_pending = max_pending
        self._queue: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.sent = 0
        self.failed_attempts = 0
        self.dropped = 0
        self.outages = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="tps-tracer-phoenix", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ listener

    def __call__(self, score: TrajectoryScore) -> None:
        self.links.for_metadata(score.trajectory_id, score.metadata, lambda link: self._enqueue(score, link))

    def annotations(self, score: TrajectoryScore, link: SpanLink) -> list[dict[str, Any]]:
        facts: dict[str, Any] = {
            "trajectory_id": score.trajectory_id,
            "stop_reason": score.stop_reason.value,
            "role": score.role.value,
            "horizon": score.horizon,
            "n_steps": score.n_steps,
            "outcome": score.outcome,
            "q_z": score.q_z,
        }
        out: list[dict[str, Any]] = [
            {
                "name": STOP_ANNOTATION,
                "annotator_kind": "CODE",
                "span_id": link.span_hex,
                "result": {"label": score.stop_reason.value, "explanation": score.role.value},
                "metadata": facts,
            }
        ]
        head = score.primary(self.predictor, None, self.weights, self.censoring)
        if head is None:
            return out
        for v in score.values():
            if (v.predictor, v.weights, v.censoring) != (head.predictor, head.weights, head.censoring):
                continue
            out.append(
                {
                    "name": f"tps.{v.rule}",
                    "annotator_kind": "CODE",
                    "span_id": link.span_hex,
                    "result": {"score": v.value, "label": score.label, "explanation": explanation(score, v)},
                    "metadata": {
                        **facts,
                        "predictor": v.predictor,
                        "weights": v.weights,
                        "censoring": v.censoring,
                        "s1": v.s1,
                        "s0": v.s0,
                    },
                }
            )
        return out

    def _enqueue(self, score: TrajectoryScore, link: SpanLink) -> None:
        items = self.annotations(score, link)
        with self._cond:
            self._queue.extend(items)
            while len(self._queue) > self.max_pending:
                self._queue.popleft()
                self.dropped += 1
            self._cond.notify_all()

    # ------------------------------------------------------------------ delivery

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        self.client.spans.log_span_annotations(span_annotations=list(batch), sync=False)

    def _run(self) -> None:
        delay = self.retry_initial
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
                batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
                self._in_flight = len(batch)
            try:
                self._send(batch)
            except Exception as exc:
                with self._cond:
                    self._queue.extendleft(reversed(batch))  # back at the front, in order
                    self._in_flight = 0
                    self.failed_attempts += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    first = delay == self.retry_initial
                    if first:
                        self.outages += 1
                    pending = len(self._queue)
                    closed = self._closed
                if first:
                    logger.warning(
                        "tps-tracer: Phoenix annotations failed (%s); %d pending, retrying with backoff",
                        self.last_error,
                        pending,
                    )
                if closed:
                    return  # closing: what is left stays counted as pending
                time.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            with self._cond:
                self.sent += len(batch)
                self._in_flight = 0
                self._cond.notify_all()
            if delay != self.retry_initial:
                logger.warning(
                    "tps-tracer: Phoenix annotations delivered again after %d failed attempts", self.failed_attempts
                )
            delay = self.retry_initial

    # ------------------------------------------------------------------ control

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "sent": self.sent,
                "pending": len(self._queue) + self._in_flight,
                "failed_attempts": self.failed_attempts,
                "outages": self.outages,
                "dropped": self.dropped,
                "last_error": self.last_error,
                "waiting_for_link": self.links.n_waiting,
            }

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued annotation is delivered; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._in_flight:
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
