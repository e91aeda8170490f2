"""One finished run's scores, as listeners and exporters get them: its branch pairs, mixed by `values()`
exactly as the snapshot's score matrix does (evaluation/pairs.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tps_tracer.constants import HEADLINE_PREDICTOR, SIMPLE
from tps_tracer.evaluation.pairs import eta_by_mode
from tps_tracer.records.stop_reasons import Role, StopReason
from tps_tracer.scoring import mix


@dataclass(frozen=True)
class ScoreValue:
    predictor: str
    rule: str
    weights: str
    censoring: str  # complete-only | simple | exact
    value: float
    s1: float  # the branch pair it was mixed from
    s0: float
    eta: float


@dataclass(frozen=True)
class TrajectoryScore:
    trajectory_id: str
    stop_reason: StopReason
    role: Role
    outcome: int | None
    q_z: float | None
    n_steps: int
    horizon: int
    # (predictor, rule, schedule) -> (s1, s0), only for predictors usable on this trajectory
    pairs: Mapping[tuple[str, str, str], tuple[float, float]]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # predictor -> steps without a forecast (scored by the missing-forecast policy, not dropped)
    gaps: Mapping[str, int] = field(default_factory=dict)

    def values(self) -> Iterator[ScoreValue]:
        """Every available score: predictor x rule x schedule x censoring mode (eta: the report's own table)."""
        nan = float("nan")
        table = eta_by_mode(
            np.array([self.role is Role.COMPLETE]),
            np.array([self.role is Role.CENSORED]),
            np.array([nan if self.outcome is None else float(self.outcome)]),
            np.array([nan if self.q_z is None else float(self.q_z)]),
        )
        etas = [(mode, float(eta[0])) for mode, (member, eta) in table.items() if member[0]]
        for (predictor, rule, weights), (s1, s0) in self.pairs.items():
            for mode, eta in etas:
                yield ScoreValue(predictor, rule, weights, mode, float(mix(s1, s0, eta)), s1, s0, eta)

    def primary(
        self,
        predictor: str = HEADLINE_PREDICTOR,
        rule: str | None = None,
        weights: str | None = None,
        censoring: str = SIMPLE,
    ) -> ScoreValue | None:
        """The headline score: `predictor` (fixed, so an exported name means one predictor on every run;
        None when this run cannot use it), `rule` / `weights` else the first configured."""
        for v in self.values():
            if (
                (predictor is None or v.predictor == predictor)
                and (rule is None or v.rule == rule)
                and (weights is None or v.weights == weights)
                and v.censoring == censoring
            ):
                return v
        return None

    @property
    def label(self) -> str:
        if self.role is Role.COMPLETE:
            return "pending" if self.outcome is None else ("success" if self.outcome else "failure")
        return self.role.value
