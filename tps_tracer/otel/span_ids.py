"""Evaluation span ids derived from what the span says (trace id, exporter settings, stop reason,
label, headline score), so the same score sent twice is one span in a store that keys spans by id
(Phoenix), and a changed score a new one. Only spans started inside `derived(...)` on the same thread
get a derived id; every other span keeps the provider's own generator.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.trace.id_generator import IdGenerator


def derived_span_id(*parts: object) -> int:
    """64 bits of SHA-256 of the parts' repr (never 0, the invalid span id)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") or 1


class DerivedSpanIds(IdGenerator):
    def __init__(self, fallback: IdGenerator):
        self.fallback = fallback
        self._local = threading.local()

    @contextlib.contextmanager
    def derived(self, *parts: object) -> Iterator[None]:
        """Spans started on this thread inside the block get the id derived from `parts`."""
        self._local.parts = parts
        try:
            yield
        finally:
            self._local.parts = None

    def generate_span_id(self) -> int:
        parts = getattr(self._local, "parts", None)
        return self.fallback.generate_span_id() if parts is None else derived_span_id(*parts)

    def generate_trace_id(self) -> int:
        return self.fallback.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return self.fallback.is_trace_id_random()


def install(tracer: Any) -> DerivedSpanIds | None:
    """Wrap an SDK tracer's id generator once (None for a tracer without one: API-only providers)."""
    current = getattr(tracer, "id_generator", None)
    if isinstance(current, DerivedSpanIds):
        return current
    if not isinstance(current, IdGenerator):
        return None
    tracer.id_generator = ids = DerivedSpanIds(current)
    return ids
