"""Scores as OpenTelemetry signals under the agent's root span (a span cannot change after it ends),
in the GenAI evaluation conventions: spans, log records, metrics (docs/otel.md). The span processor
skips these spans (scope name).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from opentelemetry._logs import LoggerProvider, LogRecord, SeverityNumber
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import TracerProvider

from tps_tracer import __version__
from tps_tracer.constants import EXACT, HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.online.trajectory_score import ScoreValue, TrajectoryScore
from tps_tracer.otel.backends import MAX_REMEMBERED, SentScores, explanation, score_facts
from tps_tracer.otel.span_processor import SCOPE_NAME
from tps_tracer.otel.trace_links import SpanLink, TraceLinks
from tps_tracer.records.stop_reasons import Role

EVALUATION_SPAN = "tps.evaluation"
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "tps"


class DerivedSpanIds(IdGenerator):
    """Spans started on this thread inside `derived(*parts)` get 64 bits of SHA-256 of the parts as
    id, so the same score sent twice is one span in a store keyed by span id (Phoenix); every other
    span keeps the wrapped generator's id."""

    def __init__(self, fallback: IdGenerator):
        self.fallback = fallback
        self._local = threading.local()

    @contextlib.contextmanager
    def derived(self, *parts: object) -> Iterator[None]:
        self._local.parts = parts
        try:
            yield
        finally:
            self._local.parts = None

    def generate_span_id(self) -> int:
        parts = getattr(self._local, "parts", None)
        if parts is None:
            return self.fallback.generate_span_id()
        return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") or 1  # 0 is invalid

    def generate_trace_id(self) -> int:
        return self.fallback.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return self.fallback.is_trace_id_random()


def value_attributes(v: ScoreValue) -> dict[str, Any]:
    attrs = {f"tps.{k}": x for k, x in dataclasses.asdict(v).items() if k != "value"}
    return {"gen_ai.evaluation.name": EVALUATION_NAME, "gen_ai.evaluation.score.value": v.value, **attrs}


def trajectory_attributes(score: TrajectoryScore) -> dict[str, Any]:
    attrs = {f"tps.{k}": x for k, x in score_facts(score).items() if x is not None}  # outcome, q_z when known
    attrs["gen_ai.evaluation.name"] = EVALUATION_NAME
    attrs["gen_ai.evaluation.score.label"] = score.label
    return attrs


class EvaluationSpanExporter:
    """A `tps.evaluation` child span per run: the headline score as gen_ai.evaluation.score.value (absent
    when the run cannot use it), every score as a `gen_ai.evaluation.result` event on it; label
    (success | failure | censored | excluded), explanation and `tps.*` facts."""

    def __init__(
        self,
        tracer_provider: TracerProvider,
        links: TraceLinks,
        *,
        predictor: str = HEADLINE_PREDICTOR,
        rule: str | None = None,
        weights: str | None = None,
        censoring: str = SIMPLE,
    ):
        """The headline is `predictor` (fixed, so the span's value means one predictor on every run)
        / rule / weights (default: the accumulator's first, the same on every run) under
        `censoring`. A later notification emits another span only when headline value or label changed."""
        tracer: Any = tracer_provider.get_tracer(SCOPE_NAME, __version__)
        self.tracer = tracer
        # The SDK tracer's id generator wrapped once; None (random ids) for a tracer without one (API-only).
        ids = getattr(tracer, "id_generator", None)
        if isinstance(ids, IdGenerator) and not isinstance(ids, DerivedSpanIds):
            ids = tracer.id_generator = DerivedSpanIds(ids)
        self.ids = ids if isinstance(ids, DerivedSpanIds) else None
        self.links = links
        self.predictor, self.rule, self.weights, self.censoring = predictor, rule, weights, censoring
        self.sent_scores = SentScores()
        self.counts: Counter[str] = Counter()

    def __call__(self, score: TrajectoryScore) -> None:
        self.links.for_metadata(score.trajectory_id, score.metadata, lambda link: self.emit(score, link))

    def emit(self, score: TrajectoryScore, link: SpanLink) -> None:
        head = score.primary(self.predictor, self.rule, self.weights, self.censoring)
        signature = (score.label, None if head is None else head.value)
        if not self.sent_scores.is_new(score.trajectory_id, EVALUATION_SPAN, signature):
            self.counts["unchanged"] += 1  # e.g. an outcome recorded for an excluded run
            return
        attrs = trajectory_attributes(score)
        attrs["gen_ai.evaluation.explanation"] = explanation(score, head, self.predictor)
        attrs["tps.predictor"] = self.predictor  # the headline, also when this run cannot use it
        attrs["tps.steps_without_forecast"] = score.gaps.get(self.predictor, score.n_steps)
        if head is not None:
            attrs.update(value_attributes(head))
        # The span id follows what the span says (DerivedSpanIds), so the same score sent live and by
        # `tps-tracer export --to otlp` is one span in a store keyed by span id. The headline is
        # resolved: a live exporter's rule=None and `export`'s explicit first rule agree.
        headline = None if head is None else (head.rule, head.weights, head.value)
        facts = (score.trajectory_id, score.stop_reason.value, score.label, headline)
        ids = self.ids
        derived = ids.derived(link.trace_hex, EVALUATION_SPAN, self.predictor, self.censoring, *facts) if ids else None
        with derived or contextlib.nullcontext():
            span = self.tracer.start_span(EVALUATION_SPAN, context=link.context(), attributes=attrs)
        for v in score.values():
            span.add_event(EVALUATION_EVENT, {**value_attributes(v), "gen_ai.evaluation.score.label": score.label})
        span.end()
        self.counts["spans"] += 1


