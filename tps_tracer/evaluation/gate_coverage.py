"""What the gate's verdict rests on: which runs it scored, which it left out and why, how many replicates.

A gate result must say when it judged a subset. Three things shrink the gated sample without
changing the exit code: working-sample runs the gated predictor cannot score (a step without a
forecast, a run without steps), clean runs still waiting for their outcome, and the runs the
censoring mode drops (cen-exact without q_z, complete-only's budget stops). The block built here
(`coverage` in `--json`) counts each one, by reason, together with the censoring rate among the
trajectories actually gated and the bootstrap replicates behind the interval, for the record
route and the snapshot route alike; the text and Markdown renderings print it on one line.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.evaluation.censoring_mix import SIMPLE

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


def pending_share(block: dict[str, Any], audit: dict[str, Any]) -> float | None:
    """Clean runs still waiting for an outcome, as a share of all clean runs."""
    pending = block["pending_outcome"]
    clean = int((audit.get("stop_reasons") or {}).get("clean") or 0)
    return _share(pending, max(clean, pending))


def skipped_check(block: dict[str, Any], predictor: str, limit: float, side: str = "") -> dict[str, Any]:
    """The assumption check on the gated predictor's skipped share; failing it refuses the sample."""
    share = block["skipped_share"] or 0.0
    n = sum(block["skipped"].values())
    return {
        "name": "skipped_share",
        "kind": "assumption",
        "passed": share <= limit,
        "estimate": share,
        "threshold": limit,
        "detail": f"{side}{n} of {block['working_sample']} working-sample runs have no {predictor} forecast to "
        f"score ({_why(block)}); "
        + (
            "gated on the rest"
            if share <= limit
            else f"the gate refuses to judge the rest alone (exit 2) unless --max-skipped-share >= {share:.3f}"
        ),
    }


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
    p_share = pending_share(block, audit)
    if p_share is not None and p_share > WARN_SHARE:
        pending = block["pending_outcome"]
        clean = max(int((audit.get("stop_reasons") or {}).get("clean") or 0), pending)
        out.append(
            f"{pending} of {clean} clean runs ({p_share:.1%}) still wait for their outcome and are not scored; "
            "gate again once they are graded"
        )
    return out


def coverage_line(block: dict[str, Any], predictor: str) -> str:
    """One line for the text and Markdown headlines: gated of working, each exclusion, replicates."""
    parts = [f"coverage: gated {block['gated']} of {block['working_sample']} working-sample runs"]
    n_skipped = sum(block["skipped"].values())
    parts.append(f"no {predictor} forecast: {n_skipped}" + (f" ({_why(block)})" if n_skipped else ""))
    if block["dropped_by_censoring_mode"]:
        parts.append(f"dropped by the censoring mode: {block['dropped_by_censoring_mode']}")
    parts.append(f"clean runs waiting for an outcome: {block['pending_outcome']}")
    reps = block["replicates"]
    whose = " (the snapshot's)" if block["replicates_source"] == SNAPSHOT_REPLICATES else ""
    parts.append(f"CI from {reps if reps is not None else 'an unknown number of'} bootstrap replicates{whose}")
    return "; ".join(parts)
