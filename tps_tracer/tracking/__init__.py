"""The trajectory core shared by every adapter: one record per run and its rules (`tracker.py`),
the capture worker (`worker.py`), the metadata keys users and adapters share (`keys.py`)."""

from tps_tracer.tracking.keys import (
    DEFAULT_REPAIR_BUDGET,
    HORIZON_KEY,
    OUTCOME_KEY,
    TASK_ID_KEY,
    TRAJECTORY_ID_KEY,
    VERBAL_SCALE_KEY,
)
from tps_tracer.tracking.tracker import StopDecision, TrajectoryState, TrajectoryTracker, decide_stop
from tps_tracer.tracking.worker import CaptureWorker

__all__ = [
    "DEFAULT_REPAIR_BUDGET",
    "HORIZON_KEY",
    "OUTCOME_KEY",
    "TASK_ID_KEY",
    "TRAJECTORY_ID_KEY",
    "VERBAL_SCALE_KEY",
    "CaptureWorker",
    "StopDecision",
    "TrajectoryState",
    "TrajectoryTracker",
    "decide_stop",
]
