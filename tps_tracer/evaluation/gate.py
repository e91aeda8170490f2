"""The deployment gate: may this agent ship, judged on censored TPS with confidence intervals?

The gated quantity (predictor, rule, schedule, censoring mode) is fixed by the criteria or,
for the predictor, by the baseline: never chosen from the candidate's data. Default: TPS
cen-simple, log rule, linear-front weights; the predictor named by `predictor`, else the
baseline's first predictor with data, else the first predictor declared in the candidate's
file (the action predictors, null by design for native tool calls, passed over). A
candidate that cannot score it (the predictor missing or without data; cen-exact without
any q_z) is UNUSABLE (exit 2), with the reason.

Decision checks, any combination:

- absolute:      the CI lower bound of the score is at least `min_score`;
- vs base rate:  candidate minus the constant base-rate forecast on the same trajectories
                 (paired: both columns share the bootstrap weights);
- vs baseline:   candidate minus a baseline run, paired on the tasks both sides scored
                 (gate_stats.py), the asymmetries between the sides named.

The two comparative checks run the hypothesis test named by `test` (gate_stats.py):
regression detection (default; FAIL only on a significant drop beyond the margin) or
non-inferiority (PASS only when a drop beyond the margin is ruled out), with their power.

Assumption checks: at least `min_n` scored trajectories (else the sample is unusable,
exit 2), at most `max_excluded_share` informative exclusions (parse/tool errors ...), at most
`max_skipped_share` of the working sample without a forecast of the gated predictor (else
unusable, like capture loss), and warnings when censoring is frequent among the gated runs
and only the simple (q_Z ~ 0) form is available. What the verdict rests on (runs gated, left
out by reason, pending outcomes, replicates) is the result's `coverage`; the lines its files held
that it did not judge (records/limits.py) are its `input` block, present only when there are any.

Verdict stability: for every decision check, the share of bootstrap replicates whose own
verdict differs from the observed one, where a replicate's verdict compares (replicate
estimate - the observed CI's half-width on the tested side) with the threshold. Near 0: the
verdict is robust to resampling; near 0.5: a coin flip. `max_flip` turns it into a check.
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

from tps_tracer.constants import CENSORING_MODES, DEFAULT_MISSING, EXACT, MAX_REPLICATES, MISSING_POLICIES, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import CI_LEVEL, bootstrap_means, trajectory_keys
from tps_tracer.evaluation.chunked import Progress
from tps_tracer.evaluation.gate_input import GateInputError, GateSample, sample_from_paths, sample_from_records
from tps_tracer.evaluation.gate_stats import (
    ALPHA,
    DEFAULT_TEST,
    PAIRING_OVERLAP,
    TESTS,
    Side,
    censoring_rates_differ,
    compare,
    decision,
    unpaired_text,
)
from tps_tracer.evaluation.pairs import audit_of_table, score_columns
from tps_tracer.evaluation.partial_state import gap_stats, gap_summary
from tps_tracer.evaluation.report import NO_WORKING_SAMPLE
from tps_tracer.evaluation.report_options import OptionError
from tps_tracer.evaluation.skipped_predictors import (
    BASE_RATE,
    NO_PREDICTOR,
    Skipped,
    as_dicts,
    check_known_predictors,
    check_no_base_rate,
    no_data_reason,
)
from tps_tracer.records.limits import KINDS, SetAside, check_unique_ids
from tps_tracer.records.reading import DEFAULT_CHUNK_BYTES
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import LogRule, ScoreRule, get_rule, get_schedule

FloatArray = NDArray[np.float64]

# 2: `test`, the predictor's source, UNUSABLE reasons, the baseline comparison block; 3: coverage;
# 4: the CANNOT DECIDE verdict (checks' `undecided`, `decides_at`, `undecided_reason`; `undecided_checks`).
GATE_VERSION = 4
PASS, FAIL, UNUSABLE, CANNOT_DECIDE = "pass", "fail", "unusable", "cannot decide"
# Every check names the side it is about; the decisions not on one side alone, by name.
CANDIDATE, BASELINE = "candidate", "baseline"
SIDE_OF = {"vs_baseline": "both", "stability": "all"}  # both: the candidate-minus-baseline difference
EXIT_CODES = {PASS: 0, FAIL: 1, UNUSABLE: 2, CANNOT_DECIDE: 2}
FRAGILE_FLIP = 0.2  # a verdict that flips in more replicates than this is warned about (legend: "fragile")
MIN_GATE_REPLICATES = 100  # fewer replicates make the 2.5% / 97.5% percentiles too coarse for a verdict

BoolArray = NDArray[np.bool_]

# Above this share of left-out runs the gate warns. The left-out runs are not a random subset:
# a run whose steps lack a "Confidence:" line, or whose grading is slow, is chosen by the agent's
# own behaviour. If they score d lower than the gated runs, the gated mean is off by share * d;
# with share 0.1 and d 0.5 (about the gap in mean log score between a failed and a succeeded run)
# that is 0.05, the size of a typical --margin, so beyond 10% the subset alone can move a verdict.
WARN_SHARE = 0.1
# Default of GateCriteria.max_skipped_share: above it the sample is refused (exit 2) unless the
# user raises the limit. At 20% a gap of only 0.25 (half the failed/succeeded gap) moves the mean
# by that margin, so the verdict describes a different population from the one deployed: the
# same reasoning as refusing capture loss, with room for the occasional unparsed step.
DEFAULT_MAX_SKIPPED_SHARE = 0.2


SNAPSHOT_REPLICATES = "the snapshot's own bootstrap (its settings.bootstrap; --bootstrap does not apply)"


def _share(num: int, den: int) -> float | None:
    return num / den if den else None


def coverage_of_rows(
    working: BoolArray,
    censored: BoolArray,
    usable: BoolArray,
    n_steps: NDArray[np.int64],
    scored: BoolArray,
    pending: int,
    replicates: int,
) -> dict[str, Any]:
    """The coverage block of one run's rows: masks over its trajectories (working sample,
    censored, the gated predictor usable, scored under the gated mode)."""
    skipped = {
        "missing": int(np.sum(working & ~usable & (n_steps > 0))),  # some step has no forecast
        "no_steps": int(np.sum(working & ~usable & (n_steps == 0))),
    }
    return _block(
        int(working.sum()),
        int(scored.sum()),
        {k: v for k, v in skipped.items() if v},
        int(np.sum(working & usable & ~scored)),
        pending,
        int(np.sum(censored & scored)),
        replicates,
        "this gate's bootstrap (--bootstrap)",
    )


def coverage_of_report(
    report: dict[str, Any], predictor: str, rule: str, weights: str, censoring: str
) -> dict[str, Any]:
    """The coverage block from a saved report / snapshot: its score rows give the counts per
    censoring mode (complete-only scores the complete runs alone, cen-simple every working-sample
    run the predictor can score), its `coverage` the file-wide skip reasons."""
    audit = report.get("audit") or {}
    n_of = {
        r.get("censoring"): int(r.get("n") or 0)
        for r in report.get("scores") or []
        if r.get("predictor") == predictor and r.get("rule") == rule and r.get("weights") == weights
    }
    working = int(audit.get("working_sample") or 0)
    gated = n_of.get(censoring, 0)
    reach = n_of.get(SIMPLE, gated)  # every working-sample run the predictor scores
    skipped = {"unscored": working - reach} if working > reach else {}
    complete = n_of.get("complete-only")
    settings = report.get("settings") or {}
    block = _block(
        working,
        gated,
        skipped,
        reach - gated,
        int(audit.get("pending_outcome") or 0),
        None if complete is None else gated - complete,
        settings.get("bootstrap"),
        SNAPSHOT_REPLICATES,
    )
    columns = [c for c in report.get("coverage") or [] if isinstance(c, dict)]
    file_wide = next((c.get("skipped") for c in columns if c.get("predictor") == predictor), None)
    if skipped and file_wide:
        block["skip_reasons_in_file"] = file_wide  # per reason over all runs; the report does not split them
    gaps = report.get("missing_forecasts") or {}
    if predictor in (gaps.get("predictors") or {}):
        block["missing_forecasts"] = {"policy": gaps.get("policy"), **gaps["predictors"][predictor]}
    return block


def _block(
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
        "skipped_share": _share(sum(skipped.values()), working),
        "dropped_by_censoring_mode": dropped_by_censoring,
        "pending_outcome": pending,
        "censored_gated": censored_gated,
        "censoring_rate_gated": None if censored_gated is None else _share(censored_gated, gated),
        "replicates": replicates,
        "replicates_source": replicates_source,
    }


def _check(name: str, passed: bool, estimate: Any, threshold: Any, detail: str, **more: Any) -> dict[str, Any]:
    """One row of the result's `checks` (an assumption check unless `kind` says otherwise)."""
    return {
        "name": name,
        "kind": "assumption",
        "passed": bool(passed),
        "estimate": estimate,
        "threshold": threshold,
        "detail": detail,
        **more,
    }


