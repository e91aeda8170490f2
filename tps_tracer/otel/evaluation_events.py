"""Scores as OpenTelemetry log records: one `gen_ai.evaluation.result` event per score.

The Span Events API is deprecated (OTEP 4430): an event is a log record with an event name,
tied to a span through the trace id and span id it carries. This listener emits, for each
finished trajectory, one record per score (predictor x rule x schedule x censoring mode),
on the trajectory's agent root span:

    log record  event_name gen_ai.evaluation.result   (logger scope "tps_tracer")
      trace id / span id              the agent root span the score evaluates
      gen_ai.evaluation.name          "tps"
      gen_ai.evaluation.score.value   the TPS of this predictor / rule / schedule / censoring mode
      gen_ai.evaluation.score.label   success | failure | censored
      gen_ai.evaluation.explanation   what the number is, in words
      tps.*                           as on the `tps.evaluation` span (evaluation_spans.py)

An excluded run (informative stop) has no score; it gets one record with the label
`excluded`, its stop reason and no value, so the trace still says why it was not scored.
A trajectory notified again later (a q_Z arriving adds the exact mode) gets records only for
the scores that are new or changed: one record per run and score.

Use it next to, or instead of, `EvaluationSpanExporter`; export with any log record
processor (`BatchLogRecordProcessor(OTLPLogExporter(...))`). Needs opentelemetry-sdk 1.35+
(log records carrying an event name and a context).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from opentelemetry._logs import LoggerProvider, LogRecord, SeverityNumber
from opentelemetry.context import Context

from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel.evaluation_spans import (
    EVALUATION_EVENT,
    EVALUATION_NAME,
    explanation,
    trajectory_attributes,
    value_attributes,
)
from tps_tracer.otel.score_names import SentScores
from tps_tracer.otel.span_processor import SCOPE_NAME
from tps_tracer.otel.trace_links import SpanLink, TraceLinks


class EvaluationEventExporter:
    def __init__(self, logger_provider: LoggerProvider, links: TraceLinks):
        """logger_provider: where the records go (an SDK LoggerProvider with your exporters);
        links: the span processor's `processor.links` (trajectory id -> agent root span)."""
        from tps_tracer import __version__

        self.logger = logger_provider.get_logger(SCOPE_NAME, __version__)
        self.links = links
        self.sent_scores = SentScores()
        self.counts: Counter[str] = Counter()

    def __call__(self, score: TrajectoryScore) -> None:
        self.links.for_metadata(score.trajectory_id, score.metadata, lambda link: self.emit(score, link))

    def emit(self, score: TrajectoryScore, link: SpanLink) -> None:
        context = link.context()
        common = {
            **trajectory_attributes(score),
            "gen_ai.evaluation.name": EVALUATION_NAME,
            "gen_ai.evaluation.score.label": score.label,
        }
        values = list(score.values())
        if not values:  # excluded: no score, but the reason is on the record
            if self.sent_scores.is_new(score.trajectory_id, "excluded", score.stop_reason.value):
                self._emit(context, {**common, "gen_ai.evaluation.explanation": explanation(score, None)})
            return
        for v in values:
            # A later notification (q_Z adds the exact mode) re-sends only what is new or changed.
            if not self.sent_scores.is_new(
                score.trajectory_id, (v.predictor, v.rule, v.weights, v.censoring), (v.value, score.label)
            ):
                continue
            self._emit(
                context, {**common, **value_attributes(v), "gen_ai.evaluation.explanation": explanation(score, v)}
            )

    def _emit(self, context: Context, attributes: dict[str, Any]) -> None:
        record = LogRecord(
            timestamp=time.time_ns(),
            context=context,  # the record's trace id and span id: the agent root's
            event_name=EVALUATION_EVENT,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            attributes=attributes,
        )
        self.logger.emit(record)
        self.counts["records"] += 1
