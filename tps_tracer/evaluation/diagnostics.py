"""Scalar diagnostics of confidences c_i and outcomes y_i, failure-oriented (AUROC, AUPRC: failure
is the positive class); ties are handled in expectation, so results do not depend on input order."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tps_tracer.constants import DEFAULT_ECE_BINS
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import linear_quantile
from tps_tracer.scoring import FloatArray


def _prep(c: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
    ca, ya = np.asarray(c, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if ca.shape != ya.shape or ca.ndim != 1:
        raise InputError("confidence and outcome must be 1-d arrays of equal length")
    return ca, ya


def auroc_failure(c: ArrayLike, y: ArrayLike, w: ArrayLike | None = None) -> float:
    """P(risk of a failure > risk of a success), ties counting 1/2 (Mann-Whitney U / n0 n1); case
    weights `w` (a bootstrap replicate's) weigh each pair by w_i w_j."""
    ca, ya = _prep(c, y)
    if ca.size == 0:
        return float("nan")
    order = np.argsort(ca, kind="stable")
    ca, ya = ca[order], ya[order]
    wa = np.ones(ca.size) if w is None else np.asarray(w, dtype=np.float64)[order]
    starts = np.flatnonzero(np.r_[True, ca[1:] != ca[:-1]])  # tie groups
    f_g = np.add.reduceat(np.where(ya == 0, wa, 0.0), starts)
    s_g = np.add.reduceat(np.where(ya == 0, 0.0, wa), starts)
    s_above = s_g[::-1].cumsum()[::-1] - s_g  # success weight strictly more confident
    total = f_g.sum() * s_g.sum()
    if total <= 0:
        return float("nan")
    return float((f_g * (s_above + 0.5 * s_g)).sum() / total)


def auprc_failure(c: ArrayLike, y: ArrayLike) -> float:
    """Average precision for detecting failures, step-wise over distinct thresholds (no interpolation)."""
    ca, ya = _prep(c, y)
    if not np.any(ya == 0):
        return float("nan")
    risk = -ca
    order = np.argsort(risk, kind="mergesort")[::-1]
    r_sorted = risk[order]
    pos = (ya[order] == 0).astype(np.float64)
    last_of_tie = np.r_[np.flatnonzero(np.diff(r_sorted)), r_sorted.size - 1]
    tps = np.cumsum(pos)[last_of_tie]
    precision = tps / (last_of_tie + 1.0)
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def aurc(c: ArrayLike, y: ArrayLike) -> float:
    """Mean selective risk over coverages k/n, most confident first; ties broken at random in expectation."""
    ca, ya = _prep(c, y)
    n = ca.size
    if n == 0:
        return float("nan")
    order = np.argsort(-ca, kind="mergesort")
    c_sorted = -ca[order]
    err = (ya[order] == 0).astype(np.float64)
    starts = np.r_[0, np.flatnonzero(np.diff(c_sorted)) + 1]
    sizes = np.diff(np.r_[starts, n])
    group_err = np.add.reduceat(err, starts)
    err_before = np.r_[0.0, np.cumsum(group_err)[:-1]]
    gid = np.repeat(np.arange(starts.size), sizes)
    k = np.arange(1, n + 1, dtype=np.float64)
    expected_err = err_before[gid] + (k - starts[gid]) * group_err[gid] / sizes[gid]
    return float(np.mean(expected_err / k))


def quantile_bins(c: ArrayLike, n_bins: int = DEFAULT_ECE_BINS) -> NDArray[np.int64]:
    """Bin per value: edges at the empirical quantiles, right-closed, duplicates dropped (ties share a bin)."""
    ca = np.asarray(c, dtype=np.float64)
    if n_bins < 1:
        raise InputError("n_bins must be at least 1")
    if ca.size == 0:
        return np.zeros(0, dtype=np.int64)
    # np.quantile and np.unique written out: they import numpy.ma.
    ordered = np.sort(ca)[:, None]
    count = np.array([ca.size])
    edges = np.sort([linear_quantile(ordered, count, q)[0] for q in np.linspace(0.0, 1.0, n_bins + 1)[1:-1]])
    inner = edges[np.concatenate(([True], edges[1:] != edges[:-1]))] if edges.size else edges
    return np.searchsorted(inner, ca, side="left").astype(np.int64)


def t_ece(c: ArrayLike, y: ArrayLike, n_bins: int = DEFAULT_ECE_BINS) -> float:
    """sum_k (n_k / n) |mean(y in bin k) - mean(c in bin k)| over tie-aware quantile bins."""
    ca, ya = _prep(c, y)
    if ca.size == 0:
        return float("nan")
    b = quantile_bins(ca, n_bins)
    counts = np.bincount(b).astype(np.float64)
    used = counts > 0
    gap = np.abs(np.bincount(b, weights=ya)[used] - np.bincount(b, weights=ca)[used])
    return float(gap.sum() / ca.size)


def t_brier(c: ArrayLike, y: ArrayLike) -> float:
    ca, ya = _prep(c, y)
    return float(np.mean(np.square(ca - ya))) if ca.size else float("nan")


def scalar_diagnostics(c: ArrayLike, y: ArrayLike, n_bins: int = DEFAULT_ECE_BINS) -> dict[str, float]:
    ca, ya = _prep(c, y)
    return {
        "auroc": auroc_failure(ca, ya),
        "auprc": auprc_failure(ca, ya),
        "aurc": aurc(ca, ya),
        "t_ece": t_ece(ca, ya, n_bins),
        "t_brier": t_brier(ca, ya),
    }
