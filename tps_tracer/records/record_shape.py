"""The one builder of a trajectory record's JSON object (the shape `records/schema.py` validates).

Used by the file writer (`records/jsonl.record_json`) and the accumulator's sink (online/accumulator.py),
so a field added to the record is added here once. Plain dicts, no pydantic: the accumulator calls
it once per finished run on the capture path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def record_object(
    trajectory_id: str,
    stop_reason: str,
    *,
    outcome: int | None,
    horizon: int | None,
    q_z: float | None,
    steps: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, Any] | None,
    outcome_pending: bool = False,
) -> dict[str, Any]:
    """A record as written to JSON Lines: steps numbered from 1, `outcome_pending` only when true."""
    obj: dict[str, Any] = {
        "trajectory_id": trajectory_id,
        "stop_reason": stop_reason,
        "outcome": outcome,
        "horizon": horizon,
        "q_z": q_z,
        "steps": [{"t": t, "forecasts": step} for t, step in enumerate(steps, start=1)],
        "metadata": dict(metadata or {}),
    }
    if outcome_pending:
        obj["outcome_pending"] = True
    return obj
