"""Weight schedules: the paper's closed forms, normalisation, truncation without renormalising."""

import importlib

import numpy as np
import pytest

from tps_tracer import custom_schedule, weights
from tps_tracer.scoring import StepLayout, branch_pairs


@pytest.mark.parametrize("T", [1, 2, 3, 7, 16, 50])
def test_closed_forms(T):
    t = np.arange(1, T + 1)
    np.testing.assert_allclose(weights("linear-front", T), 2 * (T - t + 1) / (T * (T + 1)))
    np.testing.assert_allclose(weights("uniform", T), np.full(T, 1 / T))
    np.testing.assert_allclose(weights("exponential-front", T), 2.0 ** -(t - 1) / (2 * (1 - 2.0**-T)))
    np.testing.assert_allclose(weights("linear-back", T), 2 * t / (T * (T + 1)))
    for name in ("linear-front", "uniform", "exponential-front", "linear-back"):
        assert weights(name, T).sum() == pytest.approx(1.0)
        assert np.all(weights(name, T) > 0)


def test_custom_schedule_is_normalised_numerically():
    quad = custom_schedule("quadratic-front", lambda t, T: (T - t + 1.0) ** 2)
    w = weights(quad, 5)
    raw = np.array([25, 16, 9, 4, 1], dtype=float)
    np.testing.assert_allclose(w, raw / raw.sum())
    same_as_linear = custom_schedule("my-linear", lambda t, T: T - t + 1.0)
    np.testing.assert_allclose(weights(same_as_linear, 9), weights("linear-front", 9))


def test_custom_schedule_rejects_non_positive_weights():
    bad = custom_schedule("bad", lambda t, T: t - 2.0)
    with pytest.raises(ValueError, match="positive"):
        weights(bad, 4)


def test_censored_prefix_keeps_horizon_weights():
    # Z = 2 observed steps of a T = 5 horizon: weights 5/15 and 4/15, not renormalised.
    layout = StepLayout.from_lengths([2], [5])
    s1, s0 = branch_pairs(np.array([0.5, 0.5]), layout, "brier", "linear-front")
    assert s1[0] == pytest.approx(-(9 / 15) * 0.25)
    assert s0[0] == pytest.approx(-(9 / 15) * 0.25)


def test_layout_rejects_horizon_shorter_than_prefix():
    with pytest.raises(ValueError, match="horizon"):
        StepLayout.from_lengths([4], [3])


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_weights_rejects_bad_horizon(bad):
    with pytest.raises(ValueError):
        weights("uniform", bad)


@pytest.mark.parametrize(
    "schedule",
    ["linear-front", "uniform", "exponential-front", "linear-back", custom_schedule("sq", lambda t, T: t**2 + T)],
)
def test_weight_table_and_direct_evaluation_agree(schedule, monkeypatch):
    bp = importlib.import_module("tps_tracer.scoring")

    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 12, 500)
    horizon = lengths + rng.integers(0, 5, 500)
    via_table = StepLayout.from_lengths(lengths, horizon).weights(schedule)
    monkeypatch.setattr(bp, "_MAX_LUT", 0)  # forces the direct path
    direct = StepLayout.from_lengths(lengths, horizon).weights(schedule)
    np.testing.assert_allclose(via_table, direct, rtol=1e-14)
    # And both are the schedule's own per-horizon vector, trajectory by trajectory.
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    for i in (0, 7, 499):
        expected = weights(schedule, int(horizon[i]))[: lengths[i]]
        np.testing.assert_allclose(via_table[starts[i] : starts[i] + lengths[i]], expected, rtol=1e-14)


def test_huge_horizon_does_not_allocate_a_table_of_its_size():
    layout = StepLayout.from_lengths([2], [10**9])
    w = layout.weights("linear-front")
    T = 10**9
    np.testing.assert_allclose(w, [2 * T / (T * (T + 1)), 2 * (T - 1) / (T * (T + 1))], rtol=1e-12)