def skipped_check(block: dict[str, Any], predictor: str, limit: float, side: str = "") -> dict[str, Any]:
    """The assumption check on the gated predictor's skipped share; failing it refuses the sample."""
    share = block["skipped_share"] or 0.0
    n = sum(block["skipped"].values())
    verdict = (
        "gated on the rest"
        if share <= limit
        else f"the gate refuses to judge the rest alone (exit 2) unless --max-skipped-share >= {share:.3f}"
    )
    return _check(
        "skipped_share",
        share <= limit,
        share,
        limit,
        f"{side}{n} of {block['working_sample']} working-sample runs have no {predictor} forecast to score "
        f"({_why(block)}); {verdict}",
    )


def _reasons(skipped: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in skipped.items()) or "none"


def _why(block: dict[str, Any]) -> str:
    """The skip reasons; a snapshot counts them over the whole file only (excluded runs too)."""
    if block.get("skip_reasons_in_file"):
        return f"reasons over the whole file: {_reasons(block['skip_reasons_in_file'])}"
    return _reasons(block["skipped"])


def coverage_warnings(block: dict[str, Any], audit: dict[str, Any], predictor: str) -> list[str]:
    """A warning for each large exclusion (above WARN_SHARE)."""
    out = []
    share = block["skipped_share"]
    if share is not None and share > WARN_SHARE:
        n = sum(block["skipped"].values())
        out.append(
            f"{n} of {block['working_sample']} working-sample runs ({share:.1%}) are not scored: no {predictor} "
            f"forecast ({_why(block)}); the verdict covers the other {block['gated']} runs only"
        )
    pending = block["pending_outcome"]
    clean = max(int((audit.get("stop_reasons") or {}).get("clean") or 0), pending)
    p_share = _share(pending, clean)  # clean runs still waiting for an outcome, of all clean runs
    if p_share is not None and p_share > WARN_SHARE:
        out.append(
            f"{pending} of {clean} clean runs ({p_share:.1%}) still wait for their outcome and are not scored; "
            "gate again once they are graded"
        )
    return out


