"""Scores as Arize Phoenix span annotations on each trajectory's agent root span.

    phoenix = PhoenixAnnotations("http://127.0.0.1:6006", processor.links)
    accumulator.add_listener(phoenix)
    ...
    phoenix.flush(); phoenix.status()   # {"sent": ..., "pending": ..., "failed_attempts": ..., ...}

Per trajectory, one annotation per score rule (`tps.log`, `tps.brier`, ...) for the headline
predictor (fixed: "verbal" unless `predictor=` says otherwise) and one per rule for each other
usable predictor (`tps.log.token_prob`, ...; see score_names.py), at one schedule and
censoring mode (or several: censoring=("simple", "exact") adds `tps.log.exact` once q_Z
is known), with score = the TPS, label = success / failure / censored, the other `tps.*`
facts in metadata, plus `tps.stop_reason` (label only) so runs can be filtered by why they stopped.
Each name is sent once per run; again only when its value changes (a late outcome).
Annotations are sent with `sync=False`: Phoenix queues
an annotation whose span it has not stored yet, so a score may arrive before its trace.

Delivery is `RetryingDelivery`'s: off every other thread, retried with backoff while
Phoenix is down or answers with an error, reported by `status()`, and nothing dropped
unless more than `max_pending` annotations wait. The durable record of every score is the
accumulator's JSON Lines sink, not this queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tps_tracer.constants import HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel.delivery import DEFAULT_MAX_PENDING, RetryingDelivery
from tps_tracer.otel.evaluation_spans import explanation, score_facts, value_facts
from tps_tracer.otel.score_names import STOP_NAME, named_values
from tps_tracer.otel.trace_links import SpanLink, TraceLinks

STOP_ANNOTATION = STOP_NAME


class PhoenixAnnotations(RetryingDelivery):
    backend = "Phoenix"

    def __init__(
        self,
        endpoint: str = "http://127.0.0.1:6006",
        links: TraceLinks | None = None,
        *,
        predictor: str = HEADLINE_PREDICTOR,
        weights: str | None = None,
        censoring: str | Sequence[str] = SIMPLE,
        client: Any = None,
        batch_size: int = 200,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        max_pending: int = DEFAULT_MAX_PENDING,
    ):
        if client is None:
            from phoenix.client import Client  # the optional `phoenix` extra

            client = Client(base_url=endpoint)
        self.client = client
        self.predictor, self.weights, self.censoring = predictor, weights, censoring
        super().__init__(
            links, batch_size=batch_size, retry_initial=retry_initial, retry_max=retry_max, max_pending=max_pending
        )

    def items(self, score: TrajectoryScore, link: SpanLink) -> list[dict[str, Any]]:
        facts = score_facts(score)
        out: list[dict[str, Any]] = [
            {
                "name": STOP_ANNOTATION,
                "annotator_kind": "CODE",
                "span_id": link.span_hex,
                "result": {"label": score.stop_reason.value, "explanation": score.role.value},
                "metadata": facts,
            }
        ]
        for name, v in named_values(score, self.predictor, self.weights, self.censoring):
            out.append(
                {
                    "name": name,
                    "annotator_kind": "CODE",
                    "span_id": link.span_hex,
                    "result": {"score": v.value, "label": score.label, "explanation": explanation(score, v)},
                    "metadata": {**facts, **value_facts(v)},
                }
            )
        return out

    def identity(self, record: dict[str, Any]) -> tuple[str, Any]:
        result = record["result"]
        return record["name"], (result.get("score"), result.get("label"))

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        # sync=False: Phoenix queues an annotation whose span it has not stored yet.
        self.client.spans.log_span_annotations(span_annotations=list(batch), sync=False)
