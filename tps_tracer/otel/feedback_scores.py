"""Scores as LangSmith feedback and Langfuse scores on the LangChain run they belong to.

    tps = TPSCallbackHandler(acc)
    feedback = LangSmithFeedback()          # langsmith.Client() from LANGSMITH_* settings
    scores = LangfuseScores()               # langfuse.get_client() from LANGFUSE_* settings
    acc.add_listener(feedback); acc.add_listener(scores)
    ...
    feedback.flush(); feedback.status()     # {"sent": ..., "pending": ..., "without_run_id": ...}

Neither platform takes scores over OTLP; both are REST objects attached by id. The link is the
root run id LangChain gives every handler, which the TPS handler writes into the record
(`langchain_run_id`):

- LangSmith: LangChain's LangSmith tracer makes that id the run's (and trace's) id, so the
  feedback goes on `run_id`, in the tracer's project (`project_name`, default the tracer's own).
- Langfuse: its LangChain `CallbackHandler` makes an OpenTelemetry trace of its own, with a
  random id unless given one. Give it the id seeded from the run id, `langfuse_trace_id(run_id)`
  (Langfuse's `create_trace_id(seed=...)`), so this exporter and `tps-tracer export` find it:

      run_id = uuid.uuid4()
      langfuse = CallbackHandler(trace_context={"trace_id": langfuse_trace_id(run_id)})
      agent.invoke(inputs, config={"run_id": run_id, "callbacks": [langfuse, tps]})

Per run, with the names and quantities of score_names.py: `tps.stop_reason` (its value the stop
reason), and one record per predictor x rule whose value is the TPS. LangSmith rounds a
feedback `score` to 4 decimals, so the exact TPS is its `value`. Each record has an id derived
from the run id and name (uuid5), so a second export, or a late outcome, updates it rather than
adding one: Langfuse upserts scores by id; a LangSmith create refused as a conflict (409, the id
exists) is patched instead (score, value, comment; its `extra` metadata stays the first one).
LangSmith answers 404 until the tracer's batch holding the run is ingested: that feedback waits
and is retried on its own, up to `not_stored_timeout` (as MLflow's traces, delivery.py).

Delivery is `RetryingDelivery`'s, with backoff. The SDKs' long retry loops are off for these
writes (LangSmith's create_feedback retries a 429 up to 10 times with growing sleeps; Langfuse's
API client retries too), so an outage is counted and logged promptly; LangSmith's HTTP adapter
keeps its 3 short retries unless the client is built with `retry_config`. A run whose record
names no run id (a hand-written loop without a root run) is counted in
`status()["without_run_id"]` and logged (the 1st, 2nd, 4th, ... time).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from tps_tracer.constants import HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel.delivery import DEFAULT_MAX_PENDING, DEFAULT_NOT_STORED_TIMEOUT, RetryingDelivery
from tps_tracer.otel.evaluation_spans import explanation, score_facts, value_facts
from tps_tracer.otel.score_names import STOP_NAME, named_values
from tps_tracer.tracking.keys import RUN_ID_KEY

logger = logging.getLogger("tps_tracer")

SOURCE = "tps-tracer"
_IDS = uuid.UUID("6f1d3c2a-7e0b-5c4d-9a8e-2b7f4e1c0d35")  # the uuid5 namespace of record ids


def record_id(run_id: str, name: str) -> str:
    """The feedback / score id of one name on one run: the same on every export."""
    return str(uuid.uuid5(_IDS, f"{run_id}/{name}"))


def langfuse_trace_id(run_id: object) -> str:
    """The Langfuse trace id seeded from a LangChain run id (give it to Langfuse's CallbackHandler)."""
    from langfuse import Langfuse  # the optional `langfuse` extra

    return Langfuse.create_trace_id(seed=str(run_id))


class _RunScores(RetryingDelivery):
    """Rows (name, value, comment, metadata) per run, linked by the record's LangChain run id."""

    def __init__(
        self,
        *,
        predictor: str,
        weights: str | None,
        censoring: str | Sequence[str],
        batch_size: int,
        retry_initial: float,
        retry_max: float,
        max_pending: int,
        not_stored_timeout: float = DEFAULT_NOT_STORED_TIMEOUT,
    ):
        self.predictor, self.weights, self.censoring = predictor, weights, censoring
        self.without_run_id = 0
        super().__init__(
            None,
            batch_size=batch_size,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_pending=max_pending,
            not_stored_timeout=not_stored_timeout,
        )

    def __call__(self, score: TrajectoryScore) -> None:
        run_id = score.metadata.get(RUN_ID_KEY)
        if isinstance(run_id, str):
            self._enqueue(score, run_id)
            return
        self.without_run_id += 1
        if self.without_run_id & (self.without_run_id - 1) == 0:  # the 1st, 2nd, 4th, ...: no log flood
            logger.warning(
                "tps-tracer: %s: %d runs have no LangChain run id to attach scores to (latest %r)",
                self.backend,
                self.without_run_id,
                score.trajectory_id,
            )

    def rows(self, score: TrajectoryScore) -> list[tuple[str, float | str, str, dict[str, Any]]]:
        facts = score_facts(score)
        stop = score.stop_reason.value
        out: list[tuple[str, float | str, str, dict[str, Any]]] = [
            (STOP_NAME, stop, f"stop reason {stop} ({score.role.value})", facts)
        ]
        for name, v in named_values(score, self.predictor, self.weights, self.censoring):
            out.append((name, v.value, explanation(score, v), {**facts, "label": score.label, **value_facts(v)}))
        return out

    def identity(self, record: dict[str, Any]) -> tuple[str, Any]:
        return record["id"], (record["value"], record["comment"])

    def status(self) -> dict[str, Any]:
        return {**super().status(), "without_run_id": self.without_run_id}


class LangSmithFeedback(_RunScores):
    backend = "LangSmith"

    def __init__(
        self,
        client: Any = None,
        *,
        project_name: str | None = None,
        predictor: str = HEADLINE_PREDICTOR,
        weights: str | None = None,
        censoring: str | Sequence[str] = SIMPLE,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        max_pending: int = DEFAULT_MAX_PENDING,
        not_stored_timeout: float = DEFAULT_NOT_STORED_TIMEOUT,
    ):
        """`project_name`: the tracer's project (LangSmith wants it with run feedback); default the
        one LangChainTracer uses (LANGSMITH_PROJECT, else "default")."""
        from langsmith import Client, utils  # the optional `langsmith` extra

        self.client = client if client is not None else Client()
        self.project_name = project_name or utils.get_tracer_project()
        self._session_id: Any = None
        self._errors = utils
        # One feedback per request (LangSmith has no batch write): a failure never re-sends a written one.
        super().__init__(
            predictor=predictor,
            weights=weights,
            censoring=censoring,
            batch_size=1,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_pending=max_pending,
            not_stored_timeout=not_stored_timeout,
        )

    def items(self, score: TrajectoryScore, link: str) -> list[dict[str, Any]]:
        return [
            {
                "id": record_id(link, name),
                "run_id": link,
                "key": name,
                "score": value if isinstance(value, float) else None,  # the SDK rounds it to 4 decimals
                "value": value,  # exact
                "comment": comment,
                "extra": metadata,
            }
            for name, value, comment, metadata in self.rows(score)
        ]

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        if self._session_id is None:
            self._session_id = self.client.read_project(project_name=self.project_name).id
        for item in batch:
            fields = {"score": item["score"], "value": item["value"], "comment": item["comment"]}
            try:
                self.client.create_feedback(
                    item["run_id"],
                    item["key"],
                    **fields,
                    feedback_id=item["id"],
                    extra=item["extra"],
                    source_info={"source": SOURCE},
                    session_id=self._session_id,
                    stop_after_attempt=1,  # retried here, with the other records' backoff
                )
            except self._errors.LangSmithConflictError:  # a feedback with this id exists: update it
                self.client.update_feedback(item["id"], **fields)

    def _not_stored_yet(self, exc: Exception) -> bool:
        # LangSmith answers 404 until the tracer's batch with the run has been ingested.
        return isinstance(exc, self._errors.LangSmithNotFoundError)


class LangfuseScores(_RunScores):
    backend = "Langfuse"

    def __init__(
        self,
        client: Any = None,
        *,
        predictor: str = HEADLINE_PREDICTOR,
        weights: str | None = None,
        censoring: str | Sequence[str] = SIMPLE,
        batch_size: int = 100,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        max_pending: int = DEFAULT_MAX_PENDING,
    ):
        """`client`: a `langfuse.Langfuse`; default `get_client()` (LANGFUSE_* settings)."""
        if client is None:
            from langfuse import get_client  # the optional `langfuse` extra

            client = get_client()
        self.client = client
        super().__init__(
            predictor=predictor,
            weights=weights,
            censoring=censoring,
            batch_size=batch_size,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_pending=max_pending,
        )

    def items(self, score: TrajectoryScore, link: str) -> list[dict[str, Any]]:
        trace_id = langfuse_trace_id(link)
        return [
            {
                "id": record_id(link, name),
                "traceId": trace_id,
                "name": name,
                "value": value,
                "dataType": "NUMERIC" if isinstance(value, float) else "CATEGORICAL",
                "comment": comment,
                "metadata": metadata,
            }
            for name, value, comment, metadata in self.rows(score)
        ]

    def _send(self, batch: Sequence[dict[str, Any]]) -> list[str]:
        # The SDK's create_score queues and drops on failure with a log line only; the API call
        # raises, so a failed batch is kept and retried. 207: some scores refused, not to be re-sent.
        result = self.client.api.scores.create(request=list(batch), request_options={"max_retries": 0})
        rejected = int(getattr(result, "rejected", 0))
        return ([e.message for e in result.errors] + ["refused"] * rejected)[:rejected] if rejected else []
