"""The scoring kernel: flat per-step forecasts -> per-trajectory rows in one vectorised pass (each weighted
sum one `np.add.reduceat` over (predictor, trajectory) segments, in blocks); every scoring path calls
`score_rows`. A step without a forecast (NaN) scores under one declared policy (docs/report.md)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

from tps_tracer.constants import (
    CARRY_FORWARD,
    DEFAULT_MISSING,
    DROP_RUN,
    FILL_BACKWARDS,
    MISSING_POLICIES,
    SKIP_RENORMALISE,
)
from tps_tracer.errors import InputError
from tps_tracer.scoring import (
    DEFAULT_SCHEDULE,
    BoolArray,
    FloatArray,
    IntArray,
    LogRule,
    ScoreRule,
    StepLayout,
    WeightSchedule,
    branches_at,
)

_BLOCK_ELEMENTS = 1 << 20  # of the fused (rules x 2 x schedules x steps) product per block: 8 MB


# -- steps without a forecast

PRIOR = 0.5  # the declared forecast before an agent's first statement


def check_missing_policy(policy: str) -> str:
    if policy not in MISSING_POLICIES:
        raise InputError(f"unknown missing-forecast policy {policy!r} (choose from {', '.join(MISSING_POLICIES)})")
    return policy


def filled_by_policy(values: FloatArray, starts: IntArray, lengths: IntArray, policy: str) -> FloatArray:
    """Forecasts with every gap (NaN) filled the policy's way, over segments of a flat array.
    skip-renormalise and drop-run fill as carry-forward (their filled steps carry no weight)."""
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


def usable_segments(n_gaps: IntArray, lengths: IntArray, policy: str) -> BoolArray:
    """Segments (with >= 1 step) scored under the policy, from their gap counts."""
    if policy == DROP_RUN:
        return n_gaps == 0
    if policy == SKIP_RENORMALISE:
        return n_gaps < lengths
    return np.ones(n_gaps.shape, dtype=bool)


@dataclass
class ScoredRows:
    """Rows of n trajectories for P predictors; NaN / False where a trajectory is not usable."""

    pairs: FloatArray  # (P, n, R, S, 2): s1, s0 per rule x schedule
    aggregates: FloatArray  # (P, n, 4) phi_last, phi_avg, phi_min, phi_w; (P, n, 0) without summaries
    usable: BoolArray  # (P, n): has steps and is scored under the missing-forecast policy
    weight_mass: FloatArray  # (n, S): sum_{t<=Z} w_t
    clipped: IntArray  # (P, n): forecasts the log rule clips (outside [eps, 1 - eps]); 0 without a log rule
    # (P, n, 4): steps without a forecast, steps with one, then d1, d0: the branch pair of carry-forward
    # minus that of skip-renormalise, first rule x first schedule (0 without a gap, NaN without a statement)
    missing: FloatArray


def flat_weights(lengths: IntArray, horizon: FloatArray, schedules: Sequence[WeightSchedule]) -> FloatArray:
    """(S + 1, N) per-step weights of trajectories with >= 1 step: each schedule, then Phi_w's."""
    layout = StepLayout.from_lengths(lengths, horizon)
    return np.stack([layout.weights(s) for s in [*schedules, DEFAULT_SCHEDULE]]).reshape(len(schedules) + 1, -1)


