"""The gate's comparative statistics: its two hypothesis tests, their power and verdict stability, and
the candidate-vs-baseline difference D = candidate - reference they test (docs/gate.md).

D has a two-sided 95% percentile bootstrap CI [lo, hi], each bound a one-sided test at ALPHA:
- regression (default): FAIL only when hi < -margin (an identical candidate fails with probability ALPHA);
- non-inferiority: PASS only when lo >= -margin; an identical candidate fails with probability
  P0 = Phi(Z_ALPHA - margin / SE). When P0 > FALSE_ALARM, a check that does not pass is FAIL only if
  hi < -margin, else CANNOT DECIDE, naming the margin (Z_ALPHA + Z_FALSE_ALARM) * SE that would decide.
The baseline is compared on the tasks both sides scored, resampled by task (a cluster bootstrap), when
they overlap enough (PAIRING_OVERLAP, by task ids alone), else unpaired.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm

from tps_tracer.evaluation.bootstrap import bootstrap_means, percentile_ci, replicate_sums, trajectory_keys
from tps_tracer.evaluation.report import json_num

FloatArray = NDArray[np.float64]

REGRESSION = "regression"
NON_INFERIORITY = "non-inferiority"
TESTS = (REGRESSION, NON_INFERIORITY)
DEFAULT_TEST = REGRESSION
ALPHA = 0.025  # one-sided level of each bound of the two-sided 95% CI
POWER = 0.80  # the power at which the regression test's smallest detectable drop is quoted
# An identical candidate FAILs a comparative check at most this often: a gate run on every pull
# request of an unchanged agent blocks one in twenty at worst, twice the regression test's ALPHA.
FALSE_ALARM = 0.05
Z_ALPHA = float(norm.isf(ALPHA))
Z_POWER = float(norm.isf(1.0 - POWER))
Z_FALSE_ALARM = float(norm.isf(FALSE_ALARM))


def rule_text(test: str, margin: float) -> str:
    """What must hold to PASS."""
    return f"CI {'low' if test == NON_INFERIORITY else 'high'} >= {_fmt(-margin)}"


def describe_test(test: str, margin: float) -> str:
    m, neg = _fmt(margin), _fmt(-margin)
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


def _fmt(x: float) -> str:
    return f"{x + 0.0:.4g}"  # + 0.0: no "-0"


def power(test: str, margin: float, reps: FloatArray) -> dict[str, Any]:
    """With this sample's SE: non-inferiority's `smallest_margin` (an identical candidate passes with
    probability 1 - FALSE_ALARM) and `p_fail_identical` at the margin; regression's `detectable_drop`
    (found with probability POWER)."""
    r = reps[~np.isnan(reps)]
    se = float(np.std(r, ddof=1)) if r.size >= 2 else float("nan")
    out: dict[str, Any] = {
        "se": json_num(se),
        "alpha": ALPHA,
        "power": POWER,
        "smallest_margin": None,
        "detectable_drop": None,
        "p_fail_identical": None,
        "underpowered": False,
    }
    if not math.isfinite(se) or se <= 0:
        return out
    if test == NON_INFERIORITY:
        p_fail = float(norm.cdf(Z_ALPHA - margin / se))  # P(D_hat - Z*SE < -margin | D = 0)
        smallest = (Z_ALPHA + Z_FALSE_ALARM) * se
        out.update(smallest_margin=smallest, p_fail_identical=p_fail, underpowered=bool(p_fail > FALSE_ALARM))
    else:
        out.update(detectable_drop=margin + (Z_ALPHA + Z_POWER) * se, p_fail_identical=ALPHA)
    return out


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


def decides_at(check: dict[str, Any], n: int | None) -> dict[str, Any]:
    """The margin this sample decides, and the sample (SE ~ 1/sqrt(n)) that decides the configured
    margin (None at margin 0)."""
    smallest, margin = check["power"]["smallest_margin"], -check["threshold"]
    return {"margin": smallest, "n": math.ceil(n * (smallest / margin) ** 2) if margin > 0 and n else None}


def undecided_reason(check: dict[str, Any], n: int | None, units: str) -> str:
    """Why a comparative check cannot decide, and the margin or sample size at which it would."""
    at, margin = check["decides_at"], -check["threshold"]
    more = (
        f", or about {at['n']} {units} (now {n}) at margin {margin:.3g}"
        if at["n"] is not None
        else " (no sample size decides margin 0)"
    )
    return (
        f"the 95% CI [{check['ci_low']:.4g}, {check['ci_high']:.4g}] neither rules out a drop beyond the margin "
        f"nor shows one, and an identical candidate would fail at this sample with probability "
        f"~{check['power']['p_fail_identical']:.2f}, above the {FALSE_ALARM:.0%} false-alarm bound: it decides at "
        f"margin {at['margin']:.3g} or more{more}"
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
        check["test"] = test
        check["power"] = power(test, -threshold, reps)
        if not check["passed"] and check["power"]["underpowered"] and not hi0 < threshold:
            check.update(undecided=True, decides_at=decides_at(check, n))
            check["undecided_reason"] = undecided_reason(check, n, units)
    return check


@dataclass
class Comparison:
    point: float
    replicates: FloatArray
    paired: bool
    how: str
    counts: dict[str, int]


def _salted_keys(ids: Sequence[str], salt: str) -> NDArray[np.uint64]:
    """Keys independent of the unsalted ones: for resampling two runs independently."""
    return trajectory_keys([f"{salt}\x00{i}" for i in ids])


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
    bc = bootstrap_means(c_scores[:, None], _salted_keys(c_tasks, "candidate"), bootstrap, seed)
    bb = bootstrap_means(b_scores[:, None], _salted_keys(b_tasks, "baseline"), bootstrap, seed)
    reps = bc.replicates[:, 0] - bb.replicates[:, 0]
    point = float(bc.point[0] - bb.point[0])
    why = (
        "no common task ids"
        if not common
        else f"only {len(common)} common tasks of {smaller} (< {PAIRING_OVERLAP:.0%} of the smaller side)"
    )
    how = f"unpaired ({len(c_tasks)} vs {len(b_tasks)} scored runs; {why})"
    return Comparison(point, reps, False, how, counts)


def unpaired_text(counts: dict[str, int]) -> str:
    """The runs left out of a paired comparison, by side and cause."""
    parts = []
    for side in ("candidate", "baseline"):
        out, unscored = counts[f"{side}_unpaired_runs"], counts[f"{side}_unscored_runs"]
        parts.append(f"{side} {out} scored run(s) on tasks the other side did not score, {unscored} unscored")
    return "left out of the paired difference: " + "; ".join(parts)


def censoring_rates_differ(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two-proportion z test (|z| > 1.96) of the censoring rates of two termination audits."""
    ra, rb = a.get("censoring_rate"), b.get("censoring_rate")
    na, nb = a.get("working_sample") or 0, b.get("working_sample") or 0
    if ra is None or rb is None or not na or not nb:
        return False
    pooled = (ra * na + rb * nb) / (na + nb)
    se = math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))
    return bool(se > 0 and abs(ra - rb) / se > 1.96)
