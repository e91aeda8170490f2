"""MLflow assessments written so that writing them again changes nothing (`tps-tracer export`).

MLflow's `log_assessment` always adds one more assessment, so re-exporting a records file
would stack duplicates on each trace. `MlflowUpsert` reads a trace's assessments once, then
for each of its own (source `tps-tracer`, same name and span): the same value and metadata
is left alone (counted `unchanged`), another value is updated in place, a missing one is
logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tps_tracer.otel.mlflow_assessments import SOURCE_ID, MlflowAssessments, feedback_of


class MlflowUpsert(MlflowAssessments):
    def __init__(self, *args: Any, **kwargs: Any):
        self._existing: dict[str, dict[tuple[str, str | None], Any]] = {}  # trace id -> (name, span) -> assessment
        self.unchanged = 0
        self.updated = 0
        super().__init__(*args, **kwargs)

    def _ours(self, trace_id: str) -> dict[tuple[str, str | None], Any]:
        if trace_id not in self._existing:
            info = self.client.get_trace_info(trace_id)
            self._existing[trace_id] = {
                (a.name, a.span_id): a
                for a in info.assessments or []
                if getattr(a.source, "source_id", None) == SOURCE_ID
            }
        return self._existing[trace_id]

    def _send(self, batch: Sequence[dict[str, Any]]) -> None:
        for item in batch:
            ours = self._ours(item["trace_id"])
            old = ours.get((item["name"], item["span_id"]))
            if old is not None and old.value == item["value"] and dict(old.metadata or {}) == item["metadata"]:
                self.unchanged += 1
                continue
            feedback = feedback_of(item)
            if old is None:
                ours[(item["name"], item["span_id"])] = self.client.log_assessment(item["trace_id"], feedback)
            else:
                ours[(item["name"], item["span_id"])] = self.client.update_assessment(
                    item["trace_id"], old.assessment_id, feedback
                )
                self.updated += 1

    def status(self) -> dict[str, Any]:
        return {**super().status(), "unchanged": self.unchanged, "updated": self.updated}
