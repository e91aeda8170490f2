"""Scores written to tracing backends' own APIs (Phoenix annotations, MLflow assessments, LangSmith
feedback, Langfuse scores: docs/otel.md, docs/traces.md), live or after the fact (`tps-tracer export`),
under the names every exporter shares; `RetryingDelivery` writes them off the agent's threads, retried.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from tps_tracer.constants import HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.online.trajectory_score import ScoreValue, TrajectoryScore
from tps_tracer.otel.trace_links import SpanLink, TraceLinks
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.scoring import ScoreRule
from tps_tracer.tracking.keys import RUN_ID_KEY

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("tps_tracer")

SOURCE = "tps-tracer"  # the source every backend records our writes under
_IDS = uuid.UUID("6f1d3c2a-7e0b-5c4d-9a8e-2b7f4e1c0d35")  # the uuid5 namespace of LangSmith / Langfuse ids

# A backend averages and filters by name, so a name means one quantity on every run: tps.log (the
# headline predictor's TPS, log rule; the headline fixed per exporter), tps.log.token_prob (another
# predictor's), tps.log.exact (exact censoring, q_Z known), tps.log.uniform (another weight schedule).
STOP_NAME = "tps.stop_reason"  # every annotation exporter's record of why the run stopped
DEFAULT_WEIGHTS = "linear-front"  # the accumulator's and every command's default schedule
MAX_REMEMBERED = 100_000  # trajectories whose sent values (or counted modes: TPSMetrics) are kept, oldest first out

Row = tuple[str, "float | str", str, dict[str, Any]]  # name, value, comment, metadata


def explanation(score: TrajectoryScore, v: ScoreValue | None, headline: str | None = None) -> str:
    if v is None:
        if headline is not None and next(score.values(), None) is not None:
            return f"no score for predictor {headline} on this run; stop reason {score.stop_reason.value}"
        return f"not scored: stop reason {score.stop_reason.value} ({score.role.value})"
    return (
        f"TPS, {v.rule} rule, {v.weights} weights, {v.censoring} censoring, predictor {v.predictor}, "
        f"over {score.n_steps} of T={score.horizon} steps; stop reason {score.stop_reason.value}"
    )


def score_facts(score: TrajectoryScore) -> dict[str, Any]:
    """A run's facts, named alike by every exporter (`tps.`-prefixed on OpenTelemetry signals)."""
    return {
        "trajectory_id": score.trajectory_id,
        "stop_reason": score.stop_reason.value,
        "role": score.role.value,
        "horizon": score.horizon,
        "n_steps": score.n_steps,
        "outcome": score.outcome,
        "q_z": score.q_z,
    }


def backend_rows(
    score: TrajectoryScore, headline: str, weights: str | None, censoring: str | Sequence[str]
) -> list[Row]:
    """What every backend gets per run: `tps.stop_reason` (so runs can be filtered by why they
    stopped), then every usable predictor x rule at one schedule (default the accumulator's first,
    the same on every run) in each censoring mode asked for. A name differs from the plain one in
    every respect it differs in, so `export --censoring exact` never reuses a name in use."""
    facts = score_facts(score)
    stop = score.stop_reason.value
    out: list[Row] = [(STOP_NAME, stop, f"stop reason {stop} ({score.role.value})", facts)]
    if weights is None:
        weights = next((w for (_, _, w) in score.pairs), None)
    modes = (censoring,) if isinstance(censoring, str) else tuple(censoring)
    for v in score.values():
        if v.weights != weights or v.censoring not in modes:
            continue
        plain = ((v.predictor, headline), (v.censoring, SIMPLE), (v.weights, DEFAULT_WEIGHTS))
        name = ".".join([f"tps.{v.rule}", *(part for part, usual in plain if part != usual)])
        value_facts = {"predictor": v.predictor, "weights": v.weights, "censoring": v.censoring, "s1": v.s1, "s0": v.s0}
        out.append((name, v.value, explanation(score, v), {**facts, "label": score.label, **value_facts}))
    return out


class SentScores:
    """What an exporter already sent, per trajectory and name, so that the accumulator's later
    notifications (a late outcome, a q_Z) re-send only what changed; thread-safe, bounded."""

    def __init__(self) -> None:
        self._sent: OrderedDict[str, dict[Hashable, Hashable]] = OrderedDict()
        self._lock = threading.Lock()

    def is_new(self, trajectory_id: str, name: Hashable, signature: Hashable) -> bool:
        """True (and remembered) when `name` was never sent for this trajectory, or with another signature."""
        with self._lock:
            sent = self._sent.setdefault(trajectory_id, {})
            self._sent.move_to_end(trajectory_id)
            while len(self._sent) > MAX_REMEMBERED:
                self._sent.popitem(last=False)
            if name in sent and sent[name] == signature:
                return False
            sent[name] = signature
            return True


