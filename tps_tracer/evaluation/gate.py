"""The deployment gate: may this agent ship, judged on censored TPS with confidence intervals?

One score is gated (default: TPS, cen-simple, log rule, linear-front weights, the first
predictor in the file). Decision checks, any combination:

- absolute:      the CI lower bound of the score is at least `min_score`;
- vs base rate:  non-inferiority to the constant base-rate forecast on the same
                 trajectories: the CI lower bound of (score - base-rate score) >= -margin
                 (paired: both columns share the bootstrap weights);
- vs baseline:   non-inferiority to a baseline run: CI lower bound of (candidate -
                 baseline) >= -margin; paired by task id (metadata.task_id, else the
                 trajectory id) when both runs scored exactly the same tasks, unpaired
                 (independent resampling of each run) otherwise.

Assumption checks: at least `min_n` scored trajectories (else the sample is unusable,
exit 2), at most `max_excluded_share` informative exclusions (parse/tool errors ...), and
warnings when censoring is frequent and only the simple (q_Z ~ 0) form is available.

Verdict stability: for every decision check, the share of bootstrap replicates whose own
verdict differs from the observed one, where a replicate's verdict compares (replicate
estimate - the observed CI's lower half-width) with the threshold. Near 0: the verdict is
robust to resampling; near 0.5: a coin flip. `max_flip` turns it into a check.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import MAX_REPLICATES
from tps_tracer.evaluation.bootstrap import CI_LEVEL, bootstrap_means, percentile_ci, trajectory_keys
from tps_tracer.evaluation.chunked import Progress
from tps_tracer.evaluation.gate_input import GateInputError, GateSample, sample_from_paths, sample_from_records
from tps_tracer.evaluation.report import (
    BASE_RATE,
    NO_WORKING_SAMPLE,
    base_rate_pairs,
    check_unique_ids,
    termination_audit,
)
from tps_tracer.evaluation.reserved_names import check_no_base_rate
from tps_tracer.evaluation.skipped_predictors import NO_PREDICTOR, Skipped, as_dicts, no_data_reason, nothing_left
from tps_tracer.evaluation.tps import CENSORING_MODES, EXACT, SIMPLE, score_columns
from tps_tracer.records.chunks import DEFAULT_CHUNK_BYTES
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import get_rule
from tps_tracer.scoring.schedules import get_schedule

FloatArray = NDArray[np.float64]

GATE_VERSION = 1
PASS, FAIL, UNUSABLE = "pass", "fail", "unusable"
EXIT_CODES = {PASS: 0, FAIL: 1, UNUSABLE: 2}
MIN_GATE_REPLICATES = 100  # fewer replicates make the 2.5% / 97.5% percentiles too coarse for a verdict


@dataclass
class GateCriteria:
    predictor: str | None = None  # None: the first predictor in the candidate file
    rule: str = "log"
    weights: str = "linear-front"
    censoring: str = SIMPLE
    min_score: float | None = None
    vs_base_rate: bool = False
    margin: float = 0.0
    min_n: int = 30
    max_excluded_share: float | None = None
    allow_capture_loss: bool = False  # gate a sample holding capture_lost runs (their scores unknown)
    max_flip: float | None = None
    high_censoring: float = 0.2  # warn above this censoring rate when no q_z is available
    bootstrap: int = 2000
    seed: int = 0
    policy: CensoringPolicy = field(default_factory=CensoringPolicy)

    def validate(self, has_baseline: bool) -> None:
        """Raise GateOptionError naming the first invalid field (the CLI maps it to its flag)."""
        self.check_values()
        if self.min_score is None and not self.vs_base_rate and not has_baseline:
            raise GateInputError("no decision criterion: give --min, --vs-base-rate and/or --baseline")

    def check_values(self) -> None:
        """Each field's own range, before any data is read: a NaN threshold, a probability
        outside [0, 1] or a replicate count beyond MAX_REPLICATES fails here, by field name."""
        if self.predictor is not None and (not isinstance(self.predictor, str) or not self.predictor):
            raise GateOptionError("predictor", f"must be a non-empty string or None, got {self.predictor!r}")
        for name, lookup in (("rule", get_rule), ("weights", get_schedule)):
            try:
                lookup(getattr(self, name))
            except (ValueError, TypeError, AttributeError) as exc:
                raise GateOptionError(name, str(exc)) from None
        if self.censoring not in CENSORING_MODES:
            raise GateOptionError("censoring", f"must be one of {', '.join(CENSORING_MODES)}, got {self.censoring!r}")
        if self.min_score is not None:
            _finite("min_score", self.min_score)
        for name in ("vs_base_rate", "allow_capture_loss"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise GateOptionError(name, f"must be true or false, got {getattr(self, name)!r}")
        if _finite("margin", self.margin) < 0:
            raise GateOptionError(
                "margin", f"must be >= 0 (how much worse than the reference is tolerated), got {self.margin!r}"
            )
        if not _is_int(self.min_n) or self.min_n < 1:
            raise GateOptionError("min_n", f"must be an integer >= 1, got {self.min_n!r}")
        for name in ("max_excluded_share", "max_flip", "high_censoring"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= _finite(name, value) <= 1.0:
                raise GateOptionError(name, f"is a share: must lie in [0, 1], got {value!r}")
        if not _is_int(self.bootstrap) or not MIN_GATE_REPLICATES <= self.bootstrap <= MAX_REPLICATES:
            raise GateOptionError(
                "bootstrap",
                f"must be an integer in [{MIN_GATE_REPLICATES}, {MAX_REPLICATES}] (a CI needs at least "
                f"{MIN_GATE_REPLICATES}; memory grows as replicates x columns), got {self.bootstrap!r}",
            )
        if not _is_int(self.seed):
            raise GateOptionError("seed", f"must be an integer, got {self.seed!r}")
        if not isinstance(self.policy, CensoringPolicy):
            raise GateOptionError("policy", f"must be a CensoringPolicy, got {type(self.policy).__name__}")


class GateOptionError(GateInputError):
    """A GateCriteria field is invalid; `field` is its name, `detail` the message without it."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.detail = message
        super().__init__(f"GateCriteria.{field}: {message}")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _finite(name: str, value: Any) -> float:
    """value as a finite float, else GateOptionError naming the field (NaN would make every check fail)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise GateOptionError(name, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise GateOptionError(name, f"must be a finite number, got {value!r}")
    return float(value)


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _salted_keys(ids: Sequence[str], salt: str) -> NDArray[np.uint64]:
    """Keys independent of the unsalted ones: for resampling two runs independently."""
    return trajectory_keys([f"{salt}\x00{i}" for i in ids])


def _flip_probability(replicates: FloatArray, point: float, lo: float, threshold: float) -> float | None:
    reps = replicates[~np.isnan(replicates)]
    if reps.size == 0 or not math.isfinite(point) or not math.isfinite(lo):
        return None
    verdict = lo >= threshold
    replicate_verdict = reps - (point - lo) >= threshold
    return float(np.mean(replicate_verdict != verdict))


def _decision(name: str, point: float, reps: FloatArray, threshold: float, detail: str) -> dict[str, Any]:
    lo, hi = percentile_ci(reps[:, None])
    lo0, hi0 = float(lo[0]), float(hi[0])
    return {
        "name": name,
        "kind": "decision",
        "passed": bool(math.isfinite(lo0) and lo0 >= threshold),
        "estimate": _num(point),
        "ci_low": _num(lo0),
        "ci_high": _num(hi0),
        "threshold": threshold,
        "flip_probability": _flip_probability(reps, point, lo0, threshold),
        "detail": detail,
    }


def _refused_for_capture_loss(checks: list[dict[str, Any]]) -> bool:
    return any(c["name"] == "capture_loss" and not c["passed"] for c in checks)


def _assumption_checks(n: int, audit: dict[str, Any], crit: GateCriteria) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = [
        {
            "name": "sample_size",
            "kind": "assumption",
            "passed": n >= crit.min_n,
            "estimate": n,
            "threshold": crit.min_n,
            "detail": f"{n} scored trajectories; at least {crit.min_n} needed for a CI-based verdict",
        }
    ]
    lost = int(audit.get("roles", {}).get("lost", 0))
    if lost:
        # Runs whose end tps-tracer lost are not a random subset (bursts lose the slow ones):
        # gating the rest would judge survivors. Refused unless the user accepts it.
        checks.append(
            {
                "name": "capture_loss",
                "kind": "assumption",
                "passed": bool(crit.allow_capture_loss),
                "estimate": lost,
                "threshold": 0,
                "detail": f"{lost} runs whose end tps-tracer did not see (stop reason capture_lost, "
                "metadata.tps_abandoned says why) are not scored; "
                + (
                    "gated anyway (allow_capture_loss)"
                    if crit.allow_capture_loss
                    else "the gate refuses such a sample (exit 2) unless --allow-capture-loss"
                ),
            }
        )
    if crit.max_excluded_share is not None:
        share = audit.get("excluded_share") or 0.0
        checks.append(
            {
                "name": "excluded_share",
                "kind": "assumption",
                "passed": share <= crit.max_excluded_share,
                "estimate": share,
                "threshold": crit.max_excluded_share,
                "detail": "share of runs ended by informative stops (parse/tool errors, ...), not scored",
            }
        )
    return checks


class _Run:
    """One run's scores for the gated column (and the base-rate reference), per trajectory."""

    def __init__(self, sample: GateSample, crit: GateCriteria, predictor: str | None):
        table = sample.table
        if table.n == 0:
            raise GateInputError("no trajectories")
        complete, censored = table.role_masks(crit.policy)
        if not complete.any() and not censored.any():
            raise GateInputError(NO_WORKING_SAMPLE)
        try:  # a file column of that name is read unless another predictor is named
            check_no_base_rate(table.predictors if predictor in (None, BASE_RATE) else ())
        except ValueError as exc:
            raise GateInputError(str(exc)) from None
        names = [p for p in table.predictors if p != BASE_RATE]
        self.skipped: list[Skipped] = []
        if predictor is None:  # the first predictor with data; those before it are skipped, with the reason
            if not names:
                raise GateInputError(NO_PREDICTOR)
            for name in names:
                reason = no_data_reason(table.predictors[name], complete | censored)
                if reason is None:
                    predictor = name
                    break
                self.skipped.append(Skipped(name, reason))
            if predictor is None:
                raise GateInputError(str(nothing_left("gate on", self.skipped)))
        if predictor not in table.predictors:
            raise GateInputError(f"predictor {predictor!r} is not in the file; found: {', '.join(names) or 'none'}")
        self.predictor = predictor
        # Censored runs alone are scored (as in the report); the base-rate reference needs a complete outcome.
        self.base_rate = float(np.mean(table.outcome[complete])) if complete.any() else None
        columns = {predictor: table.predictors[predictor]}
        if self.base_rate is not None:
            columns[BASE_RATE] = base_rate_pairs(table, self.base_rate)
        gated = dataclasses.replace(table, predictors=columns)
        sm = score_columns(gated, list(columns), crit.policy, (crit.censoring,))
        self.score = sm.columns[0]
        self.reference = sm.columns[1] if self.base_rate is not None else np.full(table.n, np.nan)
        self.missing_q_z = sm.missing_q_z[predictor]
        self.audit = termination_audit(gated, crit.policy)
        self.ids = table.ids
        self.task_ids = sample.task_ids


