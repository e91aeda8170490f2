"""Evaluation span ids derived from what the span says, so the same score sent twice is one span.

A run's `tps.evaluation` span can be sent live and again later (`tps-tracer export --to otlp`
after a grade or q_Z arrived, or a plain re-run of the export). A store that keys spans by
id (Phoenix ignores a span whose id it already holds) keeps one span per id, so the id is
a hash of the trace id, the exporter's headline settings and what the span reports (the
run's stop reason, label and headline score): identical content, identical id,
whichever process sends it; a changed score (a late grade) gets a new id and so a new span.

`DerivedSpanIds` wraps the id generator of the SDK tracer the exporter was given: only a span
started inside `derived(...)` on the same thread gets a derived id; every other span of that
tracer keeps the provider's own generator.
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
