"""Informative-censoring sensitivity (paper, Appendix "Parse-error sensitivity analysis"): the shift
of cen-simple TPS when informative stops are treated as censored, on shared Poisson replicates (so
its SE reflects only the trajectories that changed role).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tps_tracer.constants import SIMPLE
from tps_tracer.evaluation.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from tps_tracer.evaluation.calibration import paired_mean_delta
from tps_tracer.evaluation.pairs import pair_table_from_arrays, score_columns
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule, get_rule, get_schedule


def informative_censoring_shift(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    reasons: Sequence[str] = ("parse_error",),
    rule: str | ScoreRule = "log",
    schedule: str | WeightSchedule = "linear-front",
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """Per predictor: cen-simple TPS under the default policy and with `reasons` treated as censored."""
    alt = CensoringPolicy.treating_as_censored(list(reasons))
    table = pair_table_from_arrays(arrays, predictors, [get_rule(rule)], [get_schedule(schedule)])
    base_cols = score_columns(table, predictors, CensoringPolicy(), modes=(SIMPLE,)).columns
    alt_cols = score_columns(table, predictors, alt, modes=(SIMPLE,)).columns
    rows = []
    for name, a, b in zip(predictors, base_cols, alt_cols, strict=True):
        d = paired_mean_delta(a, b, table.ids, max(n_replicates, 2), seed, "tps cen-simple")
        rows.append(
            {
                "predictor": name,
                "rule": get_rule(rule).name,
                "weights": get_schedule(schedule).name,
                "treated_as_censored": list(reasons),
                "default": d.a,
                "n_default": int(np.sum(~np.isnan(a))),
                "sensitivity": d.b,
                "n_sensitivity": int(np.sum(~np.isnan(b))),
                "moved_into_sample": int(np.sum(np.isnan(a) & ~np.isnan(b))),
                "shift": d.delta,
                "se": d.se,
                "ci_low": d.ci_low,
                "ci_high": d.ci_high,
            }
        )
    return rows
