"""Scalar diagnostics: tie handling and hand-computed values."""

import itertools

import numpy as np
import pytest

from tps_tracer.evaluation.diagnostics import aurc, quantile_bins, t_brier, t_ece


def _aurc_fixed_order(order, y):
    err = (y[order] == 0).astype(float)
    k = np.arange(1, len(y) + 1)
    return np.mean(np.cumsum(err) / k)


def test_aurc_without_ties_is_the_plain_risk_coverage_area():
    c = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    y = np.array([1, 0, 1, 0, 0])
    # accept in order 0.9, 0.8, ...: risks 0/1, 1/2, 1/3, 2/4, 3/5
    assert aurc(c, y) == pytest.approx(np.mean([0, 1 / 2, 1 / 3, 2 / 4, 3 / 5]))


def test_aurc_with_ties_is_the_average_over_tie_breaking_orders():
    c = np.array([0.9, 0.7, 0.7, 0.7, 0.2, 0.2])
    y = np.array([1, 0, 1, 1, 0, 1])
    values = []
    for perm in itertools.permutations(range(6)):
        order = np.array(perm)
        if np.all(np.diff(c[order]) <= 0):  # orders consistent with descending confidence
            values.append(_aurc_fixed_order(order, y))
    assert aurc(c, y) == pytest.approx(np.mean(values), abs=1e-12)


def test_t_ece_by_hand():
    c = np.array([0.1, 0.1, 0.3, 0.9, 0.9, 0.9])
    y = np.array([0, 1, 0, 1, 1, 0])
    b = quantile_bins(c, 2)  # median edge 0.6: {0.1, 0.1, 0.3} and {0.9, 0.9, 0.9}
    assert b.tolist() == [0, 0, 0, 1, 1, 1]
    expected = 0.5 * abs(1 / 3 - 0.5 / 3) + 0.5 * abs(2 / 3 - 0.9)
    assert t_ece(c, y, 2) == pytest.approx(expected)


def test_quantile_bins_never_split_ties():
    c = np.r_[np.full(50, 0.95), np.full(30, 1.0), np.linspace(0, 0.5, 20)]
    b = quantile_bins(c, 10)
    for v in (0.95, 1.0):
        assert len(set(b[c == v].tolist())) == 1


def test_t_brier():
    assert t_brier([0.2, 0.9], [0, 1]) == pytest.approx((0.04 + 0.01) / 2)
