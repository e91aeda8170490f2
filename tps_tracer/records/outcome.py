"""What counts as a task outcome, decided once: `as_outcome`.

Every way an outcome enters tps-tracer goes through this function: the `outcome` field of
a JSON Lines record, `Accumulator.resolve`, `record_outcome` on the adapters, a grader's
verdict, and a label set up front (`tps_outcome` run metadata, `tps.outcome` span
attribute). One table, so `"false"` can never be a success on one path and a failure on
another:

| value                                             | outcome |
|---------------------------------------------------|---------|
| None                                              | None (not known yet)  |
| True / False                                      | 1 / 0   |
| 1 / 0 (int, float or numpy number equal to it)    | 1 / 0   |
| "true" "1" "yes" "success" (any case, spaces around)  | 1 (where strings are allowed) |
| "false" "0" "no" "failure"                            | 0 (where strings are allowed) |
| anything else (2, 0.5, NaN, "maybe", "", a list)  | InvalidOutcome (a ValueError) |

JSON Lines records allow no strings (`allow_strings=False`): a file says 0, 1, true or
false; a number equal to 0 or 1 (`1.0`, as numpy- or JavaScript-based writers store every number)
is the same outcome, and the error message says so (it once listed only `0, 1, true, false`).
Run metadata and span attributes are often strings, so labels allow them.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

from tps_tracer.errors import InputError

_TRUE = frozenset({"true", "1", "yes", "success"})
_FALSE = frozenset({"false", "0", "no", "failure"})


class InvalidOutcome(InputError):
    """A value that is not a binary outcome (see the module table)."""


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
