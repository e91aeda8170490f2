"""What every adapter (LangChain handler, span processor) offers the user on top of its tracker."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from tps_tracer.health import HealthLedger
from tps_tracer.tracking.tracker import TrajectoryTracker
from tps_tracer.tracking.worker import CaptureWorker

_Method = TypeVar("_Method", bound=Callable[..., None])


def never_raises(where: str) -> Callable[[_Method], _Method]:
    """The one guard of every callback an agent framework calls on an adapter (the handler's
    on_*, the span processor's on_start / on_end and their worker halves): whatever goes wrong
    inside is counted as an error under `where` in the adapter's health ledger and the callback
    returns None, so capture can never break, slow or change the agent it observes."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def guarded(self: TrackedAdapter, *args: Any, **kwargs: Any) -> None:
            try:
                method(self, *args, **kwargs)
            except Exception as exc:
                self._fail(where, exc)

        return guarded  # type: ignore[return-value]

    return wrap


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
