"""The trajectory core shared by every adapter: model calls in, trajectories out.

- `trajectory.py`: one run's record (`TrajectoryState`: calls, the call held for a parser, the
  steps' forecasts, the stop, outcomes known early); steps vs repairs, stop precedence, the horizon rule.
- `tracker.py`: `TrajectoryTracker`, what adapters call (open, model_call, failed_call, finish).
- a run's lifetime (paused by an interrupt, idle, late events) is `tps_tracer/open_runs.py`'s
  `OpenRuns`, shared with the accumulator's live store.
- `worker.py`: `CaptureWorker`, the bounded background thread that extracts signals onto the
  record and hands the finished run to the accumulator (`Accumulator.finished`), off the agent's path.
- `keys.py`: the metadata keys and defaults users and adapters share.
"""

from tps_tracer.tracking.keys import (
    DEFAULT_REPAIR_BUDGET,
    HORIZON_KEY,
    OUTCOME_KEY,
    TASK_ID_KEY,
    TRAJECTORY_ID_KEY,
    VERBAL_SCALE_KEY,
)
from tps_tracer.tracking.tracker import TrajectoryTracker
from tps_tracer.tracking.trajectory import StopDecision, TrajectoryState, decide_stop
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