def evaluate_gate(
    candidate: Sequence[TrajectoryRecord] | GateSample,
    criteria: GateCriteria | None = None,
    baseline: Sequence[TrajectoryRecord] | GateSample | None = None,
) -> dict[str, Any]:
    """Run the gate on records (or samples read by `gate_paths`); returns the result object
    behind `tps-tracer gate --json`."""
    crit = criteria or GateCriteria()
    crit.validate(baseline is not None)
    run = _Run(_sample(candidate, crit), crit, crit.predictor)
    if crit.vs_base_rate and run.base_rate is None:
        raise GateInputError(
            "--vs-base-rate: no complete trajectory (a clean stop with an outcome), so no base rate to compare with"
        )
    checks: list[dict[str, Any]] = []
    warnings: list[str] = []
    notes: list[str] = []

    scored = ~np.isnan(run.score)
    n = int(scored.sum())
    both = scored & ~np.isnan(run.reference)
    boot = bootstrap_means(
        np.column_stack([run.score, np.where(both, run.reference, np.nan), np.where(both, run.score, np.nan)]),
        trajectory_keys(run.ids),
        crit.bootstrap,
        crit.seed,
    )
    lo, hi = boot.ci()
    selected = {
        "predictor": run.predictor,
        "rule": get_rule(crit.rule).name,
        "weights": get_schedule(crit.weights).name,
        "censoring": crit.censoring,
        "n": n,
        "mean": _num(boot.point[0]),
        "ci_low": _num(lo[0]),
        "ci_high": _num(hi[0]),
    }

    checks.extend(_assumption_checks(n, run.audit, crit))

    if crit.min_score is not None:
        checks.append(
            _decision(
                "absolute", float(boot.point[0]), boot.replicates[:, 0], crit.min_score, "CI lower bound of the score"
            )
        )
    if crit.vs_base_rate:
        delta_reps = boot.replicates[:, 2] - boot.replicates[:, 1]
        delta = float(boot.point[2] - boot.point[1])
        checks.append(
            _decision(
                "vs_base_rate",
                delta,
                delta_reps,
                -crit.margin + 0.0,  # + 0.0: no "-0" in reports
                f"score minus the base-rate forecast ({run.base_rate:.4g}) on the same trajectories, paired",
            )
        )
    if baseline is not None:
        base_run = _Run(_sample(baseline, crit), crit, run.predictor)
        for check in _assumption_checks(len(base_run.ids), base_run.audit, crit):
            if check["name"] == "capture_loss":
                checks.append({**check, "detail": "baseline: " + check["detail"]})
        checks.append(_baseline_check(run, base_run, crit, notes))

    # Assumption discipline: what the censored score rests on.
    rate = run.audit["censoring_rate"]
    with_q = run.audit["censored_with_q_z"]
    n_cens = run.audit["roles"]["censored"]
    if n_cens:
        source = f"q_z from the records for {with_q} of {n_cens} censored runs" if with_q else "no q_z in the records"
        notes.append(f"q_Z source: {source}")
    if rate is not None and rate > crit.high_censoring and with_q == 0:
        warnings.append(
            f"censoring rate {rate:.1%} with only the simple form (q_Z ~ 0) available: the score is pessimistic "
            "for runs stopped by the step budget; supply q_z (continuation audits) to gate on cen-exact"
        )
    if crit.censoring == EXACT and run.missing_q_z:
        warnings.append(f"{run.missing_q_z} censored runs lack q_z and are left out of the cen-exact score")
    if crit.censoring == "complete-only" and n_cens:
        warnings.append(f"complete-only drops {n_cens} censored runs: survivor bias (use --censoring simple)")
    if not run.audit["default_policy"]:
        notes.append("non-default censoring policy: some informative stops treated as censored")
    for s in run.skipped:
        notes.append(f"default predictor: skipped {s.predictor} ({s.reason})")

    decisions = [c for c in checks if c["kind"] == "decision"]
    flips = [c["flip_probability"] for c in decisions if c["flip_probability"] is not None]
    if crit.max_flip is not None:
        worst = max(flips) if flips else float("nan")
        checks.append(
            {
                "name": "stability",
                "kind": "decision",
                "passed": bool(flips) and worst <= crit.max_flip,
                "estimate": _num(worst),
                "threshold": crit.max_flip,
                "detail": "largest verdict-flip probability under resampling",
            }
        )
    if n < crit.min_n or _refused_for_capture_loss(checks):  # the baseline's loss included
        verdict = UNUSABLE
    else:
        verdict = PASS if all(c["passed"] for c in checks) else FAIL
    return {
        "version": GATE_VERSION,
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "score": selected,
        "checks": checks,
        "warnings": warnings,
        "notes": notes,
        "settings": {"bootstrap": crit.bootstrap, "seed": crit.seed, "ci_level": CI_LEVEL, "margin": crit.margin},
        "audit": run.audit,
        "skipped_predictors": as_dicts(run.skipped),
    }