class EvaluationEventExporter:
    """One `gen_ai.evaluation.result` log record per score (span events are deprecated, OTEP 4430;
    needs opentelemetry-sdk 1.35+); an excluded run gets one with its stop reason and no score."""

    def __init__(self, logger_provider: LoggerProvider, links: TraceLinks):
        """logger_provider: an SDK LoggerProvider with your exporters; links: `processor.links`."""
        self.logger = logger_provider.get_logger(SCOPE_NAME, __version__)
        self.links = links
        self.sent_scores = SentScores()
        self.counts: Counter[str] = Counter()

    def __call__(self, score: TrajectoryScore) -> None:
        self.links.for_metadata(score.trajectory_id, score.metadata, lambda link: self.emit(score, link))

    def emit(self, score: TrajectoryScore, link: SpanLink) -> None:
        common = trajectory_attributes(score)
        records: list[dict[str, Any]] = []
        values = list(score.values())
        if not values and self.sent_scores.is_new(score.trajectory_id, "excluded", score.stop_reason.value):
            records.append({**common, "gen_ai.evaluation.explanation": explanation(score, None)})  # no score: why
        for v in values:
            key = (v.predictor, v.rule, v.weights, v.censoring)
            if self.sent_scores.is_new(score.trajectory_id, key, (v.value, score.label)):
                explained = {"gen_ai.evaluation.explanation": explanation(score, v)}
                gaps = {"tps.steps_without_forecast": score.gaps.get(v.predictor, score.n_steps)}
                records.append({**common, **value_attributes(v), **explained, **gaps})
        for attributes in records:
            record = LogRecord(
                timestamp=time.time_ns(),
                context=link.context(),  # the record's trace id and span id: the agent root's
                event_name=EVALUATION_EVENT,
                severity_number=SeverityNumber.INFO,
                severity_text="INFO",
                attributes=attributes,
            )
            self.logger.emit(record)
            self.counts["records"] += 1


Key = tuple[str, str, str, str]  # predictor, rule, weights, censoring


class TPSMetrics:
    """TPS is a reward (<= 0 for the log rule) and histograms reject negative values, so the means are
    gauges over exact running sums: the snapshot's means, without its bootstrap CI."""

    def __init__(self, meter_provider: MeterProvider):
        meter = meter_provider.get_meter(SCOPE_NAME, __version__)
        self._lock = threading.Lock()
        self._sums: dict[Key, list[float]] = {}  # key -> [sum, n]
        # "exact" keys holding a censored run with its q_Z: before one, the mean would be the complete-only one.
        self._exact_with_q_z: set[Key] = set()
        # Modes counted per trajectory (bounded): a late q_Z re-sends the run with "exact" added.
        self._seen: OrderedDict[str, frozenset[str]] = OrderedDict()
        meter.create_observable_gauge(
            "tps.score.mean",
            callbacks=[functools.partial(self._observe, 0)],
            description="Running mean of per-trajectory TPS (reward orientation: higher is better)",
        )
        meter.create_observable_counter(
            "tps.scored", callbacks=[functools.partial(self._observe, 1)], description="Trajectories in tps.score.mean"
        )
        self._trajectories = meter.create_counter(
            "tps.trajectories", description="Finished trajectories by stop reason and scoring role"
        )
        self._steps = meter.create_counter(
            "tps.steps", description="Steps of finished trajectories by predictor, with a stated forecast or without"
        )

    def __call__(self, score: TrajectoryScore) -> None:
        with self._lock:
            before = self._seen.get(score.trajectory_id)
            values = [v for v in score.values() if before is None or v.censoring not in before]
            for v in values:
                key = (v.predictor, v.rule, v.weights, v.censoring)
                acc = self._sums.setdefault(key, [0.0, 0.0])
                acc[0] += v.value
                acc[1] += 1
                if v.censoring == EXACT and score.role is Role.CENSORED:
                    self._exact_with_q_z.add(key)
            self._seen[score.trajectory_id] = (before or frozenset()) | {v.censoring for v in values}
            self._seen.move_to_end(score.trajectory_id)
            while len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)
        if before is None:
            self._trajectories.add(1, {"stop_reason": score.stop_reason.value, "role": score.role.value})
            for predictor, gaps in score.gaps.items():  # the gaps the means include, scored by the policy
                self._steps.add(score.n_steps - gaps, {"predictor": predictor, "forecast": "stated"})
                self._steps.add(gaps, {"predictor": predictor, "forecast": "missing"})

    def means(self) -> dict[Key, tuple[float, int]]:
        with self._lock:
            return {
                k: (s / n, int(n))
                for k, (s, n) in self._sums.items()
                if n and (k[3] != EXACT or k in self._exact_with_q_z)
            }

    def _observe(self, which: int, options: CallbackOptions) -> Iterable[Observation]:
        """The means (which=0) or their counts (1), labelled with their key."""
        labels = ("predictor", "rule", "weights", "censoring")
        return [Observation(v[which], dict(zip(labels, k, strict=True))) for k, v in self.means().items()]


class DeliveryCount(SpanExporter):
    """Counts what an OTLP endpoint took (`export --to otlp`): the batch processor's `force_flush`
    returns True also when the endpoint refused an export or it failed after its retries."""

    def __init__(self, inner: SpanExporter):
        self.inner = inner
        self.delivered = self.gave_up = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.delivered += len(spans)
        else:
            self.gave_up += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))
