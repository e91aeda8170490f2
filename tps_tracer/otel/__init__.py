"""OpenTelemetry: capture TPS from spans (`TPSSpanProcessor`), export scores next to the traces.

Exporters are accumulator listeners: `accumulator.add_listener(exporter)`. Names are imported on
first use (PEP 562), so `TPSSpanProcessor` does not load the exporters.
"""

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
    from tps_tracer.otel.evaluations import EvaluationEventExporter, EvaluationSpanExporter
    from tps_tracer.otel.metrics import TPSMetrics
    from tps_tracer.otel.span_processor import SCOPE_NAME, TPSSpanProcessor
    from tps_tracer.otel.trace_links import SpanLink, TraceLinks

_WHERE = {
    "SCOPE_NAME": "span_processor",
    "EvaluationEventExporter": "evaluations",
    "EvaluationSpanExporter": "evaluations",
    "LangfuseScores": "backends",
    "LangSmithFeedback": "backends",
    "langfuse_trace_id": "backends",
    "MlflowAssessments": "backends",
    "PhoenixAnnotations": "backends",
    "SpanLink": "trace_links",
    "TPSMetrics": "metrics",
    "TPSSpanProcessor": "span_processor",
    "TraceLinks": "trace_links",
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


__getattr__, __dir__ = lazy_names(__name__, _WHERE, extra=True)
