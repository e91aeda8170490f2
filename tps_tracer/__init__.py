"""tps-tracer: Trajectory Proper Scores for LLM agents. Entry points: `score`, `weights`, `read_trajectories`,
`evaluate` (the report of `tps-tracer report --json`), `Accumulator` (online TPS), `SignalExtractor` (one LLM
step -> its five forecasts). Names are imported on first use (PEP 562): `import tps_tracer` loads no numpy."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tps_tracer.errors import lazy_names

if TYPE_CHECKING:
    from tps_tracer.capture import SignalExtractor, VerbalConfidenceExtractor
    from tps_tracer.evaluation.report_options import ReportOptions
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

_HOME = {
    name: module
    for module, names in {
        "capture": "SignalExtractor VerbalConfidenceExtractor",
        "evaluation.report_options": "ReportOptions",
        "online": "Accumulator AccumulatorError JsonlSink",
        "records": "CensoringPolicy Role StepRecord StopReason TrajectoryFileError TrajectoryRecord read_trajectories "
        "to_arrays write_trajectories",
        "scoring": "custom_schedule get_rule get_schedule score weights",
    }.items()
    for name in names.split()
}


def evaluate(records: Sequence[TrajectoryRecord], options: ReportOptions | None = None) -> dict[str, Any]:
    """The report dict (docs/report.md) of `TrajectoryRecord`s, each id once."""
    from tps_tracer.evaluation.report import build_report
    from tps_tracer.records.arrays import to_arrays
    from tps_tracer.records.schema import TrajectoryRecord

    hint = "use tps_tracer.read_trajectories(path) to read a file (or TrajectoryRecord.model_validate(d) per dict)"
    if isinstance(records, (str, bytes, os.PathLike)):
        raise TypeError(f"evaluate takes a list of TrajectoryRecord, got a path {records!r}: {hint}")
    records = list(records)
    bad = next((r for r in records if not isinstance(r, TrajectoryRecord)), None)
    if bad is not None:
        raise TypeError(f"evaluate takes a list of TrajectoryRecord, got a {type(bad).__name__}: {hint}")
    return build_report(to_arrays(records), options)


__getattr__, __dir__ = lazy_names(__name__, _HOME)


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
    "to_arrays",
    "weights",
    "write_trajectories",
]
