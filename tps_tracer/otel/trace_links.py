"""Where each trajectory lives in the tracing backend (its agent root span), added by the span processor
as the root ends; under the LangChain handler a score may come first, and waits (`for_metadata`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tps_tracer.health import HealthLedger

MAX_LINKS = 100_000
LINK_WAIT = "score_link_wait"  # the health kind of a score given up waiting for its run's root span


@dataclass(frozen=True)
class SpanLink:
    trace_id: int
    span_id: int

    @property
    def trace_hex(self) -> str:
        return f"{self.trace_id:032x}"

    @property
    def span_hex(self) -> str:
        return f"{self.span_id:016x}"

    @classmethod
    def from_hex(cls, trace_hex: str, span_hex: str) -> SpanLink:
        return cls(int(trace_hex, 16), int(span_hex, 16))

    def context(self) -> Any:
        """A context whose current span is this agent root: what is emitted in it goes under the root."""
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        root = SpanContext(self.trace_id, self.span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return trace.set_span_in_context(NonRecordingSpan(root))


class TraceLinks:
    def __init__(self, health: HealthLedger | None = None) -> None:
        """health: where a score given up waiting for its link is counted (dropped, logged once); the span
        processor passes its accumulator's."""
        self._links: OrderedDict[str, SpanLink] = OrderedDict()
        self._waiting: OrderedDict[str, list[Callable[[SpanLink], None]]] = OrderedDict()
        self._lock = threading.Lock()
        self.health = health if health is not None else HealthLedger()

    @property
    def expired(self) -> int:
        """Score callbacks pushed out of the bounded wait before their link came."""
        return self.health.get("dropped", LINK_WAIT)

    def add(self, trajectory_id: str, link: SpanLink) -> None:
        with self._lock:
            self._links[trajectory_id] = link
            self._links.move_to_end(trajectory_id)
            while len(self._links) > MAX_LINKS:
                self._links.popitem(last=False)
            callbacks = self._waiting.pop(trajectory_id, [])
        for callback in callbacks:
            callback(link)

    def get(self, trajectory_id: str) -> SpanLink | None:
        with self._lock:
            return self._links.get(trajectory_id)

    def for_metadata(
        self, trajectory_id: str, metadata: Mapping[str, Any], callback: Callable[[SpanLink], None]
    ) -> None:
        """Call `callback(link)` now if the link is known (the span ids in the stop metadata win when
        present), else when it is added."""
        trace_hex, span_hex = metadata.get("otel_trace_id"), metadata.get("otel_span_id")
        if isinstance(trace_hex, str) and isinstance(span_hex, str):
            callback(SpanLink.from_hex(trace_hex, span_hex))
            return
        lost = 0
        with self._lock:
            link = self._links.get(trajectory_id)
            if link is None:
                self._waiting.setdefault(trajectory_id, []).append(callback)
                while len(self._waiting) > MAX_LINKS:
                    lost += len(self._waiting.popitem(last=False)[1])
        if lost:
            why = f"more than {MAX_LINKS} runs' scores waited for their trace's root span; the oldest were not exported"
            self.health.count("dropped", LINK_WAIT, why, n=lost)
        if link is not None:
            callback(link)

    @property
    def n_waiting(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._waiting.values())
