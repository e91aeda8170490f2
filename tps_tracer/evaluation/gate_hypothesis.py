"""The gate's comparative hypothesis tests, their verdict stability and their power.

A comparative check (candidate vs base rate, candidate vs baseline) estimates the difference
D = candidate - reference with a two-sided 95% percentile bootstrap CI [lo, hi], so each bound
is a one-sided test at ALPHA = 2.5%. Two tests, named in the config (`test`) and the output:

- regression (default): H0 "no drop beyond the margin" (D >= -margin). FAIL only when the CI
  upper bound is below -margin: the data show a significant drop. An identical candidate
  fails with probability ALPHA (2.5%); a small real drop may pass (see the power line).
- non-inferiority: H0 "worse by more than the margin" (D <= -margin). PASS only when the CI
  lower bound is >= -margin: the data rule the drop out. A candidate truly worse by the
  margin passes with probability <= ALPHA; an identical one fails unless the margin is
  well above the CI's half-width (the power line says how likely).

Power uses the normal approximation with the bootstrap SE of D (sd of the replicates):
the one-sided bound is ~ D_hat -/+ Z_ALPHA * SE.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm

from tps_tracer.evaluation.bootstrap import percentile_ci

FloatArray = NDArray[np.float64]

REGRESSION = "regression"
NON_INFERIORITY = "non-inferiority"
TESTS = (REGRESSION, NON_INFERIORITY)
DEFAULT_TEST = REGRESSION
ALPHA = 0.025  # one-sided level of each bound of the two-sided 95% CI
POWER = 0.80  # the power at which the smallest detectable difference is quoted
Z_ALPHA = float(norm.isf(ALPHA))
Z_POWER = float(norm.isf(1.0 - POWER))


def rule_text(test: str, margin: float) -> str:
    """What must hold to PASS, in words a reviewer reads once."""
    m = _fmt(-margin)
    if test == NON_INFERIORITY:
        return f"CI low >= {m}"
    return f"CI high >= {m}"


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


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _se(reps: FloatArray) -> float:
    r = reps[~np.isnan(reps)]
    return float(np.std(r, ddof=1)) if r.size >= 2 else float("nan")


def power(test: str, margin: float, reps: FloatArray) -> dict[str, Any]:
    """The test's power with this sample's SE.

    non-inferiority: `smallest_margin` is the margin an identical candidate passes with
    probability POWER; `p_fail_identical` the probability that an identical candidate fails
    at the configured margin. regression: `detectable_drop` is the true drop found (FAIL)
    with probability POWER; an identical candidate fails with probability ALPHA.
    """
    se = _se(reps)
    out: dict[str, Any] = {"se": _num(se), "alpha": ALPHA, "power": POWER}
    if not math.isfinite(se) or se <= 0:
        out.update(smallest_margin=None, detectable_drop=None, p_fail_identical=None, underpowered=False)
        return out
    if test == NON_INFERIORITY:
        p_fail = float(norm.cdf(Z_ALPHA - margin / se))  # P(D_hat - Z*SE < -margin | D = 0)
        smallest = (Z_ALPHA + Z_POWER) * se
        out.update(
            smallest_margin=smallest,
            detectable_drop=None,
            p_fail_identical=p_fail,
            underpowered=bool(margin < smallest),
        )
    else:
        out.update(
            smallest_margin=None,
            detectable_drop=margin + (Z_ALPHA + Z_POWER) * se,
            p_fail_identical=ALPHA,
            underpowered=False,
        )
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
            f"{POWER:.0%} probability is {pw['smallest_margin']:.3g} (configured {margin:.3g}: an identical "
            f"candidate fails with probability ~{pw['p_fail_identical']:.2f})"
        )
    return (
        f"{name}: SE of the difference {se:.3g}; a true drop of {pw['detectable_drop']:.3g} is detected (FAIL) "
        f"with {POWER:.0%} probability, smaller drops may pass"
    )


def underpowered_warning(name: str, margin: float, pw: dict[str, Any]) -> str:
    return (
        f"underpowered {name}: an identical candidate fails with probability ~{pw['p_fail_identical']:.2f} "
        f"(margin {margin:.3g} is below {pw['smallest_margin']:.3g}, the smallest margin this sample rules out "
        f'with {POWER:.0%} power); raise the margin or the sample, or use test = "{REGRESSION}"'
    )


def _flip_probability(reps: FloatArray, point: float, bound: float, threshold: float) -> float | None:
    """Share of replicates whose own verdict differs: a replicate's bound sits at the same
    distance from its estimate as the observed bound from the observed estimate."""
    r = reps[~np.isnan(reps)]
    if r.size == 0 or not math.isfinite(point) or not math.isfinite(bound):
        return None
    verdict = bound >= threshold
    return float(np.mean((r - (point - bound) >= threshold) != verdict))


def decision(
    name: str, point: float, reps: FloatArray, threshold: float, detail: str, test: str | None = None
) -> dict[str, Any]:
    """One decision check. test None: an absolute threshold on the CI lower bound; otherwise a
    comparative test with threshold -margin (see the module docstring)."""
    lo, hi = percentile_ci(reps[:, None])
    lo0, hi0 = float(lo[0]), float(hi[0])
    bound = hi0 if test == REGRESSION else lo0
    check: dict[str, Any] = {
        "name": name,
        "kind": "decision",
        "passed": bool(math.isfinite(bound) and bound >= threshold),
        "estimate": _num(point),
        "ci_low": _num(lo0),
        "ci_high": _num(hi0),
        "threshold": threshold,
        "flip_probability": _flip_probability(reps, point, bound, threshold),
        "detail": detail,
    }
    if test is not None:
        check["test"] = test
        check["power"] = power(test, -threshold, reps)
    return check
