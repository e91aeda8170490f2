"""What every adapter (LangChain handler, span processor) offers the user on top of its tracker."""

from __future__ import annotations

from typing import Any

from tps_tracer.health import HealthLedger
from tps_tracer.tracking.tracker import TrajectoryTracker
from tps_tracer.tracking.worker import CaptureWorker


class TrackedAdapter:
    tracker: TrajectoryTracker

    @property
    def health(self) -> HealthLedger:
        """Counts of what was rejected, dropped, abandoned, malformed or failed (shared with the accumulator)."""
        return self.tracker.health

    @property
    def errors(self) -> dict[str, int]:
        """Internal errors caught on the agent's path or the worker, by where (empty when all is well)."""
        return self.health.category("error")

    @property
    def feeder(self) -> CaptureWorker:
        """The capture worker (extraction and accumulator updates off the agent's path)."""
        return self.tracker.worker

    def record_outcome(self, trajectory_id: str, success: Any = None, q_z: float | None = None) -> None:
        """The task's outcome (True/False, 1/0, "true"/"false") or a censored run's q_Z, any time after the run."""
        self.tracker.record_outcome(trajectory_id, success, q_z)

    def _fail(self, where: str, exc: BaseException) -> None:
        self.health.count("error", where, f"{where} ({type(exc).__name__}: {exc}); the agent is unaffected")