@dataclass
class ExportSummary:
    exported: list[str] = field(default_factory=list)
    without_trace: list[str] = field(default_factory=list)
    pending_outcome: list[str] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)  # the accumulator's own refusals, by kind
    delivery: dict[str, Any] = field(default_factory=dict)  # the exporter's status() after flushing

    def as_dict(self) -> dict[str, Any]:
        return {
            "exported": len(self.exported),
            "without_trace": {"count": len(self.without_trace), "ids": self.without_trace},
            "pending_outcome": {"count": len(self.pending_outcome), "ids": self.pending_outcome},
            "rejected": self.rejected,
            "delivery": self.delivery,
        }


OTEL_LINK = ("otel_trace_id", "otel_span_id")  # the metadata a record joins its OpenTelemetry trace by


def has_trace(record: TrajectoryRecord, link: Sequence[str] = OTEL_LINK) -> bool:
    """Whether the record names every id in `link` (OTEL_LINK, or (RUN_ID_KEY,) for LangSmith / Langfuse)."""
    return all(isinstance(record.metadata.get(key), str) for key in link)


def export_records(
    records: Sequence[TrajectoryRecord],
    exporter: Callable[[TrajectoryScore], None],
    rules: Sequence[str | ScoreRule] = ("log", "brier", "beta(2,4)"),
    weights: Sequence[str] = ("linear-front",),
    link: Sequence[str] = OTEL_LINK,
) -> ExportSummary:
    """Hand every linked run's score to `exporter` (a live exporter: a listener)."""
    summary = ExportSummary()
    linked = []
    for rec in records:
        if not has_trace(rec, link):
            summary.without_trace.append(rec.trajectory_id)
        elif rec.is_pending:
            summary.pending_outcome.append(rec.trajectory_id)
        else:
            linked.append(rec)
    # Scored on the accumulator the live exporters listen to (clean runs without a grade: no score).
    from tps_tracer.online.accumulator import Accumulator

    acc = Accumulator(rules=rules, weights=weights, bootstrap=0, base_rate=False, idle_timeout=None)
    scores: list[TrajectoryScore] = []
    acc.add_listener(scores.append)
    for rec in linked:
        for step in rec.steps:
            acc.observe(rec.trajectory_id, dict(step.forecasts))
        acc.stop(rec.trajectory_id, rec.stop_reason, rec.horizon, rec.metadata, q_z=rec.q_z, outcome=rec.outcome)
    acc.close()
    summary.rejected = dict(acc.rejected)
    for score in scores:
        exporter(score)
        summary.exported.append(score.trajectory_id)
    return summary


class Options(TypedDict, total=False):
    """What every backend exporter takes: which scores (`backend_rows`) and how they are retried."""

    predictor: str  # the headline, fixed: a name means one predictor on every run
    weights: str | None  # default: the accumulator's first schedule
    censoring: str | Sequence[str]  # ("simple", "exact") sends both, the exact one once q_Z is known
    retry_initial: float  # backoff doubling up to retry_max while the backend is down
    retry_max: float
    max_pending: int
    not_stored_timeout: float  # how long a record waits for the backend to store its trace


@dataclass(order=True)
class _Waiting:
    """A record whose trace the backend has not stored yet, due for another try at `due`."""

    due: float
    seq: int
    first_failed: float = field(compare=False)
    delay: float = field(compare=False)
    item: Any = field(compare=False)


