"""Scores of a records file pushed to the traces they belong to, after the fact (`tps-tracer export`).

Each run is scored on the accumulator the live exporters listen to and handed to the same
exporters, so a number is the one the live path would have sent. Runs are accounted for, never
silently skipped (`ExportSummary`: exported, without_trace, pending_outcome).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tps_tracer.online.accumulator import Accumulator
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.scoring import ScoreRule


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
