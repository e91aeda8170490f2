"""The censoring-mode mixing: per-trajectory TPS for every predictor x rule x schedule x censoring mode, vectorised.

For each predictor the pair table holds the branch pairs (s1, s0) per rule x schedule of
every usable trajectory; here we pick eta per mode:

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

from tps_tracer.constants import CENSORING_MODES, COMPLETE_ONLY, EXACT, SIMPLE
from tps_tracer.evaluation.pairs import PairTable, pair_table_from_arrays
from tps_tracer.records.arrays import FloatArray, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.branch_pairs import mix
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule


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


def eta_by_mode(
    complete: NDArray[np.bool_], censored: NDArray[np.bool_], outcome: FloatArray, q_z: FloatArray
) -> dict[str, tuple[NDArray[np.bool_], FloatArray]]:
    """The eta table (docs/design.md, "the branch pair"), the one definition: per censoring mode,
    which rows it scores and the eta each row's pair is mixed with (score = eta s1 + (1-eta) s0).

    complete: rows whose outcome Y is observed (NaN outcome on a complete row is pending:
    not a member); censored: administratively stopped rows; q_z NaN where unknown."""
    has_y = complete & ~np.isnan(outcome)
    has_q = censored & ~np.isnan(q_z)
    y = np.where(has_y, outcome, 0.0)
    return {
        COMPLETE_ONLY: (has_y, y),
        SIMPLE: (has_y | censored, y),
        EXACT: (has_y | has_q, np.where(has_y, y, np.nan_to_num(q_z))),
    }


def score_columns(
    table: PairTable,
    predictors: Sequence[str],
    policy: CensoringPolicy | None = None,
    modes: Sequence[str] = CENSORING_MODES,
) -> ScoreMatrix:
    """Mix each row's branch pairs with its eta per censoring mode, one column per combination."""
    complete, censored = table.role_masks(policy or CensoringPolicy())
    has_q = ~np.isnan(table.q_z)
    eta = eta_by_mode(complete, censored, table.outcome, table.q_z)
    out = ScoreMatrix()
    for name in predictors:
        col = table.predictors[name]
        out.missing_q_z[name] = int(np.sum(col.usable & censored & ~has_q))
        for i, rule in enumerate(table.rules):
            for j, sched in enumerate(table.schedules):
                s1, s0 = col.pairs[:, i, j, 0], col.pairs[:, i, j, 1]
                for mode in modes:
                    member, e = eta[mode]
                    rows = member & col.usable
                    column = np.full(table.n, np.nan)
                    column[rows] = mix(s1[rows], s0[rows], e[rows])
                    out.keys.append(ColumnKey(name, rule.name, sched.name, mode))
                    out.columns.append(column)
    return out


def score_matrix(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    rules: Sequence[ScoreRule],
    schedules: Sequence[WeightSchedule],
    policy: CensoringPolicy | None = None,
    modes: Sequence[str] = CENSORING_MODES,
) -> ScoreMatrix:
    """Per-trajectory scores for every combination, as columns over all n trajectories."""
    return score_columns(pair_table_from_arrays(arrays, predictors, rules, schedules), predictors, policy, modes)