def coverage_line(block: dict[str, Any], predictor: str, side: str = "") -> str:
    """One line for the text and Markdown headlines: scored of working (the report's and the score
    table's denominator, named alike), each exclusion, replicates; `side` labels it in baseline mode."""
    label = f"coverage ({side})" if side else "coverage"
    parts = [f"{label}: scored {block['gated']} of {block['working_sample']} working-sample runs"]
    n_skipped = sum(block["skipped"].values())
    parts.append(f"no {predictor} forecast: {n_skipped}" + (f" ({_why(block)})" if n_skipped else ""))
    if block["dropped_by_censoring_mode"]:
        parts.append(f"dropped by the censoring mode: {block['dropped_by_censoring_mode']}")
    parts.append(f"clean runs waiting for an outcome: {block['pending_outcome']}")
    reps = block["replicates"]
    whose = " (the snapshot's)" if block["replicates_source"] == SNAPSHOT_REPLICATES else ""
    parts.append(f"CI from {reps if reps is not None else 'an unknown number of'} bootstrap replicates{whose}")
    return "; ".join(parts)


def missing_line(block: dict[str, Any], predictor: str) -> str | None:
    """One line on the gated predictor's steps without a forecast (None when the block has no counts)."""
    g = block.get("missing_forecasts")
    if not g or g.get("steps") is None:
        return None
    line = (
        f"steps without a {predictor} forecast: {g['missing_steps']} of {g['steps']} "
        f"({_pct(g['missing_step_share'])}), in {g['runs_affected']} of {g['runs']} runs "
        f"({_pct(g['runs_affected_share'])}"
        + (f", {g['runs_silent']} of them without any" if g.get("runs_silent") else "")
        + f"); scored as {g['policy']}"
    )
    if g["runs_affected"]:
        line += (
            f"; cost of missingness {_num_text(g['cost'])}; success rate with a gap "
            f"{_pct(g['success_rate_affected'])}, without {_pct(g['success_rate_unaffected'])}"
        )
    return line


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _num_text(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.4f}"


def input_block(candidate: SetAside, baseline: SetAside | None = None) -> dict[str, Any] | None:
    """`{"set_aside": ..., "baseline": {"set_aside": ...}}`, each side only when it set lines aside."""
    block: dict[str, Any] = {}
    if candidate:
        block["set_aside"] = candidate.as_dict()
    if baseline:
        block["baseline"] = {"set_aside": baseline.as_dict()}
    return block or None


def from_report(report: dict[str, Any]) -> dict[str, Any] | None:
    """A saved report's own `input` block (a snapshot gate has no files to read)."""
    section = report.get("input")
    if isinstance(section, dict) and section.get("set_aside"):
        return {"set_aside": section["set_aside"]}
    return None


def _line(set_aside: dict[str, Any]) -> str:
    return "; ".join(
        f"{kind} {set_aside[kind]['count']} (first: {set_aside[kind]['first']})" for kind in KINDS if kind in set_aside
    )


def set_aside_lines(block: dict[str, Any] | None) -> list[str]:
    """One line per side that set lines aside, for the text and Markdown headlines."""
    if not block:
        return []
    lines = []
    if block.get("set_aside"):
        lines.append("set aside (not scored): " + _line(block["set_aside"]))
    if (block.get("baseline") or {}).get("set_aside"):
        lines.append("baseline: set aside (not scored): " + _line(block["baseline"]["set_aside"]))
    return lines


@dataclass
class GateCriteria:
    predictor: str | None = None  # None: the baseline's first predictor with data, else the candidate file's first
    rule: str = "log"
    weights: str = "linear-front"
    censoring: str = SIMPLE
    min_score: float | None = None
    vs_base_rate: bool = False
    margin: float = 0.0
    test: str = DEFAULT_TEST  # the comparative checks' hypothesis test (gate_stats.TESTS)
    min_n: int = 30
    max_excluded_share: float | None = None
    allow_capture_loss: bool = False  # gate a sample holding capture_lost runs (their scores unknown)
    # Largest share of the working sample the gated predictor may leave unscored (DEFAULT_MAX_SKIPPED_SHARE: why 0.2).
    max_skipped_share: float = DEFAULT_MAX_SKIPPED_SHARE
    max_flip: float | None = None
    high_censoring: float = 0.2  # warn above this censoring rate when no q_z is available
    bootstrap: int = 2000
    seed: int = 0
    policy: CensoringPolicy = field(default_factory=CensoringPolicy)
    missing: str = DEFAULT_MISSING  # steps without a forecast (evaluation/rows.py)

    def validate(self, has_baseline: bool) -> None:
        """Raise GateOptionError naming the first invalid field (the CLI maps it to its flag)."""
        self.check_values()
        if self.min_score is None and not self.vs_base_rate and not has_baseline:
            raise GateInputError("no decision criterion: give --min, --vs-base-rate and/or --baseline")

    def check_values(self) -> None:
        """Each field's own range, before any data is read: a NaN threshold, a probability
        outside [0, 1] or a replicate count beyond MAX_REPLICATES fails here, by field name."""
        if self.missing not in MISSING_POLICIES:
            raise GateOptionError(
                "missing", f"unknown policy {self.missing!r} (choose from {', '.join(MISSING_POLICIES)})"
            )
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
        if self.test not in TESTS:
            raise GateOptionError("test", f"must be one of {', '.join(TESTS)}, got {self.test!r}")
        if not _is_int(self.min_n) or self.min_n < 1:
            raise GateOptionError("min_n", f"must be an integer >= 1, got {self.min_n!r}")
        for name in ("max_excluded_share", "max_skipped_share", "max_flip", "high_censoring"):
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


