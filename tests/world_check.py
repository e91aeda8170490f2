"""Shared by the handler tests: run tasks of the simulated world and compare with its ground truth."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tps_tracer import Accumulator
from tps_tracer.records import read_trajectories
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.world import AgentWorld, Expected, TaskScript, expected_forecasts, render

SIGNAL_TOLERANCE = 1e-12


def sink_records(path: Path) -> dict[str, TrajectoryRecord]:
    return {r.trajectory_id: r for r in read_trajectories(path)}


def new_accumulator(tmp_path: Path, name: str = "runs.jsonl", **kw: Any) -> tuple[Accumulator, Path]:
    path = tmp_path / name
    return Accumulator(bootstrap=20, sink=path, **kw), path


def recursion_error_expected(task: TaskScript, budget: int, repairs: bool) -> Expected:
    """LangGraph with an odd recursion limit 2B-1: the B-th model call runs, then the graph raises.

    So a run that reaches call B stops as max_steps whatever that call said (its well-formed
    output still counts as a step).
    """
    e = task.expected(budget, repairs=repairs)
    if e.n_calls == budget and e.stop_reason in (StopReason.CLEAN, StopReason.PARSE_ERROR):
        return Expected(StopReason.MAX_STEPS, e.n_steps, e.n_calls, None)
    return e


def check_against_world(
    records: dict[str, TrajectoryRecord],
    world: AgentWorld,
    expect: Callable[[TaskScript], Expected],
    style: str = "tagged",
    budget: int | None = None,
) -> dict[str, int]:
    """Every run's stop reason, steps, forecasts, horizon and outcome equal the world's; returns stop counts."""
    assert set(records) == set(world.tasks)
    counts: dict[str, int] = {}
    for task in world:
        e = expect(task)
        rec = records[task.task_id]
        where = f"{task.task_id}: expected {e}, got {rec.stop_reason} with {len(rec.steps)} steps {rec.metadata}"
        assert rec.stop_reason == e.stop_reason, where
        assert len(rec.steps) == e.n_steps, where
        for step, got in zip(task.steps, rec.steps, strict=False):
            want = expected_forecasts(render(task.task_id, step, style), step.verbal)
            assert set(got.forecasts) == set(want), where
            for name, value in want.items():
                assert got.forecasts[name] is not None, (where, name)
                assert math.isclose(got.forecasts[name], value, rel_tol=0, abs_tol=SIGNAL_TOLERANCE), (where, name)
        if e.stop_reason is StopReason.MAX_STEPS:
            assert rec.horizon == max(e.n_calls, budget or 0), where
        counts[e.stop_reason.value] = counts.get(e.stop_reason.value, 0) + 1
    return counts
