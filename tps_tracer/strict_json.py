"""Strict JSON for every output: no NaN or Infinity tokens, ever.

A number that cannot be computed (an AUROC with one class, a CI without replicates, a
mean of nothing) is written as `null`. `json_safe` maps non-finite floats (Python or
numpy) to None and numpy scalars / arrays to plain Python values; `dumps` then encodes with
`allow_nan=False`, so anything that slipped through still fails loudly instead of writing
a token other JSON parsers reject.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def json_safe(obj: Any) -> Any:
    """A copy of `obj` with NaN / +-inf as None and numpy values as Python values."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return json_safe(float(obj))
    return obj


def dumps(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON text of `obj` (undefined numbers as null), ending with a newline."""
    return json.dumps(json_safe(obj), indent=indent, allow_nan=False) + "\n"