def gate_paths(
    candidate: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    criteria: GateCriteria | None = None,
    baseline: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> dict[str, Any]:
    """`evaluate_gate` on trajectory files (JSON Lines, Parquet, directories of shards), read
    chunk by chunk: memory holds a fixed-size row per trajectory, never the records."""
    crit = criteria or GateCriteria()
    crit.validate(baseline is not None)
    if isinstance(candidate, (str, os.PathLike)):  # one path, not a sequence of characters
        candidate = [candidate]
    rule, schedule = get_rule(crit.rule), get_schedule(crit.weights)
    paired = baseline is not None  # task ids pair the two runs
    cand = sample_from_paths(candidate, rule, schedule, paired, chunk_bytes, progress)
    base = None if baseline is None else sample_from_paths([baseline], rule, schedule, True, chunk_bytes, progress)
    return evaluate_gate(cand, crit, base)


def _sample(run: Sequence[TrajectoryRecord] | GateSample, crit: GateCriteria) -> GateSample:
    if isinstance(run, GateSample):
        return run
    try:
        check_unique_ids([r.trajectory_id for r in run])
    except ValueError as exc:
        raise GateInputError(str(exc)) from None
    return sample_from_records(run, get_rule(crit.rule), get_schedule(crit.weights))


def _pairing(cand: _Run, base: _Run, n: int) -> str:
    """Say what paired the runs: task ids come from metadata.task_id, else the trajectory id."""
    from_metadata = [t != i for run in (cand, base) for t, i in zip(run.task_ids, run.ids, strict=True)]
    if not any(from_metadata):
        return f"paired by trajectory id over {n} trajectories (no metadata.task_id)"
    if all(from_metadata):
        return f"paired by task id over {n} tasks (metadata.task_id)"
    return f"paired by task id over {n} tasks (metadata.task_id, else the trajectory id)"


def _baseline_check(cand: _Run, base: _Run, crit: GateCriteria, notes: list[str]) -> dict[str, Any]:
    c_ok, b_ok = ~np.isnan(cand.score), ~np.isnan(base.score)
    c_tasks = [t for t, ok in zip(cand.task_ids, c_ok, strict=True) if ok]
    b_tasks = [t for t, ok in zip(base.task_ids, b_ok, strict=True) if ok]
    paired = len(set(c_tasks)) == len(c_tasks) and len(set(b_tasks)) == len(b_tasks) and set(c_tasks) == set(b_tasks)
    if paired:
        b_by_task = dict(zip(b_tasks, base.score[b_ok], strict=True))
        cols = np.column_stack([cand.score[c_ok], [b_by_task[t] for t in c_tasks]])
        boot = bootstrap_means(cols, trajectory_keys(c_tasks), crit.bootstrap, crit.seed)
        reps = boot.replicates[:, 0] - boot.replicates[:, 1]
        point = float(boot.point[0] - boot.point[1])
        how = _pairing(cand, base, len(c_tasks))
    else:
        bc = bootstrap_means(cand.score[c_ok][:, None], _salted_keys(c_tasks, "candidate"), crit.bootstrap, crit.seed)
        bb = bootstrap_means(base.score[b_ok][:, None], _salted_keys(b_tasks, "baseline"), crit.bootstrap, crit.seed)
        reps = bc.replicates[:, 0] - bb.replicates[:, 0]
        point = float(bc.point[0] - bb.point[0])
        how = f"unpaired ({len(c_tasks)} vs {len(b_tasks)} scored runs; task ids differ or repeat)"
    notes.append(f"baseline comparison {how}; baseline mean {float(np.mean(base.score[b_ok])):.6g}")
    return _decision("vs_baseline", point, reps, -crit.margin + 0.0, f"candidate minus baseline, {how}")


def evaluate_gate_on_report(report: dict[str, Any], criteria: GateCriteria | None = None) -> dict[str, Any]:
    """Gate a saved report / `Accumulator.snapshot()` (no per-trajectory data).

    Only the absolute check and the assumption checks can be evaluated from a report; the
    flip probability uses a normal approximation with the report's bootstrap SE.
    """
    crit = criteria or GateCriteria()
    crit.check_values()
    if crit.vs_base_rate:
        raise GateInputError("--vs-base-rate needs trajectory records (a paired bootstrap), not a snapshot")
    if crit.min_score is None:
        raise GateInputError("a snapshot can only be gated with --min (and the assumption checks)")
    try:
        rows = report["scores"]
        audit = report["audit"]
    except (KeyError, TypeError):
        raise GateInputError("not a tps-tracer report or snapshot (no 'scores' / 'audit')") from None
    rule, weights = get_rule(crit.rule).name, get_schedule(crit.weights).name
    candidates = [r for r in rows if r["rule"] == rule and r["weights"] == weights and r["censoring"] == crit.censoring]
    names = [r["predictor"] for r in candidates if r["predictor"] != BASE_RATE]
    predictor = crit.predictor or (names[0] if names else None)
    row = next((r for r in candidates if r["predictor"] == predictor), None)
    if row is None:
        raise GateInputError(f"the snapshot has no row for {predictor} / {rule} / {weights} / {crit.censoring}")
    n = int(row["n"])
    checks = _assumption_checks(n, audit, crit)
    mean, lo, se = row["mean"], row["ci_low"], row["se"]
    if lo is None or mean is None:
        raise GateInputError("the snapshot row has no CI (was it made with bootstrap 0?)")
    flip = None
    if se:
        from scipy.stats import norm

        # Replicate ~ N(mean, se) passes iff rep - (mean - lo) >= min, i.e. rep - mean >= min - lo.
        p_pass = float(norm.sf((crit.min_score - lo) / se))
        flip = p_pass if lo < crit.min_score else 1.0 - p_pass
    checks.append(
        {
            "name": "absolute",
            "kind": "decision",
            "passed": lo >= crit.min_score,
            "estimate": mean,
            "ci_low": lo,
            "ci_high": row["ci_high"],
            "threshold": crit.min_score,
            "flip_probability": flip,
            "detail": "CI lower bound of the score (from the snapshot; flip probability: normal approximation)",
        }
    )
    unusable = n < crit.min_n or _refused_for_capture_loss(checks)
    verdict = UNUSABLE if unusable else (PASS if all(c["passed"] for c in checks) else FAIL)
    return {
        "version": GATE_VERSION,
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "score": {k: row[k] for k in ("predictor", "rule", "weights", "censoring", "n", "mean", "ci_low", "ci_high")},
        "checks": checks,
        "warnings": [],
        "notes": ["gated from a saved report/snapshot"],
        "settings": {
            "bootstrap": report.get("settings", {}).get("bootstrap"),
            "ci_level": CI_LEVEL,
            "margin": crit.margin,
        },
        "audit": audit,
    }