class GateOptionError(OptionError, GateInputError):
    """A GateCriteria field is invalid (the CLI maps `field` to its flag)."""

    owner = "GateCriteria"


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


# Assumption checks whose failure refuses the sample (exit 2) rather than failing the candidate:
# the runs they leave out have unknown scores, so no verdict on the rest is one on the agent; and
# the two an `Unusable` sample fails (it cannot score the gated quantity at all).
REFUSING_CHECKS = ("capture_loss", "skipped_share", "gated_predictor", "q_z_for_exact")


def _assumption_checks(
    n: int, audit: dict[str, Any], coverage: dict[str, Any], predictor: str, crit: GateCriteria, side: str = CANDIDATE
) -> list[dict[str, Any]]:
    """The checks on one side's sample, each naming its `side` (the baseline's details say so too)."""
    who = "" if side == CANDIDATE else f"{side}: "
    # A tiny baseline makes a wide CI, which the default regression test would pass: unusable instead.
    size = "sample_size" if side == CANDIDATE else "baseline_size"
    detail = f"{who}{n} scored trajectories; at least {crit.min_n} needed for a CI-based verdict"
    checks = [_check(size, n >= crit.min_n, n, crit.min_n, detail)]
    lost = int(audit.get("roles", {}).get("lost", 0))
    if lost:
        # Runs whose end tps-tracer lost are not a random subset (bursts lose the slow ones):
        # gating the rest would judge survivors. Refused unless the user accepts it.
        verdict = (
            "gated anyway (allow_capture_loss)"
            if crit.allow_capture_loss
            else "the gate refuses such a sample (exit 2) unless --allow-capture-loss"
        )
        detail = f"{who}{lost} runs whose end tps-tracer did not see (stop reason capture_lost, "
        checks.append(
            _check(
                "capture_loss",
                crit.allow_capture_loss,
                lost,
                0,
                detail + f"metadata.tps_abandoned says why) are not scored; {verdict}",
            )
        )
    if crit.max_excluded_share is not None:
        share = audit.get("excluded_share") or 0.0
        detail = "share of runs ended by informative stops (parse/tool errors, ...), not scored"
        checks.append(
            _check("excluded_share", share <= crit.max_excluded_share, share, crit.max_excluded_share, detail)
        )
    if coverage["skipped"]:
        checks.append(skipped_check(coverage, predictor, crit.max_skipped_share, who))
    for c in checks:
        c["side"] = side
    return checks


class Unusable(Exception):
    """The sample cannot score the gated quantity: an UNUSABLE verdict (exit 2), with the reason."""

    def __init__(self, check: str, reason: str, side: str = CANDIDATE):
        self.check = check
        self.reason = reason
        self.side = side
        super().__init__(reason)

    def as_check(self) -> dict[str, Any]:
        return _check(self.check, False, None, None, self.reason, side=self.side)


def _scorable(sample: GateSample, crit: GateCriteria) -> NDArray[np.bool_]:
    table = sample.table
    if table.n == 0:
        raise GateInputError("no trajectories")
    complete, censored = table.role_masks(crit.policy)
    if not complete.any() and not censored.any():
        raise GateInputError(NO_WORKING_SAMPLE)
    return complete | censored


# Null on every step by design for a native tool-calling agent (no action text: capture/step_signals.py):
# the only predictors a default choice passes over when they have no data.
BY_DESIGN_NULL = ("action_token_prob", "action_entropy_conf")


