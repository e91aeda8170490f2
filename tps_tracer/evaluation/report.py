"""Assemble the evaluation report (the object behind `tps-tracer report --json`).

Follows the paper's reporting convention (Section 4.2): the termination audit first, TPS
per predictor x rule x schedule for complete-only, cen-simple and (where q_z is present)
cen-exact with bootstrap CIs, Delta_practice, then rank/calibration diagnostics.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tps_tracer.errors import InputError
from tps_tracer.evaluation.audit import audit_of_rows
from tps_tracer.evaluation.bootstrap import (
    CI_LEVEL,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    BootstrapResult,
    bootstrap_means,
    percentile_ci,
    trajectory_keys,
)
from tps_tracer.evaluation.calibration.calibrator import Calibrator
from tps_tracer.evaluation.calibration.cross_fit import DEFAULT_PENALTY
from tps_tracer.evaluation.calibration.recalibration import (
    PLATT_SUFFIX,
    auroc_deltas,
    with_calibrator_streams,
    with_platt_streams,
)
from tps_tracer.evaluation.censoring_mix import COMPLETE_ONLY, EXACT, SIMPLE, ColumnKey, score_columns
from tps_tracer.evaluation.diagnostics import DEFAULT_ECE_BINS, scalar_diagnostics
from tps_tracer.evaluation.pairs import (
    AGGREGATOR_NAMES,
    PairTable,
    PredictorPairs,
    pair_table_from_arrays,
    skip_counts,
)
from tps_tracer.evaluation.report_options_check import check_report_options
from tps_tracer.evaluation.reserved_names import BASE_RATE, check_no_base_rate
from tps_tracer.evaluation.skipped_predictors import (
    NO_PREDICTOR,
    Skipped,
    as_dicts,
    no_data_reason,
    nothing_left,
    platt_fit_reason,
    role_masks,
    split_usable,
)
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import ScoreRule, get_rule
from tps_tracer.scoring.schedules import DEFAULT_SCHEDULE, WeightSchedule, get_schedule

REPORT_VERSION = 1
NO_WORKING_SAMPLE = "no complete trajectory (stop_reason 'clean' with an outcome) and no censored one: nothing to score"
# With censored runs only, the predictors are scored (cen-simple, cen-exact) and the base rate,
# whose forecast is the mean complete outcome, is listed as skipped with this reason.
BASE_RATE_SKIPPED = Skipped(
    BASE_RATE, "needs at least one complete trajectory (a clean stop with an outcome) for its value; none yet"
)


@dataclass
class ReportOptions:
    predictors: Sequence[str] | None = None  # None: every predictor in the file
    rules: Sequence[str | ScoreRule] = ("log", "brier", "beta(2,4)")
    schedules: Sequence[str | WeightSchedule] = ("linear-front",)
    bootstrap: int = DEFAULT_REPLICATES
    seed: int = DEFAULT_SEED
    policy: CensoringPolicy = field(default_factory=CensoringPolicy)
    base_rate: bool = True
    ece_bins: int = DEFAULT_ECE_BINS
    calibrate: str | None = None  # "platt": add cross-fitted "<p>+platt" rows and paired deltas
    calibrator: Calibrator | None = None  # or apply a saved calibrator artifact instead

    def __post_init__(self) -> None:
        check_report_options(self)  # OptionError (a ValueError naming the field)


def _num(x: float | np.floating[Any]) -> float | None:
    """JSON-safe float: NaN/inf become null."""
    v = float(x)
    return v if math.isfinite(v) else None


def termination_audit(table: PairTable, policy: CensoringPolicy) -> dict[str, Any]:
    """The termination audit of a pair table's rows (evaluation/audit.py builds it)."""
    return audit_of_rows(table.stop_code, table.q_z, int(table.pending.sum()), table.outcome_on_unscored, policy)


def check_unique_ids(ids: Sequence[str]) -> None:
    """A trajectory counted twice would double its weight in every mean and CI: an error, as in the readers."""
    if len(set(ids)) == len(ids):
        return
    dups = [i for i, k in Counter(ids).items() if k > 1]
    more = f" (and {len(dups) - 3} more)" if len(dups) > 3 else ""
    raise InputError(
        f"duplicate trajectory id(s) {', '.join(map(repr, dups[:3]))}{more}: each trajectory must appear once"
    )


