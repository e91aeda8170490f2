"""tps-tracer: Trajectory Proper Scores for LLM agents.

Public entry points:

    tps_tracer.score(p, y, rule)            strictly proper per-step scores (log, brier, beta(a,b))
    tps_tracer.weights(schedule, T)         normalised step weights
    tps_tracer.read_trajectories(path)      the JSON Lines interchange format
    tps_tracer.evaluate(records, ...)       the report object (same as `tps-tracer report --json`)
    tps_tracer.Accumulator(...)             online TPS: observe / stop / resolve / snapshot / merge
    tps_tracer.SignalExtractor()            one LLM step (text, logprobs) -> the five forecasts
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tps_tracer.capture import SignalExtractor, VerbalConfidenceExtractor
from tps_tracer.evaluation.report import ReportOptions, build_report
from tps_tracer.online import Accumulator, AccumulatorError, JsonlSink
from tps_tracer.records import (
    CensoringPolicy,
    Role,
    StepRecord,
    StopReason,
    TrajectoryFileError,
    TrajectoryRecord,
    read_trajectories,
    to_arrays,
    write_trajectories,
)
from tps_tracer.scoring import custom_schedule, get_rule, get_schedule, score, weights

__version__ = "0.1.0"


def evaluate(records: Sequence[TrajectoryRecord], options: ReportOptions | None = None) -> dict[str, Any]:
    """Evaluate trajectory records; returns the report dict documented in the README."""
    return build_report(to_arrays(records), options)


__all__ = [
    "Accumulator",
    "AccumulatorError",
    "CensoringPolicy",
    "JsonlSink",
    "ReportOptions",
    "Role",
    "SignalExtractor",
    "StepRecord",
    "StopReason",
    "TrajectoryFileError",
    "TrajectoryRecord",
    "VerbalConfidenceExtractor",
    "__version__",
    "custom_schedule",
    "evaluate",
    "get_rule",
    "get_schedule",
    "read_trajectories",
    "score",
    "weights",
    "write_trajectories",
]