def choose_predictor(crit: GateCriteria, cand: GateSample, base: GateSample | None) -> tuple[str, str, list[Skipped]]:
    """(predictor, where the choice came from, predictors passed over with the reason).

    Never from the candidate's data: a prompt change that nulls the candidate's `verbal`
    must not move the gate to `token_prob` on both sides. A named predictor found in neither
    file is a usage error (a typo); one the baseline has and the candidate lacks makes the
    candidate unusable (`_Run`).
    """
    if crit.predictor in (None, BASE_RATE):  # a file column of that name is read unless another is named
        try:
            for sample in (cand, base):
                if sample is not None:
                    check_no_base_rate(sample.table.predictors)
        except InputError as exc:
            raise GateInputError(str(exc)) from None
    if crit.predictor is not None:
        in_base = base is not None and crit.predictor in base.table.predictors
        if not in_base:
            try:
                check_known_predictors([crit.predictor], [p for p in cand.table.predictors if p != BASE_RATE])
            except InputError as exc:
                raise GateInputError(f"--predictor: {exc}") from None
        return crit.predictor, "--predictor", []
    skipped: list[Skipped] = []
    if base is not None:
        working = _scorable(base, crit)
        for name in base.table.predictors:
            reason = no_data_reason(base.table.predictors[name], working)
            if reason is None:
                return name, "the baseline's first predictor with data", skipped
            skipped.append(Skipped(name, f"no data in the baseline: {reason}"))
        why = "; ".join(f"{s.predictor}: {s.reason}" for s in skipped) or NO_PREDICTOR
        raise GateInputError(f"the baseline has no predictor to gate on: {why}")
    working = _scorable(cand, crit)
    for name in cand.table.predictors:
        reason = no_data_reason(cand.table.predictors[name], working)
        if reason is None or name not in BY_DESIGN_NULL:
            return name, "the first predictor in the candidate's file", skipped
        skipped.append(Skipped(name, f"{reason} (null by design for native tool calls)"))
    if not cand.table.predictors:
        raise GateInputError(NO_PREDICTOR)
    why = "; ".join(f"{s.predictor}: {s.reason}" for s in skipped)
    raise GateInputError(f"no predictor to gate on: {why}")


class _Run:
    """One run's scores for the gated column (and the base-rate reference), per trajectory."""

    def __init__(self, sample: GateSample, crit: GateCriteria, predictor: str, side: str):
        table = sample.table
        working = _scorable(sample, crit)
        complete = table.role_masks(crit.policy)[0]
        names = [p for p in table.predictors if p != BASE_RATE]
        if predictor not in table.predictors:
            raise Unusable(
                "gated_predictor",
                f"the {side} has no predictor {predictor!r} (found: {', '.join(names) or 'none'})",
                side,
            )
        reason = no_data_reason(table.predictors[predictor], working)
        if reason is not None:
            with_data = [p for p in names if no_data_reason(table.predictors[p], working) is None]
            raise Unusable(
                "gated_predictor",
                f"the {side} cannot score predictor {predictor!r}: {reason}; predictors with data: "
                f"{', '.join(with_data) or 'none'} (the gated predictor is never switched silently: "
                "name one with --predictor on both runs)",
                side,
            )
        self.predictor = predictor
        # Censored runs alone are scored (as in the report); the base-rate reference needs a complete outcome.
        self.base_rate = float(np.mean(table.outcome[complete])) if complete.any() else None
        columns = {predictor: table.predictors[predictor]}
        if self.base_rate is not None:
            columns[BASE_RATE] = table.constant_pairs(self.base_rate)
        gated = dataclasses.replace(table, predictors=columns)
        sm = score_columns(gated, list(columns), crit.policy, (crit.censoring,))
        self.score = sm.columns[0]
        self.reference = sm.columns[1] if self.base_rate is not None else np.full(table.n, np.nan)
        self.missing_q_z = sm.missing_q_z[predictor]
        self.audit = audit_of_table(gated, crit.policy)
        self.coverage = coverage_of_rows(
            working,
            table.role_masks(crit.policy)[1],
            table.predictors[predictor].usable,
            table.n_steps,
            ~np.isnan(self.score),
            self.audit["pending_outcome"],
            crit.bootstrap,
        )
        complete, censored = table.role_masks(crit.policy)
        gaps = gap_stats(table.predictors[predictor], table, complete, censored)
        self.coverage["missing_forecasts"] = {"policy": crit.missing, **gap_summary(gaps)}
        self.ids = table.ids
        # Forecasts the log rule clipped in the runs the gated score covers (0 under another rule).
        self.clipped = table.predictors[predictor].clipped_in(~np.isnan(self.score))
        self.task_ids = sample.task_ids
        self.with_data = {p for p in names if no_data_reason(table.predictors[p], working) is None}

    def side(self) -> Side:
        return Side(self.score, self.task_ids, self.ids)


