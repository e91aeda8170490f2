"""Recipe: TPS scores in MLflow, as assessments on the agent's traces.

    import mlflow
    from mlflow_recipe import trace_to_mlflow
    experiment_id = mlflow.set_experiment("my-agent").experiment_id
    tps = trace_to_mlflow("http://127.0.0.1:5000", experiment_id, sink="runs.jsonl")
    LangChainInstrumentor().instrument(tracer_provider=tps.provider)   # OpenInference
    agent.invoke(..., config={"metadata": {"tps_trajectory_id": task_id}})
    tps.processor.record_outcome(task_id, success=True)   # when the grade is known
    tps.flush()

What lands in MLflow, per agent run: a trace (`tr-<OpenTelemetry trace id>`) with the
agent's spans, sent over OTLP/HTTP to the tracking server's /v1/traces endpoint; a
`tps.evaluation` child span of the run's root in that trace; and assessments (feedback,
source CODE) on the root span: `tps.log` / `tps.brier` / ... (headline predictor, `verbal`;
others as `tps.log.token_prob`, ...) with the TPS as value, and
`tps.stop_reason`. The JSON Lines sink is the durable record; `tps.assessments.status()`
reports delivery (retried while MLflow is down). With the LangChain handler doing the
capture instead, pass `capture="handler"` and add `tps.handler` to the agent's callbacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tps_tracer import Accumulator
from tps_tracer.otel import EvaluationSpanExporter, MlflowAssessments, TPSSpanProcessor

# MLflow's OTLP endpoint files the spans under the experiment named by this header.
EXPERIMENT_HEADER = "x-mlflow-experiment-id"


@dataclass
class MlflowTPS:
    provider: TracerProvider
    accumulator: Accumulator
    processor: TPSSpanProcessor
    assessments: MlflowAssessments
    handler: Any = None  # TPSCallbackHandler when capture="handler"

    def flush(self, timeout: float = 60.0) -> bool:
        """Everything captured so far scored, exported and assessed (False: MLflow still unreachable)."""
        if self.handler is not None:
            self.handler.flush()
        self.processor.force_flush()
        self.provider.force_flush()
        return self.assessments.flush(timeout)


def trace_to_mlflow(
    tracking_uri: str,
    experiment_id: str,
    sink: str | Path,
    *,
    capture: str = "spans",
    horizon: int | None = None,
    service_name: str = "agent",
    accumulator_options: dict[str, Any] | None = None,
    assessment_options: dict[str, Any] | None = None,
) -> MlflowTPS:
    """A tracer provider exporting to an MLflow tracking server, with TPS capture (spans or handler) and exporters."""
    if capture not in ("spans", "handler"):
        raise ValueError(f"capture must be 'spans' or 'handler', not {capture!r}")
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    acc = Accumulator(sink=str(sink), **(accumulator_options or {}))
    processor = TPSSpanProcessor(acc if capture == "spans" else None, capture=capture == "spans", horizon=horizon)
    provider.add_span_processor(processor)
    exporter = OTLPSpanExporter(
        endpoint=f"{tracking_uri.rstrip('/')}/v1/traces", headers={EXPERIMENT_HEADER: str(experiment_id)}
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    assessments = MlflowAssessments(tracking_uri, processor.links, **(assessment_options or {}))
    acc.add_listener(EvaluationSpanExporter(provider, processor.links))
    acc.add_listener(assessments)
    handler = None
    if capture == "handler":
        from tps_tracer.langchain import TPSCallbackHandler

        handler = TPSCallbackHandler(acc, horizon=horizon)
    return MlflowTPS(provider, acc, processor, assessments, handler)
