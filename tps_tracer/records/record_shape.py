"""A trajectory record as the online writers write it: the one builder of its JSON object (the shape
`records/schema.py` validates), and the one rule for its id.

Used by the accumulator's sink (online/accumulator.py) and the capture path's checks, so a field
added to the record is added here once. Plain dicts, no pydantic: the accumulator calls it once per
finished run on the capture path.

An id is a non-empty string of valid Unicode text. A lone surrogate ("bad\\ud800") is a Python
str but not text: JSON writes it as the escape `"\\ud800"`, and the reader refuses the record
(pydantic: "unable to parse raw data as a unicode string"). The online side refuses such an id
with `id_problem`, counted, instead of writing a line that makes the whole file unreadable.
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


def id_problem(value: Any) -> str | None:
    """Why `value` cannot be a trajectory id, or None."""
    if not isinstance(value, str) or not value:
        return f"trajectory id must be a non-empty string, got {value!r}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"trajectory id {value!r} is not valid Unicode text (a lone surrogate): it could not be read back"
    return None