def censoring_warnings(
    audit: dict[str, Any], crit: GateCriteria, missing_q_z: int, coverage: dict[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """(warnings, notes) on what the censored score rests on; the same for records, Ray and snapshots.

    The rate is the one among the trajectories gated (`coverage`), when known: the runs the gated
    predictor skips are not scored, so the whole sample's rate says little about the score."""
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


def fragile_warnings(checks: Sequence[dict[str, Any]]) -> list[str]:
    """A verdict that resampling reverses often is not evidence either way: say so on every PASS or FAIL."""
    out = []
    for c in checks:
        flip = c.get("flip_probability")
        if flip is not None and flip > FRAGILE_FLIP and not c.get("undecided"):  # no verdict to call fragile
            verb = "passes" if c["passed"] else "fails"
            out.append(
                f"fragile verdict: {c['name']} {verb}, but P(flip) is {flip:.3f} (> {FRAGILE_FLIP}): a new sample "
                "of the same size could reverse it (--max-flip makes stability a check)"
            )
    return out


def clipped_note(rule: ScoreRule, predictor: str, clipped: int) -> str | None:
    """The note saying how many forecasts the gated log rule clipped (None for another rule, or none)."""
    if not isinstance(rule, LogRule) or not clipped:
        return None
    return (
        f"log rule: {clipped} forecasts of {predictor} were 0 or 1, clipped to [{rule.eps:g}, 1-{rule.eps:g}]; "
        f"one on a run that went the other way scores log({rule.eps:g}) = {math.log(rule.eps):.1f} "
        "times its step weight"
    )


def _check_exact(audit: dict[str, Any], crit: GateCriteria) -> None:
    """cen-exact on a candidate with censored runs and no q_z at all scores only its complete runs:
    a different quantity, so the sample cannot be gated on it."""
    n_cens = (audit.get("roles") or {}).get("censored") or 0
    if crit.censoring == EXACT and n_cens and not audit.get("censored_with_q_z"):
        raise Unusable(
            "q_z_for_exact",
            f"--censoring exact needs q_z, and none of the candidate's {n_cens} censored runs carries one "
            "(estimate it with `tps-tracer censoring --write-records`, or gate with --censoring simple)",
        )


def _settings(crit: GateCriteria) -> dict[str, Any]:
    return {
        "bootstrap": crit.bootstrap,
        "seed": crit.seed,
        "ci_level": CI_LEVEL,
        "margin": crit.margin,
        "test": crit.test,
        "alpha_one_sided": ALPHA,
    }


def _score(crit: GateCriteria, predictor: str, source: str, n: int, mean: Any, lo: Any, hi: Any) -> dict[str, Any]:
    """The result's `score`: what was gated, from where, and its estimate."""
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
    audit: dict[str, Any] | None,
    coverage: dict[str, Any] | None,
    settings: dict[str, Any] | None = None,
    skipped: Sequence[Skipped] | None = None,
    comparison: dict[str, Any] | None = None,
    read: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The one gate result of every route (records, Ray rows, snapshot): the verdict follows from
    the checks (a failed sample-size or refusing check: UNUSABLE; else any other failed check:
    FAIL; else an undecided check: CANNOT DECIDE, with its reason)."""
    for c in checks:
        c.setdefault("side", SIDE_OF.get(c["name"], CANDIDATE))
    undecided = [c["name"] for c in checks if c.get("undecided")]
    failed = [c["name"] for c in checks if not c["passed"] and not c.get("undecided")]
    reasons = _unusable_reasons(checks)
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
        "warnings": warnings,
        "notes": notes,
        "settings": settings or _settings(crit),
        "audit": audit,
        "coverage": coverage,
    }
    if skipped is not None:
        result["skipped_predictors"] = as_dicts(skipped)
    if comparison is not None:
        result["comparison"] = comparison
    if read:  # only when lines were set aside
        result["input"] = read
    return result


def evaluate_gate(
    candidate: Sequence[TrajectoryRecord] | GateSample,
    criteria: GateCriteria | None = None,
    baseline: Sequence[TrajectoryRecord] | GateSample | None = None,
) -> dict[str, Any]:
    """Run the gate on records (or samples read by `gate_paths`); returns the result object
    behind `tps-tracer gate --json`."""
    crit = criteria or GateCriteria()
    crit.validate(baseline is not None)
    cand_sample = _sample(candidate, crit)
    base_sample = None if baseline is None else _sample(baseline, crit)
    predictor, source, skipped = choose_predictor(crit, cand_sample, base_sample)
    read = input_block(cand_sample.set_aside, None if base_sample is None else base_sample.set_aside)
    try:
        run = _Run(cand_sample, crit, predictor, "candidate")
        _check_exact(run.audit, crit)
        base = None if base_sample is None else _Run(base_sample, crit, predictor, "baseline")
    except Unusable as u:
        score = _score(crit, predictor, source, 0, None, None, None)
        return _result(crit, score, [u.as_check()], [], [], None, None, skipped=skipped, read=read)
    if crit.vs_base_rate and run.base_rate is None:
        raise GateInputError(
            "--vs-base-rate: no complete trajectory (a clean stop with an outcome), so no base rate to compare with"
        )
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
    selected = _score(crit, run.predictor, source, n, _num(boot.point[0]), _num(lo[0]), _num(hi[0]))
    checks = _assumption_checks(n, run.audit, run.coverage, run.predictor, crit)
    if base is not None:  # the baseline's sample, held to the same limits (its excluded share is not gated)
        n_base = int(np.sum(~np.isnan(base.score)))
        checks += [
            c
            for c in _assumption_checks(n_base, base.audit, base.coverage, base.predictor, crit, BASELINE)
            if c["name"] != "excluded_share"
        ]

    if crit.min_score is not None:
        checks.append(
            decision(
                "absolute", float(boot.point[0]), boot.replicates[:, 0], crit.min_score, "CI lower bound of the score"
            )
        )
    if crit.vs_base_rate:
        delta_reps = boot.replicates[:, 2] - boot.replicates[:, 1]
        delta = float(boot.point[2] - boot.point[1])
        checks.append(
            decision(
                "vs_base_rate",
                delta,
                delta_reps,
                -crit.margin + 0.0,  # + 0.0: no "-0" in reports
                f"score minus the base-rate forecast ({run.base_rate:.4g}) on the same trajectories, paired",
                crit.test,
                int(both.sum()),
            )
        )
    warnings, more_notes = censoring_warnings(run.audit, crit, run.missing_q_z, run.coverage)
    warnings.extend(coverage_warnings(run.coverage, run.audit, run.predictor))
    comparison = None
    if base is not None:
        warnings.extend("baseline: " + w for w in coverage_warnings(base.coverage, base.audit, base.predictor))
        check, comparison = _baseline_check(run, base, crit, warnings, notes)
        checks.append(check)
    notes.extend(more_notes)
    notes.append(f"gated predictor {run.predictor}: {source}")
    rule = get_rule(crit.rule)
    for who, r in (("", run), ("baseline: ", base)):
        note = clipped_note(rule, r.predictor, r.clipped) if r is not None else None
        if note:
            notes.append(who + note)
    for s in skipped:
        notes.append(f"default predictor: skipped {s.predictor} ({s.reason})")

    warnings.extend(fragile_warnings(checks))
    decisions = [c for c in checks if c["kind"] == "decision"]
    flips = [c["flip_probability"] for c in decisions if c["flip_probability"] is not None]
    if crit.max_flip is not None:
        worst = max(flips) if flips else float("nan")
        stable = bool(flips) and worst <= crit.max_flip
        # A verdict that resampling reverses this often is evidence neither way: no FAIL.
        fragile = {} if stable else {"undecided": True, "undecided_reason": _fragile_reason(worst, crit.max_flip)}
        detail = "largest verdict-flip probability under resampling"
        checks.append(_check("stability", stable, _num(worst), crit.max_flip, detail, kind="decision", **fragile))
    return _result(crit, selected, checks, warnings, notes, run.audit, run.coverage, None, skipped, comparison, read)


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
    cand = sample_from_paths(candidate, rule, schedule, paired, chunk_bytes, progress, crit.missing)
    base = (
        None
        if baseline is None
        else sample_from_paths([baseline], rule, schedule, True, chunk_bytes, progress, crit.missing)
    )
    return evaluate_gate(cand, crit, base)


def _sample(run: Sequence[TrajectoryRecord] | GateSample, crit: GateCriteria) -> GateSample:
    if isinstance(run, GateSample):
        return run
    try:
        check_unique_ids([r.trajectory_id for r in run])
    except InputError as exc:
        raise GateInputError(str(exc)) from None
    return sample_from_records(run, get_rule(crit.rule), get_schedule(crit.weights), crit.missing)


def _pairing(cand: _Run, base: _Run, n: int) -> str:
    """Say what paired the runs: task ids come from metadata.task_id, else the trajectory id."""
    from_metadata = [t != i for run in (cand, base) for t, i in zip(run.task_ids, run.ids, strict=True)]
    if not any(from_metadata):
        # A metadata.task_id equal to its trajectory id pairs the same runs: say what paired them, not a lack.
        return f"paired by trajectory id over {n} trajectories (task ids, where given, equal them)"
    if all(from_metadata):
        return f"paired by task id over {n} tasks (metadata.task_id)"
    return f"paired by task id over {n} tasks (metadata.task_id, else the trajectory id)"


def _asymmetries(cand: _Run, base: _Run, crit: GateCriteria, warnings: list[str], notes: list[str]) -> list[str]:
    """Name every difference between the sides that changes what is compared."""
    found: list[str] = []
    ca, ba = cand.audit, base.audit
    cq, bq = ca["censored_with_q_z"], ba["censored_with_q_z"]
    cn, bn = ca["roles"]["censored"], ba["roles"]["censored"]
    if (cq > 0) != (bq > 0):
        who = "candidate" if cq else "baseline"
        text = f"q_z on the {who} only (candidate {cq} of {cn} censored runs, baseline {bq} of {bn})"
        found.append(text)
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
        found.append(text)
        notes.append(text)
    cr, br = ca["censoring_rate"], ba["censoring_rate"]
    if cr is not None and br is not None:
        text = f"censoring rate candidate {cr:.1%}, baseline {br:.1%}"
        if censoring_rates_differ(ca, ba):
            found.append(text)
            warnings.append(
                f"{text} differ significantly: the runs stop on the step budget at different rates, and "
                "cen-simple scores budget stops pessimistically (q_Z ~ 0)"
            )
        else:
            notes.append(text)
    return found


def _baseline_check(
    cand: _Run, base: _Run, crit: GateCriteria, warnings: list[str], notes: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    asym = _asymmetries(cand, base, crit, warnings, notes)
    cmp = compare(cand.side(), base.side(), crit.bootstrap, crit.seed)
    how = _pairing(cand, base, cmp.counts["common_tasks"]) + cmp.how if cmp.paired else cmp.how
    counts = cmp.counts
    if cmp.paired and (counts["candidate_unpaired_runs"] or counts["baseline_unpaired_runs"]):
        notes.append(unpaired_text(counts))
    elif not cmp.paired and counts["common_tasks"]:
        warnings.append(
            f"the runs share only {counts['common_tasks']} scored tasks (less than {PAIRING_OVERLAP:.0%} of the "
            "smaller side's): compared unpaired, on different task sets"
        )
    b_ok = ~np.isnan(base.score)
    base_mean = float(np.mean(base.score[b_ok])) if b_ok.any() else float("nan")
    notes.append(f"baseline: mean {base_mean:.6g} over {int(b_ok.sum())} scored runs; compared {how}")
    units = "tasks both sides score" if cmp.paired else "scored runs on each side"
    n_units = counts["common_tasks"] if cmp.paired else min(int(np.sum(~np.isnan(cand.score))), int(b_ok.sum()))
    check = decision(
        "vs_baseline",
        cmp.point,
        cmp.replicates,
        -crit.margin + 0.0,
        f"candidate minus baseline, {how}",
        crit.test,
        n_units,
        units,
    )
    comparison = {
        "paired": cmp.paired,
        "how": how,
        **counts,
        "asymmetries": asym,
        "baseline_mean": _num(base_mean),
        "baseline_coverage": base.coverage,
    }
    return check, comparison


def evaluate_gate_on_report(report: dict[str, Any], criteria: GateCriteria | None = None) -> dict[str, Any]:
    """Gate a saved report / `Accumulator.snapshot()` (no per-trajectory data).

    Only the absolute check and the assumption checks can be evaluated from a report; the
    flip probability uses a normal approximation with the report's bootstrap SE. The
    censoring warnings come from the report's audit, as on records.
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
    source = "--predictor" if crit.predictor else "the report's first scored predictor"
    coverage = coverage_of_report(report, str(predictor), rule, weights, crit.censoring)  # no row: fails below
    warnings, notes = censoring_warnings(audit, crit, _missing_q_z(audit), coverage)
    skipped = [s.get("predictor") for s in report.get("skipped_predictors") or [] if isinstance(s, dict)]
    if crit.predictor is None and skipped:
        warnings.append(
            f"default predictor {predictor}: the report skipped {', '.join(map(str, skipped))} (no data); "
            "name the gated predictor with --predictor so it cannot move"
        )
    try:
        _check_exact(audit, crit)
    except Unusable as u:
        score = _score(crit, str(predictor), source, 0, None, None, None)
        return _result(crit, score, [u.as_check()], warnings, notes, None, None, skipped=[], read=from_report(report))
    row = next((r for r in candidates if r["predictor"] == predictor), None)
    if row is None:
        raise GateInputError(f"the snapshot has no row for {predictor} / {rule} / {weights} / {crit.censoring}")
    n = int(row["n"])
    checks = _assumption_checks(n, audit, coverage, str(predictor), crit)
    warnings.extend(coverage_warnings(coverage, audit, str(predictor)))
    if coverage["replicates"] != crit.bootstrap:
        # The records route would draw crit.bootstrap replicates: near the threshold the two
        # percentile intervals can give different verdicts (the P(flip) column says how near).
        # Replicate weights derive from (trajectory id, replicate, seed): the same count and seed on
        # the records give this interval again.
        reps, seed = coverage["replicates"], report.get("settings", {}).get("seed")
        notes.append(
            f"the interval rests on the snapshot's {reps} bootstrap replicates (seed {seed}); gating the records "
            f"draws {crit.bootstrap} (--bootstrap {reps} --seed {seed} on the records gives this interval)"
        )
    clipped = (report.get("log_clipped") or {}).get("forecasts", {}).get(predictor, 0)
    note = clipped_note(get_rule(crit.rule), str(predictor), int(clipped))
    if note:  # the report counts its working sample, complete and censored runs alike
        notes.append(note + " (the report's count, over its working sample)")
    mean, lo, se = row["mean"], row["ci_low"], row["se"]
    if lo is None or mean is None:
        raise GateInputError("the snapshot row has no CI (was it made with bootstrap 0?)")
    flip = None
    if se:
        from scipy.stats import norm

        # Replicate ~ N(mean, se) passes iff rep - (mean - lo) >= min, i.e. rep - mean >= min - lo.
        p_pass = float(norm.sf((crit.min_score - lo) / se))
        flip = p_pass if lo < crit.min_score else 1.0 - p_pass
    detail = "CI lower bound of the score (from the snapshot; flip probability: normal approximation)"
    checks.append(
        _check(
            "absolute",
            lo >= crit.min_score,
            mean,
            crit.min_score,
            detail,
            kind="decision",
            ci_low=lo,
            ci_high=row["ci_high"],
            flip_probability=flip,
        )
    )
    warnings.extend(fragile_warnings(checks))
    settings = _settings(crit)
    settings.update(bootstrap=report.get("settings", {}).get("bootstrap"), seed=report.get("settings", {}).get("seed"))
    score = {k: row[k] for k in ("predictor", "rule", "weights", "censoring", "n", "mean", "ci_low", "ci_high")}
    score["predictor_source"] = source  # the saved row's own fields first
    notes = ["gated from a saved report/snapshot", *notes]
    return _result(crit, score, checks, warnings, notes, audit, coverage, settings, read=from_report(report))


def _fragile_reason(flip: float, limit: float) -> str:
    return (
        f"the verdict flips in {flip:.1%} of the bootstrap replicates (more than --max-flip {limit:g}): a new "
        "sample of the same size could reverse it"
    )


def _unusable_reasons(checks: Sequence[dict[str, Any]]) -> list[str]:
    """Why there is no verdict: every failed sample-size check (too small for a CI-based verdict)."""
    return [
        f"{c['name']}: {c['estimate']} scored trajectories, fewer than min_n {c['threshold']}: too small for a "
        "CI-based verdict"
        for c in checks
        if c["name"] in ("sample_size", "baseline_size") and not c["passed"]
    ] + [f"{c['name']}: {c['detail']}" for c in checks if c["name"] in REFUSING_CHECKS and not c["passed"]]


def _missing_q_z(audit: dict[str, Any]) -> int:
    roles = audit.get("roles") or {}
    return max(0, int(roles.get("censored") or 0) - int(audit.get("censored_with_q_z") or 0))
