"""Exact-minus-simple on censored prefixes (paper, Appendix "q_Z Estimation", Eq. app_qz_delta):

    TPS_simple = s0,   TPS_exact = q_hat s1 + (1 - q_hat) s0,   Delta = q_hat (s1 - s0)

(for the log rule s1 - s0 = sum_{t<=Z} w_t log(F_t / (1 - F_t)), the weighted prefix log-odds),
the check that the exact score equals the branch average of complete-prefix scores, and the
informative-censoring sensitivity (Appendix "Parse-error sensitivity analysis").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tps_tracer.constants import SIMPLE
from tps_tracer.evaluation.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED, bootstrap_means, trajectory_keys
from tps_tracer.evaluation.calibration import paired_mean_delta
from tps_tracer.evaluation.censoring.continuations import McEstimates
from tps_tracer.evaluation.pairs import pair_table_from_arrays, score_columns
from tps_tracer.evaluation.report import json_num
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.branch_pairs import mix
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule, get_rule, get_schedule, score


def exact_vs_simple(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    rules: Sequence[str | ScoreRule] = ("log",),
    schedules: Sequence[str | WeightSchedule] = ("linear-front",),
    policy: CensoringPolicy | None = None,
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """Simple, exact and their paired difference on censored prefixes with q_z (Tables "qz_headline")."""
    rules_ = [get_rule(r) for r in rules]
    scheds = [get_schedule(s) for s in schedules]
    table = pair_table_from_arrays(arrays, predictors, rules_, scheds)
    _, censored = table.role_masks(policy or CensoringPolicy())
    with_q = censored & ~np.isnan(table.q_z)
    keys = trajectory_keys(table.ids)
    rows = []
    for name in predictors:
        col = table.predictors[name]
        sel = with_q & col.usable
        for i, rule in enumerate(rules_):
            for j, sched in enumerate(scheds):
                s1, s0 = col.pairs[:, i, j, 0], col.pairs[:, i, j, 1]
                simple = np.where(sel, s0, np.nan)
                exact = np.where(sel, mix(s1, s0, np.nan_to_num(table.q_z)), np.nan)
                correction = np.where(sel, table.q_z * (s1 - s0), np.nan)
                boot = bootstrap_means(np.column_stack([simple, exact, correction]), keys, n_replicates, seed)
                lo, hi = boot.ci()
                se = boot.se()
                rows.append(
                    {
                        "predictor": name,
                        "rule": rule.name,
                        "weights": sched.name,
                        "n": int(sel.sum()),
                        "simple": json_num(boot.point[0]),
                        "simple_ci": [json_num(lo[0]), json_num(hi[0])],
                        "exact": json_num(boot.point[1]),
                        "exact_ci": [json_num(lo[1]), json_num(hi[1])],
                        "delta": json_num(boot.point[2]),
                        "delta_ci": [json_num(lo[2]), json_num(hi[2])],
                        "delta_se": json_num(se[2]),
                    }
                )
    return rows


def conditional_projection_check(
    arrays: TrajectoryArrays,
    estimates: McEstimates,
    predictors: Sequence[str],
    rules: Sequence[str | ScoreRule] = ("log",),
    schedules: Sequence[str | WeightSchedule] = ("linear-front",),
) -> list[dict[str, Any]]:
    """max_i |TPS_exact-MC_i - mean_m sum_t w_t S(F_t, Y_i^(m))| over retained prefixes in `arrays`.

    The left side goes through the branch pairs (s1, s0) mixed with q_hat; the right side
    scores every branch outcome step by step and averages. They must agree to ~1e-15.
    """
    rules_ = [get_rule(r) for r in rules]
    scheds = [get_schedule(s) for s in schedules]
    table = pair_table_from_arrays(arrays, predictors, rules_, scheds)
    index = {tid: i for i, tid in enumerate(arrays.ids)}
    q_hat = estimates.as_mapping()
    rows = []
    for name in predictors:
        col = arrays.predictors[name]
        members = [(tid, index[tid]) for tid in estimates.ids if tid in index and col.usable[index[tid]]]
        for ri, rule in enumerate(rules_):
            for si, sched in enumerate(scheds):
                worst = 0.0
                for tid, i in members:
                    f = col.values[arrays.offsets[i] : arrays.offsets[i + 1]]
                    w = sched.step_weights(
                        np.arange(1, f.size + 1, dtype=np.float64), np.full(f.size, arrays.horizon[i])
                    )
                    ys = estimates.outcomes[tid]
                    per_branch = score(f[None, :], ys[:, None], rule) @ w  # each branch scored as a complete prefix
                    branch_avg = float(per_branch.mean())
                    s1, s0 = table.predictors[name].pairs[i, ri, si]
                    worst = max(worst, abs(float(mix(s1, s0, q_hat[tid])) - branch_avg))
                rows.append(
                    {
                        "predictor": name,
                        "rule": rule.name,
                        "weights": sched.name,
                        "n": len(members),
                        "max_abs_error": worst,
                    }
                )
    return rows


def informative_censoring_shift(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    reasons: Sequence[str] = ("parse_error",),
    rule: str | ScoreRule = "log",
    schedule: str | WeightSchedule = "linear-front",
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """Per predictor: cen-simple TPS under the default policy and with `reasons` treated as censored, on
    shared Poisson replicates (so the SE reflects only the trajectories that changed role)."""
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
