"""What an OTLP endpoint took of the spans `tps-tracer export --to otlp` sent.

Kept apart from evaluation_spans.py, which needs only the OpenTelemetry API: this wraps an SDK
exporter.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class DeliveryCount(SpanExporter):
    """Wraps the OTLP exporter to count what the endpoint took. The batch processor's
    `force_flush` only says the queue was emptied in time: an export the endpoint refused, or
    that failed after its retries, still returns True, so "exported" would be claimed for spans
    that never arrived."""

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