def build_report(arrays: TrajectoryArrays, options: ReportOptions | None = None) -> dict[str, Any]:
    """The report of flat trajectory arrays (see `report_from_table`)."""
    opts = options or ReportOptions()
    check_unique_ids(arrays.ids)
    if opts.predictors is None and not arrays.predictors:
        raise InputError(NO_PREDICTOR)
    predictors = list(arrays.predictors) if opts.predictors is None else list(opts.predictors)
    check_no_base_rate(predictors)  # an unselected column of that name collides with nothing
    unknown = [p for p in predictors if p not in arrays.predictors]
    if unknown:
        raise InputError(f"predictor(s) not in the file: {', '.join(unknown)}; found: {', '.join(arrays.predictors)}")
    rules = [get_rule(r) for r in opts.rules]
    schedules = [get_schedule(s) for s in opts.schedules]
    calibration: dict[str, Any] = {"method": "raw"}
    recalibrated: list[tuple[str, str]] = []
    skipped: list[Skipped] = []
    if opts.calibrate is not None or opts.calibrator is not None:
        complete, censored = role_masks(arrays.stop_code, arrays.outcome, opts.policy)
        raw = [  # predictors without data are skipped (once) by report_from_table
            p
            for p in predictors
            if p != BASE_RATE
            and not p.endswith(PLATT_SUFFIX)
            and no_data_reason(arrays.predictors[p], complete | censored) is None
        ]
        arrays, calibration, skipped = _recalibrate(arrays, raw, schedules[0], opts)
        recalibrated = [(p, p + PLATT_SUFFIX) for p in raw if p + PLATT_SUFFIX in arrays.predictors]
        cal_of = dict(recalibrated)
        predictors = list(dict.fromkeys(n for p in predictors for n in (p, cal_of.get(p)) if n is not None))
    report = report_from_table(
        pair_table_from_arrays(arrays, predictors, rules, schedules),
        dataclasses.replace(opts, predictors=predictors),
        recalibrated=recalibrated,
        skipped=skipped,
    )
    report["settings"]["calibration"] = calibration
    return report


def _recalibrate(
    arrays: TrajectoryArrays, predictors: list[str], schedule: WeightSchedule, opts: ReportOptions
) -> tuple[TrajectoryArrays, dict[str, Any], list[Skipped]]:
    """Arrays with "<p>+platt" streams, the disclosure of how they were made, and what was not recalibrated."""
    if opts.calibrator is not None:
        cal = opts.calibrator
        matches = cal.check_schedule(schedule)
        known, skipped = split_usable(
            predictors, lambda p: None if p in cal.maps else "not recalibrated: the calibrator has no map for it"
        )
        out = with_calibrator_streams(arrays, cal, known)
        info = {
            "method": "platt (saved calibrator)",
            "schedule": cal.schedule,
            "schedule_mismatch": not matches,
            "maps": {p: m.as_dict() for p, m in cal.maps.items() if p in known},
        }
        return out, info, skipped
    if opts.calibrate != "platt":
        raise InputError(f"unknown calibration method {opts.calibrate!r} (supported: platt)")
    fittable, skipped = split_usable(predictors, lambda p: platt_fit_reason(arrays, p))
    if not fittable:
        raise nothing_left("recalibrate", skipped)
    out, fits = with_platt_streams(arrays, fittable, schedule)
    info = {
        "method": "platt (cross-fitted, 50/50 split stratified by Y)",
        "schedule": schedule.name,
        "penalty": DEFAULT_PENALTY,
        "splits": {p: fit.diagnostics() for p, fit in fits.items()},
    }
    return out, info, [Skipped(s.predictor, "not recalibrated: " + s.reason) for s in skipped]


def base_rate_pairs(table: PairTable, p: float) -> PredictorPairs:
    """Pairs of the constant forecast p on every step: S(p, y) times the truncated weight mass."""
    usable = table.n_steps > 0
    pairs = np.full((table.n, len(table.rules), len(table.schedules), 2), np.nan)
    for i, rule in enumerate(table.rules):
        b1, b0 = rule.branches(np.array([p]))
        pairs[usable, i, :, 0] = b1[0] * table.weight_mass[usable]
        pairs[usable, i, :, 1] = b0[0] * table.weight_mass[usable]
    aggs = np.where(usable[:, None], p, np.nan) * np.ones((1, len(AGGREGATOR_NAMES)))
    return PredictorPairs(usable, pairs, aggs, skip_counts(usable, table.n_steps))


def empty_tables() -> dict[str, list[Any]]:
    """The report's tables when nothing can be scored yet (a live monitor before its first run)."""
    return {"scores": [], "deltas": [], "diagnostics": [], "scalar_predictors": [], "recalibration": []}


