"""Per-step probability signals from token logprobs (paper, Appendix "Predictor Transparency Tables").

Token probability: the mean chosen-token probability over the tokens considered,

    TP = (1/n) sum_i exp(logprob_i)

Entropy confidence: one minus the normalised mean per-token Shannon entropy over the
top-k candidates (k = 5 by default, as in the paper's 1 - H/ln 5),

    q_ij = exp(l_ij) / sum_{j<=k} exp(l_ij)        (top-k mass renormalised to 1)
    H_i  = -sum_j q_ij ln q_ij
    EC   = 1 - (1/n) sum_i H_i / ln k

Normalisation, stated: each token's top-k probabilities are renormalised to sum to one
(the mass outside the top k is dropped, not lumped into an extra bucket). A token with
fewer than k candidates is scored over the ones it has, still divided by ln k (absent
candidates carry no mass), so EC stays in [0, 1]. Tokens with no candidates at all, and
tokens with no chosen logprob (legacy echo), are left out of the averages; if no token
remains, the signal is missing (None), never a default.

Both are computed over a boolean token mask: all tokens (completion signals) or the
tokens of the committed action (action-span signals).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from tps_tracer.capture.token_logprobs import TokenLogprobs
from tps_tracer.constants import DEFAULT_TOP_K
from tps_tracer.errors import InputError

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


def per_token_probability(lp: TokenLogprobs) -> FloatArray:
    """exp(chosen logprob) per token; NaN where the API gave none."""
    return np.exp(lp.logprob)


def per_token_entropy_confidence(lp: TokenLogprobs, k: int = DEFAULT_TOP_K) -> FloatArray:
    """1 - H_i / ln k per token over its top-k candidates (renormalised); NaN where it has none."""
    if k < 2:
        raise InputError("entropy confidence needs k >= 2 candidates")
    top = lp.top_logprobs[:, :k]
    if top.shape[1] == 0:
        return np.full(lp.n, np.nan)
    if top.size and top[:, -1].min() > -np.inf:
        return _full_rows_entropy_confidence(top, k)
    has = np.isfinite(top[:, 0])
    # Shift by each row's max before exponentiating (stable for very negative logprobs).
    shifted = top - np.where(has, top[:, 0], 0.0)[:, None]
    p = np.exp(shifted)  # -inf padding -> 0
    total = p.sum(axis=1)
    q = p / np.where(total > 0, total, 1.0)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(q > 0, q * np.log(q), 0.0)
    conf = 1.0 + terms.sum(axis=1) / math.log(k)
    return np.where(has, np.clip(conf, 0.0, 1.0), np.nan)


def _full_rows_entropy_confidence(top: FloatArray, k: int) -> FloatArray:
    """The general computation above when every row has its candidates (no -inf: the usual API
    payload), in half the numpy calls, with the same operations on the same values (so the same
    bits): the row max is the first column (rows are sorted), every total is >= 1, and a
    candidate whose q underflows to 0 adds 0 as `np.where` makes it there."""
    if top.shape[1] <= _COLUMNS_MAX_WIDTH:
        return _by_columns(np.ascontiguousarray(top.T), k)
    p = np.exp(top - top[:, :1])
    q = p / p.sum(axis=1)[:, None]
    positive = q > 0
    log_q = np.log(q, out=np.zeros_like(q), where=positive)
    conf = 1.0 + (q * log_q).sum(axis=1) / math.log(k)
    return np.minimum(np.maximum(conf, 0.0), 1.0)  # np.clip, without its Python-level wrapper


# numpy sums a row of fewer than 8 values left to right (its pairwise summation starts at 8),
# which is what adding the columns one after the other does: up to this width the rows can be
# processed as contiguous columns, the same bits in ~1/3 of the time (row-wise broadcasting over
# a (n, 5) array runs numpy's slow strided loops; tests/test_extraction_equivalence.py checks it).
_COLUMNS_MAX_WIDTH = 7


def _by_columns(cols: FloatArray, k: int) -> FloatArray:
    """`_full_rows_entropy_confidence` of top = cols.T, cols (width, n) C-contiguous, width <= 7."""
    p = np.exp(cols - cols[0])
    q = p / p.sum(axis=0)
    # np.log on q > 0 everywhere gives the bits the masked call gives (same loop), without the mask.
    log_q = np.log(q) if q.size and q.min() > 0 else np.log(q, out=np.zeros_like(q), where=q > 0)
    conf = 1.0 + (q * log_q).sum(axis=0) / math.log(k)
    return np.minimum(np.maximum(conf, 0.0), 1.0)


def batched_per_token(
    parsed: Sequence[TokenLogprobs | None], k: int = DEFAULT_TOP_K
) -> dict[int, tuple[FloatArray, FloatArray]]:
    """{index: (per_token_probability, per_token_entropy_confidence)} of the steps whose k first
    candidate rows are all full (no -inf) and of the most common width, computed over their
    concatenation in one pass: the operations are elementwise or within a row, so every element
    gets the bits the step alone gives it. Steps of other shapes are left out (computed alone)."""
    if k < 2:
        raise InputError("entropy confidence needs k >= 2 candidates")
    full: dict[int, list[int]] = {}
    for i, lp in enumerate(parsed):
        if lp is None or lp.n == 0:
            continue
        top = lp.top_logprobs
        width = min(top.shape[1], k)
        if width and top[:, width - 1].min() > -np.inf:
            full.setdefault(width, []).append(i)
    if not full:
        return {}
    width, group = max(full.items(), key=lambda item: len(item[1]))
    if len(group) < 2:
        return {}
    steps = [parsed[i] for i in group]
    prob = np.exp(np.concatenate([lp.logprob for lp in steps]))  # type: ignore[union-attr]
    ent = _full_rows_entropy_confidence(np.concatenate([lp.top_logprobs[:, :width] for lp in steps]), k)  # type: ignore[union-attr]
    ends = np.cumsum([lp.n for lp in steps]).tolist()  # type: ignore[union-attr]
    starts = [0, *ends[:-1]]
    return {i: (prob[a:b], ent[a:b]) for i, a, b in zip(group, starts, ends, strict=True)}


def masked_mean(values: FloatArray, mask: BoolArray | None = None) -> float | None:
    """Mean over the masked tokens that have a value; None if there are none."""
    sel = values if mask is None else values[mask]
    if sel.size:
        # No NaN (nor inf) when the sum is finite: then the mean is that sum over the count,
        # as np.mean computes it, without filtering a copy first.
        total = float(sel.sum())
        if math.isfinite(total):
            return min(1.0, max(0.0, total / sel.size))
    sel = sel[~np.isnan(sel)]
    if sel.size == 0:
        return None
    return float(min(1.0, max(0.0, sel.mean())))


def token_probability(lp: TokenLogprobs, mask: BoolArray | None = None) -> float | None:
    return masked_mean(per_token_probability(lp), mask)


def entropy_confidence(lp: TokenLogprobs, mask: BoolArray | None = None, k: int = DEFAULT_TOP_K) -> float | None:
    return masked_mean(per_token_entropy_confidence(lp, k), mask)
