"""A trajectory record's rules that need no pydantic (the capture path calls them per run): the object the
online writers write (`record_object`), what an id may be (`id_problem`) and what an outcome is (`as_outcome`:
None, bool, a number equal to 0/1, or, where allowed, "true"/"1"/"yes"/"success" and their opposites)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any

from tps_tracer.errors import InputError


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


_TRUE = frozenset({"true", "1", "yes", "success"})
_FALSE = frozenset({"false", "0", "no", "failure"})


class InvalidOutcome(InputError):
    """A value that is not a binary outcome (`as_outcome`)."""


def as_outcome(value: Any, *, allow_strings: bool = True) -> int | None:
    """The outcome a value stands for: 1, 0 or None; InvalidOutcome for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Real):
        v = float(value)
        if v == 1.0 or v == 0.0:
            return int(v)
    elif isinstance(value, str) and allow_strings:
        word = value.strip().lower()
        if word in _TRUE:
            return 1
        if word in _FALSE:
            return 0
    shown = repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    # The message states the whole rule: a number equal to 0 or 1 (1.0 from a writer that stores
    # every number as a float is the outcome 1, as JSON does not tell 1 from 1.0), a boolean, null.
    allowed = "0, 1 (or 0.0, 1.0), true, false" + (
        ', "true"/"false"/"yes"/"no"/"success"/"failure"' if allow_strings else ""
    )
    raise InvalidOutcome(f"an outcome must be one of {allowed} or null, got {shown[:80]}")