def report_from_table(
    table: PairTable,
    options: ReportOptions | None = None,
    allow_empty: bool = False,
    recalibrated: Sequence[tuple[str, str]] = (),
    skipped: Sequence[Skipped] = (),
) -> dict[str, Any]:
    """The report object (`tps-tracer report --json`, `Accumulator.snapshot()`) of a pair table.

    Rules and schedules are the table's; `options.predictors` selects among its predictors.
    `recalibrated` names (raw, recalibrated) predictor pairs to compare (paired TPS and AUROC
    deltas in the "recalibration" section). Censored runs alone are scored (cen-simple, and
    cen-exact where q_z is given): complete-only columns then have n=0, and the base rate, which
    needs a complete outcome, is listed in "skipped_predictors". With no complete and no censored
    trajectory this raises, or with `allow_empty` returns the audit and coverage with empty score
    tables (a live monitor before its first finished run). A predictor without a usable
    trajectory in the working sample is left out of the score tables and listed in
    "skipped_predictors" with the reason, after the `skipped` entries the caller already
    decided (e.g. predictors not recalibrated).
    """
    opts = options or ReportOptions()
    predictors = list(table.predictors) if opts.predictors is None else list(opts.predictors)
    unknown = [p for p in predictors if p not in table.predictors]
    if unknown:
        raise InputError(f"unknown predictor(s): {', '.join(unknown)}; known: {', '.join(table.predictors)}")
    complete, censored = table.role_masks(opts.policy)
    if not complete.any() and not censored.any():
        if allow_empty:
            return {**_header(table, opts, predictors, None, list(skipped)), **empty_tables()}
        raise InputError(NO_WORKING_SAMPLE)
    covered = list(predictors)
    predictors, no_data = split_usable(predictors, lambda p: no_data_reason(table.predictors[p], complete | censored))
    if covered and not predictors and not allow_empty:
        raise nothing_left("score", no_data)
    skipped = [*skipped, *no_data]
    # Censored runs alone are scored (cen-simple, cen-exact); the base rate needs a complete outcome.
    base_rate = float(np.mean(table.outcome[complete])) if complete.any() else None
    if opts.base_rate and base_rate is None and BASE_RATE not in table.predictors:
        skipped.append(BASE_RATE_SKIPPED)
    if opts.base_rate and base_rate is not None and BASE_RATE not in table.predictors:
        table = dataclasses.replace(table, predictors=dict(table.predictors))  # leave the caller's intact
        table.predictors[BASE_RATE] = base_rate_pairs(table, base_rate)
        predictors.append(BASE_RATE)
        covered.append(BASE_RATE)
    has_exact = bool(np.any(censored & ~np.isnan(table.q_z)))
    modes = (COMPLETE_ONLY, SIMPLE, EXACT) if has_exact else (COMPLETE_ONLY, SIMPLE)

    sm = score_columns(table, predictors, opts.policy, modes)
    boot = bootstrap_means(sm.matrix(table.n), trajectory_keys(table.ids), opts.bootstrap, opts.seed)
    scores, deltas = score_rows(sm.keys, boot, sm.missing_q_z)
    index = sm.index()

    def paired(k_from: ColumnKey, k_to: ColumnKey) -> dict[str, Any]:
        return paired_delta_row(boot, index[k_from], index[k_to])

    recalibration = []
    aurocs = auroc_deltas(table, recalibrated, opts.policy, opts.bootstrap, opts.seed) if recalibrated else {}
    for raw, cal in recalibrated:
        rows = [
            {"statistic": f"tps {k.rule} {k.weights} {k.censoring}", **paired(k, dataclasses.replace(k, predictor=cal))}
            for k in sm.keys
            if k.predictor == raw
        ]
        au = aurocs[(raw, cal)]
        rows.append(
            {
                "statistic": "auroc phi_w",
                "delta": _num(au.delta),
                "se": _num(au.se),
                "z": _num(au.z),
                "ci_low": _num(au.ci_low),
                "ci_high": _num(au.ci_high),
            }
        )
        recalibration.append({"predictor": raw, "recalibrated": cal, "comparisons": rows})

    diagnostics, scalar_rows = diagnostic_rows(
        [
            (name, table.predictors[name].aggregates[sel], table.outcome[sel])
            for name in predictors
            for sel in [complete & table.predictors[name].usable]
        ],
        opts.ece_bins,
    )

    return {
        **_header(table, opts, covered, base_rate, skipped),
        "scores": scores,
        "deltas": deltas,
        "diagnostics": diagnostics,
        "scalar_predictors": scalar_rows,
        "recalibration": recalibration,
    }


