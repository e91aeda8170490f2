"""Scores next to the trace: a `tps.evaluation` span under each trajectory's agent root span.

Spans cannot be changed after they end, and a run's score is known only at its end or
later (a grader, user feedback), so the score travels as a new span in the same trace,
child of the agent root, in the shape of the OpenTelemetry GenAI evaluation conventions:

    span  tps.evaluation          (parent: the agent root; scope "tps_tracer")
      gen_ai.evaluation.name          "tps"
      gen_ai.evaluation.score.value   the headline TPS (the exporter's fixed predictor, default "verbal",
                                      rule / schedule / censoring); absent when the run cannot use it
      gen_ai.evaluation.score.label   success | failure | censored | excluded
      gen_ai.evaluation.explanation   what the number is, in words
      tps.*                           trajectory id, predictor, rule, weights, censoring, stop reason,
                                      role, horizon, steps, outcome, q_z, branch pair s1 / s0
      event gen_ai.evaluation.result  one per predictor x rule x schedule x censoring mode

The span's id is derived from its trace, the exporter's headline predictor / censoring and
what the span reports (stop reason, label, headline score; span_ids.py): the same score sent
live and again by `tps-tracer export --to otlp` is the same span, which a store keyed by span
id (Phoenix) keeps once.

An excluded run (informative stop) gets the span with its stop reason and no score, so the
trace says why it was not scored. Register with `accumulator.add_listener(...)`; the span
processor skips these spans (scope name), so they never become trajectories themselves.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from opentelemetry.trace import TracerProvider

from tps_tracer.constants import HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.online.trajectory_score import ScoreValue, TrajectoryScore
from tps_tracer.otel.score_names import SentScores
from tps_tracer.otel.span_ids import install
from tps_tracer.otel.span_processor import SCOPE_NAME
from tps_tracer.otel.trace_links import SpanLink, TraceLinks

EVALUATION_SPAN = "tps.evaluation"
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "tps"


def value_attributes(v: ScoreValue) -> dict[str, Any]:
    return {
        "gen_ai.evaluation.name": EVALUATION_NAME,
        "gen_ai.evaluation.score.value": v.value,
        "tps.predictor": v.predictor,
        "tps.rule": v.rule,
        "tps.weights": v.weights,
        "tps.censoring": v.censoring,
        "tps.s1": v.s1,
        "tps.s0": v.s0,
        "tps.eta": v.eta,
    }


def trajectory_attributes(score: TrajectoryScore) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "tps.trajectory_id": score.trajectory_id,
        "tps.stop_reason": score.stop_reason.value,
        "tps.role": score.role.value,
        "tps.horizon": score.horizon,
        "tps.n_steps": score.n_steps,
    }
    if score.outcome is not None:
        attrs["tps.outcome"] = score.outcome
    if score.q_z is not None:
        attrs["tps.q_z"] = score.q_z
    return attrs


def score_facts(score: TrajectoryScore) -> dict[str, Any]:
    """The trajectory's facts for a backend annotation's metadata (names without the `tps.` prefix)."""
    return {
        "trajectory_id": score.trajectory_id,
        "stop_reason": score.stop_reason.value,
        "role": score.role.value,
        "horizon": score.horizon,
        "n_steps": score.n_steps,
        "outcome": score.outcome,
        "q_z": score.q_z,
    }


def value_facts(v: ScoreValue) -> dict[str, Any]:
    """Which score a backend annotation carries, and the branch pair it was mixed from."""
    return {"predictor": v.predictor, "weights": v.weights, "censoring": v.censoring, "s1": v.s1, "s0": v.s0}


def explanation(score: TrajectoryScore, v: ScoreValue | None, headline: str | None = None) -> str:
    if v is None:
        if headline is not None and next(score.values(), None) is not None:
            return f"no score for predictor {headline} on this run; stop reason {score.stop_reason.value}"
        return f"not scored: stop reason {score.stop_reason.value} ({score.role.value})"
    return (
        f"TPS, {v.rule} rule, {v.weights} weights, {v.censoring} censoring, predictor {v.predictor}, "
        f"over {score.n_steps} of T={score.horizon} steps; stop reason {score.stop_reason.value}"
    )


class EvaluationSpanExporter:
    def __init__(
        self,
        tracer_provider: TracerProvider,
        links: TraceLinks,
        *,
        predictor: str = HEADLINE_PREDICTOR,
        rule: str | None = None,
        weights: str | None = None,
        censoring: str = SIMPLE,
        sent_scores: SentScores | None = None,
    ):
        """The headline score is `predictor` (fixed: the span's value means one predictor on every
        run) / rule / weights (default: the accumulator's first of each, the same on every run)
        under `censoring`; every other combination is an event on the span. One span per run: a
        later notification emits another only when the headline value or label changed."""
        from tps_tracer import __version__

        self.tracer = tracer_provider.get_tracer(SCOPE_NAME, __version__)
        self.ids = install(self.tracer)  # None (random ids) only for a provider that is not the SDK's
        self.links = links
        self.predictor, self.rule, self.weights, self.censoring = predictor, rule, weights, censoring
        self.sent_scores = sent_scores if sent_scores is not None else SentScores()
        self.counts: Counter[str] = Counter()

    def __call__(self, score: TrajectoryScore) -> None:
        self.links.for_metadata(score.trajectory_id, score.metadata, lambda link: self.emit(score, link))

    def emit(self, score: TrajectoryScore, link: SpanLink) -> None:
        context = link.context()
        head = score.primary(self.predictor, self.rule, self.weights, self.censoring)
        signature = (score.label, None if head is None else head.value)
        if not self.sent_scores.is_new(score.trajectory_id, EVALUATION_SPAN, signature):
            self.counts["unchanged"] += 1  # e.g. an outcome recorded for an excluded run
            return
        attrs = trajectory_attributes(score)
        attrs["gen_ai.evaluation.name"] = EVALUATION_NAME
        attrs["gen_ai.evaluation.score.label"] = score.label
        attrs["gen_ai.evaluation.explanation"] = explanation(score, head, self.predictor)
        attrs["tps.predictor"] = self.predictor  # the headline, also when this run cannot use it
        if head is not None:
            attrs.update(value_attributes(head))
        with self._derived_id(score, link, head):
            span = self.tracer.start_span(EVALUATION_SPAN, context=context, attributes=attrs)
        for v in score.values():
            span.add_event(EVALUATION_EVENT, {**value_attributes(v), "gen_ai.evaluation.score.label": score.label})
        span.end()
        self.counts["spans"] += 1

    def _derived_id(
        self, score: TrajectoryScore, link: SpanLink, head: ScoreValue | None
    ) -> contextlib.AbstractContextManager[None]:
        """The id follows what the span says (the signature emit() deduplicates on), with the
        headline resolved: a live exporter's rule=None and `export`'s explicit first rule agree."""
        if self.ids is None:
            return contextlib.nullcontext()
        headline = None if head is None else (head.rule, head.weights, head.value)
        facts = (score.trajectory_id, score.stop_reason.value, score.label, headline)
        return self.ids.derived(link.trace_hex, EVALUATION_SPAN, self.predictor, self.censoring, *facts)
