"""Shared by the backend end-to-end tests: load an integrations/ recipe, drive sim agents through it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from otel_support import run_tasks
from test_otel_export import expected_tps

from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import StopReason

HORIZON = 6
SCORED = (StopReason.CLEAN, StopReason.MAX_STEPS)


def load_recipe(folder: str, name: str) -> ModuleType:
    """integrations/<folder>/<name>.py, the recipe users copy: the backend tests run through it."""
    path = Path(__file__).resolve().parents[1] / "integrations" / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class Subset:
    """Some tasks of a world, iterable like the world (run_tasks takes either)."""

    def __init__(self, tasks):
        self.tasks = {t.task_id: t for t in tasks}

    def __iter__(self):
        return iter(self.tasks.values())


class RecipeRun:
    """A recipe's wiring (provider, accumulator, processor, optional handler) driving sim agents."""

    def __init__(self, tps: Any, sink: Path):
        self.tps, self.sink = tps, sink
        self.provider, self.acc, self.processor, self.handler = (
            tps.provider,
            tps.accumulator,
            tps.processor,
            tps.handler,
        )

    def run(self, agent, inputs, tasks) -> None:
        callbacks = [self.handler] if self.handler else []
        run_tasks(agent, inputs, tasks, callbacks, metadata={"tps_horizon": HORIZON}, recursion_limit=2 * HORIZON)

    def flush(self) -> None:
        (self.handler.flush if self.handler else self.processor.force_flush)()

    def record_outcomes(self, tasks, every_run: bool = False) -> None:
        """Each clean run's grade; every_run: a grading job that grades every task, excluded and
        censored runs too (whose outcomes scoring ignores: nothing may be exported twice for them)."""
        for task in tasks:
            if every_run or task.expected(HORIZON, repairs=False).stop_reason is StopReason.CLEAN:
                (self.handler or self.processor).record_outcome(task.task_id, success=task.outcome)
        self.flush()


def expected_score(record: TrajectoryRecord, rule: str, outcomes: dict[str, bool], predictor: str = "verbal") -> float:
    """A predictor's TPS under `rule`, computed independently (q_Z ~ 0 for a censored run)."""
    eta = float(outcomes[record.trajectory_id]) if record.stop_reason is StopReason.CLEAN else 0.0
    return expected_tps(record, predictor, rule, eta)


def usable_predictors(record: TrajectoryRecord) -> list[str]:
    """Predictors with a forecast at every step (the only ones a run is scored with)."""
    if not record.steps:
        return []
    return [p for p in record.steps[0].forecasts if all(s.forecasts.get(p) is not None for s in record.steps)]


def expected_score_names(record: TrajectoryRecord, rules) -> dict[str, tuple[str, str]]:
    """Exported name -> (predictor, rule): `tps.<rule>` is always verbal, others carry their predictor."""
    if record.stop_reason not in SCORED:
        return {}
    return {
        (f"tps.{rule}" if p == "verbal" else f"tps.{rule}.{p}"): (p, rule)
        for p in usable_predictors(record)
        for rule in rules
    }
