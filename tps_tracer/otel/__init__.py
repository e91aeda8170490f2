"""OpenTelemetry adapter: capture TPS from spans, export scores next to the traces.

    TPSSpanProcessor        spans of an instrumented agent -> trajectories -> the accumulator
    EvaluationSpanExporter  a `tps.evaluation` child span of each agent root (same trace)
    EvaluationEventExporter `gen_ai.evaluation.result` log records on each agent root (one per score)
    TPSMetrics              running mean TPS and counts as OpenTelemetry metrics
    PhoenixAnnotations      Arize Phoenix span annotations, retried while Phoenix is down
    MlflowAssessments       MLflow assessments (feedback) on the traces, retried while MLflow is down
    TraceLinks              trajectory id -> agent root span (shared by the above)

Exporters are accumulator listeners: `accumulator.add_listener(exporter)`.
"""

from tps_tracer.otel.evaluation_events import EvaluationEventExporter
from tps_tracer.otel.evaluation_spans import EvaluationSpanExporter
from tps_tracer.otel.metrics import TPSMetrics
from tps_tracer.otel.mlflow_assessments import MlflowAssessments
from tps_tracer.otel.phoenix import PhoenixAnnotations
from tps_tracer.otel.span_processor import SCOPE_NAME, TPSSpanProcessor
from tps_tracer.otel.trace_links import SpanLink, TraceLinks

__all__ = [
    "SCOPE_NAME",
    "EvaluationEventExporter",
    "EvaluationSpanExporter",
    "MlflowAssessments",
    "PhoenixAnnotations",
    "SpanLink",
    "TPSMetrics",
    "TPSSpanProcessor",
    "TraceLinks",
]
