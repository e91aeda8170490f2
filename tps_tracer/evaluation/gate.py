"""The deployment gate: may this agent ship, judged on censored TPS with confidence intervals (docs/gate.md).
Every route (records, files, Ray rows, a saved snapshot) hands its checks to `_result`, which decides the verdict.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import norm

from tps_tracer.constants import CENSORING_MODES, DEFAULT_MISSING, EXACT, MAX_REPLICATES, MISSING_POLICIES, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import CI_LEVEL, bootstrap_means, percentile_ci, replicate_sums, trajectory_keys
from tps_tracer.evaluation.chunked import Progress, map_chunks
from tps_tracer.evaluation.pairs import (
    PairTable,
    PredictorPairs,
    audit_of_table,
    pair_table_from_arrays,
    score_columns,
    skip_counts,
)
from tps_tracer.evaluation.partial_state import gap_stats, gap_summary
from tps_tracer.evaluation.report import NO_WORKING_SAMPLE, json_num
from tps_tracer.evaluation.report_options import OptionError, is_int
from tps_tracer.evaluation.skipped_predictors import (
    BASE_RATE,
    NO_PREDICTOR,
    Skipped,
    as_dicts,
    check_known_predictors,
    check_no_base_rate,
    no_data_reason,
)
from tps_tracer.records.arrays import TrajectoryArrays, to_arrays
from tps_tracer.records.limits import SetAside, check_unique_ids
from tps_tracer.records.reading import (
    DEFAULT_CHUNK_BYTES,
    has_resolution_lines,
    is_parquet,
    read_task_ids,
    source_files,
    task_id_from,
)
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring import BoolArray, FloatArray, LogRule, get_rule, get_schedule

REGRESSION = "regression"
NON_INFERIORITY = "non-inferiority"
TESTS = (REGRESSION, NON_INFERIORITY)
ALPHA = 0.025  # one-sided level of each bound of the two-sided 95% CI
POWER = 0.80  # the power at which the regression test's smallest detectable drop is quoted
# An identical candidate FAILs a comparative check at most this often: a gate run on every pull
# request of an unchanged agent blocks one in twenty at worst, twice the regression test's ALPHA.
FALSE_ALARM = 0.05
Z_ALPHA = float(norm.isf(ALPHA))
Z_POWER = float(norm.isf(1.0 - POWER))
Z_FALSE_ALARM = float(norm.isf(FALSE_ALARM))

GATE_VERSION = 4  # raised with each change of the result's fields (docs/gate.md: 3 coverage, 4 CANNOT DECIDE)
PASS, FAIL, UNUSABLE, CANNOT_DECIDE = "pass", "fail", "unusable", "cannot decide"
EXIT_CODES = {PASS: 0, FAIL: 1, UNUSABLE: 2, CANNOT_DECIDE: 2}
# Every check names the side it is about; "both": the candidate-minus-baseline difference.
CANDIDATE, BASELINE = "candidate", "baseline"
SIDE_OF = {"vs_baseline": "both", "stability": "all"}
# Failing one of these refuses the sample (exit 2): the runs they leave out have unknown scores.
REFUSING_CHECKS = ("capture_loss", "skipped_share", "gated_predictor", "q_z_for_exact")
FRAGILE_FLIP = 0.2  # a verdict that flips in more replicates than this is warned about
MIN_GATE_REPLICATES = 100  # fewer make the 2.5% / 97.5% percentiles too coarse for a verdict
# Left-out runs are chosen by the agent's behaviour: scoring d lower, they move the gated mean by
# share * d. At 10% and d 0.5 (failed vs succeeded log score) that is 0.05, a typical margin: warn.
WARN_SHARE = 0.1
# Null on every step by design for a native tool-calling agent: the default choice passes over them.
BY_DESIGN_NULL = ("action_token_prob", "action_entropy_conf")
SNAPSHOT_REPLICATES = "the snapshot's own bootstrap (its settings.bootstrap; --bootstrap does not apply)"


class GateInputError(InputError):
    """The gate cannot run on this input (the message says why)."""


class GateOptionError(OptionError, GateInputError):
    """A GateCriteria field is invalid (the CLI maps `field` to its flag)."""

    owner = "GateCriteria"


@dataclass
class GateCriteria:
    predictor: str | None = None  # None: the baseline's first predictor with data, else the candidate file's first
    rule: str = "log"
    weights: str = "linear-front"
    censoring: str = SIMPLE
    min_score: float | None = None
    vs_base_rate: bool = False
    margin: float = 0.0
    test: str = REGRESSION
    min_n: int = 30
    max_excluded_share: float | None = None
    allow_capture_loss: bool = False  # gate a sample holding capture_lost runs (their scores unknown)
    # Above 20% even d 0.25 (WARN_SHARE) moves the mean by a margin: the verdict would describe another population.
    max_skipped_share: float = 0.2
    max_flip: float | None = None
    high_censoring: float = 0.2  # warn above this censoring rate when no q_z is available
    bootstrap: int = 2000
    seed: int = 0
    policy: CensoringPolicy = field(default_factory=CensoringPolicy)
    missing: str = DEFAULT_MISSING  # steps without a forecast (evaluation/rows.py)

    def validate(self, has_baseline: bool) -> None:
        self.check_values()
        if self.min_score is None and not self.vs_base_rate and not has_baseline:
            raise GateInputError("no decision criterion: give --min, --vs-base-rate and/or --baseline")

    def check_values(self) -> None:
        """Each field's own range, before any data is read (a NaN threshold would fail every check)."""
        for name, ok, message in _FIELD_CHECKS:
            value = getattr(self, name)
            try:
                passed = ok(value)
            except (ValueError, TypeError, AttributeError) as exc:  # a lookup's or `_finite`'s own message
                raise GateOptionError(name, str(exc)) from None
            if not passed:
                raise GateOptionError(name, message.format(value, type(value).__name__))


