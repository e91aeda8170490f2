"""Bootstrap: determinism, order invariance, accuracy of the SE, pairing."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tps_tracer.evaluation.bootstrap import (
    _POISSON1_CDF,
    _rep_keys,
    _splitmix64,
    bootstrap_means,
    percentile_ci,
    replicate_weights,
    trajectory_key,
    trajectory_keys,
)


def replicate_weights_reference(keys, replicates, seed):
    """The definition of the weights, written plainly: the fast path must equal it bit for bit."""
    rep_keys = _rep_keys(replicates, seed)
    bits = _splitmix64(rep_keys[:, None] ^ np.asarray(keys, dtype=np.uint64)[None, :])
    u = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)  # [0, 1)
    return np.searchsorted(_POISSON1_CDF, u, side="right").astype(np.float64)


def _ids(n):
    return [f"traj-{i}" for i in range(n)]


def test_poisson_weights_have_mean_and_variance_one():
    w = replicate_weights(trajectory_keys(_ids(2000)), np.arange(200), seed=1)
    assert w.mean() == pytest.approx(1.0, abs=0.01)
    assert w.var() == pytest.approx(1.0, abs=0.02)
    assert w.min() == 0 and np.all(w == np.round(w))


def test_weights_depend_only_on_id_replicate_and_seed():
    keys = trajectory_keys(_ids(50))
    a = replicate_weights(keys, np.arange(10), seed=3)
    b = replicate_weights(keys[::-1], np.arange(10), seed=3)[:, ::-1]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[4:6], replicate_weights(keys, np.array([4, 5]), seed=3))
    assert not np.array_equal(a, replicate_weights(keys, np.arange(10), seed=4))


def test_results_do_not_depend_on_row_order_and_repeat_exactly():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    keys = trajectory_keys(_ids(300))
    r1 = bootstrap_means(x, keys, 200, seed=9)
    perm = rng.permutation(300)
    r2 = bootstrap_means(x[perm], keys[perm], 200, seed=9)
    np.testing.assert_allclose(r1.replicates, r2.replicates, rtol=1e-12)
    np.testing.assert_array_equal(r1.replicates, bootstrap_means(x, keys, 200, seed=9).replicates)


def test_bootstrap_se_matches_the_analytic_standard_error():
    rng = np.random.default_rng(1)
    x = rng.exponential(size=(3000, 1))
    res = bootstrap_means(x, trajectory_keys(_ids(3000)), 1000, seed=0)
    analytic = x.std(ddof=1) / np.sqrt(x.shape[0])
    assert res.se()[0] == pytest.approx(analytic, rel=0.1)
    lo, hi = res.ci()
    assert lo[0] < x.mean() < hi[0]
    assert (hi[0] - lo[0]) == pytest.approx(2 * 1.96 * analytic, rel=0.15)


def test_nan_marks_absence_and_pairing_uses_shared_weights():
    rng = np.random.default_rng(2)
    full = rng.normal(size=400)
    sub = np.where(np.arange(400) < 250, full, np.nan)  # a subsample column, like complete-only
    res = bootstrap_means(np.column_stack([full, sub]), trajectory_keys(_ids(400)), 300, seed=5)
    assert res.n.tolist() == [400, 250]
    assert res.point[1] == pytest.approx(full[:250].mean())
    delta = res.replicates[:, 0] - res.replicates[:, 1]
    # Paired delta SE is smaller than the naive independent combination.
    naive = np.sqrt(res.se()[0] ** 2 + res.se()[1] ** 2)
    assert np.std(delta, ddof=1) < naive


def test_large_inputs_are_processed_in_blocks_with_identical_results(monkeypatch):
    import tps_tracer.evaluation.bootstrap as bs

    x = np.random.default_rng(3).normal(size=(500, 3))
    keys = trajectory_keys(_ids(500))
    whole = bootstrap_means(x, keys, 64, seed=1)
    monkeypatch.setattr(bs, "_BLOCK_ELEMENTS", 700)  # forces hashing pieces and several GEMM blocks
    monkeypatch.setattr(bs, "_GEMM_ELEMENTS", 64 * 130)
    blocked = bootstrap_means(x, keys, 64, seed=1)
    np.testing.assert_allclose(whole.replicates, blocked.replicates, rtol=1e-12)


def test_fast_weights_equal_the_definition_bit_for_bit():
    """The bucket table and in-place hash give exactly the searchsorted inverse CDF of the definition,
    including the buckets a CDF step falls into (about 1 in 8000 weights here)."""
    keys = trajectory_keys(_ids(4000))
    for seed in (0, 11, 2**64 - 1):
        fast = replicate_weights(keys, np.arange(250), seed)
        np.testing.assert_array_equal(fast, replicate_weights_reference(keys, np.arange(250), seed))
    assert fast.max() >= 6  # the upper tail is reached


def test_trajectory_keys_match_the_per_id_key():
    ids = [*_ids(50), "café ü", "x" * 500]
    assert trajectory_keys(ids).tolist() == [trajectory_key(i) for i in ids]
    assert trajectory_keys([]).shape == (0,)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 4),
    st.sampled_from([0.95, 0.9, 0.5, 0.99]),
    st.floats(0.0, 0.7),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_percentile_ci_equals_numpy_nanquantile_bit_for_bit(b, k, level, nan_share, seed, ties):
    """The written-out interval (no np.nanquantile: numpy.ma's import) is numpy's, to the bit."""
    rng = np.random.default_rng(seed)
    reps = rng.normal(size=(b, k)) * 10.0 ** rng.integers(-3, 4)
    reps = np.round(reps, 1) if ties else reps
    reps[rng.random((b, k)) < nan_share] = np.nan
    lo, hi = percentile_ci(reps, level)
    alpha = (1.0 - level) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: numpy warns, gives NaN
        want = np.nanquantile(reps, [alpha, 1.0 - alpha], axis=0)
    np.testing.assert_array_equal(lo, want[0])
    np.testing.assert_array_equal(hi, want[1])
