"""Assemble the evaluation report (the object behind `tps-tracer report --json`).

Follows the paper's reporting convention (Section 4.2): the termination audit first, TPS
per predictor x rule x schedule for complete-only, cen-simple and (where q_z is present)
cen-exact with bootstrap CIs, Delta_practice, then rank/calibration diagnostics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from tps_tracer.errors import InputError
from tps_tracer.evaluation.calibration.cross_fit import DEFAULT_PENALTY
from tps_tracer.evaluation.calibration.recalibration import (
    PLATT_SUFFIX,
    auroc_deltas,
    with_calibrator_streams,
    with_platt_streams,
)
from tps_tracer.evaluation.pairs import (
    AGGREGATOR_NAMES,
    PairTable,
    PredictorPairs,
    pair_table_from_arrays,
    skip_counts,
)
from tps_tracer.evaluation.partial_state import PartialState, StateSpec
from tps_tracer.evaluation.report_builder import (  # re-exported: the report's constants, as before
    BASE_RATE_SKIPPED,
    NO_WORKING_SAMPLE,
    REPORT_VERSION,
    report_from_state,
)
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.skipped_predictors import (
    BASE_RATE,
    NO_PREDICTOR,
    Skipped,
    check_known_predictors,
    check_no_base_rate,
    no_data_reason,
    nothing_left,
    platt_fit_reason,
    role_masks,
    split_usable,
)
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.limits import check_unique_ids
from tps_tracer.scoring.rules import WeightSchedule, get_rule, get_schedule

__all__ = [
    "BASE_RATE",
    "BASE_RATE_SKIPPED",
    "NO_WORKING_SAMPLE",
    "REPORT_VERSION",
    "ReportOptions",
    "base_rate_pairs",
    "build_report",
    "check_unique_ids",
    "report_from_table",
]


def build_report(arrays: TrajectoryArrays, options: ReportOptions | None = None) -> dict[str, Any]:
    """The report of flat trajectory arrays (see `report_from_table`)."""
    opts = options or ReportOptions()
    check_unique_ids(arrays.ids)
    if opts.predictors is None and not arrays.predictors:
        raise InputError(NO_PREDICTOR)
    predictors = list(arrays.predictors) if opts.predictors is None else list(opts.predictors)
    check_no_base_rate(predictors)  # an unselected column of that name collides with nothing
    check_known_predictors(predictors, arrays.predictors)
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
        pair_table_from_arrays(arrays, predictors, rules, schedules, missing=opts.missing),
        # the streams are fitted above; the builder reports them like any other predictor
        dataclasses.replace(opts, predictors=predictors, calibrate=None, calibrator=None),
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


def report_from_table(
    table: PairTable,
    options: ReportOptions | None = None,
    allow_empty: bool = False,
    recalibrated: Sequence[tuple[str, str]] = (),
    skipped: Sequence[Skipped] = (),
) -> dict[str, Any]:
    """The report of one pair table: the partial state of its rows, reported by the one builder
    (`report_builder.report_from_state`; see it for `allow_empty`, `recalibrated`, `skipped`).

    Rules and schedules are the table's; `options.predictors` selects among its predictors. The
    paired AUROC deltas of `recalibrated` pairs need the rows' ranks, so they are computed here.
    """
    opts = options or ReportOptions()
    check_known_predictors([] if opts.predictors is None else opts.predictors, table.predictors)
    spec = StateSpec(
        rules=tuple(table.rules),
        schedules=tuple(table.schedules),
        policy=opts.policy,
        bootstrap=opts.bootstrap,
        seed=opts.seed,
        predictors=None if opts.predictors is None else tuple(opts.predictors),
        missing=opts.missing,
    )
    state = PartialState.from_table(table, spec)
    aurocs = auroc_deltas(table, recalibrated, opts.policy, opts.bootstrap, opts.seed) if recalibrated else {}
    return report_from_state(state, opts, allow_empty, skipped, recalibrated, aurocs)
