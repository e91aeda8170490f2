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

from tps_tracer.evaluation import rows as rows_module
from tps_tracer.evaluation.rows import flat_weights, score_rows
from tps_tracer.online.batch_scorer import BatchScorer
from tps_tracer.scoring.rules import parse_rules
from tps_tracer.scoring.schedules import parse_schedules

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
    b[rng.random(n) < 0.05] = np.nan  # gaps make the trajectory unusable for that predictor
    return lens, horizon, [a, b]


@pytest.mark.parametrize("block", [1 << 20, 7])
def test_rows_equal_a_per_trajectory_loop(monkeypatch, block: int) -> None:
    monkeypatch.setattr(rows_module, "_BLOCK_ELEMENTS", block)  # 7: one segment per block
    lens, horizon, values = _data(1)
    has = lens > 0
    got = score_rows(values, lens, flat_weights(lens[has], horizon[has], SCHEDULES), RULES, len(SCHEDULES))
    offsets = np.concatenate(([0], np.cumsum(lens)))
    for p, flat in enumerate(values):
        for i in range(lens.size):
            seg = flat[offsets[i] : offsets[i + 1]]
            usable = seg.size > 0 and not np.isnan(seg).any()
            assert got.usable[p, i] == usable
            if not usable:
                assert np.isnan(got.pairs[p, i]).all() and np.isnan(got.aggregates[p, i]).all()
                continue
            big_t = int(horizon[i])
            for r, rule in enumerate(RULES):
                for j, sched in enumerate(SCHEDULES):
                    for k, y in enumerate((1, 0)):
                        want = sum(_w(t + 1, big_t, sched.name) * _s(float(f), y, rule.name) for t, f in enumerate(seg))
                        tol = 1e-7 if rule.name.startswith("beta") else 1e-12
                        assert got.pairs[p, i, r, j, k] == pytest.approx(want, rel=tol, abs=tol)
            w = [_w(t + 1, big_t, "linear-front") for t in range(seg.size)]
            want_aggs = [seg[-1], seg.mean(), seg.min(), float(np.dot(w, seg) / sum(w))]
            np.testing.assert_allclose(got.aggregates[p, i], want_aggs, rtol=1e-11)
    for i in range(lens.size):
        want_mass = [sum(_w(t + 1, int(horizon[i]), s.name) for t in range(lens[i])) for s in SCHEDULES]
        np.testing.assert_allclose(got.weight_mass[i], want_mass, rtol=1e-12, atol=0)


def test_micro_batch_scorer_is_the_kernel() -> None:
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
    online = BatchScorer(RULES, SCHEDULES).score(step_lists, [int(h) for h in horizon], ["a", "b"])
    has = lens > 0
    batch = score_rows(values, lens, flat_weights(lens[has], horizon[has], SCHEDULES), RULES, len(SCHEDULES))
    np.testing.assert_array_equal(online.usable, batch.usable.T)
    np.testing.assert_allclose(online.pairs, batch.pairs.transpose(1, 0, 2, 3, 4), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(online.aggregates, batch.aggregates.transpose(1, 0, 2), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(online.weight_mass, batch.weight_mass, rtol=1e-12, atol=1e-15)


def test_caller_exclusions_are_kept() -> None:
    """A trajectory the caller marked unusable (e.g. a non-numeric forecast) stays unusable."""
    lens = np.array([2, 3])
    values = [np.array([0.2, 0.3, 0.4, 0.5, 0.6])]
    got = score_rows(
        values,
        lens,
        flat_weights(lens, lens.astype(float), SCHEDULES),
        RULES,
        len(SCHEDULES),
        usable=[np.array([False, True])],
    )
    assert got.usable.tolist() == [[False, True]]
    assert np.isnan(got.pairs[0, 0]).all() and not np.isnan(got.pairs[0, 1]).any()
