"""Recipe: TPS scores in Arize Phoenix, next to the agent's traces.

    from phoenix_recipe import trace_to_phoenix
    tps = trace_to_phoenix("http://127.0.0.1:6006", project="my-agent", sink="runs.jsonl")
    LangChainInstrumentor().instrument(tracer_provider=tps.provider)   # OpenInference
    agent.invoke(..., config={"metadata": {"tps_trajectory_id": task_id}})
    tps.processor.record_outcome(task_id, success=True)   # when the grade is known
    tps.flush()

What lands in Phoenix, per agent run: the agent's spans (OTLP/HTTP), a `tps.evaluation`
child span of the run's root in the same trace, and span annotations on that root
(`tps.log` / `tps.brier` / ... score and label for the headline predictor, `verbal`; others
as `tps.log.token_prob`, ...; `tps.stop_reason`). The JSON Lines sink is
the durable record; `tps.annotations.status()` reports delivery (retried while Phoenix is down).
With the LangChain handler doing the capture instead, pass `capture="handler"` and add
`tps.handler` to the agent's callbacks.
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
from tps_tracer.otel import EvaluationSpanExporter, PhoenixAnnotations, TPSSpanProcessor


@dataclass
class PhoenixTPS:
    provider: TracerProvider
    accumulator: Accumulator
    processor: TPSSpanProcessor
    annotations: PhoenixAnnotations
    handler: Any = None  # TPSCallbackHandler when capture="handler"

    def flush(self, timeout: float = 30.0) -> bool:
        """Everything captured so far scored, exported and annotated (False: Phoenix still unreachable)."""
        if self.handler is not None:
            self.handler.flush()
        self.processor.force_flush()
        self.provider.force_flush()
        return self.annotations.flush(timeout)


def trace_to_phoenix(
    endpoint: str,
    project: str,
    sink: str | Path,
    *,
    capture: str = "spans",
    horizon: int | None = None,
    accumulator_options: dict[str, Any] | None = None,
    annotation_options: dict[str, Any] | None = None,
) -> PhoenixTPS:
    """A tracer provider exporting to Phoenix with TPS capture (from spans or the handler) and both exporters."""
    if capture not in ("spans", "handler"):
        raise ValueError(f"capture must be 'spans' or 'handler', not {capture!r}")
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    acc = Accumulator(sink=str(sink), **(accumulator_options or {}))
    processor = TPSSpanProcessor(acc if capture == "spans" else None, capture=capture == "spans", horizon=horizon)
    provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces")))
    annotations = PhoenixAnnotations(endpoint, processor.links, **(annotation_options or {}))
    acc.add_listener(EvaluationSpanExporter(provider, processor.links))
    acc.add_listener(annotations)
    handler = None
    if capture == "handler":
        from tps_tracer.langchain import TPSCallbackHandler

        handler = TPSCallbackHandler(acc, horizon=horizon)
    return PhoenixTPS(provider, acc, processor, annotations, handler)