class RetryingDelivery:
    """A backend exporter: `record(score, link, row)` is its record of a row, `_send(batch)` writes them and returns
    why records refused for good were refused (counted in `gave_up`, not retried). While the backend
    is down a batch is retried with backoff; a record whose trace the backend has not stored yet
    (`_not_stored_yet`: spans travel by another exporter) waits on its own, up to `not_stored_timeout`.
    Only past `max_pending` waiting records are the oldest dropped (counted)."""

    backend = "backend"  # in log lines and the worker thread's name

    def __init__(
        self,
        links: TraceLinks | None = None,
        *,
        predictor: str = HEADLINE_PREDICTOR,
        weights: str | None = None,
        censoring: str | Sequence[str] = SIMPLE,
        batch_size: int = 200,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        max_pending: int = 100_000,
        not_stored_timeout: float = 120.0,
    ):
        self.links = links if links is not None else TraceLinks()
        self.predictor, self.weights, self.censoring = predictor, weights, censoring
        self.sent_scores = SentScores()
        self.batch_size, self.max_pending, self.not_stored_timeout = batch_size, max_pending, not_stored_timeout
        self.retry_initial, self.retry_max = retry_initial, retry_max
        self._queue: deque[Any] = deque()
        self._waiting: list[_Waiting] = []  # heap by due time
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.sent = self.failed_attempts = self.dropped = self.gave_up = self.outages = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"tps-tracer-{self.backend.lower()}", daemon=True)
        self._thread.start()

    def rows(self, score: TrajectoryScore) -> list[Row]:
        return backend_rows(score, self.predictor, self.weights, self.censoring)

    def record(self, score: TrajectoryScore, link: Any, row: Row) -> Any:
        raise NotImplementedError

    def _send(self, batch: Sequence[Any]) -> list[str] | None:
        raise NotImplementedError

    def _not_stored_yet(self, exc: Exception) -> bool:
        return False

    def __call__(self, score: TrajectoryScore) -> None:
        self.links.for_metadata(score.trajectory_id, score.metadata, lambda link: self._enqueue(score, link))

    def signature(self, row: Row) -> Hashable:
        """A later notification re-sends a row only when this changed (value or label)."""
        return row[1], row[3].get("label")

    def new_records(self, score: TrajectoryScore, link: Any) -> list[Any]:
        tid = score.trajectory_id
        new = [row for row in self.rows(score) if self.sent_scores.is_new(tid, row[0], self.signature(row))]
        return [self.record(score, link, row) for row in new]

    def _enqueue(self, score: TrajectoryScore, link: Any) -> None:
        records = self.new_records(score, link)
        if not records:
            return
        with self._cond:
            self._queue.extend(records)
            while len(self._queue) > self.max_pending:
                self._queue.popleft()
                self.dropped += 1
            self._cond.notify_all()

    def _next_batch(self) -> tuple[list[Any], _Waiting | None] | None:
        """Block until something is due; None when closed and nothing is due."""
        with self._cond:
            while True:
                now = time.monotonic()
                if self._waiting and self._waiting[0].due <= now:
                    waiting = heapq.heappop(self._waiting)
                    self._in_flight = 1
                    return [waiting.item], waiting
                if self._queue:
                    n = min(self.batch_size, len(self._queue))
                    batch = [self._queue.popleft() for _ in range(n)]
                    self._in_flight = n
                    return batch, None
                if self._closed:
                    return None
                self._cond.wait(timeout=self._waiting[0].due - now if self._waiting else None)

    def _run(self) -> None:
        delay = self.retry_initial
        while (taken := self._next_batch()) is not None:
            batch, waiting = taken
            try:
                refused = self._send(batch) or []
            except Exception as exc:
                if len(batch) == 1 and self._not_stored_yet(exc):
                    self._wait_for_trace(batch[0], waiting, exc)
                    continue
                if not self._outage(batch, waiting, exc, first=delay == self.retry_initial):
                    return  # closing: what is left stays counted as pending
                time.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            if refused:  # logged before flush() can return
                logger.warning("tps-tracer: %s refused %d records: %s", self.backend, len(refused), "; ".join(refused))
            with self._cond:
                self.sent += len(batch) - len(refused)
                self.gave_up += len(refused)
                self.last_error = "; ".join(refused) if refused else self.last_error
                self._in_flight = 0
                self._cond.notify_all()
            if delay != self.retry_initial:
                logger.warning(
                    "tps-tracer: %s delivered again after %d failed attempts", self.backend, self.failed_attempts
                )
            delay = self.retry_initial

    def _outage(self, batch: list[Any], waiting: _Waiting | None, exc: Exception, *, first: bool) -> bool:
        """Keep a failed batch for the next try; False when closing."""
        with self._cond:
            if waiting is not None:
                heapq.heappush(self._waiting, waiting)  # still due: tried first when the backend is back
            else:
                self._queue.extendleft(reversed(batch))  # back at the front, in order
            self._in_flight = 0
            self.failed_attempts += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            if first:
                self.outages += 1
            pending = len(self._queue) + len(self._waiting)
            closed = self._closed
        if first:
            logger.warning(
                "tps-tracer: %s writes failed (%s); %d pending, retrying with backoff",
                self.backend,
                self.last_error,
                pending,
            )
        return not closed

    def _wait_for_trace(self, item: Any, waiting: _Waiting | None, exc: Exception) -> None:
        now = time.monotonic()
        if waiting is None:
            waiting = _Waiting(0.0, 0, now, self.retry_initial / 2, item)
        with self._cond:
            self._in_flight = 0
            give_up = now - waiting.first_failed >= self.not_stored_timeout
            if give_up:
                self.gave_up += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._cond.notify_all()
            else:
                waiting.delay = min(waiting.delay * 2, self.retry_max)
                waiting.due, waiting.seq = now + waiting.delay, next(self._seq)
                heapq.heappush(self._waiting, waiting)
        if give_up and self.gave_up & (self.gave_up - 1) == 0:  # the 1st, 2nd, 4th, 8th, ...: no log flood
            logger.warning(
                "tps-tracer: %s never stored the trace of a score after %.0f s; %d given up so far (%s)",
                self.backend,
                self.not_stored_timeout,
                self.gave_up,
                self.last_error,
            )

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "sent": self.sent,
                "pending": len(self._queue) + len(self._waiting) + self._in_flight,
                "waiting_for_trace": len(self._waiting),
                "failed_attempts": self.failed_attempts,
                "outages": self.outages,
                "dropped": self.dropped,
                "gave_up": self.gave_up,
                "last_error": self.last_error,
                "waiting_for_link": self.links.n_waiting,
                "link_wait_expired": self.links.expired,  # given up waiting (shared by the links' listeners)
            }

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued record is delivered (or given up); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._waiting or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(timeout=0.05 if left is None else min(0.05, left))
        return True

    def close(self, timeout: float | None = 10.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)


