"""Per-trajectory TPS for every predictor x rule x schedule x censoring mode, vectorised.

For each predictor we compute the branch pairs (s1, s0) once per rule x schedule, on the
trajectories that are usable for it and are complete or censored, then pick eta per mode:

    complete-only   complete trajectories,                     eta = Y
    simple          complete + censored,                       eta = Y, or 0 if censored   (q_Z ~ 0)
    exact           complete + censored that carry q_z,        eta = Y, or q_z if censored

The result is one (n_trajectories x K) matrix, NaN outside each column's sample, which
the bootstrap consumes in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from tps_tracer.records.arrays import ROLES, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy, Role
from tps_tracer.scoring.branch_pairs import branch_pairs_from_branches, mix
from tps_tracer.scoring.rules import ScoreRule
from tps_tracer.scoring.schedules import WeightSchedule

FloatArray = NDArray[np.float64]

COMPLETE_ONLY = "complete-only"
SIMPLE = "simple"
EXACT = "exact"
CENSORING_MODES = (COMPLETE_ONLY, SIMPLE, EXACT)


@dataclass(frozen=True)
class ColumnKey:
    predictor: str
    rule: str
    weights: str
    censoring: str


@dataclass
class ScoreMatrix:
    keys: list[ColumnKey] = field(default_factory=list)
    columns: list[FloatArray] = field(default_factory=list)
    # Censored trajectories usable for the predictor but lacking q_z (left out of "exact").
    missing_q_z: dict[str, int] = field(default_factory=dict)

    def matrix(self, n: int) -> FloatArray:
        return np.column_stack(self.columns) if self.columns else np.zeros((n, 0))

    def index(self) -> dict[ColumnKey, int]:
        return {k: i for i, k in enumerate(self.keys)}


def role_masks(arrays: TrajectoryArrays, policy: CensoringPolicy) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    roles = arrays.roles(policy)
    return roles == ROLES.index(Role.COMPLETE), roles == ROLES.index(Role.CENSORED)


def score_matrix(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    rules: Sequence[ScoreRule],
    schedules: Sequence[WeightSchedule],
    policy: CensoringPolicy | None = None,
    modes: Sequence[str] = CENSORING_MODES,
) -> ScoreMatrix:
    """Per-trajectory scores for every combination, as columns over all n trajectories."""
    complete, censored = role_masks(arrays, policy or CensoringPolicy())
    has_q = ~np.isnan(arrays.q_z)
    out = ScoreMatrix()
    n = arrays.n
    for name in predictors:
        usable = arrays.predictors[name].usable
        scored = usable & (complete | censored)
        values, layout = arrays.subset(scored, name)
        c_sub, q_sub = complete[scored], has_q[scored]
        y_sub = np.where(c_sub, arrays.outcome[scored], 0.0)
        eta = {
            COMPLETE_ONLY: (c_sub, y_sub),
            SIMPLE: (np.ones_like(c_sub), y_sub),
            EXACT: (c_sub | q_sub, np.where(c_sub, y_sub, np.nan_to_num(arrays.q_z[scored]))),
        }
        out.missing_q_z[name] = int(np.sum(usable & censored & ~has_q))
        for rule in rules:
            b1, b0 = rule.branches(values)
            for sched in schedules:
                s1, s0 = branch_pairs_from_branches(b1, b0, layout, sched)
                for mode in modes:
                    member, e = eta[mode]
                    col = np.full(n, np.nan)
                    col[np.flatnonzero(scored)[member]] = mix(s1[member], s0[member], e[member])
                    out.keys.append(ColumnKey(name, rule.name, sched.name, mode))
                    out.columns.append(col)
    return out
