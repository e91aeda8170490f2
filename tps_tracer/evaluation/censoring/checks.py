"""The censoring checks (paper, Appendix "q_Z Estimation"; "Parse-error sensitivity analysis";
"Artificial-Censoring Validation"; formulas in docs/censoring.md): exact vs simple on censored
prefixes, Delta = q_hat (s1 - s0), and artificial censoring's prefix-swap + tail-omission split."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tps_tracer.constants import COMPLETE_ONLY, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED, bootstrap_means, trajectory_keys
from tps_tracer.evaluation.calibration import paired_mean_delta
from tps_tracer.evaluation.censoring.continuations import McEstimates
from tps_tracer.evaluation.pairs import pair_table_from_arrays, score_columns, score_matrix
from tps_tracer.evaluation.report import json_num
from tps_tracer.evaluation.skipped_predictors import role_masks
from tps_tracer.records.arrays import STOP_REASONS, PredictorColumn, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy, StopReason
from tps_tracer.scoring import IntArray, ScoreRule, WeightSchedule, get_rule, get_schedule, mix, score

DEFAULT_RATES = (0.25, 0.5, 0.75)
_MAX_STEPS = STOP_REASONS.index(StopReason.MAX_STEPS)


def censoring_plan(ids: Sequence[str], lengths: IntArray, rate: float, seed: int = 0) -> IntArray:
    """Cut point Z per trajectory (0: left complete). Length-1 trajectories cannot be cut."""
    if not 0.0 <= rate <= 1.0:
        raise InputError(f"censoring rate must be in [0, 1], got {rate}")
    rng = np.random.default_rng([seed, round(rate * 1_000_000)])
    cuts = np.zeros(len(ids), dtype=np.int64)
    for length in np.unique(lengths):
        members = sorted(np.flatnonzero(lengths == length).tolist(), key=lambda i: ids[i])
        k = round(rate * len(members))
        if length < 2 or k == 0:
            continue
        for c in rng.permutation(len(members))[:k].tolist():
            cuts[members[c]] = rng.integers(1, length)  # Z in 1..T-1
    return cuts


def artificial_censoring(
    arrays: TrajectoryArrays,
    predictor: str,
    rules: Sequence[str | ScoreRule] = ("log", "brier", "beta(2,4)"),
    schedules: Sequence[str | WeightSchedule] = ("linear-front", "uniform", "exponential-front", "linear-back"),
    rates: Sequence[float] = DEFAULT_RATES,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per rate x rule x schedule (see the module docstring); means over all complete trajectories."""
    sample = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())[0] & arrays.predictors[predictor].usable
    if not sample.any():
        raise InputError(f"no complete trajectory with a usable {predictor!r} stream to censor artificially")
    f, layout = arrays.subset(sample, predictor)
    n, lengths, y = int(sample.sum()), layout.lengths, arrays.outcome[sample]
    base = replace(
        arrays,
        ids=[tid for tid, s in zip(arrays.ids, sample, strict=True) if s],
        offsets=layout.offsets,
        horizon=layout.horizon,
        stop_code=arrays.stop_code[sample],
        outcome=y,
        q_z=arrays.q_z[sample],
        predictors={predictor: PredictorColumn(predictor, f, np.ones(n, bool))},
    )
    rules_, scheds = [get_rule(r) for r in rules], [get_schedule(s) for s in schedules]
    owner = np.repeat(np.arange(n), lengths)
    t = layout.step_index()
    complete = score_matrix(base, [predictor], rules_, scheds, modes=(COMPLETE_ONLY,))
    y_s = y[owner]
    rows = []
    for rate in rates:
        cuts = censoring_plan(base.ids, lengths, rate, seed)
        censored = cuts > 0
        in_prefix = t <= np.where(censored, cuts, lengths)[owner]
        cut_copy = replace(  # the trajectories cut at Z > 0 turned into max_steps prefixes (horizon kept)
            base,
            offsets=np.concatenate(([0], np.cumsum(np.where(censored, cuts, lengths)))).astype(np.int64),
            stop_code=np.where(censored, _MAX_STEPS, base.stop_code).astype(np.int8),
            outcome=np.where(censored, np.nan, y),
            q_z=np.full(n, np.nan),
            predictors={predictor: PredictorColumn(predictor, f[in_prefix], np.ones(n, bool))},
        )
        simple = score_matrix(cut_copy, [predictor], rules_, scheds, modes=(SIMPLE,))
        for (key, full), part in zip(zip(complete.keys, complete.columns, strict=True), simple.columns, strict=True):
            b1, b0 = get_rule(key.rule).branches(f)  # the closed form, step by step
            w = get_schedule(key.weights).step_weights(t, base.horizon[owner])
            swap_steps = np.where(in_prefix & censored[owner], y_s * w * (b0 - b1), 0.0)
            swap = np.bincount(owner, weights=swap_steps, minlength=n)
            tail = np.bincount(owner, weights=np.where(in_prefix, 0.0, -w * (y_s * b1 + (1 - y_s) * b0)), minlength=n)
            direct = part - full
            rows.append(
                {
                    "predictor": predictor,
                    "rule": key.rule,
                    "weights": key.weights,
                    "rate": rate,
                    "n": n,
                    "n_censored": int(censored.sum()),
                    "tps_complete": float(full.mean()),
                    "delta_mean": float(direct.mean()),
                    "prefix_swap_mean": float(swap.mean()),
                    "tail_omission_mean": float(tail.mean()),
                    "delta_y0": float(direct[y == 0].mean()) if np.any(y == 0) else None,
                    "delta_y1": float(direct[y == 1].mean()) if np.any(y == 1) else None,
                    "max_abs_error": float(np.max(np.abs(direct - (swap + tail)))),
                    "min_tail_omission": float(tail.min()),
                }
            )
    return rows


