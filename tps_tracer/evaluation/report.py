"""The evaluation report (paper, Section 4.2): the termination audit, TPS per predictor x rule x
schedule x censoring mode with bootstrap CIs, Delta_practice, then rank/calibration diagnostics."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tps_tracer.constants import CENSORING_MODES, COMPLETE_ONLY, DEFAULT_PENALTY, EXACT, MISSING_POLICIES, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import (
    CI_LEVEL,
    BootstrapResult,
    PairedDelta,
    delta_from_replicates,
    replicate_means,
)
from tps_tracer.evaluation.diagnostics import scalar_diagnostics
from tps_tracer.evaluation.pairs import (
    ColumnKey,
    PairTable,
    pair_table_from_arrays,
)
from tps_tracer.evaluation.partial_state import PartialState, PredictorState, StateSpec, gap_summary, states_nothing
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES
from tps_tracer.evaluation.skipped_predictors import (
    BASE_RATE,
    NO_PREDICTOR,
    PLATT_SUFFIX,
    Skipped,
    as_dicts,
    check_known_predictors,
    check_no_base_rate,
    no_data_reason,
    nothing_left,
    platt_fit_reason,
    role_masks,
    skip_detail,
    split_usable,
)
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.limits import check_unique_ids
from tps_tracer.records.stop_reasons import Role
from tps_tracer.scoring import DEFAULT_SCHEDULE, LogRule, WeightSchedule, get_rule, get_schedule

if TYPE_CHECKING:
    from tps_tracer.records.schema import TrajectoryRecord

REPORT_VERSION = 1
NO_WORKING_SAMPLE = "no complete trajectory (stop_reason 'clean' with an outcome) and no censored one: nothing to score"
# With censored runs only, the predictors are scored (cen-simple, cen-exact) and the base rate,
# whose forecast is the mean complete outcome, is listed as skipped with this reason.
BASE_RATE_SKIPPED = Skipped(
    BASE_RATE, "needs at least one complete trajectory (a clean stop with an outcome) for its value; none yet"
)
_M = len(CENSORING_MODES)
_DELTA_STATS = ("delta", "se", "z", "ci_low", "ci_high")
_TABLES = ("scores", "deltas", "diagnostics", "scalar_predictors", "recalibration")


def report_from_state(
    state: PartialState,
    opts: ReportOptions,
    allow_empty: bool = False,
    skipped: Sequence[Skipped] = (),
    recalibrated: Sequence[tuple[str, str]] = (),
    aurocs: Mapping[tuple[str, str], PairedDelta] | None = None,
) -> dict[str, Any]:
    """The report object of a state. Censored runs alone are scored (the base rate skipped); with no
    complete and no censored run this raises, or with `allow_empty` (a live monitor before its first
    finished run) returns the audit with empty tables."""
    if opts.calibrate is not None or opts.calibrator is not None:
        raise InputError("recalibration refits on the whole sample: use build_report on full arrays")
    seen = sorted(state.first_seen, key=lambda p: state.first_seen[p])  # first-seen order
    covered = list(seen) if opts.predictors is None else list(opts.predictors)
    check_known_predictors(covered, seen)
    missing = [p for p in covered if p not in state.predictors]
    if missing:
        raise InputError(f"the state was built without predictor(s) {', '.join(missing)}")
    audit = state.audit()
    if state.n_complete == 0 and audit["roles"][Role.CENSORED.value] == 0:
        if allow_empty:
            return {**_header(state, opts, covered, None, audit, skipped, state.predictors), **{k: [] for k in _TABLES}}
        raise InputError(NO_WORKING_SAMPLE)
    predictors, no_data = split_usable(covered, lambda p: _no_data_reason(state.predictors[p]))
    if covered and not predictors and not allow_empty:
        raise nothing_left("score", no_data)
    skipped = [*skipped, *no_data]
    base_rate = state.outcome_sum / state.n_complete if state.n_complete else None
    states = {name: state.predictors[name] for name in covered}
    if opts.base_rate and base_rate is None and BASE_RATE not in state.predictors:
        skipped.append(BASE_RATE_SKIPPED)
    if opts.base_rate and base_rate is not None and BASE_RATE not in state.predictors:
        states[BASE_RATE] = PredictorState.constant(state.spec, state.base, state.n, state.n_empty, base_rate)
        predictors.append(BASE_RATE)
        covered.append(BASE_RATE)
    modes = CENSORING_MODES if audit["censored_with_q_z"] > 0 else (COMPLETE_ONLY, SIMPLE)
    # One column per predictor x rule x schedule x mode, its means from the state's sums.
    spec, b = state.spec, state.spec.bootstrap
    m = [CENSORING_MODES.index(mode) for mode in modes]
    rules, schedules = [r.name for r in spec.rules], [s.name for s in spec.schedules]
    keys = [ColumnKey(*k) for k in itertools.product(predictors, rules, schedules, modes)]
    width = len(rules) * len(schedules)  # columns per predictor and mode
    sts = [states[name] for name in predictors]
    count = np.concatenate([st.count[..., m].ravel() for st in sts] or [np.zeros(0, dtype=np.int64)])
    total = np.concatenate([st.total[..., m].ravel() for st in sts] or [np.zeros(0)])
    rep_sum = np.hstack([st.rep_total[..., m].reshape(b, width * len(m)) for st in sts] or [np.zeros((b, 0))])
    rep_den = np.hstack([np.tile(st.rep_count[:, m], width) for st in sts] or [np.zeros((b, 0))])
    boot = BootstrapResult(replicate_means(total, count), count, replicate_means(rep_sum, rep_den))
    # The "scores" rows and the "deltas" rows (each censored mode minus complete-only, paired).
    lo, hi = boot.ci()
    stats = {"mean": boot.point, "se": boot.se(), "ci_low": lo, "ci_high": hi}
    index = {k: i for i, k in enumerate(keys)}
    scores, deltas = [], []
    for i, k in enumerate(keys):
        row: dict[str, Any] = {**vars(k), "n": int(boot.n[i]), **{stat: json_num(v[i]) for stat, v in stats.items()}}
        if k.censoring == EXACT:
            row["n_missing_q_z"] = states[k.predictor].missing_q_z
        scores.append(row)
        if k.censoring != COMPLETE_ONLY:
            ref = index[dataclasses.replace(k, censoring=COMPLETE_ONLY)]
            row = {**vars(k), "comparison": f"{k.censoring} - {COMPLETE_ONLY}", **paired_delta_row(boot, ref, i)}
            del row["censoring"]  # (predictor, rule, weights, comparison, delta statistics)
            deltas.append(row)
    diagnostics, scalar_rows = [], []
    for name in predictors:
        y = states[name].outcomes
        for a, agg_name in enumerate(AGGREGATOR_NAMES):
            d = scalar_diagnostics(states[name].summaries[:, a], y, opts.ece_bins)
            diag = {key: json_num(v) for key, v in d.items()}
            scalar_rows.append({"predictor": name, "aggregator": agg_name, "n": int(y.size), **diag})
            if agg_name == "phi_w":
                diagnostics.append({"predictor": name, "n": int(y.size), **diag})
    recalibration: list[dict[str, Any]] = []
    for raw, cal in recalibrated:  # the paired TPS delta of each raw column, then the AUROC delta of Phi_w
        rows = [
            {
                "statistic": f"tps {k.rule} {k.weights} {k.censoring}",
                **paired_delta_row(boot, index[k], index[dataclasses.replace(k, predictor=cal)]),
            }
            for k in keys
            if k.predictor == raw
        ]
        au = (aurocs or {})[(raw, cal)]
        rows.append({"statistic": "auroc phi_w", **{k: json_num(getattr(au, k)) for k in _DELTA_STATS}})
        recalibration.append({"predictor": raw, "recalibrated": cal, "comparisons": rows})
    return {
        **_header(state, opts, covered, base_rate, audit, skipped, states),
        "scores": scores,
        "deltas": deltas,
        "diagnostics": diagnostics,
        "scalar_predictors": scalar_rows,
        "recalibration": recalibration,
    }


def _no_data_reason(st: PredictorState) -> str | None:
    """`no_data_reason` from counts: the working sample's usable runs are the simple mode's members; a
    predictor no run states has no data either (a fill policy would score the constant PRIOR)."""
    note = skip_detail(st.skipped)
    if states_nothing(st.gaps):
        return "no trajectory states a forecast" + note
    if not st.usable:
        return "no trajectory has a forecast at every step" + note  # a state written before the gap counts
    in_working = int(st.count.reshape(-1, _M)[0, CENSORING_MODES.index(SIMPLE)]) if st.count.size else 0
    return None if in_working else "no usable trajectory in the working sample" + note


def json_num(x: float | np.floating[Any]) -> float | None:  # NaN, inf: JSON null
    v = float(x)
    return v if math.isfinite(v) else None


def paired_delta_row(boot: BootstrapResult, i: int, j: int) -> dict[str, Any]:
    """mean(column j) - mean(column i) on the same replicates."""
    rep = boot.replicates[:, j] - boot.replicates[:, i]
    d = delta_from_replicates("", boot.point[i], boot.point[j], rep, 0)
    return {k: json_num(getattr(d, k)) for k in _DELTA_STATS}


def _header(
    state: PartialState,
    opts: ReportOptions,
    covered: list[str],
    base_rate: float | None,
    audit: dict[str, Any],
    skipped: Sequence[Skipped],
    states: Mapping[str, PredictorState],
) -> dict[str, Any]:
    """The parts every report has, scored or not."""
    spec = state.spec
    coverage = [
        {"predictor": name, "usable": states[name].usable, "skipped": dict(states[name].skipped)} for name in covered
    ]
    # log_clipped: forecasts the log rule clipped to [eps, 1 - eps] (a 0 or 1 that went the other way
    # scores log(eps) = -13.8 per unit weight); None without a log rule. The base rate is 0 or 1 only
    # if all complete runs went one way.
    eps = next((r.eps for r in spec.rules if isinstance(r, LogRule)), None)
    clipped = {name: int(states[name].clipped) for name in covered if name != BASE_RATE}
    return {
        "version": REPORT_VERSION,
        "settings": {
            "rules": [r.name for r in spec.rules],
            "weights": [s.name for s in spec.schedules],
            "bootstrap": opts.bootstrap,
            "seed": opts.seed,
            "ci_level": CI_LEVEL,
            "bootstrap_method": "poisson, replicate weights derived from (trajectory_id, replicate, seed)",
            "diagnostic_summary": f"phi_w({DEFAULT_SCHEDULE.name}), normalised over observed steps",
            "ece_bins": opts.ece_bins,
            "base_rate": json_num(base_rate) if opts.base_rate and base_rate is not None else None,
            "calibration": {"method": "raw"},
        },
        "audit": audit,
        "coverage": coverage,
        "log_clipped": None if eps is None else {"eps": eps, "forecasts": clipped, "total": sum(clipped.values())},
        "missing_forecasts": {
            "policy": spec.missing,
            "policy_note": MISSING_POLICIES[spec.missing],
            "cost": (
                f"mean over runs of carry-forward minus skip-renormalise TPS ({spec.rules[0].name}, "
                f"{spec.schedules[0].name}, simple censoring): what the gaps cost the agent"
            ),
            # A predictor no run states is a skipped one (without data), not one with gaps.
            "predictors": {
                name: gap_summary(states[name].gaps)
                for name in covered
                if name != BASE_RATE and not states_nothing(states[name].gaps)
            },
        },
        "skipped_predictors": as_dicts(skipped),
    }


def build_report(arrays: TrajectoryArrays, options: ReportOptions | None = None) -> dict[str, Any]:
    """The report of flat trajectory arrays; recalibration (`opts.calibrate`, `opts.calibrator`) fits
    "<p>+platt" streams on the whole sample first."""
    opts = options or ReportOptions()
    check_unique_ids(arrays.ids)
    if opts.predictors is None and not arrays.predictors:
        raise InputError(NO_PREDICTOR)
    predictors = list(arrays.predictors) if opts.predictors is None else list(opts.predictors)
    check_no_base_rate(predictors)  # an unselected column of that name collides with nothing
    check_known_predictors(predictors, arrays.predictors)
    rules, schedules = [get_rule(r) for r in opts.rules], [get_schedule(s) for s in opts.schedules]
    calibration: dict[str, Any] = {"method": "raw"}
    recalibrated: list[tuple[str, str]] = []
    skipped: list[Skipped] = []
    if opts.calibrate is not None or opts.calibrator is not None:
        complete, censored = role_masks(arrays.stop_code, arrays.outcome, opts.policy)
        raw = [  # predictors without data are skipped (once) by report_from_state
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
    from tps_tracer.evaluation.calibration import with_calibrator_streams, with_platt_streams

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


def report_from_table(
    table: PairTable,
    options: ReportOptions | None = None,
    allow_empty: bool = False,
    recalibrated: Sequence[tuple[str, str]] = (),
    skipped: Sequence[Skipped] = (),
) -> dict[str, Any]:
    """The report of the partial state of one pair table (rules and schedules are the table's); the
    paired AUROC deltas of `recalibrated` pairs need the rows' ranks, so they are computed here."""
    opts = options or ReportOptions()
    check_known_predictors([] if opts.predictors is None else opts.predictors, table.predictors)
    spec = StateSpec.from_options(opts, table.rules, table.schedules)
    state = PartialState.from_table(table, spec)
    aurocs = {}
    if recalibrated:
        from tps_tracer.evaluation.calibration import auroc_deltas

        aurocs = auroc_deltas(table, recalibrated, opts.policy, opts.bootstrap, opts.seed)
    return report_from_state(state, opts, allow_empty, skipped, recalibrated, aurocs)


# -- `report --by KEY`: one report per value of a record metadata key ----------------------------

MISSING = "(missing)"
MAX_GROUPS = 100  # more distinct values is almost certainly a per-run key (an id), not a slice


class TooManyGroups(InputError):
    pass


def reports_by(path: str | os.PathLike[str], key: str, options: ReportOptions | None = None) -> dict[str, Any]:
    """{"by": key, "groups": [{"value", "n", "report" or "error"}], "input"?}: each group scored on its
    own, as `report` of a file holding only its records. Groups are labelled by `metadata[key]` (strings as
    they are, other values as JSON, `(missing)` without the key) in the order their value first occurs.
    The records are read whole (the columnar readers keep no metadata), so memory grows with the file."""
    from tps_tracer.records.arrays import to_arrays
    from tps_tracer.records.reading import exact_records

    opts = options or ReportOptions()
    read = exact_records(path)
    by_label: dict[str, list[TrajectoryRecord]] = {}
    for rec in read:
        value = rec.metadata.get(key)
        label = MISSING if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        by_label.setdefault(label, []).append(rec)
        if len(by_label) > MAX_GROUPS:
            raise TooManyGroups(
                f"metadata key {key!r} has more than {MAX_GROUPS} distinct values: "
                "split by a key that names a group (agent, model), not a run"
            )
    groups = []
    for value, recs in by_label.items():
        try:
            groups.append({"value": value, "n": len(recs), "report": build_report(to_arrays(recs), opts)})
        except InputError as exc:  # e.g. no forecasts in this group: the other groups are still scored
            groups.append({"value": value, "n": len(recs), "error": str(exc)})
    out: dict[str, Any] = {"by": key, "groups": groups}
    if read.set_aside:
        out["input"] = {"set_aside": read.set_aside.as_dict()}
    return out
