"""Cross-fitted Platt recalibration (paper Appendix "Calibration Procedure") and paired deltas."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from tps_tracer.evaluation.calibration import (
    EPS,
    cross_fit_platt,
    fit_platt,
    paired_auroc_delta,
    paired_mean_delta,
    split_halves,
    step_weights,
)
from tps_tracer.evaluation.diagnostics import auroc_failure
from tps_tracer.records import to_arrays
from tps_tracer.synthetic import simulate_runs, to_records


def _data(seed=0, n=400, slope=2.0):
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.02, 0.98, n)
    logit = np.log(f / (1 - f))
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.3 + slope * logit)))).astype(float)
    w = rng.uniform(0.1, 1.0, n)
    return f, y, w


def _standardised(f, w):
    x = np.log(f) - np.log1p(-f)
    mu = np.average(x, weights=w)
    sd = np.sqrt(np.average((x - mu) ** 2, weights=w))
    return (x - mu) / sd


@pytest.mark.parametrize("penalty", [1.0, 0.1, 10.0])
def test_fit_matches_a_direct_scipy_optimisation_of_the_same_objective(penalty):
    f, y, w = _data()
    m = fit_platt(f, y, w, penalty)
    x = _standardised(f, w)

    def objective(theta):
        u = theta[0] + theta[1] * x
        return np.sum(w * (np.logaddexp(0, u) - y * u)) + 0.5 * penalty * theta[1] ** 2

    ref = minimize(objective, [0.0, 0.0], method="BFGS", options={"gtol": 1e-12}).x
    assert (m.a, m.b) == pytest.approx(tuple(ref), abs=1e-6)
    assert not m.fallback


def test_fit_matches_sklearn_with_c_equal_one_over_lambda():
    f, y, w = _data(seed=3)
    m = fit_platt(f, y, w, penalty=1.0)
    lr = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(_standardised(f, w)[:, None], y, sample_weight=w)
    assert (m.a, m.b) == pytest.approx((lr.intercept_[0], lr.coef_[0, 0]), abs=1e-6)


def test_anti_correlated_signal_falls_back_to_the_weighted_base_rate():
    f, y, w = _data(seed=1, slope=-2.0)
    m = fit_platt(f, y, w)
    assert m.fallback and m.b == 0.0
    ybar = np.average(y, weights=w)
    assert m.apply(f) == pytest.approx(np.full_like(f, ybar), abs=1e-12)


def test_mapping_is_clipped_and_monotone():
    f, y, w = _data(seed=2, slope=8.0)
    m = fit_platt(f, y, w)
    grid = np.linspace(0, 1, 1001)
    out = m.apply(grid)
    assert out.min() >= EPS and out.max() <= 1 - EPS
    assert np.all(np.diff(out) >= 0)


def _arrays(n=300, seed=4):
    return to_arrays(to_records(simulate_runs(n, seed=seed), forecasters=("overconfident", "truthful"), seed=seed))


def test_split_is_stratified_alternating_in_id_order():
    ids = [f"t{i:02d}" for i in range(10)]
    y = np.array([1, 0, 1, 1, 0, 0, 1, np.nan, 0, 1])
    complete = ~np.isnan(y)
    half = split_halves(ids, y, complete)
    # successes t00 t02 t03 t06 t09 -> 0 1 0 1 0; failures t01 t04 t05 t08 -> 0 1 0 1; t07 alone -> 0
    assert half.tolist() == [0, 0, 1, 0, 1, 0, 1, 0, 1, 0]


def test_no_trajectory_is_calibrated_by_a_map_fitted_on_its_own_half():
    arrays = _arrays()
    res = cross_fit_platt(arrays, "overconfident")
    col = arrays.predictors["overconfident"]
    step_half = np.repeat(res.half, arrays.lengths)
    usable = np.repeat(col.usable, arrays.lengths)
    for h in (0, 1):
        sel = usable & (step_half == h)
        other = res.maps[1 - h]
        assert res.values[sel] == pytest.approx(other.apply(col.values[sel]), abs=0)
        assert not np.allclose(res.values[sel], res.maps[h].apply(col.values[sel]))
    # Refitting the half-0 map on half 0's complete steps, by hand, gives the same map.
    clean = ~np.isnan(arrays.outcome) & col.usable
    train = np.repeat(clean & (res.half == 0), arrays.lengths)
    y = np.repeat(np.nan_to_num(arrays.outcome), arrays.lengths)
    w = step_weights(arrays)
    again = fit_platt(col.values[train], y[train], w[train])
    assert (again.a, again.b) == pytest.approx((res.maps[0].a, res.maps[0].b), abs=1e-12)


def test_one_global_monotone_map_leaves_auroc_exactly_unchanged():
    arrays = _arrays()
    res = cross_fit_platt(arrays, "overconfident")
    m = res.maps[0]
    f = arrays.predictors["overconfident"].values
    clean = ~np.isnan(arrays.outcome)
    last = arrays.offsets[1:] - 1
    c_raw, c_cal, y = f[last][clean], m.apply(f[last])[clean], arrays.outcome[clean]
    # Strictly increasing map: same order, same ties, so AUROC is identical (not just close).
    assert auroc_failure(c_cal, y) == auroc_failure(c_raw, y)


def test_weighted_auroc_reduces_to_sklearn_and_handles_ties():
    rng = np.random.default_rng(0)
    c = np.round(rng.random(200), 1)  # many ties
    y = (rng.random(200) < c).astype(float)
    assert auroc_failure(c, y, np.ones(200)) == pytest.approx(roc_auc_score(1 - y, 1 - c), abs=1e-12)
    w = rng.integers(0, 3, 200).astype(float)
    rep = np.repeat(np.arange(200), w.astype(int))
    assert auroc_failure(c, y, w) == pytest.approx(roc_auc_score(1 - y[rep], 1 - c[rep]), abs=1e-12)


def test_paired_deltas_recalibration_finding_on_a_saturated_stream():
    arrays = _arrays(n=600, seed=9)
    res = cross_fit_platt(arrays, "overconfident")
    from tps_tracer.constants import SIMPLE
    from tps_tracer.evaluation.pairs import score_matrix
    from tps_tracer.records.arrays import PredictorColumn
    from tps_tracer.scoring import parse_rules, parse_schedules

    raw = arrays.predictors["overconfident"]
    arrays.predictors["platt"] = PredictorColumn("platt", res.values, raw.usable.copy(), dict(raw.skipped))
    sm = score_matrix(
        arrays, ["overconfident", "platt"], parse_rules("log"), parse_schedules("linear-front"), modes=(SIMPLE,)
    )
    d = paired_mean_delta(sm.columns[0], sm.columns[1], arrays.ids, 500, 1)
    assert d.delta == pytest.approx(np.nanmean(sm.columns[1]) - np.nanmean(sm.columns[0]), abs=1e-12)
    assert d.z > 5
    last = arrays.offsets[1:] - 1
    clean = ~np.isnan(arrays.outcome)
    a = np.where(clean, raw.values[last], np.nan)
    b = np.where(clean, res.values[last], np.nan)
    au = paired_auroc_delta(a, b, arrays.outcome, arrays.ids, 500, 1)
    assert abs(au.delta) < 0.02 and abs(au.z) < 3