def score_rows(
    values: Sequence[FloatArray],
    lengths: IntArray,
    weights: FloatArray,
    rules: Sequence[ScoreRule],
    n_schedules: int,
    with_summaries: bool = True,
    missing: str = DEFAULT_MISSING,
) -> ScoredRows:
    """Score every (trajectory, predictor): values, one flat array per predictor (NaN: no forecast);
    lengths, steps per trajectory (0: an unusable row); weights, (S + 1, N) from `flat_weights`."""
    lens = np.asarray(lengths, dtype=np.int64)
    n, n_pred, n_rules = lens.size, len(values), len(rules)
    n_aggs = len(AGGREGATOR_NAMES) if with_summaries else 0
    mass = np.zeros((n, n_schedules))
    # The forecasts the log rule clips (a sure failing run would score -inf) are counted, by its own eps.
    eps = next((r.eps for r in rules if isinstance(r, LogRule)), None)
    prior: FloatArray | None = None  # branches at PRIOR, computed once a block has a silent run
    has = np.flatnonzero(lens > 0)
    m = has.size
    seg_lens = lens[has]
    n_steps = int(seg_lens.sum())
    if m:
        starts = np.concatenate(([0], np.cumsum(seg_lens)[:-1]))
        mass[has] = np.add.reduceat(weights[:n_schedules], starts, axis=1).T
    flat = np.concatenate([np.zeros(0), *(np.asarray(v, dtype=np.float64) for v in values)])  # predictor-major
    all_lens = np.tile(seg_lens, n_pred)
    all_ends = np.cumsum(all_lens)
    all_starts = all_ends - all_lens
    seg_pairs = np.empty((n_pred * m, n_rules, n_schedules, 2))
    seg_aggs = np.empty((n_pred * m, n_aggs))
    gap_free = np.empty(n_pred * m, dtype=bool)
    seg_gaps = np.zeros((n_pred * m, 4))
    seg_clipped = np.zeros(n_pred * m, dtype=np.int64)
    per_step = max(1, 2 * n_rules * n_schedules)
    lo = 0
    while lo < n_pred * m:
        # Whole segments up to the block budget (at least one, however long).
        limit = all_starts[lo] + max(_BLOCK_ELEMENTS // per_step, 1)
        hi = max(lo + 1, int(np.searchsorted(all_ends, limit, side="right")))
        a, b = int(all_starts[lo]), int(all_ends[hi - 1])
        local = all_starts[lo:hi] - a
        v = flat[a:b]
        lens_b = all_lens[lo:hi]
        gaps = np.isnan(v)
        n_gaps = np.add.reduceat(gaps, local)
        seg_gaps[lo:hi, 0] = n_gaps
        seg_gaps[lo:hi, 1] = lens_b - n_gaps
        clean = filled_by_policy(v, local, lens_b, missing)
        if a == 0 and b == n_pred * n_steps:  # one block (a micro-batch): the weights repeat per predictor
            w = np.tile(weights, n_pred)
        else:
            w = weights[:, np.arange(a, b) % n_steps]
        counted = ~gaps if missing == SKIP_RENORMALISE and n_gaps.any() else None
        w_sum = w[:n_schedules] if counted is None else w[:n_schedules] * counted
        branches = np.empty((n_rules, 2, b - a))
        for r, rule in enumerate(rules):
            branches[r, 0], branches[r, 1] = rule.branches(clean)
        sums = np.add.reduceat(branches[:, :, None, :] * w_sum[None, None, :, :], local, axis=-1)
        if counted is not None:  # stated steps stand for the run's whole truncated mass
            with np.errstate(divide="ignore", invalid="ignore"):
                sums *= np.add.reduceat(w[:n_schedules], local, axis=-1) / np.add.reduceat(w_sum, local, axis=-1)
        seg_pairs[lo:hi] = sums.transpose(3, 0, 2, 1)  # (R, 2, S, k) -> (k, R, S, 2)
        silent = np.flatnonzero(n_gaps == lens_b)
        if silent.size and n_rules:  # no statement at all: PRIOR throughout, as PredictorPairs.never_stated
            prior = branches_at(rules, PRIOR) if prior is None else prior
            seg_mass = np.add.reduceat(w[:n_schedules], local, axis=-1)[:, silent]  # (S, k')
            seg_pairs[lo + silent] = prior[None, :, None, :] * seg_mass.T[:, None, :, None]
        if n_aggs:
            seg_aggs[lo:hi] = summaries(clean, local, lens_b, w[n_schedules], counted).T
        gap_free[lo:hi] = usable_segments(n_gaps, lens_b, missing)
        if n_rules and n_gaps.any():  # the gaps' cost: carry-forward's pair minus skip-renormalise's
            carried = branches[0]  # every policy but fill-backwards fills the way carry-forward does
            if missing == FILL_BACKWARDS:
                carried = np.stack(rules[0].branches(filled_by_policy(v, local, lens_b, CARRY_FORWARD)))
            w0, stated = w[0], ~gaps
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.add.reduceat(w0, local) / np.add.reduceat(w0 * stated, local)
                estimate = np.add.reduceat(carried * (w0 * stated), local, axis=-1) * scale
            cost = (np.add.reduceat(carried * w0, local, axis=-1) - estimate).T
            cost[n_gaps == 0] = 0.0
            cost[n_gaps == lens_b] = np.nan
            seg_gaps[lo:hi, 2:] = cost
        if eps is not None:  # exactly the forecasts np.clip(p, eps, 1 - eps) moves; NaN (a gap) never counts
            seg_clipped[lo:hi] = np.add.reduceat((v < eps) | (v > 1.0 - eps), local)
        lo = hi

    def spread(seg: np.ndarray, fill: float) -> np.ndarray:
        """(P * m, ...) block results -> (P, n, ...) rows; `fill` on the rows without steps."""
        rows = seg.reshape(n_pred, m, *seg.shape[1:])
        if m == n:  # every trajectory has steps (the usual case): the block results are the rows
            return rows
        out = np.full((n_pred, n, *seg.shape[1:]), fill, dtype=seg.dtype)
        out[:, has] = rows
        return out

    ok, clipped, gap_info = spread(gap_free, False), spread(seg_clipped, 0), spread(seg_gaps, 0.0)
    pairs, aggregates = spread(seg_pairs, np.nan), spread(seg_aggs, np.nan)
    pairs[~ok] = np.nan
    aggregates[~ok] = np.nan
    clipped[~ok] = 0  # an unusable row is not scored: nothing of it was clipped
    return ScoredRows(pairs, aggregates, ok, mass, clipped, gap_info)


# -- the accumulator's micro-batches

_MAX_CACHED_SHAPES = 4096


class BatchScorer:
    """Step dicts -> `score_rows` over one batch (numpy's fixed cost shared by the batch), with the
    per-(T, Z) weights cached: agents have few step budgets."""

    def __init__(self, rules: Sequence[ScoreRule], schedules: Sequence[WeightSchedule], missing: str = DEFAULT_MISSING):
        self.rules = list(rules)
        self.schedules = list(schedules)
        self.missing = missing
        self._shapes: OrderedDict[tuple[int, int], FloatArray] = OrderedDict()

    def _weights(self, horizon: int, n_steps: int) -> FloatArray:
        """(S + 1, Z): each schedule's w_1..w_Z for horizon T (O(Z): closed-form totals), then Phi_w's."""
        key = (horizon, n_steps)
        w = self._shapes.get(key)
        if w is None:
            scheds = [*self.schedules, DEFAULT_SCHEDULE]
            t = np.arange(1.0, n_steps + 1.0)
            w = np.stack([s.step_weights(t, np.full_like(t, float(horizon))) for s in scheds]).reshape(len(scheds), -1)
            self._shapes[key] = w
            if len(self._shapes) > _MAX_CACHED_SHAPES:
                self._shapes.popitem(last=False)
        return w

    def score(
        self,
        step_lists: Sequence[Sequence[Mapping[str, float | None]]],
        horizons: Sequence[int],
        names: Sequence[str],
    ) -> ScoredRows:
        k = len(step_lists)
        lens = np.array([len(steps) for steps in step_lists], dtype=np.int64)
        flat_steps = [step for steps in step_lists for step in steps]
        # dtype=float turns None (no forecast) into NaN: a gap, scored by the missing-forecast policy.
        values = [np.array([step.get(name) for step in flat_steps], dtype=np.float64) for name in names]
        if flat_steps:
            w = np.concatenate([self._weights(int(horizons[i]), int(lens[i])) for i in range(k) if lens[i]], axis=1)
        else:
            w = np.zeros((len(self.schedules) + 1, 0))
        return score_rows(values, lens, w, self.rules, len(self.schedules), missing=self.missing)

    def score_safely(
        self,
        step_lists: Sequence[Sequence[Mapping[str, float | None]]],
        horizons: Sequence[int],
        names: Sequence[str],
        on_error: Callable[[str, BaseException], None],
    ) -> ScoredRows:
        """`score`, else one by one: a run that cannot be scored still gets its row (no usable
        predictor, so it stays in the audit); each failure goes to `on_error`."""
        try:
            return self.score(step_lists, horizons, names)
        except Exception as exc:
            on_error("score", exc)
        parts = []
        for steps, horizon in zip(step_lists, horizons, strict=True):
            try:
                parts.append(self.score([steps], [horizon], names))
            except Exception as exc:
                on_error("score", exc)
                parts.append(self.score([[]], [0], names))
        return ScoredRows(
            **{
                f.name: np.concatenate([getattr(p, f.name) for p in parts], axis=0 if f.name == "weight_mass" else 1)
                for f in fields(ScoredRows)
            }
        )


# -- the scalar summaries Phi(F_1..F_Z): inputs of the scalar diagnostics, not of TPS (paper,
# Appendix "Predictor Transparency Tables" and Theorem B).

TIE_DECIMALS = 12  # equal traces give exactly equal averages: float noise must not break rank ties

AGGREGATOR_NAMES: tuple[str, ...] = ("phi_last", "phi_avg", "phi_min", "phi_w")


def summaries(
    values: FloatArray, starts: IntArray, lengths: IntArray, w_phi: FloatArray, counted: BoolArray | None = None
) -> FloatArray:
    """(4, k): phi_last, phi_avg, phi_min, phi_w = sum_t w_t F_t / sum_t w_t (w_phi: the default
    schedule's weights) of k non-empty segments; counted: the steps that count (None: all)."""
    out = np.empty((len(AGGREGATOR_NAMES), starts.size))
    if starts.size == 0:
        return out
    out[0] = values[starts + lengths - 1]
    if counted is None:
        out[1] = np.round(np.add.reduceat(values, starts) / lengths, TIE_DECIMALS)
        out[2] = np.minimum.reduceat(values, starts)
        out[3] = np.round(np.add.reduceat(w_phi * values, starts) / np.add.reduceat(w_phi, starts), TIE_DECIMALS)
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        out[1] = np.round(np.add.reduceat(values * counted, starts) / np.add.reduceat(counted, starts), TIE_DECIMALS)
        out[2] = np.minimum.reduceat(np.where(counted, values, np.inf), starts)
        wc = w_phi * counted
        out[3] = np.round(np.add.reduceat(wc * values, starts) / np.add.reduceat(wc, starts), TIE_DECIMALS)
    return out
