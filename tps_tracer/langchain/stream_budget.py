"""Your own step budget around a `graph.stream(...)` loop: `TPSCallbackHandler.budget(...)`.

Breaking out of a stream closes LangGraph's generator, and the root run ends on
GeneratorExit: on its own that is `other` (informative, excluded), because the handler
cannot tell a budget from any other reason to stop reading. Inside

    with handler.budget(config, max_steps=8) as b:
        for chunk in graph.stream(inputs, config=config):
            if b.exhausted:          # 8 model calls made
                break

the same break is the caller's budget: the run is recorded as max_steps (administratively
censored, scored by cen-simple / cen-exact) with horizon max_steps. A run that ends on its
own inside the block (clean, a parse error, LangGraph's recursion limit) keeps the stop it
had: the budget only names what a closed stream means.

The run is named by its trajectory id: a string, or the run config, whose
`metadata.tps_trajectory_id` is used (and set to a fresh id when missing, so the handler
and the budget agree on it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from tps_tracer.errors import InputError


@dataclass
class StreamBudget:
    """What `handler.budget(...)` yields: the limit and the model calls started so far."""

    trajectory_id: str
    max_steps: int
    calls: int = 0  # model calls started in this run (counted as they start, so `exhausted` is current)

    @property
    def exhausted(self) -> bool:
        return self.calls >= self.max_steps

    @property
    def detail(self) -> str:
        return f"stream closed under handler.budget(max_steps={self.max_steps})"


def budget_trajectory_id(target: str | MutableMapping[str, Any], key: str) -> str:
    """The trajectory id a budget applies to: the string itself, or the config's metadata[key]
    (set to a new id when the config names none)."""
    if isinstance(target, str):
        if not target.strip():
            raise InputError("budget: the trajectory id is empty")
        return target
    if not isinstance(target, MutableMapping):
        raise TypeError(f"budget: give a trajectory id or the run config, got {type(target).__name__}")
    metadata = target.get("metadata")
    if metadata is None:
        metadata = target["metadata"] = {}
    if not isinstance(metadata, Mapping):
        raise TypeError("budget: config['metadata'] is not a mapping")
    tid = metadata.get(key)
    if tid is None or not str(tid).strip():
        tid = str(uuid.uuid4())
        target["metadata"] = {**metadata, key: tid}
    return str(tid)


def check_max_steps(max_steps: Any) -> int:
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InputError(f"budget: max_steps must be a whole number >= 1, got {max_steps!r}")
    return max_steps


def closed_by_caller(error: BaseException | None) -> bool:
    """The root run ended because the caller stopped reading its stream (the generator was closed)."""
    return isinstance(error, GeneratorExit)
