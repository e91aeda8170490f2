"""The one scoring kernel (evaluation/rows.py): its rows equal a per-trajectory Python loop
written from the paper's formulas, across block boundaries, gaps and empty trajectories; and
the batch path (pair table) and the accumulator's micro-batch scorer are that kernel (equal
to 1e-12 on the same trajectories)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from test_score_matrix import _w  # the paper's weights, written out per schedule

from tps_tracer.constants import MISSING_POLICIES
from tps_tracer.evaluation import rows as rows_module
from tps_tracer.evaluation.rows import BatchScorer, flat_weights, score_rows
from tps_tracer.scoring import parse_rules, parse_schedules

RULES = parse_rules("log,brier,beta(2,4)")
SCHEDULES = parse_schedules("all")


@functools.cache  # the quadrature is slow; each (p, y, rule) recurs per schedule
def _s(p: float, y: int, rule: str) -> float:
    if rule == "log":
        p = min(max(p, 1e-6), 1 - 1e-6)
        return math.log(p) if y else math.log(1 - p)
    if rule == "brier":
        return -((p - y) ** 2)
    # beta(2,4): S(p,1) = -int_p^1 c (1-c)^4 dc, S(p,0) = -int_0^p c^2 (1-c)^3 dc, by midpoint quadrature.
    grid = (np.arange(200_000) + 0.5) / 200_000
    if y:
        c = p + (1 - p) * grid
        return float(-np.mean(c * (1 - c) ** 4) * (1 - p))
    c = p * grid
    return float(-np.mean(c**2 * (1 - c) ** 3) * p)


def _data(seed: int):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 6, size=30)
    horizon = (lens + rng.integers(0, 4, size=30)).astype(float)
    horizon[horizon == 0] = 1.0
    n = int(lens.sum())
    a, b = rng.random(n), rng.random(n)
    b[rng.random(n) < 0.25] = np.nan  # gaps: some runs lose a step, a few every step
    return lens, horizon, [a, b]


def _reference(seg: np.ndarray, policy: str) -> tuple[list[float], list[float]] | None:
    """(forecast per step, weight factor per step) the policy scores a segment with, written
    directly from its definition (docs/report.md, "Steps without a forecast"); None: not scored."""
    stated = [i for i, f in enumerate(seg) if not np.isnan(f)]
    if (policy == "drop-run" and len(stated) < len(seg)) or (policy == "skip-renormalise" and not stated):
        return None
    out = []
    for t in range(len(seg)):
        before = [i for i in stated if i <= t]
        after = [i for i in stated if i >= t]
        if policy == "fill-backwards" and after:
            out.append(float(seg[after[0]]))
        else:  # carry-forward (skip-renormalise gives the filled steps no weight)
            out.append(float(seg[before[-1]]) if before else 0.5)
    counted = [1.0 if policy != "skip-renormalise" or t in stated else 0.0 for t in range(len(seg))]
    return out, counted


@pytest.mark.parametrize("policy", list(MISSING_POLICIES))
@pytest.mark.parametrize("block", [1 << 20, 7])
def test_rows_equal_a_per_trajectory_loop(monkeypatch, block: int, policy: str) -> None:
    monkeypatch.setattr(rows_module, "_BLOCK_ELEMENTS", block)  # 7: one segment per block
    lens, horizon, values = _data(1)
    has = lens > 0
    got = score_rows(
        values, lens, flat_weights(lens[has], horizon[has], SCHEDULES), RULES, len(SCHEDULES), missing=policy
    )
    offsets = np.concatenate(([0], np.cumsum(lens)))
    for p, flat in enumerate(values):
        for i in range(lens.size):
            seg = flat[offsets[i] : offsets[i + 1]]
            ref = _reference(seg, policy) if seg.size else None
            assert got.usable[p, i] == (ref is not None)
            assert got.missing[p, i, :2].tolist() == [np.isnan(seg).sum(), (~np.isnan(seg)).sum()]
            if ref is None:
                assert np.isnan(got.pairs[p, i]).all() and np.isnan(got.aggregates[p, i]).all()
                continue
            fc, counted = ref
            big_t = int(horizon[i])
            for r, rule in enumerate(RULES):
                for j, sched in enumerate(SCHEDULES):
                    w = [_w(t + 1, big_t, sched.name) for t in range(seg.size)]
                    scale = sum(w) / sum(
                        a * c for a, c in zip(w, counted, strict=True)
                    )  # skip-renormalise: to the full mass
                    for k, y in enumerate((1, 0)):
                        want = scale * sum(a * c * _s(f, y, rule.name) for a, c, f in zip(w, counted, fc, strict=True))
                        tol = 1e-7 if rule.name.startswith("beta") else 1e-12
                        assert got.pairs[p, i, r, j, k] == pytest.approx(want, rel=tol, abs=tol)
            w = [_w(t + 1, big_t, "linear-front") * c for t, c in enumerate(counted)]
            kept = [f for f, c in zip(fc, counted, strict=True) if c]
            want_aggs = [fc[-1], float(np.mean(kept)), min(kept), float(np.dot(w, fc) / sum(w))]
            np.testing.assert_allclose(got.aggregates[p, i], want_aggs, rtol=1e-11)
    for i in range(lens.size):
        want_mass = [sum(_w(t + 1, int(horizon[i]), s.name) for t in range(lens[i])) for s in SCHEDULES]
        np.testing.assert_allclose(got.weight_mass[i], want_mass, rtol=1e-12, atol=0)


def test_cost_of_missingness_is_carry_forward_minus_skip_renormalise() -> None:
    """The kernel's per-row cost (first rule x first schedule) is the difference of the two policies'
    own branch pairs, whichever policy scores the rows; 0 without a gap, NaN without a statement."""
    lens, horizon, values = _data(3)
    values[1][:3] = np.nan  # the first non-empty runs lose their opening statements
    has = lens > 0
    w = flat_weights(lens[has], horizon[has], SCHEDULES)
    carry = score_rows(values, lens, w, RULES, len(SCHEDULES), missing="carry-forward")
    skip = score_rows(values, lens, w, RULES, len(SCHEDULES), missing="skip-renormalise")
    want = carry.pairs[:, :, 0, 0] - skip.pairs[:, :, 0, 0]
    for policy in MISSING_POLICIES:
        got = score_rows(values, lens, w, RULES, len(SCHEDULES), missing=policy).missing
        scored = skip.usable
        np.testing.assert_allclose(got[..., 2:][scored], want[scored], rtol=1e-12, atol=1e-15)
        silent = has[None, :] & ~skip.usable
        assert np.isnan(got[..., 2:][silent]).all()
        assert (got[..., 2:][got[..., 0] == 0] == 0).all()


@pytest.mark.parametrize("policy", list(MISSING_POLICIES))
def test_micro_batch_scorer_is_the_kernel(policy: str) -> None:
    """The accumulator's scorer (step dicts, cached (T, Z) weights) gives the batch path's rows."""
    lens, horizon, values = _data(2)
    offsets = np.concatenate(([0], np.cumsum(lens)))
    step_lists = [
        [
            {"a": float(values[0][s]), "b": None if np.isnan(values[1][s]) else float(values[1][s])}
            for s in range(offsets[i], offsets[i + 1])
        ]
        for i in range(lens.size)
    ]
    online = BatchScorer(RULES, SCHEDULES, policy).score(step_lists, [int(h) for h in horizon], ["a", "b"])
    has = lens > 0
    w = flat_weights(lens[has], horizon[has], SCHEDULES)
    batch = score_rows(values, lens, w, RULES, len(SCHEDULES), missing=policy)
    np.testing.assert_array_equal(online.usable, batch.usable)
    for name in ("pairs", "aggregates", "weight_mass", "missing"):
        np.testing.assert_allclose(getattr(online, name), getattr(batch, name), rtol=1e-12, atol=1e-15)