def _finite(value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InputError(f"must be a finite number, got {value!r}")
    return float(value)


_FLAGS = ("vs_base_rate", "allow_capture_loss")
_SHARES = ("max_excluded_share", "max_skipped_share", "max_flip", "high_censoring")

# GateCriteria's checks in the order a user meets them: (field, test, message formatted with the value, its type).
_FIELD_CHECKS: tuple[tuple[str, Any, str], ...] = (
    ("missing", lambda v: v in MISSING_POLICIES, f"unknown policy {{0!r}} (choose from {', '.join(MISSING_POLICIES)})"),
    ("predictor", lambda v: v is None or (isinstance(v, str) and v), "must be a non-empty string or None, got {0!r}"),
    ("rule", lambda v: hasattr(get_rule(v), "branches"), "must be a rule name or a score rule, got {0!r}"),
    ("weights", get_schedule, ""),
    ("censoring", lambda v: v in CENSORING_MODES, f"must be one of {', '.join(CENSORING_MODES)}, got {{0!r}}"),
    ("min_score", lambda v: v is None or _finite(v) is not None, ""),  # _finite raises unless a finite number
    *((f, lambda v: isinstance(v, (bool, np.bool_)), "must be true or false, got {0!r}") for f in _FLAGS),
    ("margin", lambda v: _finite(v) >= 0, "must be >= 0 (how much worse than the reference is tolerated), got {0!r}"),
    ("test", lambda v: v in TESTS, f"must be one of {', '.join(TESTS)}, got {{0!r}}"),
    ("min_n", lambda v: is_int(v) and v >= 1, "must be an integer >= 1, got {0!r}"),
    *((f, lambda v: v is None or 0 <= _finite(v) <= 1, "is a share: must lie in [0, 1], got {0!r}") for f in _SHARES),
    (
        "bootstrap",
        lambda v: is_int(v) and MIN_GATE_REPLICATES <= v <= MAX_REPLICATES,
        f"must be an integer in [{MIN_GATE_REPLICATES}, {MAX_REPLICATES}] (a CI needs at least "
        f"{MIN_GATE_REPLICATES}; memory grows as replicates x columns), got {{0!r}}",
    ),
    ("seed", is_int, "must be an integer, got {0!r}"),
    ("policy", lambda v: isinstance(v, CensoringPolicy), "must be a CensoringPolicy, got {1}"),
)


# -- what the gate reads: per run, a fixed-size row per trajectory (never the records or their steps) --


@dataclass
class GateSample:
    """One run: its pair table (the gated rule and schedule), task ids to pair it with a baseline, lines set aside."""

    table: PairTable
    task_ids: list[str]
    set_aside: SetAside = field(default_factory=SetAside)


def gate_rows(arrays: TrajectoryArrays, crit: GateCriteria) -> PairTable:
    rules, schedules = [get_rule(crit.rule)], [get_schedule(crit.weights)]
    return pair_table_from_arrays(arrays, list(arrays.predictors), rules, schedules, False, missing=crit.missing)


def concat_tables(parts: Sequence[PairTable], missing: str) -> PairTable:
    """One table from consecutive parts; a predictor a part lacks is all gaps there, scored by `missing`."""
    if len(parts) == 1:
        return parts[0]
    predictors: dict[str, PredictorPairs] = {}
    for name in dict.fromkeys(name for p in parts for name in p.predictors):
        cols = [
            p.predictors[name]
            if name in p.predictors
            else PredictorPairs.never_stated(p.n_steps, p.weight_mass, p.rules, 0, missing)
            for p in parts
        ]
        predictors[name] = PredictorPairs(
            aggregates=np.empty((sum(p.n for p in parts), 0)),
            skipped=dict(sum((Counter(c.skipped) for c in cols), Counter())),  # zero counts dropped
            **{f: np.concatenate([getattr(c, f) for c in cols]) for f in ("usable", "pairs", "clipped", "missing")},
        )
    rows = ("stop_code", "outcome", "q_z", "n_steps", "horizon", "weight_mass")
    arrays: dict[str, Any] = {a: np.concatenate([getattr(p, a) for p in parts]) for a in rows}
    ids, unscored = [i for p in parts for i in p.ids], sum(p.outcome_on_unscored for p in parts)
    return dataclasses.replace(parts[0], ids=ids, predictors=predictors, outcome_on_unscored=unscored, **arrays)


def sample_from_paths(
    paths: Sequence[str | os.PathLike[str]],
    crit: GateCriteria,
    with_task_ids: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Progress | None = None,
) -> GateSample:
    """The files (JSON Lines, Parquet, directories of shards) read chunk by chunk as one run."""
    parts: list[PairTable] = []
    seen: set[str] = set()  # ids of the earlier files (within one file, the reader checks duplicates)
    inputs: list[Any] = list(paths)
    set_aside = SetAside()
    if len(paths) > 1 and any(not is_parquet(f) and has_resolution_lines(f) for f in source_files(inputs)):
        inputs = [inputs]  # a grading job's resolution lines in a file of their own: one input (records/reading.py)
    for path in inputs:
        tables = map_chunks(path, lambda a: gate_rows(a, crit), chunk_bytes, progress, set_aside)
        dup = next((i for t in tables for i in t.ids if i in seen), None)
        if dup is not None:
            raise GateInputError(f"{path}: trajectory id {dup!r} also appears in an earlier file")
        if len(inputs) > 1:
            seen.update(i for t in tables for i in t.ids)
        parts.extend(tables)
    return sample_from_tables(parts, paths, with_task_ids, crit.missing, set_aside)


def sample_from_tables(
    parts: Sequence[PairTable],
    paths: Sequence[str | os.PathLike[str]],
    with_task_ids: bool,
    missing: str,
    set_aside: SetAside | None = None,
) -> GateSample:
    """Task ids (a baseline comparison only) are read in one more streaming pass, else the trajectory ids serve."""
    if sum(p.n for p in parts) == 0:
        raise GateInputError("no trajectories")
    table = concat_tables(parts, missing)
    task_ids = list(table.ids)
    set_aside = set_aside or SetAside()
    if with_task_ids:
        pairs = [p for path in paths for p in zip(*read_task_ids(path), strict=True)]
        if set_aside.counts.get("duplicate_id"):  # the readers kept each repeated id's first record
            firsts: dict[str, str] = {}
            pairs = [(i, firsts.setdefault(i, t)) for i, t in pairs if i not in firsts]
        task_ids = [t for _, t in pairs]
        if [i for i, _ in pairs] != table.ids:  # both passes read the same files in the same order
            raise GateInputError("the trajectory files changed while the gate was reading them")
    return GateSample(table, task_ids, set_aside)


def _sample(run: Sequence[TrajectoryRecord] | GateSample, crit: GateCriteria) -> GateSample:
    if isinstance(run, GateSample):
        return run
    try:
        check_unique_ids([r.trajectory_id for r in run])
    except InputError as exc:
        raise GateInputError(str(exc)) from None
    if not run:
        raise GateInputError("no trajectories")
    set_aside = getattr(run, "set_aside", None)  # what `read_trajectories` set aside (ReadRecords)
    return GateSample(
        gate_rows(to_arrays(run), crit),
        [task_id_from(r.trajectory_id, r.metadata) for r in run],
        set_aside if isinstance(set_aside, SetAside) else SetAside(),
    )


# -- the gated column: chosen from the criteria or the baseline, never from the candidate's data --


def _scorable(sample: GateSample, crit: GateCriteria) -> BoolArray:
    if sample.table.n == 0:
        raise GateInputError("no trajectories")
    complete, censored = sample.table.role_masks(crit.policy)
    if not complete.any() and not censored.any():
        raise GateInputError(NO_WORKING_SAMPLE)
    return complete | censored


def choose_predictor(crit: GateCriteria, cand: GateSample, base: GateSample | None) -> tuple[str, str, list[Skipped]]:
    """(predictor, where the choice came from, predictors passed over with the reason); never from the candidate's
    data: a prompt change that nulls the candidate's `verbal` must not move the gate to `token_prob` on both sides."""
    if crit.predictor in (None, BASE_RATE):  # a file column of that name is read unless another is named
        try:
            for sample in [s for s in (cand, base) if s is not None]:
                check_no_base_rate(sample.table.predictors)
        except InputError as exc:
            raise GateInputError(str(exc)) from None
    if crit.predictor is not None:
        if base is None or crit.predictor not in base.table.predictors:  # in neither file: a typo
            try:
                check_known_predictors([crit.predictor], [p for p in cand.table.predictors if p != BASE_RATE])
            except InputError as exc:
                raise GateInputError(f"--predictor: {exc}") from None
        return crit.predictor, "--predictor", []
    # The baseline's first predictor with data; else the candidate's first, passing over only the by-design nulls.
    sample = cand if base is None else base
    on_base = base is not None
    working = _scorable(sample, crit)
    skipped: list[Skipped] = []
    for name, col in sample.table.predictors.items():
        reason = no_data_reason(col, working)
        if on_base and reason is None:
            return name, "the baseline's first predictor with data", skipped
        if not on_base and (reason is None or name not in BY_DESIGN_NULL):
            return name, "the first predictor in the candidate's file", skipped
        why = f"no data in the baseline: {reason}" if on_base else f"{reason} (null by design for native tool calls)"
        skipped.append(Skipped(name, why))
    why = "; ".join(f"{s.predictor}: {s.reason}" for s in skipped)
    if on_base:
        raise GateInputError(f"the baseline has no predictor to gate on: {why or NO_PREDICTOR}")
    raise GateInputError(f"no predictor to gate on: {why}" if why else NO_PREDICTOR)


@dataclass(eq=False)  # hashable, as an exception should be
class Unusable(Exception):
    """The sample cannot score the gated quantity: an UNUSABLE verdict (exit 2), with the reason."""

    check: str
    reason: str
    side: str = CANDIDATE

    def as_check(self) -> dict[str, Any]:
        return _check(self.check, False, None, None, self.reason, side=self.side)


class _Run:
    """One run's scores for the gated column (and the base-rate reference), per trajectory."""

    def __init__(self, sample: GateSample, crit: GateCriteria, predictor: str, side: str):
        table = sample.table
        working = _scorable(sample, crit)
        complete, censored = table.role_masks(crit.policy)
        names = [p for p in table.predictors if p != BASE_RATE]
        if predictor not in table.predictors:
            found = ", ".join(names) or "none"
            raise Unusable("gated_predictor", f"the {side} has no predictor {predictor!r} (found: {found})", side)
        with_data = [p for p in names if no_data_reason(table.predictors[p], working) is None]
        col = table.predictors[predictor]
        if (reason := no_data_reason(col, working)) is not None:
            raise Unusable(
                "gated_predictor",
                f"the {side} cannot score predictor {predictor!r}: {reason}; predictors with data: "
                f"{', '.join(with_data) or 'none'} (the gated predictor is never switched silently: "
                "name one with --predictor on both runs)",
                side,
            )
        self.predictor, self.ids, self.task_ids, self.with_data = predictor, table.ids, sample.task_ids, set(with_data)
        # Censored runs alone are scored (as in the report); the base-rate reference needs a complete outcome.
        self.base_rate = float(np.mean(table.outcome[complete])) if complete.any() else None
        columns = {predictor: col}
        if self.base_rate is not None:
            columns[BASE_RATE] = table.constant_pairs(self.base_rate)
        gated = dataclasses.replace(table, predictors=columns)
        sm = score_columns(gated, list(columns), crit.policy, (crit.censoring,))
        self.score = sm.columns[0]
        self.reference = sm.columns[1] if self.base_rate is not None else np.full(table.n, np.nan)
        self.missing_q_z = sm.missing_q_z[predictor]
        self.audit = audit_of_table(gated, crit.policy)
        scored = ~np.isnan(self.score)
        self.coverage = _coverage(
            int(working.sum()),
            int(scored.sum()),
            skip_counts(col.usable | ~working, table.n_steps),  # the working sample's unusable runs
            int(np.sum(working & col.usable & ~scored)),
            self.audit["pending_outcome"],
            int(np.sum(censored & scored)),
            crit.bootstrap,
            "this gate's bootstrap (--bootstrap)",
        )
        gaps = gap_stats(col, table, complete, censored)
        self.coverage["missing_forecasts"] = {"policy": crit.missing, **gap_summary(gaps)}
        self.clipped = col.clipped_in(scored)  # forecasts the log rule clipped in the gated runs


# -- coverage: what the verdict rests on --


def _coverage(
    working: int,
    gated: int,
    skipped: dict[str, int],
    dropped_by_censoring: int,
    pending: int,
    censored_gated: int | None,
    replicates: int | None,
    replicates_source: str,
) -> dict[str, Any]:
    return {
        "working_sample": working,
        "gated": gated,
        "skipped": skipped,
        "skipped_share": sum(skipped.values()) / working if working else None,
        "dropped_by_censoring_mode": dropped_by_censoring,
        "pending_outcome": pending,
        "censored_gated": censored_gated,
        "censoring_rate_gated": censored_gated / gated if censored_gated is not None and gated else None,
        "replicates": replicates,
        "replicates_source": replicates_source,
    }


def skip_reasons(block: dict[str, Any]) -> str:
    """The coverage's skip reasons; a snapshot counts them over the whole file only (excluded runs too)."""
    file_wide = block.get("skip_reasons_in_file")
    reasons = ", ".join(f"{k} {v}" for k, v in (file_wide or block["skipped"]).items()) or "none"
    return f"reasons over the whole file: {reasons}" if file_wide else reasons


def censoring_warnings(
    audit: dict[str, Any], crit: GateCriteria, missing_q_z: int, coverage: dict[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """(warnings, notes) on what the censored score rests on; the rate is the gated runs' when known."""
    warnings: list[str] = []
    notes: list[str] = []
    rate = audit.get("censoring_rate")
    among = "in the working sample"
    if coverage is not None and coverage.get("censoring_rate_gated") is not None:
        rate = coverage["censoring_rate_gated"]
        among = f"among the {coverage['gated']} gated runs ({coverage['censored_gated']} stopped by the step budget)"
    with_q = audit.get("censored_with_q_z") or 0
    n_cens = (audit.get("roles") or {}).get("censored") or 0
    if n_cens:
        source = f"q_z from the records for {with_q} of {n_cens} censored runs" if with_q else "no q_z in the records"
        notes.append(f"q_Z source: {source}")
    if rate is not None and rate > crit.high_censoring and with_q == 0:
        warnings.append(
            f"censoring rate {rate:.1%} {among} with only the simple form (q_Z ~ 0) available: the score is "
            "pessimistic for runs stopped by the step budget; supply q_z (continuation audits) to gate on cen-exact"
        )
    if crit.censoring == EXACT and missing_q_z:
        warnings.append(f"{missing_q_z} censored runs lack q_z and are left out of the cen-exact score")
    if crit.censoring == "complete-only" and n_cens:
        warnings.append(f"complete-only drops {n_cens} censored runs: survivor bias (use --censoring simple)")
    if audit.get("default_policy") is False:
        notes.append("non-default censoring policy: some informative stops treated as censored")
    return warnings, notes


def clipped_notes(crit: GateCriteria, predictor: str, clipped: int, who: str = "", tail: str = "") -> list[str]:
    rule = get_rule(crit.rule)
    if not isinstance(rule, LogRule) or not clipped:
        return []
    return [
        f"{who}log rule: {clipped} forecasts of {predictor} were 0 or 1, clipped to [{rule.eps:g}, 1-{rule.eps:g}]; "
        f"one on a run that went the other way scores log({rule.eps:g}) = {math.log(rule.eps):.1f} "
        f"times its step weight{tail}"
    ]


# -- the comparative tests (docs/gate.md) --
# D = candidate - reference has a two-sided 95% percentile bootstrap CI [lo, hi], each bound a one-sided
# test at ALPHA. regression (default): FAIL only when hi < -margin. non-inferiority: PASS only when
# lo >= -margin; an identical candidate then fails with probability P0 = Phi(Z_ALPHA - margin / SE), and
# when P0 > FALSE_ALARM a check that does not pass is FAIL only if hi < -margin, else CANNOT DECIDE,
# naming the margin (Z_ALPHA + Z_FALSE_ALARM) * SE that would decide. The baseline is compared on the
# tasks both sides scored, resampled by task, when they overlap enough (PAIRING_OVERLAP), else unpaired.


def describe_test(test: str, margin: float) -> str:
    m, neg = f"{margin + 0.0:.4g}", f"{-margin + 0.0:.4g}"  # + 0.0: no "-0"
    if test == NON_INFERIORITY:
        return (
            f"non-inferiority, margin {m}: PASS only if the 95% CI lower bound of (candidate - reference) "
            f">= {neg} (a drop beyond the margin is ruled out; a candidate worse by exactly the margin passes "
            f"with probability <= {ALPHA:.1%})"
        )
    return (
        f"regression detection, margin {m}: FAIL only if the 95% CI upper bound of (candidate - reference) "
        f"< {neg} (a significant drop; an identical candidate fails with probability {ALPHA:.1%})"
    )


def power_text(name: str, test: str, margin: float, pw: dict[str, Any]) -> str | None:
    se = pw.get("se")
    if se is None:
        return None
    if pw.get("smallest_margin") is None and pw.get("detectable_drop") is None:  # se == 0
        return f"{name}: the difference does not vary under resampling (SE 0): no power statement"
    if test == NON_INFERIORITY:
        return (
            f"{name}: SE of the difference {se:.3g}; the smallest margin an identical candidate passes with "
            f"{1 - FALSE_ALARM:.0%} probability is {pw['smallest_margin']:.3g} (configured {margin:.3g}: an "
            f"identical candidate fails with probability ~{pw['p_fail_identical']:.2f})"
        )
    return (
        f"{name}: SE of the difference {se:.3g}; a true drop of {pw['detectable_drop']:.3g} is detected (FAIL) "
        f"with {POWER:.0%} probability, smaller drops may pass"
    )


def decision(
    name: str,
    point: float,
    reps: FloatArray,
    threshold: float,
    detail: str,
    test: str | None = None,
    n: int | None = None,
    units: str = "scored runs",
) -> dict[str, Any]:
    """One decision check: test None, the CI lower bound against an absolute threshold; else the
    comparative test against -margin, undecided where a FAIL would break FALSE_ALARM (n units: its SE's sample)."""
    lo, hi = percentile_ci(reps[:, None])
    lo0, hi0 = float(lo[0]), float(hi[0])
    bound = hi0 if test == REGRESSION else lo0
    # P(flip): the share of replicates whose own verdict differs, each replicate's bound as far from its
    # estimate as the observed bound from the observed estimate.
    r = reps[~np.isnan(reps)]
    flip = None
    if r.size and math.isfinite(point) and math.isfinite(bound):
        flip = float(np.mean((r - (point - bound) >= threshold) != (bound >= threshold)))
    check: dict[str, Any] = {
        "name": name,
        "kind": "decision",
        "passed": bool(math.isfinite(bound) and bound >= threshold),
        "estimate": json_num(point),
        "ci_low": json_num(lo0),
        "ci_high": json_num(hi0),
        "threshold": threshold,
        "flip_probability": flip,
        "detail": detail,
    }
    if test is not None:
        # Power at this sample's SE: non-inferiority's smallest margin an identical candidate passes with
        # probability 1 - FALSE_ALARM, and its P(fail) at the margin; regression's drop found with probability POWER.
        se = float(np.std(r, ddof=1)) if r.size >= 2 else float("nan")
        pw: dict[str, Any] = {"se": json_num(se), "alpha": ALPHA, "power": POWER}
        pw |= dict.fromkeys(("smallest_margin", "detectable_drop", "p_fail_identical")) | {"underpowered": False}
        check.update(test=test, power=pw)
        if math.isfinite(se) and se > 0 and test == NON_INFERIORITY:
            p_fail = float(norm.cdf(Z_ALPHA + threshold / se))  # P(D_hat - Z*SE < -margin | D = 0)
            smallest = (Z_ALPHA + Z_FALSE_ALARM) * se
            pw.update(smallest_margin=smallest, p_fail_identical=p_fail, underpowered=bool(p_fail > FALSE_ALARM))
        elif math.isfinite(se) and se > 0:
            pw.update(detectable_drop=-threshold + (Z_ALPHA + Z_POWER) * se, p_fail_identical=ALPHA)
        if not check["passed"] and pw["underpowered"] and not hi0 < threshold:
            # The margin this sample decides, and the sample (SE ~ 1/sqrt(n)) that decides the configured one.
            smallest, margin = pw["smallest_margin"], -threshold
            at_n = math.ceil(n * (smallest / margin) ** 2) if margin > 0 and n else None
            more = (
                f", or about {at_n} {units} (now {n}) at margin {margin:.3g}"
                if at_n is not None
                else " (no sample size decides margin 0)"
            )
            reason = (
                f"the 95% CI [{lo0:.4g}, {hi0:.4g}] neither rules out a drop beyond the margin nor shows one, and "
                f"an identical candidate would fail at this sample with probability ~{pw['p_fail_identical']:.2f}, "
                f"above the {FALSE_ALARM:.0%} false-alarm bound: it decides at margin {smallest:.3g} or more"
            )
            check.update(undecided=True, decides_at={"margin": smallest, "n": at_n}, undecided_reason=reason + more)
    return check


@dataclass
class Comparison:
    point: float
    replicates: FloatArray
    paired: bool
    how: str
    counts: dict[str, int]


def _scored_tasks(score: FloatArray, task_ids: Sequence[str]) -> tuple[list[str], FloatArray]:
    ok = ~np.isnan(score)
    return [t for t, k in zip(task_ids, ok, strict=True) if k], score[ok]


# Pair when the common tasks are at least this share of the smaller side's scored tasks (and at least 2):
# the runs were made on one task set. Task ids alone decide, never scores or min_n.
PAIRING_OVERLAP = 0.5


def compare(
    cand: FloatArray, cand_tasks: Sequence[str], base: FloatArray, base_tasks: Sequence[str], bootstrap: int, seed: int
) -> Comparison:
    """Mean(candidate) - mean(baseline) of the scores per run (NaN: not scored) with bootstrap replicates,
    paired on common scored tasks."""
    c_tasks, c_scores = _scored_tasks(cand, cand_tasks)
    b_tasks, b_scores = _scored_tasks(base, base_tasks)
    common = set(c_tasks) & set(b_tasks)
    smaller = min(len(set(c_tasks)), len(set(b_tasks)))
    c_in = np.array([t in common for t in c_tasks], dtype=bool)
    b_in = np.array([t in common for t in b_tasks], dtype=bool)
    counts = {
        "common_tasks": len(common),
        "candidate_paired_runs": int(c_in.sum()),
        "baseline_paired_runs": int(b_in.sum()),
        "candidate_unpaired_runs": int((~c_in).sum()),
        "baseline_unpaired_runs": int((~b_in).sum()),
        "candidate_unscored_runs": len(cand) - len(c_tasks),
        "baseline_unscored_runs": len(base) - len(b_tasks),
    }
    if len(common) >= 2 and len(common) >= PAIRING_OVERLAP * smaller:
        # Task-clustered: one row per common task (each side's score sum and run count) under the task's weight.
        c_common = [t for t, k in zip(c_tasks, c_in, strict=True) if k]
        order = {t: i for i, t in enumerate(dict.fromkeys(c_common))}
        rows = np.zeros((len(order), 4))
        c_idx = np.array([order[t] for t in c_common], dtype=np.int64)
        b_idx = np.array([order[t] for t, k in zip(b_tasks, b_in, strict=True) if k], dtype=np.int64)
        np.add.at(rows[:, 0], c_idx, c_scores[c_in])
        np.add.at(rows[:, 1], c_idx, 1.0)
        np.add.at(rows[:, 2], b_idx, b_scores[b_in])
        np.add.at(rows[:, 3], b_idx, 1.0)
        sums = replicate_sums(rows, trajectory_keys(list(order)), bootstrap, seed)
        with np.errstate(invalid="ignore", divide="ignore"):  # a replicate that drew no task: NaN
            reps = sums[:, 0] / sums[:, 1] - sums[:, 2] / sums[:, 3]
        total = rows.sum(axis=0)
        point = float(total[0] / total[1] - total[2] / total[3])
        # The caller says what the task ids are; here only what the resampling did with repeats.
        repeats = len(c_idx) > len(order) or len(b_idx) > len(order)
        return Comparison(point, reps, True, "; tasks repeat: resampled by task" if repeats else "", counts)
    # Salted keys, independent of the unsalted ones: the two runs are resampled independently.
    bc = bootstrap_means(c_scores[:, None], trajectory_keys([f"candidate\x00{t}" for t in c_tasks]), bootstrap, seed)
    bb = bootstrap_means(b_scores[:, None], trajectory_keys([f"baseline\x00{t}" for t in b_tasks]), bootstrap, seed)
    reps = bc.replicates[:, 0] - bb.replicates[:, 0]
    point = float(bc.point[0] - bb.point[0])
    why = (
        "no common task ids"
        if not common
        else f"only {len(common)} common tasks of {smaller} (< {PAIRING_OVERLAP:.0%} of the smaller side)"
    )
    how = f"unpaired ({len(c_tasks)} vs {len(b_tasks)} scored runs; {why})"
    return Comparison(point, reps, False, how, counts)


# -- the checks --


def _check(name: str, passed: bool, estimate: Any, threshold: Any, detail: str, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "assumption",
        "passed": bool(passed),
        "estimate": estimate,
        "threshold": threshold,
        "detail": detail,
        **more,
    }


def _assumption_checks(
    audit: dict[str, Any],
    coverage: dict[str, Any],
    predictor: str,
    crit: GateCriteria,
    warnings: list[str],
    side: str = CANDIDATE,
) -> list[dict[str, Any]]:
    """One side's checks on its sample; what the verdict leaves out, past WARN_SHARE, goes to `warnings`."""
    n, who = coverage["gated"], "" if side == CANDIDATE else f"{side}: "
    # A tiny baseline makes a wide CI, which the default regression test would pass: unusable instead.
    size = "sample_size" if side == CANDIDATE else "baseline_size"
    detail = f"{who}{n} scored trajectories; at least {crit.min_n} needed for a CI-based verdict"
    checks = [_check(size, n >= crit.min_n, n, crit.min_n, detail)]
    lost = int(audit.get("roles", {}).get("lost", 0))
    if lost:  # bursts lose the slow runs: gating the rest would judge survivors
        verdict = (
            "gated anyway (allow_capture_loss)"
            if crit.allow_capture_loss
            else "the gate refuses such a sample (exit 2) unless --allow-capture-loss"
        )
        detail = (
            f"{who}{lost} runs whose end tps-tracer did not see (stop reason capture_lost, "
            f"metadata.tps_abandoned says why) are not scored; {verdict}"
        )
        checks.append(_check("capture_loss", crit.allow_capture_loss, lost, 0, detail))
    if crit.max_excluded_share is not None and side == CANDIDATE:  # the baseline's excluded share is not gated
        share, limit = audit.get("excluded_share") or 0.0, crit.max_excluded_share
        detail = "share of runs ended by informative stops (parse/tool errors, ...), not scored"
        checks.append(_check("excluded_share", share <= limit, share, limit, detail))
    if coverage["skipped"]:
        skipped, working = sum(coverage["skipped"].values()), coverage["working_sample"]
        share, limit = coverage["skipped_share"] or 0.0, crit.max_skipped_share
        verdict = (
            "gated on the rest"
            if share <= limit
            else f"the gate refuses to judge the rest alone (exit 2) unless --max-skipped-share >= {share:.3f}"
        )
        detail = (
            f"{who}{skipped} of {working} working-sample runs have no {predictor} forecast to score "
            f"({skip_reasons(coverage)}); {verdict}"
        )
        checks.append(_check("skipped_share", share <= limit, share, limit, detail))
        if share > WARN_SHARE:
            warnings.append(
                f"{who}{skipped} of {working} working-sample runs ({share:.1%}) are not scored: no {predictor} "
                f"forecast ({skip_reasons(coverage)}); the verdict covers the other {n} runs only"
            )
    pending = coverage["pending_outcome"]
    clean = max(int((audit.get("stop_reasons") or {}).get("clean") or 0), pending)
    if pending and pending / clean > WARN_SHARE:
        warnings.append(
            f"{who}{pending} of {clean} clean runs ({pending / clean:.1%}) still wait for their outcome and are not "
            "scored; gate again once they are graded"
        )
    for c in checks:
        c["side"] = side
    return checks


def _check_exact(audit: dict[str, Any], crit: GateCriteria) -> None:
    """cen-exact without any q_z scores the complete runs alone: another quantity, not gated."""
    n_cens = (audit.get("roles") or {}).get("censored") or 0
    if crit.censoring == EXACT and n_cens and not audit.get("censored_with_q_z"):
        raise Unusable(
            "q_z_for_exact",
            f"--censoring exact needs q_z, and none of the candidate's {n_cens} censored runs carries one "
            "(estimate it with `tps-tracer censoring --write-records`, or gate with --censoring simple)",
        )


# -- the verdict: one assembler for every route --


def _score(
    crit: GateCriteria, predictor: str, source: str, n: int = 0, mean: Any = None, lo: Any = None, hi: Any = None
) -> dict[str, Any]:
    return {
        "predictor": predictor,
        "predictor_source": source,
        "rule": get_rule(crit.rule).name,
        "weights": get_schedule(crit.weights).name,
        "censoring": crit.censoring,
        "n": n,
        "mean": mean,
        "ci_low": lo,
        "ci_high": hi,
    }


def _result(
    crit: GateCriteria,
    score: dict[str, Any],
    checks: list[dict[str, Any]],
    warnings: list[str],
    notes: list[str],
    audit: dict[str, Any] | None = None,
    coverage: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """The verdict follows from the checks: a failed sample-size or refusing check, UNUSABLE; else
    any other failed check, FAIL; else an undecided check, CANNOT DECIDE (with its reason); else PASS.
    `sections` (skipped_predictors, comparison, input) are added unless None."""
    for c in checks:
        c.setdefault("side", SIDE_OF.get(c["name"], CANDIDATE))
    undecided = [c["name"] for c in checks if c.get("undecided")]
    failed = [c["name"] for c in checks if not c["passed"] and not c.get("undecided")]
    reasons = [
        f"{c['name']}: {c['estimate']} scored trajectories, fewer than min_n {c['threshold']}: too small for a "
        "CI-based verdict"
        for c in checks
        if c["name"] in ("sample_size", "baseline_size") and not c["passed"]
    ] + [f"{c['name']}: {c['detail']}" for c in checks if c["name"] in REFUSING_CHECKS and not c["passed"]]
    fragile = [
        f"fragile verdict: {c['name']} {'passes' if c['passed'] else 'fails'}, but P(flip) is "
        f"{c['flip_probability']:.3f} (> {FRAGILE_FLIP}): a new sample of the same size could reverse it "
        "(--max-flip makes stability a check)"
        for c in checks
        if (c.get("flip_probability") or 0) > FRAGILE_FLIP and not c.get("undecided")  # undecided: no verdict
    ]
    verdict = UNUSABLE if reasons else FAIL if failed else CANNOT_DECIDE if undecided else PASS
    if verdict == CANNOT_DECIDE:
        reasons = [f"{c['name']}: {c['undecided_reason']}" for c in checks if c.get("undecided")]
    result = {
        "version": GATE_VERSION,
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "score": score,
        "checks": checks,
        "failed_checks": failed,
        "undecided_checks": undecided,
        "reasons": reasons,
        "warnings": warnings + fragile,
        "notes": notes,
        "settings": {
            "bootstrap": crit.bootstrap,
            "seed": crit.seed,
            "ci_level": CI_LEVEL,
            "margin": crit.margin,
            "test": crit.test,
            "alpha_one_sided": ALPHA,
            **(settings or {}),  # a snapshot's own bootstrap and seed
        },
        "audit": audit,
        "coverage": coverage,
    }
    return result | {k: v for k, v in sections.items() if v is not None}


# -- the routes --


def evaluate_gate(
    candidate: Sequence[TrajectoryRecord] | GateSample,
    criteria: GateCriteria | None = None,
    baseline: Sequence[TrajectoryRecord] | GateSample | None = None,
) -> dict[str, Any]:
    """Gate records (or samples read by `gate_paths`): the result behind `tps-tracer gate --json`."""
    crit = criteria or GateCriteria()
    crit.validate(baseline is not None)
    cand_sample = _sample(candidate, crit)
    base_sample = None if baseline is None else _sample(baseline, crit)
    predictor, source, skipped = choose_predictor(crit, cand_sample, base_sample)
    read: dict[str, Any] | None = {"set_aside": cand_sample.set_aside.as_dict()} if cand_sample.set_aside else None
    if base_sample is not None and base_sample.set_aside:
        read = {**(read or {}), "baseline": {"set_aside": base_sample.set_aside.as_dict()}}
    try:
        run = _Run(cand_sample, crit, predictor, CANDIDATE)
        _check_exact(run.audit, crit)
        base = None if base_sample is None else _Run(base_sample, crit, predictor, BASELINE)
    except Unusable as u:
        score, unusable = _score(crit, predictor, source), [u.as_check()]
        return _result(crit, score, unusable, [], [], skipped_predictors=as_dicts(skipped), input=read)
    if crit.vs_base_rate and run.base_rate is None:
        raise GateInputError(
            "--vs-base-rate: no complete trajectory (a clean stop with an outcome), so no base rate to compare with"
        )
    both = ~np.isnan(run.score) & ~np.isnan(run.reference)
    # One bootstrap for the score and the paired (score, base-rate) columns: they share the weights.
    columns = np.column_stack([run.score, np.where(both, run.reference, np.nan), np.where(both, run.score, np.nan)])
    boot = bootstrap_means(columns, trajectory_keys(run.ids), crit.bootstrap, crit.seed)
    lo, hi = boot.ci()
    n = run.coverage["gated"]
    score = _score(crit, run.predictor, source, n, json_num(boot.point[0]), json_num(lo[0]), json_num(hi[0]))
    warnings, censoring_notes = censoring_warnings(run.audit, crit, run.missing_q_z, run.coverage)
    checks = _assumption_checks(run.audit, run.coverage, run.predictor, crit, warnings)
    if base is not None:  # the baseline's sample, held to the same limits
        checks += _assumption_checks(base.audit, base.coverage, base.predictor, crit, warnings, BASELINE)
    if crit.min_score is not None:
        detail = "CI lower bound of the score"
        checks.append(decision("absolute", float(boot.point[0]), boot.replicates[:, 0], crit.min_score, detail))
    if crit.vs_base_rate:
        detail = f"score minus the base-rate forecast ({run.base_rate:.4g}) on the same trajectories, paired"
        delta = float(boot.point[2] - boot.point[1])
        reps = boot.replicates[:, 2] - boot.replicates[:, 1]
        checks.append(decision("vs_base_rate", delta, reps, -crit.margin + 0.0, detail, crit.test, int(both.sum())))
    notes: list[str] = []
    comparison = None if base is None else _vs_baseline(run, base, crit, checks, warnings, notes)
    notes.extend(censoring_notes)
    notes.append(f"gated predictor {run.predictor}: {source}")
    for who, r in (("", run), ("baseline: ", base)):
        notes += clipped_notes(crit, r.predictor, r.clipped, who) if r is not None else []
    notes.extend(f"default predictor: skipped {s.predictor} ({s.reason})" for s in skipped)
    if crit.max_flip is not None:  # a verdict that resampling reverses this often is evidence neither way (no FAIL)
        flips = [c["flip_probability"] for c in checks if c["kind"] == "decision" and c["flip_probability"] is not None]
        worst, limit = max(flips, default=float("nan")), crit.max_flip
        stable = bool(flips) and worst <= limit
        reason = (
            f"the verdict flips in {worst:.1%} of the bootstrap replicates (more than --max-flip {limit:g}): a new "
            "sample of the same size could reverse it"
        )
        fragile = {} if stable else {"undecided": True, "undecided_reason": reason}
        detail = "largest verdict-flip probability under resampling"
        checks.append(_check("stability", stable, json_num(worst), limit, detail, kind="decision", **fragile))
    sections: dict[str, Any] = {"skipped_predictors": as_dicts(skipped), "comparison": comparison, "input": read}
    return _result(crit, score, checks, warnings, notes, run.audit, run.coverage, **sections)


def gate_paths(
    candidate: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    criteria: GateCriteria | None = None,
    baseline: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    read: Callable[[Sequence[str | os.PathLike[str]], bool], GateSample] | None = None,
) -> dict[str, Any]:
    """`evaluate_gate` on trajectory files (JSON Lines, Parquet, directories of shards), in bounded memory;
    `read(paths, with_task_ids)` reads a run another way (the Ray engine's blocks)."""
    crit = criteria or GateCriteria()
    crit.validate(baseline is not None)
    if isinstance(candidate, (str, os.PathLike)):  # one path, not a sequence of characters
        candidate = [candidate]
    read = read or (lambda paths, with_task_ids: sample_from_paths(paths, crit, with_task_ids, chunk_bytes, progress))
    cand = read(candidate, baseline is not None)  # task ids pair the two runs
    base = None if baseline is None else read([baseline], True)
    return evaluate_gate(cand, crit, base)


def _vs_baseline(
    cand: _Run, base: _Run, crit: GateCriteria, checks: list[dict[str, Any]], warnings: list[str], notes: list[str]
) -> dict[str, Any]:
    """Appends the vs_baseline check; returns the `comparison`, whose `asymmetries` change what is compared."""
    asym: list[str] = []
    ca, ba = cand.audit, base.audit
    cq, bq = ca["censored_with_q_z"], ba["censored_with_q_z"]
    if (cq > 0) != (bq > 0):
        cn, bn = ca["roles"]["censored"], ba["roles"]["censored"]
        who = "candidate" if cq else "baseline"
        text = f"q_z on the {who} only (candidate {cq} of {cn} censored runs, baseline {bq} of {bn})"
        asym.append(text)
        if crit.censoring == EXACT:
            warnings.append(
                f"{text}: under cen-exact the other side cannot score its censored runs, so the difference "
                "is computed on the tasks both sides score"
            )
        else:
            notes.append(f"{text}; not used by cen-{crit.censoring}")
    only_c, only_b = sorted(cand.with_data - base.with_data), sorted(base.with_data - cand.with_data)
    if only_c or only_b:
        text = (
            f"predictor sets differ: candidate only {', '.join(only_c) or 'none'}; "
            f"baseline only {', '.join(only_b) or 'none'}"
        )
        asym.append(text)
        notes.append(text)
    cr, br = ca["censoring_rate"], ba["censoring_rate"]
    if cr is not None and br is not None:  # then both working samples are non-empty
        text = f"censoring rate candidate {cr:.1%}, baseline {br:.1%}"
        na, nb = ca["working_sample"], ba["working_sample"]
        pooled = (cr * na + br * nb) / (na + nb)
        se = math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))
        if se > 0 and abs(cr - br) / se > 1.96:  # two-proportion z test
            asym.append(text)
            warnings.append(
                f"{text} differ significantly: the runs stop on the step budget at different rates, and "
                "cen-simple scores budget stops pessimistically (q_Z ~ 0)"
            )
        else:
            notes.append(text)
    cmp = compare(cand.score, cand.task_ids, base.score, base.task_ids, crit.bootstrap, crit.seed)
    counts, how = cmp.counts, cmp.how
    if cmp.paired:
        n = counts["common_tasks"]
        from_metadata = [t != i for run in (cand, base) for t, i in zip(run.task_ids, run.ids, strict=True)]
        if not any(from_metadata):  # task ids equal to the trajectory ids pair the same runs
            how = f"paired by trajectory id over {n} trajectories (task ids, where given, equal them)" + how
        else:
            where = "metadata.task_id" if all(from_metadata) else "metadata.task_id, else the trajectory id"
            how = f"paired by task id over {n} tasks ({where})" + how
        if counts["candidate_unpaired_runs"] or counts["baseline_unpaired_runs"]:
            left_out = [
                f"{side} {counts[f'{side}_unpaired_runs']} scored run(s) on tasks the other side did not score, "
                f"{counts[f'{side}_unscored_runs']} unscored"
                for side in (CANDIDATE, BASELINE)
            ]
            notes.append("left out of the paired difference: " + "; ".join(left_out))
    elif counts["common_tasks"]:
        warnings.append(
            f"the runs share only {counts['common_tasks']} scored tasks (less than {PAIRING_OVERLAP:.0%} of the "
            "smaller side's): compared unpaired, on different task sets"
        )
    b_ok = ~np.isnan(base.score)
    base_mean = float(np.mean(base.score[b_ok])) if b_ok.any() else float("nan")
    notes.append(f"baseline: mean {base_mean:.6g} over {int(b_ok.sum())} scored runs; compared {how}")
    units = "tasks both sides score" if cmp.paired else "scored runs on each side"
    n_units = counts["common_tasks"] if cmp.paired else min(cand.coverage["gated"], base.coverage["gated"])
    detail, floor = f"candidate minus baseline, {how}", -crit.margin + 0.0  # + 0.0: no "-0"
    checks.append(decision("vs_baseline", cmp.point, cmp.replicates, floor, detail, crit.test, n_units, units))
    return {
        "paired": cmp.paired,
        "how": how,
        **counts,
        "asymmetries": asym,
        "baseline_mean": json_num(base_mean),
        "baseline_coverage": base.coverage,
    }


def evaluate_gate_on_report(report: dict[str, Any], criteria: GateCriteria | None = None) -> dict[str, Any]:
    """Gate a saved report / `Accumulator.snapshot()`: the absolute and assumption checks only (no
    per-trajectory data), the flip probability from a normal approximation with the report's SE."""
    crit = criteria or GateCriteria()
    crit.check_values()
    if crit.vs_base_rate:
        raise GateInputError("--vs-base-rate needs trajectory records (a paired bootstrap), not a snapshot")
    if crit.min_score is None:
        raise GateInputError("a snapshot can only be gated with --min (and the assumption checks)")
    try:
        rows, audit = report["scores"], report["audit"]
    except (KeyError, TypeError):
        raise GateInputError("not a tps-tracer report or snapshot (no 'scores' / 'audit')") from None
    rule, weights = get_rule(crit.rule).name, get_schedule(crit.weights).name
    candidates = [r for r in rows if r["rule"] == rule and r["weights"] == weights and r["censoring"] == crit.censoring]
    predictor = crit.predictor or next((r["predictor"] for r in candidates if r["predictor"] != BASE_RATE), None)
    name = str(predictor)  # "None": no row, fails below
    source = "--predictor" if crit.predictor else "the report's first scored predictor"
    # The gated runs counted from the score rows per censoring mode (cen-simple: every working-sample run the
    # predictor scores); the skip reasons from the report's `coverage`, over the whole file.
    n_of = {
        r.get("censoring"): int(r.get("n") or 0)
        for r in rows
        if r.get("predictor") == name and r.get("rule") == rule and r.get("weights") == weights
    }
    working, gated = int(audit.get("working_sample") or 0), n_of.get(crit.censoring, 0)
    reach, complete = n_of.get(SIMPLE, gated), n_of.get("complete-only")
    unscored = {"unscored": working - reach} if working > reach else {}
    saved = report.get("settings") or {}
    pending, censored_gated = int(audit.get("pending_outcome") or 0), None if complete is None else gated - complete
    coverage = _coverage(
        working, gated, unscored, reach - gated, pending, censored_gated, saved.get("bootstrap"), SNAPSHOT_REPLICATES
    )
    columns = [c for c in report.get("coverage") or [] if isinstance(c, dict)]
    file_wide = next((c.get("skipped") for c in columns if c.get("predictor") == name), None)
    if unscored and file_wide:
        coverage["skip_reasons_in_file"] = file_wide
    gaps = report.get("missing_forecasts") or {}
    if name in (gaps.get("predictors") or {}):
        coverage["missing_forecasts"] = {"policy": gaps.get("policy"), **gaps["predictors"][name]}
    n_cens = int((audit.get("roles") or {}).get("censored") or 0)
    missing_q_z = max(0, n_cens - int(audit.get("censored_with_q_z") or 0))
    warnings, notes = censoring_warnings(audit, crit, missing_q_z, coverage)
    skipped = [s.get("predictor") for s in report.get("skipped_predictors") or [] if isinstance(s, dict)]
    if crit.predictor is None and skipped:
        warnings.append(
            f"default predictor {predictor}: the report skipped {', '.join(map(str, skipped))} (no data); "
            "name the gated predictor with --predictor so it cannot move"
        )
    section = report.get("input")
    read = {"set_aside": section["set_aside"]} if isinstance(section, dict) and section.get("set_aside") else None
    try:
        _check_exact(audit, crit)
    except Unusable as u:
        score, unusable = _score(crit, name, source), [u.as_check()]
        return _result(crit, score, unusable, warnings, notes, skipped_predictors=[], input=read)
    row = next((r for r in candidates if r["predictor"] == predictor), None)
    if row is None:
        raise GateInputError(f"the snapshot has no row for {predictor} / {rule} / {weights} / {crit.censoring}")
    checks = _assumption_checks(audit, coverage, name, crit, warnings)
    if coverage["replicates"] != crit.bootstrap:  # near the threshold the records route's CI may decide otherwise
        reps, seed = coverage["replicates"], saved.get("seed")
        notes.append(
            f"the interval rests on the snapshot's {reps} bootstrap replicates (seed {seed}); gating the records "
            f"draws {crit.bootstrap} (--bootstrap {reps} --seed {seed} on the records gives this interval)"
        )
    clipped = (report.get("log_clipped") or {}).get("forecasts", {}).get(predictor, 0)
    notes += clipped_notes(crit, name, int(clipped), tail=" (the report's count, over its working sample)")
    mean, lo, se = row["mean"], row["ci_low"], row["se"]
    if lo is None or mean is None:
        raise GateInputError("the snapshot row has no CI (was it made with bootstrap 0?)")
    flip = None
    if se:
        # Replicate ~ N(mean, se) passes iff rep - (mean - lo) >= min, i.e. rep - mean >= min - lo.
        p_pass = float(norm.sf((crit.min_score - lo) / se))
        flip = p_pass if lo < crit.min_score else 1.0 - p_pass
    detail = "CI lower bound of the score (from the snapshot; flip probability: normal approximation)"
    more = {"kind": "decision", "ci_low": lo, "ci_high": row["ci_high"], "flip_probability": flip}
    checks.append(_check("absolute", lo >= crit.min_score, mean, crit.min_score, detail, **more))
    settings = {"bootstrap": saved.get("bootstrap"), "seed": saved.get("seed")}
    score = {k: row[k] for k in ("predictor", "rule", "weights", "censoring", "n", "mean", "ci_low", "ci_high")}
    score["predictor_source"] = source
    notes = ["gated from a saved report/snapshot", *notes]
    return _result(crit, score, checks, warnings, notes, audit, coverage, settings, input=read)
