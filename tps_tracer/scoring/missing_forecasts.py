"""Steps without a forecast: the one place that decides what a gap in a predictor's stream scores.

A step whose forecast is missing (or non-numeric) is scored under one declared policy
(docs/report.md, "Steps without a forecast"):

    carry-forward     (default, proper) the agent's last stated forecast; PRIOR (0.5) before its
                      first statement. Uses only what the agent already said, so no pattern of
                      omissions can raise its expected score: an omission at step t replaces F_t by
                      a forecast measurable with respect to the same prefix, and the rule is
                      strictly proper conditionally on that prefix (paper, Theorem "Strict
                      propriety under complete observation"), so the step's expected score can
                      only fall. Biased down when omissions are innocent.
    fill-backwards    estimate: the next stated forecast (the last one after the final statement,
                      PRIOR if none). Uses later information: can be gamed.
    skip-renormalise  estimate: stated steps only, their weights scaled up to the run's full
                      truncated mass sum_{t<=Z} w_t. A run with no statement is not scored. Can be
                      gamed (silence when unsure removes the step's loss).
    drop-run          the run is not scored for the predictor if any step lacks a forecast (the
                      rule before issue 47). Not proper: omitting on the worst runs pays.

Pure numpy over flat arrays with segment starts, like the rest of the math layer.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import (  # noqa: F401  (re-exported: the policies' names live beside the rule)
    CARRY_FORWARD,
    DEFAULT_MISSING,
    DROP_RUN,
    FILL_BACKWARDS,
    MISSING_POLICIES,
    SKIP_RENORMALISE,
)
from tps_tracer.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

PRIOR = 0.5  # the declared forecast before an agent's first statement


def check_missing_policy(policy: str) -> str:
    if policy not in MISSING_POLICIES:
        raise InputError(f"unknown missing-forecast policy {policy!r} (choose from {', '.join(MISSING_POLICIES)})")
    return policy


def filled_by_policy(values: FloatArray, starts: IntArray, lengths: IntArray, policy: str) -> FloatArray:
    """Forecasts with every gap (NaN) filled the policy's way, over segments of a flat array.

    skip-renormalise and drop-run fill like carry-forward: the filled steps carry no weight there
    (`counted`), they only keep the rules away from NaN and give Phi_last the last statement."""
    gaps = np.isnan(values)
    if not gaps.any():
        return values
    n = values.size
    idx = np.arange(n)
    seg_start = np.repeat(starts, lengths)
    last = np.maximum.accumulate(np.where(gaps, -1, idx))
    out = np.where(last >= seg_start, values[np.maximum(last, 0)], PRIOR)
    if policy == FILL_BACKWARDS:
        seg_end = seg_start + np.repeat(lengths, lengths)
        nxt = np.minimum.accumulate(np.where(gaps, n, idx)[::-1])[::-1]
        out = np.where(nxt < seg_end, values[np.minimum(nxt, n - 1)], out)
    return out


def counted_steps(values: FloatArray, policy: str) -> BoolArray | None:
    """Steps whose weight counts: None (all) for the fill policies, the stated ones otherwise."""
    if policy in (CARRY_FORWARD, FILL_BACKWARDS):
        return None
    return ~np.isnan(values)


def usable_segments(n_gaps: IntArray, lengths: IntArray, policy: str) -> BoolArray:
    """Segments (with >= 1 step) scored under the policy, from their gap counts."""
    if policy == DROP_RUN:
        return n_gaps == 0
    if policy == SKIP_RENORMALISE:
        return n_gaps < lengths
    return np.ones(n_gaps.shape, dtype=bool)
