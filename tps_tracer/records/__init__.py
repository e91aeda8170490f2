"""The interchange schema (JSON Lines), stop reasons and their roles, and flat arrays."""

from tps_tracer.records.arrays import PredictorColumn, TrajectoryArrays, to_arrays
from tps_tracer.records.jsonl import (
    RecordError,
    TrajectoryFileError,
    parse_lines,
    read_trajectories,
    write_trajectories,
)
from tps_tracer.records.schema import StepRecord, TrajectoryRecord
from tps_tracer.records.stop_reasons import DEFAULT_ROLES, CensoringPolicy, Role, StopReason

__all__ = [
    "DEFAULT_ROLES",
    "CensoringPolicy",
    "PredictorColumn",
    "RecordError",
    "Role",
    "StepRecord",
    "StopReason",
    "TrajectoryArrays",
    "TrajectoryFileError",
    "TrajectoryRecord",
    "parse_lines",
    "read_trajectories",
    "to_arrays",
    "write_trajectories",
]