def exact_vs_simple(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    rules: Sequence[str | ScoreRule] = ("log",),
    schedules: Sequence[str | WeightSchedule] = ("linear-front",),
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """Simple, exact and their paired difference on censored prefixes with q_z (Tables "qz_headline")."""
    rules_, scheds = [get_rule(r) for r in rules], [get_schedule(s) for s in schedules]
    table = pair_table_from_arrays(arrays, predictors, rules_, scheds)
    _, censored = table.role_masks(CensoringPolicy())
    with_q = censored & ~np.isnan(table.q_z)
    keys = trajectory_keys(table.ids)
    rows = []
    for name, (i, rule), (j, sched) in itertools.product(predictors, enumerate(rules_), enumerate(scheds)):
        sel = with_q & table.predictors[name].usable
        s1, s0 = table.predictors[name].pairs[:, i, j, 0], table.predictors[name].pairs[:, i, j, 1]
        simple = np.where(sel, s0, np.nan)
        exact = np.where(sel, mix(s1, s0, np.nan_to_num(table.q_z)), np.nan)
        correction = np.where(sel, table.q_z * (s1 - s0), np.nan)
        boot = bootstrap_means(np.column_stack([simple, exact, correction]), keys, n_replicates, seed)
        lo, hi = boot.ci()
        row = {"predictor": name, "rule": rule.name, "weights": sched.name, "n": int(sel.sum())}
        for c, stat in enumerate(("simple", "exact", "delta")):
            row[stat] = json_num(boot.point[c])
            row[f"{stat}_ci"] = [json_num(lo[c]), json_num(hi[c])]
        rows.append({**row, "delta_se": json_num(boot.se()[2])})
    return rows


def conditional_projection_check(
    arrays: TrajectoryArrays,
    estimates: McEstimates,
    predictors: Sequence[str],
    rules: Sequence[str | ScoreRule] = ("log",),
    schedules: Sequence[str | WeightSchedule] = ("linear-front",),
) -> list[dict[str, Any]]:
    """max_i |TPS_exact-MC_i - mean_m sum_t w_t S(F_t, Y_i^(m))| over retained prefixes in `arrays`:
    branch pairs mixed with q_hat against every branch outcome scored step by step (~1e-15 apart)."""
    rules_, scheds = [get_rule(r) for r in rules], [get_schedule(s) for s in schedules]
    table = pair_table_from_arrays(arrays, predictors, rules_, scheds)
    index = {tid: i for i, tid in enumerate(arrays.ids)}
    q_hat = estimates.as_mapping()
    rows = []
    for name, (ri, rule), (si, sched) in itertools.product(predictors, enumerate(rules_), enumerate(scheds)):
        col = arrays.predictors[name]
        members = [(tid, index[tid]) for tid in estimates.ids if tid in index and col.usable[index[tid]]]
        worst = 0.0
        for tid, i in members:
            f = col.values[arrays.offsets[i] : arrays.offsets[i + 1]]
            w = sched.step_weights(np.arange(1, f.size + 1, dtype=np.float64), np.full(f.size, arrays.horizon[i]))
            per_branch = score(f[None, :], estimates.outcomes[tid][:, None], rule) @ w  # each a complete prefix
            s1, s0 = table.predictors[name].pairs[i, ri, si]
            worst = max(worst, abs(float(mix(s1, s0, q_hat[tid])) - float(per_branch.mean())))
        rows.append(
            {"predictor": name, "rule": rule.name, "weights": sched.name, "n": len(members), "max_abs_error": worst}
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
    table = pair_table_from_arrays(arrays, predictors, [get_rule(rule)], [get_schedule(schedule)])
    base_cols = score_columns(table, predictors, CensoringPolicy(), modes=(SIMPLE,)).columns
    alt = CensoringPolicy.treating_as_censored(list(reasons))
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
                **{stat: getattr(d, stat) for stat in ("se", "ci_low", "ci_high")},
            }
        )
    return rows
