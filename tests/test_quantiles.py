"""bootstrap.linear_quantile: numpy's default quantile, written out (np.quantile imports numpy.ma,
~30 ms of a small report), must equal numpy's to the bit -- checked against numpy itself."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tps_tracer.evaluation.bootstrap import linear_quantile
from tps_tracer.evaluation.diagnostics import quantile_bins

VALUES = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.7, 1.0, 1e-9, 0.3333333333333333, 0.9999999])


@settings(max_examples=300, deadline=None)
@given(arrays(np.float64, st.integers(1, 80), elements=VALUES | st.floats(0, 1)), st.floats(0.0, 1.0))
def test_linear_quantile_equals_np_quantile(x: np.ndarray, q: float) -> None:
    got = linear_quantile(np.sort(x)[:, None], np.array([x.size]), q)[0]
    assert got == np.quantile(x, q), (got, np.quantile(x, q))


@settings(max_examples=300, deadline=None)
@given(arrays(np.float64, st.integers(1, 120), elements=VALUES | st.floats(0, 1)), st.integers(1, 15))
def test_quantile_bins_equal_the_np_quantile_and_np_unique_binning(x: np.ndarray, n_bins: int) -> None:
    edges = np.unique(np.quantile(x, np.linspace(0.0, 1.0, n_bins + 1))[1:-1])
    np.testing.assert_array_equal(quantile_bins(x, n_bins), np.searchsorted(edges, x, side="left"))
