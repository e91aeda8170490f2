"""The interchange schema, stop reasons and their roles, and flat arrays; names imported on first use, so a
light submodule (`records.errors`) loads no pydantic, numpy or scipy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tps_tracer.errors import lazy_names

if TYPE_CHECKING:
    from tps_tracer.records.arrays import PredictorColumn, TrajectoryArrays, to_arrays
    from tps_tracer.records.errors import RecordError, TrajectoryFileError
    from tps_tracer.records.jsonl import parse_lines, read_trajectories, write_trajectories
    from tps_tracer.records.schema import StepRecord, TrajectoryRecord
    from tps_tracer.records.stop_reasons import DEFAULT_ROLES, CensoringPolicy, Role, StopReason

_WHERE = {
    "arrays": ("PredictorColumn", "TrajectoryArrays", "to_arrays"),
    "errors": ("RecordError", "TrajectoryFileError"),
    "jsonl": ("parse_lines", "read_trajectories", "write_trajectories"),
    "schema": ("StepRecord", "TrajectoryRecord"),
    "stop_reasons": ("DEFAULT_ROLES", "CensoringPolicy", "Role", "StopReason"),
}

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


__getattr__, __dir__ = lazy_names(__name__, {n: m for m, names in _WHERE.items() for n in names})
