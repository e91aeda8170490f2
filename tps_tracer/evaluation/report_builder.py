"""The one report builder: the report object of a partial state.

Every report is built here, from a `PartialState` (evaluation/partial_state.py): the file
report (`report_from_table` makes the state of its one table), the accumulator's snapshot in
both modes, the chunked reader and the Ray engine (merged states). A change to a section of
the report is made here and nowhere else.

Recalibration is the one part that is not a sum: the "+platt" streams are fitted on the whole
sample before the state is built (report.py), and the paired AUROC deltas, which need the
per-trajectory ranks, are computed by that caller and passed in (`aurocs`); the paired TPS
deltas come from the state's bootstrap replicates like every other delta.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tps_tracer.constants import MISSING_POLICIES
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import CI_LEVEL, BootstrapResult, percentile_ci, replicate_means
from tps_tracer.evaluation.censoring_mix import CENSORING_MODES, COMPLETE_ONLY, EXACT, SIMPLE, ColumnKey
from tps_tracer.evaluation.diagnostics import scalar_diagnostics
from tps_tracer.evaluation.pairs import AGGREGATOR_NAMES
from tps_tracer.evaluation.partial_state import PartialState, PredictorState, gap_summary, states_nothing
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.skipped_predictors import (
    BASE_RATE,
    Skipped,
    as_dicts,
    check_known_predictors,
    no_data_reason,
    nothing_left,
    skip_detail,
    split_usable,
)
from tps_tracer.records.stop_reasons import Role
from tps_tracer.scoring.rules import DEFAULT_SCHEDULE, LogRule

if TYPE_CHECKING:
    from tps_tracer.evaluation.calibration.paired import PairedDelta

REPORT_VERSION = 1
NO_WORKING_SAMPLE = "no complete trajectory (stop_reason 'clean' with an outcome) and no censored one: nothing to score"
# With censored runs only, the predictors are scored (cen-simple, cen-exact) and the base rate,
# whose forecast is the mean complete outcome, is listed as skipped with this reason.
BASE_RATE_SKIPPED = Skipped(
    BASE_RATE, "needs at least one complete trajectory (a clean stop with an outcome) for its value; none yet"
)
_M = len(CENSORING_MODES)


def report_from_state(
    state: PartialState,
    opts: ReportOptions,
    allow_empty: bool = False,
    skipped: Sequence[Skipped] = (),
    recalibrated: Sequence[tuple[str, str]] = (),
    aurocs: Mapping[tuple[str, str], PairedDelta] | None = None,
) -> dict[str, Any]:
    """The report object (`tps-tracer report --json`, `Accumulator.snapshot()`) of a state.

    `opts.predictors` selects among the state's predictors (None: all, in first-seen order).
    Censored runs alone are scored (cen-simple, and cen-exact where q_z is given):
    complete-only columns then have n=0, and the base rate, which needs a complete outcome, is
    listed in "skipped_predictors". With no complete and no censored trajectory this raises, or
    with `allow_empty` returns the audit and coverage with empty score tables (a live monitor
    before its first finished run). A predictor without a usable trajectory in the working
    sample is left out of the score tables and listed in "skipped_predictors" with the reason,
    after the `skipped` entries the caller already decided (e.g. predictors not recalibrated).
    `recalibrated` names (raw, recalibrated) pairs whose paired deltas fill the "recalibration"
    section; `aurocs` holds their paired AUROC deltas (computed on the rows by the caller).
    """
    if opts.calibrate is not None or opts.calibrator is not None:
        raise InputError("recalibration refits on the whole sample: use build_report on full arrays")
    seen = state.predictor_names()
    wanted = list(seen) if opts.predictors is None else list(opts.predictors)
    check_known_predictors(wanted, seen)
    missing = [p for p in wanted if p not in state.predictors]
    if missing:
        raise InputError(f"the state was built without predictor(s) {', '.join(missing)}")
    audit = state.audit()
    if state.n_complete == 0 and audit["roles"][Role.CENSORED.value] == 0:
        if allow_empty:
            return {**_header(state, opts, wanted, None, audit, list(skipped)), **empty_tables()}
        raise InputError(NO_WORKING_SAMPLE)
    covered = list(wanted)
    predictors, no_data = split_usable(wanted, lambda p: _no_data_reason(state.predictors[p]))
    if covered and not predictors and not allow_empty:
        raise nothing_left("score", no_data)
    skipped = [*skipped, *no_data]
    # Censored runs alone are scored (cen-simple, cen-exact); the base rate needs a complete outcome.
    base_rate = state.outcome_sum / state.n_complete if state.n_complete else None
    states = {name: state.predictors[name] for name in covered}
    if opts.base_rate and base_rate is None and BASE_RATE not in state.predictors:
        skipped.append(BASE_RATE_SKIPPED)
    if opts.base_rate and base_rate is not None and BASE_RATE not in state.predictors:
        states[BASE_RATE] = PredictorState.constant(state.spec, state.base, state.n, state.n_empty, base_rate)
        predictors.append(BASE_RATE)
        covered.append(BASE_RATE)
    modes = CENSORING_MODES if audit["censored_with_q_z"] > 0 else (COMPLETE_ONLY, SIMPLE)
    keys, boot = _bootstrapped_columns(state, states, predictors, modes)
    scores, deltas = score_and_delta_rows(keys, boot, {name: states[name].missing_q_z for name in predictors})
    diagnostics, scalar_rows = diagnostic_rows(
        [(name, states[name].summaries, states[name].outcomes) for name in predictors], opts.ece_bins
    )
    return {
        **_header(state, opts, covered, base_rate, audit, skipped, states),
        "scores": scores,
        "deltas": deltas,
        "diagnostics": diagnostics,
        "scalar_predictors": scalar_rows,
        "recalibration": recalibration_rows(keys, boot, recalibrated, aurocs or {}),
    }


def _bootstrapped_columns(
    state: PartialState, states: dict[str, PredictorState], predictors: list[str], modes: Sequence[str]
) -> tuple[list[ColumnKey], BootstrapResult]:
    """One column per predictor x rule x schedule x mode: point means from the sums, replicate
    means from the replicate sums (the same Poisson weights whichever chunk a trajectory was in)."""
    mode_idx = [CENSORING_MODES.index(m) for m in modes]
    keys: list[ColumnKey] = []
    point, n, rep_sum, rep_den = [], [], [], []
    for name in predictors:
        st = states[name]
        for i, rule in enumerate(state.spec.rules):
            for j, sched in enumerate(state.spec.schedules):
                for m, mode in zip(mode_idx, modes, strict=True):
                    keys.append(ColumnKey(name, rule.name, sched.name, mode))
                    n.append(int(st.count[i, j, m]))
                    point.append(st.total[i, j, m] / st.count[i, j, m] if st.count[i, j, m] else np.nan)
                    rep_sum.append(st.rep_total[:, i, j, m])
                    rep_den.append(st.rep_count[:, m])
    b = state.spec.bootstrap
    boot = BootstrapResult(
        point=np.array(point, dtype=np.float64),
        n=np.array(n, dtype=np.int64),
        replicates=replicate_means(
            np.column_stack(rep_sum) if keys else np.zeros((b, 0)),
            np.column_stack(rep_den) if keys else np.zeros((b, 0)),
        ),
    )
    return keys, boot


def _no_data_reason(st: PredictorState) -> str | None:
    """`skipped_predictors.no_data_reason` from counts: trajectories usable in the working sample
    are the members of the simple mode's columns. A fill policy scores every run, so a predictor
    that no run states even once has no data either (it would score the constant PRIOR)."""
    if states_nothing(st.gaps):
        return "no trajectory states a forecast" + _skip_note(st.skipped)
    in_working = int(st.count.reshape(-1, _M)[0, CENSORING_MODES.index(SIMPLE)]) if st.count.size else 0
    return no_data_reason(_Coverage(np.array([st.usable > 0]), st.skipped), np.array([in_working > 0]))


@dataclasses.dataclass(frozen=True)
class _Coverage:
    usable: np.ndarray
    skipped: dict[str, int]
    no_data = "no trajectory has a forecast at every step"  # a state written before the gap counts

    @property
    def stated(self) -> np.ndarray:
        return self.usable


def _skip_note(skipped: dict[str, int]) -> str:
    return skip_detail(_Coverage(np.zeros(0, dtype=bool), skipped))


def recalibration_rows(
    keys: Sequence[ColumnKey],
    boot: BootstrapResult,
    recalibrated: Sequence[tuple[str, str]],
    aurocs: Mapping[tuple[str, str], PairedDelta],
) -> list[dict[str, Any]]:
    """The "recalibration" section: per (raw, recalibrated) pair, the paired TPS delta of each of
    the raw predictor's columns (same replicates) and the paired AUROC delta of Phi_w."""
    index = {k: i for i, k in enumerate(keys)}
    out = []
    for raw, cal in recalibrated:
        rows = [
            {
                "statistic": f"tps {k.rule} {k.weights} {k.censoring}",
                **paired_delta_row(boot, index[k], index[dataclasses.replace(k, predictor=cal)]),
            }
            for k in keys
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
        out.append({"predictor": raw, "recalibrated": cal, "comparisons": rows})
    return out


def _num(x: float | np.floating[Any]) -> float | None:
    """JSON-safe float: NaN/inf become null."""
    v = float(x)
    return v if math.isfinite(v) else None


def empty_tables() -> dict[str, list[Any]]:
    """The report's tables when nothing can be scored yet (a live monitor before its first run)."""
    return {"scores": [], "deltas": [], "diagnostics": [], "scalar_predictors": [], "recalibration": []}


def score_and_delta_rows(
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
    state: PartialState,
    opts: ReportOptions,
    covered: list[str],
    base_rate: float | None,
    audit: dict[str, Any],
    skipped: Sequence[Skipped],
    states: Mapping[str, PredictorState] | None = None,
) -> dict[str, Any]:
    """version, settings, audit, coverage and skipped predictors: the parts every report has, scored or not."""
    states = state.predictors if states is None else states
    coverage = [
        {"predictor": name, "usable": states[name].usable, "skipped": dict(states[name].skipped)} for name in covered
    ]
    return {
        "version": REPORT_VERSION,
        "settings": {
            "rules": [r.name for r in state.spec.rules],
            "weights": [s.name for s in state.spec.schedules],
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
        "log_clipped": _log_clipped(state, covered, states),
        "missing_forecasts": _missing_forecasts(state, covered, states),
        "skipped_predictors": as_dicts(skipped),
    }


def _missing_forecasts(state: PartialState, covered: list[str], states: Mapping[str, PredictorState]) -> dict[str, Any]:
    """Steps without a forecast per predictor over the working sample (evaluation/rows.py):
    the policy that scored them, and per predictor the share of steps and runs affected, the cost
    of missingness and the success rate of runs with and without a gap."""
    spec = state.spec
    return {
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
    }


def _log_clipped(
    state: PartialState, covered: list[str], states: Mapping[str, PredictorState]
) -> dict[str, Any] | None:
    """How many forecasts the log rule clipped to [eps, 1 - eps], per predictor, over the working
    sample's usable trajectories (None without a log rule). A forecast of exactly 0 or 1 on a run
    that went the other way scores log(eps) = -13.8 per unit weight: the count says how often."""
    eps = next((r.eps for r in state.spec.rules if isinstance(r, LogRule)), None)
    if eps is None:
        return None
    # The base rate is the share of complete runs that succeeded: 0 or 1 only if all went one way.
    counts = {name: int(states[name].clipped) for name in covered if name != BASE_RATE}
    return {"eps": eps, "forecasts": counts, "total": sum(counts.values())}
