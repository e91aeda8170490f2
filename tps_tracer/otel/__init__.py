"""OpenTelemetry adapter: capture TPS from spans, export scores next to the traces.

    TPSSpanProcessor        spans of an instrumented agent -> trajectories -> the accumulator
    EvaluationSpanExporter  a `tps.evaluation` child span of each agent root (same trace)
    EvaluationEventExporter `gen_ai.evaluation.result` log records on each agent root (one per score)
    TPSMetrics              running mean TPS and counts as OpenTelemetry metrics
    PhoenixAnnotations      Arize Phoenix span annotations, retried while Phoenix is down
    MlflowAssessments       MLflow assessments (feedback) on the traces, retried while MLflow is down
    LangSmithFeedback       LangSmith feedback on each LangChain root run (the run LangSmith's tracer made)
    LangfuseScores          Langfuse scores on each run's trace (its id seeded from the run id: langfuse_trace_id)
    TraceLinks              trajectory id -> agent root span (shared by the above)

Exporters are accumulator listeners: `accumulator.add_listener(exporter)`.

Each name is imported when first used (PEP 562): `from tps_tracer.otel import TPSSpanProcessor`
loads the capture path only, not the exporters (which read scores, hence the evaluation layer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tps_tracer.errors import lazy_names

if TYPE_CHECKING:
    from tps_tracer.otel.evaluation_events import EvaluationEventExporter
    from tps_tracer.otel.evaluation_spans import EvaluationSpanExporter
    from tps_tracer.otel.feedback_scores import LangfuseScores, LangSmithFeedback, langfuse_trace_id
    from tps_tracer.otel.metrics import TPSMetrics
    from tps_tracer.otel.mlflow_assessments import MlflowAssessments
    from tps_tracer.otel.phoenix import PhoenixAnnotations
    from tps_tracer.otel.span_processor import SCOPE_NAME, TPSSpanProcessor
    from tps_tracer.otel.trace_links import SpanLink, TraceLinks

_WHERE = {
    "SCOPE_NAME": "span_processor",
    "EvaluationEventExporter": "evaluation_events",
    "EvaluationSpanExporter": "evaluation_spans",
    "LangfuseScores": "feedback_scores",
    "LangSmithFeedback": "feedback_scores",
    "langfuse_trace_id": "feedback_scores",
    "MlflowAssessments": "mlflow_assessments",
    "PhoenixAnnotations": "phoenix",
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