class PhoenixAnnotations(RetryingDelivery):
    backend = "Phoenix"

    def __init__(
        self,
        endpoint: str = "http://127.0.0.1:6006",
        links: TraceLinks | None = None,
        *,
        client: Any = None,
        **options: Unpack[Options],
    ):
        if client is None:
            from phoenix.client import Client  # the optional `phoenix` extra

            client = Client(base_url=endpoint)
        self.client = client
        super().__init__(links, **options)

    def record(self, score: TrajectoryScore, link: SpanLink, row: Row) -> dict[str, Any]:
        name, value, comment, metadata = row
        if name == STOP_NAME:
            result = {"label": value, "explanation": score.role.value}
        else:  # the label goes in the result, not the metadata
            metadata = {k: v for k, v in metadata.items() if k != "label"}
            result = {"score": value, "label": score.label, "explanation": comment}
        return {
            "name": name,
            "annotator_kind": "CODE",
            "span_id": link.span_hex,
            "result": result,
            "metadata": metadata,
        }

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        # sync=False: Phoenix queues an annotation whose span it has not stored yet.
        self.client.spans.log_span_annotations(span_annotations=list(batch), sync=False)


def mlflow_trace_id(link: SpanLink) -> str:
    """The id MLflow gives a trace it ingested over OTLP."""
    return f"tr-{link.trace_hex}"


class MlflowAssessments(RetryingDelivery):
    """The MLflow client retries each request itself first (MLFLOW_HTTP_REQUEST_MAX_RETRIES, default
    7: minutes); lower it and MLFLOW_HTTP_REQUEST_TIMEOUT for `status()` to show an outage promptly."""

    backend = "MLflow"

    def __init__(
        self,
        tracking_uri: str | None = None,
        links: TraceLinks | None = None,
        *,
        client: Any = None,
        **options: Unpack[Options],
    ):
        """`tracking_uri` None: the one MLflow is configured with (MLFLOW_TRACKING_URI, mlflow.set_tracking_uri)."""
        if client is None:
            # TracingClient takes its own tracking URI: no change to the process-wide MLflow setting.
            from mlflow.tracing.client import TracingClient  # the optional `mlflow` extra

            client = TracingClient(tracking_uri)
        self.client = client
        # One assessment per request (MLflow has no batch write): a failure never re-sends a written one.
        super().__init__(links, batch_size=1, **options)

    def record(self, score: TrajectoryScore, link: SpanLink, row: Row) -> dict[str, Any]:
        name, value, comment, metadata = row
        return {
            "trace_id": mlflow_trace_id(link),
            "span_id": link.span_hex,
            "name": name,
            "value": value,
            "rationale": comment,
            # MLflow stores metadata as strings; absent facts are left out, not "None".
            "metadata": {k: str(v) for k, v in metadata.items() if v is not None},
        }

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        for item in batch:
            self.client.log_assessment(item["trace_id"], _feedback(item))

    def _not_stored_yet(self, exc: Exception) -> bool:
        return getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"


def _feedback(item: dict[str, Any]) -> Any:
    from mlflow.entities import AssessmentSource, AssessmentSourceType, Feedback

    return Feedback(
        name=item["name"],
        value=item["value"],
        source=AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=SOURCE),
        rationale=item["rationale"],
        metadata=item["metadata"],
        span_id=item["span_id"],
    )


