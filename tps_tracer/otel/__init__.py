"""OpenTelemetry: capture TPS from spans (`TPSSpanProcessor`), export scores next to the traces (exporters
are accumulator listeners). Names are imported on first use (PEP 562): the processor loads no exporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tps_tracer.errors import lazy_names

if TYPE_CHECKING:
    from tps_tracer.otel.backends import (
        LangfuseScores,
        LangSmithFeedback,
        MlflowAssessments,
        PhoenixAnnotations,
        langfuse_trace_id,
    )
    from tps_tracer.otel.evaluations import EvaluationEventExporter, EvaluationSpanExporter, TPSMetrics
    from tps_tracer.otel.span_processor import SCOPE_NAME, TPSSpanProcessor
    from tps_tracer.otel.trace_links import SpanLink, TraceLinks

_WHERE = {
    "backends": ("LangSmithFeedback", "LangfuseScores", "MlflowAssessments", "PhoenixAnnotations", "langfuse_trace_id"),
    "evaluations": ("EvaluationEventExporter", "EvaluationSpanExporter", "TPSMetrics"),
    "span_processor": ("SCOPE_NAME", "TPSSpanProcessor"),
    "trace_links": ("SpanLink", "TraceLinks"),
}

__all__ = [
    "SCOPE_NAME",
    "EvaluationEventExporter",
    "EvaluationSpanExporter",
    "LangSmithFeedback",
    "LangfuseScores",
    "MlflowAssessments",
    "PhoenixAnnotations",
    "SpanLink",
    "TPSMetrics",
    "TPSSpanProcessor",
    "TraceLinks",
    "langfuse_trace_id",
]


__getattr__, __dir__ = lazy_names(__name__, {n: m for m, names in _WHERE.items() for n in names}, extra=True)
