"""Scores as MLflow assessments (feedback) on each trajectory's trace, where MLflow is the tracing backend.

    # the agent's spans go to MLflow's OTLP endpoint: {tracking_uri}/v1/traces,
    # header x-mlflow-experiment-id (see integrations/mlflow/)
    mlflow_scores = MlflowAssessments("http://127.0.0.1:5000", processor.links)
    accumulator.add_listener(mlflow_scores)
    ...
    mlflow_scores.flush(); mlflow_scores.status()

MLflow names a trace ingested over OTLP `tr-<32 hex digits of the OpenTelemetry trace id>`.
Per trajectory it gets, on the agent root span: one feedback per score rule (`tps.log`,
`tps.brier`, ...) for the headline predictor (fixed: "verbal" unless configured), and per rule
for each other usable predictor (`tps.log.token_prob`, ...; score_names.py), at one schedule and
censoring mode (or several: censoring=("simple", "exact") adds `tps.log.exact` once q_Z
is known), each sent once per run (again only when its value changes), value = the TPS,
rationale = what the number is, the label and other facts in metadata; and `tps.stop_reason`
(value = the stop reason) so runs can be filtered by why they stopped. Source: CODE,
source id `tps-tracer`.

MLflow answers RESOURCE_DOES_NOT_EXIST for a trace it has not stored yet (spans travel by
the OTLP exporter's batches, so a score can outrun its trace): that assessment waits and is
retried on its own, up to `not_stored_timeout` seconds, then counted in
`status()["gave_up"]`. When MLflow is down, every write is retried with backoff (see
`RetryingDelivery`). Note that the MLflow client retries each request itself first
(MLFLOW_HTTP_REQUEST_MAX_RETRIES, default 7, with backoff: minutes); lower it, and
MLFLOW_HTTP_REQUEST_TIMEOUT, for `status()` to report an outage promptly.

Needs the `mlflow` extra (`mlflow-tracing`, the client only; the server is yours).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tps_tracer.constants import HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel.delivery import DEFAULT_MAX_PENDING, DEFAULT_NOT_STORED_TIMEOUT, RetryingDelivery
from tps_tracer.otel.evaluation_spans import explanation, score_facts, value_facts
from tps_tracer.otel.score_names import STOP_NAME, named_values
from tps_tracer.otel.trace_links import SpanLink, TraceLinks

STOP_ASSESSMENT = STOP_NAME
SOURCE_ID = "tps-tracer"
NOT_STORED = "RESOURCE_DOES_NOT_EXIST"


def mlflow_trace_id(link: SpanLink) -> str:
    """The id MLflow gives a trace it ingested over OTLP."""
    return f"tr-{link.trace_hex}"


def _metadata(facts: dict[str, Any]) -> dict[str, str]:
    # MLflow stores assessment metadata as strings; absent facts are left out, not "None".
    return {k: str(v) for k, v in facts.items() if v is not None}


class MlflowAssessments(RetryingDelivery):
    backend = "MLflow"

    def __init__(
        self,
        tracking_uri: str | None = None,
        links: TraceLinks | None = None,
        *,
        predictor: str = HEADLINE_PREDICTOR,
        weights: str | None = None,
        censoring: str | Sequence[str] = SIMPLE,
        client: Any = None,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        max_pending: int = DEFAULT_MAX_PENDING,
        not_stored_timeout: float = DEFAULT_NOT_STORED_TIMEOUT,
    ):
        """`tracking_uri` None: the one MLflow is configured with (MLFLOW_TRACKING_URI, mlflow.set_tracking_uri)."""
        if client is None:
            # TracingClient takes its own tracking URI: no change to the process-wide MLflow setting.
            from mlflow.tracing.client import TracingClient  # the optional `mlflow` extra

            client = TracingClient(tracking_uri)
        self.client = client
        self.predictor, self.weights, self.censoring = predictor, weights, censoring
        # One assessment per request (MLflow has no batch write): a failure never re-sends a written one.
        super().__init__(
            links,
            batch_size=1,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_pending=max_pending,
            not_stored_timeout=not_stored_timeout,
        )

    def items(self, score: TrajectoryScore, link: SpanLink) -> list[dict[str, Any]]:
        facts = score_facts(score)
        where = {"trace_id": mlflow_trace_id(link), "span_id": link.span_hex}
        out: list[dict[str, Any]] = [
            {
                **where,
                "name": STOP_ASSESSMENT,
                "value": score.stop_reason.value,
                "rationale": f"stop reason {score.stop_reason.value} ({score.role.value})",
                "metadata": _metadata(facts),
            }
        ]
        for name, v in named_values(score, self.predictor, self.weights, self.censoring):
            out.append(
                {
                    **where,
                    "name": name,
                    "value": v.value,
                    "rationale": explanation(score, v),
                    "metadata": _metadata({**facts, "label": score.label, **value_facts(v)}),
                }
            )
        return out

    def identity(self, record: dict[str, Any]) -> tuple[str, Any]:
        return record["name"], (record["value"], record["metadata"].get("label"))

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        for item in batch:
            self.client.log_assessment(item["trace_id"], feedback_of(item))

    def _not_stored_yet(self, exc: Exception) -> bool:
        return getattr(exc, "error_code", None) == NOT_STORED


def feedback_of(item: dict[str, Any]) -> Any:
    """An assessment item (name, value, rationale, metadata, span_id) as MLflow's Feedback, sourced CODE."""
    from mlflow.entities import AssessmentSource, AssessmentSourceType, Feedback

    return Feedback(
        name=item["name"],
        value=item["value"],
        source=AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=SOURCE_ID),
        rationale=item["rationale"],
        metadata=item["metadata"],
        span_id=item["span_id"],
    )
