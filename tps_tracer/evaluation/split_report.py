"""`report --by KEY`: one report per value of a record metadata key (agent, model, dataset, ...).

The adapters copy the scalars a user attaches to a run (`config["metadata"]`) into each record's
`metadata` (tracking/trajectory.py: `user_metadata`), so a sink shared by several agents or
models can be scored per agent or model. Records without the key form the group `(missing)`.
Each group is scored on its own (its own bootstrap over its own trajectories), exactly as
`report` on a file holding only that group's records would.

Records are read whole (the columnar readers do not keep metadata): memory grows with the file,
unlike plain `report`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tps_tracer.errors import InputError
from tps_tracer.evaluation.report import ReportOptions, build_report
from tps_tracer.records.arrays import to_arrays
from tps_tracer.records.reading import exact_records
from tps_tracer.records.schema import TrajectoryRecord

MISSING = "(missing)"
MAX_GROUPS = 100  # more distinct values is almost certainly a per-run key (an id), not a slice


class TooManyGroups(InputError):
    pass


def group_label(value: Any) -> str:
    """The group a metadata value falls in: strings as they are, other values as JSON."""
    if value is None:
        return MISSING
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def split_records(records: list[TrajectoryRecord], key: str) -> dict[str, list[TrajectoryRecord]]:
    """The records grouped by `metadata[key]`, groups in the order their value first occurs."""
    groups: dict[str, list[TrajectoryRecord]] = {}
    for rec in records:
        groups.setdefault(group_label(rec.metadata.get(key)), []).append(rec)
        if len(groups) > MAX_GROUPS:
            raise TooManyGroups(
                f"metadata key {key!r} has more than {MAX_GROUPS} distinct values: "
                "split by a key that names a group (agent, model), not a run"
            )
    return groups


def reports_by(path: str | os.PathLike[str], key: str, options: ReportOptions | None = None) -> dict[str, Any]:
    """{"by": key, "groups": [{"value", "n", "report"} or {"value", "n", "error"}], "input"?}."""
    opts = options or ReportOptions()
    # The exact whole-input read of a file, Parquet file or directory (resolution lines across
    # shards, repeats and empty shards counted: records/reading.py), with what it set aside.
    read = exact_records(path)
    set_aside, records = read.set_aside, read
    groups = []
    for value, recs in split_records(records, key).items():
        try:
            groups.append({"value": value, "n": len(recs), "report": build_report(to_arrays(recs), opts)})
        except InputError as exc:  # e.g. no forecasts in this group: the other groups are still scored
            groups.append({"value": value, "n": len(recs), "error": str(exc)})
    out: dict[str, Any] = {"by": key, "groups": groups}
    if set_aside:
        out["input"] = {"set_aside": set_aside.as_dict()}
    return out