def score_rows(
    keys: Sequence[ColumnKey], boot: BootstrapResult, missing_q_z: dict[str, int]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The "scores" rows (mean, SE, CI per column) and the "deltas" rows (each censored mode minus
    complete-only, paired on the same replicates) of bootstrapped columns."""
    se = boot.se()
    lo, hi = boot.ci()
    scores = []
    for i, k in enumerate(keys):
        row: dict[str, Any] = {
            "predictor": k.predictor,
            "rule": k.rule,
            "weights": k.weights,
            "censoring": k.censoring,
            "n": int(boot.n[i]),
            "mean": _num(boot.point[i]),
            "se": _num(se[i]),
            "ci_low": _num(lo[i]),
            "ci_high": _num(hi[i]),
        }
        if k.censoring == EXACT:
            row["n_missing_q_z"] = missing_q_z[k.predictor]
        scores.append(row)
    index = {k: i for i, k in enumerate(keys)}
    deltas = []
    for k in keys:
        if k.censoring == COMPLETE_ONLY:
            continue
        ref = ColumnKey(k.predictor, k.rule, k.weights, COMPLETE_ONLY)
        deltas.append(
            {
                "predictor": k.predictor,
                "rule": k.rule,
                "weights": k.weights,
                "comparison": f"{k.censoring} - {COMPLETE_ONLY}",
                **paired_delta_row(boot, index[ref], index[k]),
            }
        )
    return scores, deltas


def paired_delta_row(boot: BootstrapResult, i: int, j: int) -> dict[str, Any]:
    """mean(column j) - mean(column i) on the same replicates (paired bootstrap)."""
    rep = boot.replicates[:, j] - boot.replicates[:, i]
    d = boot.point[j] - boot.point[i]
    d_se = float(np.nanstd(rep, ddof=1)) if np.sum(~np.isnan(rep)) >= 2 else float("nan")
    d_lo, d_hi = percentile_ci(rep[:, None])
    return {
        "delta": _num(d),
        "se": _num(d_se),
        "z": _num(d / d_se) if d_se > 0 else None,
        "ci_low": _num(d_lo[0]),
        "ci_high": _num(d_hi[0]),
    }


def diagnostic_rows(
    items: Sequence[tuple[str, np.ndarray, np.ndarray]], ece_bins: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """("diagnostics", "scalar_predictors") rows from (predictor, (m, 4) summaries, (m,) outcomes)
    of the complete trajectories usable for each predictor."""
    diagnostics, scalar_rows = [], []
    for name, summaries, y in items:
        for a, agg_name in enumerate(AGGREGATOR_NAMES):
            diag = {key: _num(v) for key, v in scalar_diagnostics(summaries[:, a], y, ece_bins).items()}
            scalar_rows.append({"predictor": name, "aggregator": agg_name, "n": int(y.size), **diag})
            if agg_name == "phi_w":
                diagnostics.append({"predictor": name, "n": int(y.size), **diag})
    return diagnostics, scalar_rows


def _header(
    table: PairTable, opts: ReportOptions, predictors: list[str], base_rate: float | None, skipped: list[Skipped]
) -> dict[str, Any]:
    """version, settings, audit, coverage and skipped predictors: the parts every report has, scored or not."""
    coverage = [
        {
            "predictor": name,
            "usable": int(table.predictors[name].usable.sum()),
            "skipped": dict(table.predictors[name].skipped),
        }
        for name in predictors
    ]
    return report_header(
        [r.name for r in table.rules],
        [s.name for s in table.schedules],
        opts,
        base_rate,
        termination_audit(table, opts.policy),
        coverage,
        skipped,
    )


def report_header(
    rules: list[str],
    schedules: list[str],
    opts: ReportOptions,
    base_rate: float | None,
    audit: dict[str, Any],
    coverage: list[dict[str, Any]],
    skipped: Sequence[Skipped] = (),
) -> dict[str, Any]:
    """The header of a report from its parts (shared by the whole-sample and the partial-state paths)."""
    return {
        "version": REPORT_VERSION,
        "settings": {
            "rules": rules,
            "weights": schedules,
            "bootstrap": opts.bootstrap,
            "seed": opts.seed,
            "ci_level": CI_LEVEL,
            "bootstrap_method": "poisson, replicate weights derived from (trajectory_id, replicate, seed)",
            "diagnostic_summary": f"phi_w({DEFAULT_SCHEDULE.name}), normalised over observed steps",
            "ece_bins": opts.ece_bins,
            "base_rate": _num(base_rate) if opts.base_rate and base_rate is not None else None,
            "calibration": {"method": "raw"},
        },
        "audit": audit,
        "coverage": coverage,
        "skipped_predictors": as_dicts(skipped),
    }