class MlflowUpsert(MlflowAssessments):
    """For `tps-tracer export`: `log_assessment` always adds one, so each trace's own assessments
    (source tps-tracer) are read once and an equal one is left alone (`unchanged`), another value
    updated in place: exporting again changes nothing."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._existing: dict[str, dict[tuple[str, str | None], Any]] = {}  # trace id -> (name, span) -> assessment
        self.unchanged = self.updated = 0
        super().__init__(*args, **kwargs)

    def _ours(self, trace_id: str) -> dict[tuple[str, str | None], Any]:
        if trace_id not in self._existing:
            info = self.client.get_trace_info(trace_id)
            self._existing[trace_id] = {
                (a.name, a.span_id): a for a in info.assessments or [] if getattr(a.source, "source_id", None) == SOURCE
            }
        return self._existing[trace_id]

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        for item in batch:
            ours = self._ours(item["trace_id"])
            key = (item["name"], item["span_id"])
            old = ours.get(key)
            if old is not None and old.value == item["value"] and dict(old.metadata or {}) == item["metadata"]:
                self.unchanged += 1
                continue
            if old is None:
                ours[key] = self.client.log_assessment(item["trace_id"], _feedback(item))
            else:
                ours[key] = self.client.update_assessment(item["trace_id"], old.assessment_id, _feedback(item))
                self.updated += 1

    def status(self) -> dict[str, Any]:
        return {**super().status(), "unchanged": self.unchanged, "updated": self.updated}


def record_id(run_id: str, name: str) -> str:
    """The same id on every export: a second write updates the record rather than adding one."""
    return str(uuid.uuid5(_IDS, f"{run_id}/{name}"))


def langfuse_trace_id(run_id: object) -> str:
    """The Langfuse trace id seeded from a LangChain run id (give it to Langfuse's CallbackHandler)."""
    from langfuse import Langfuse  # the optional `langfuse` extra

    return Langfuse.create_trace_id(seed=str(run_id))


class _ByRunId(RetryingDelivery):
    """Linked by the record's LangChain run id: neither platform takes scores over OTLP."""

    without_run_id = 0  # runs that had none (an instance's own count from its first)

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

    def signature(self, row: Row) -> Hashable:
        return row[1], row[2]  # value, comment

    def status(self) -> dict[str, Any]:
        return {**super().status(), "without_run_id": self.without_run_id}


class LangSmithFeedback(_ByRunId):
    backend = "LangSmith"

    def __init__(self, client: Any = None, *, project_name: str | None = None, **options: Unpack[Options]):
        """`project_name`: the tracer's project (default LANGSMITH_PROJECT, else "default")."""
        from langsmith import Client, utils  # the optional `langsmith` extra

        self.client = client if client is not None else Client()
        self.project_name = project_name or utils.get_tracer_project()
        self._session_id: Any = None
        self._errors = utils
        # One feedback per request (LangSmith has no batch write): a failure never re-sends a written one.
        super().__init__(batch_size=1, **options)

    def record(self, score: TrajectoryScore, link: str, row: Row) -> dict[str, Any]:
        name, value, comment, metadata = row
        return {
            "id": record_id(link, name),
            "run_id": link,
            "key": name,
            "score": value if isinstance(value, float) else None,  # the SDK rounds it to 4 decimals
            "value": value,  # exact
            "comment": comment,
            "extra": metadata,
        }

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


class LangfuseScores(_ByRunId):
    backend = "Langfuse"

    def __init__(self, client: Any = None, **options: Unpack[Options]):
        """`client`: a `langfuse.Langfuse`; default `get_client()` (LANGFUSE_* settings)."""
        if client is None:
            from langfuse import get_client  # the optional `langfuse` extra

            client = get_client()
        self.client = client
        super().__init__(batch_size=100, **options)

    def record(self, score: TrajectoryScore, link: str, row: Row) -> dict[str, Any]:
        name, value, comment, metadata = row
        return {
            "id": record_id(link, name),
            "traceId": langfuse_trace_id(link),
            "name": name,
            "value": value,
            "dataType": "NUMERIC" if isinstance(value, float) else "CATEGORICAL",
            "comment": comment,
            "metadata": metadata,
        }

    def _send(self, batch: Sequence[dict[str, Any]]) -> list[str]:
        # The SDK's create_score drops a failed write with a log line; the API call raises, so a
        # failed batch is retried. 207: some scores refused, not to be re-sent.
        result = self.client.api.scores.create(request=list(batch), request_options={"max_retries": 0})
        rejected = int(getattr(result, "rejected", 0))
        return ([e.message for e in result.errors] + ["refused"] * rejected)[:rejected] if rejected else []
