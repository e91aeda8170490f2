"""One rule for a valid probability and one for a valid horizon on the capture side (tps_tracer/validity.py).

Each capture-side check used to have its own copy (issue 36: horizon validity in 3 places, forecast
validity in 5), and they disagreed on numpy scalars: a q_Z of numpy.int64(1) was accepted by
nothing, a numpy.float32 q_Z refused by the sink's resolution lines but a float32 forecast taken.
Here every caller is run on the same values and must agree with the one function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tps_tracer.errors import InputError
from tps_tracer.online.accumulator import Accumulator
from tps_tracer.online.jsonl_sink import JsonlSink
from tps_tracer.validity import horizon, probability

PROBABILITIES = [0.0, 1.0, 0.5, -0.0, 1, 0, np.float32(0.25), np.float64(1.0), np.int64(1), np.int8(0)]
NOT_PROBABILITIES = [-0.1, 1.0001, math.nan, math.inf, True, False, "0.5", None, [0.5], np.float64("nan"), 2]


def test_probability_accepts_real_numbers_in_the_unit_interval_only():
    for v in PROBABILITIES:
        p = probability(v)
        assert type(p) is float and p == float(v), v
    for v in NOT_PROBABILITIES:
        assert probability(v) is None, v


def test_every_capture_side_probability_check_agrees(tmp_path):
    acc = Accumulator(idle_timeout=None)  # its input checks
    sink = JsonlSink(tmp_path / "r.jsonl")
    for v in PROBABILITIES + NOT_PROBABILITIES:
        want = probability(v)
        if v is None:
            continue  # None means "no forecast" / "no q_Z" to these callers, not a bad value
        assert acc._step_checked("t", {"p": v}) == {"p": want}, v
        assert acc._check_q_z("t", v) == want, v
        if want is None:
            with pytest.raises(InputError):
                sink.resolve("t", q_z=v)
        else:
            sink.resolve("t", q_z=v)
    sink.close()
    assert acc.rejected["invalid_forecast"] == acc.rejected["invalid_q_z"] == len(NOT_PROBABILITIES) - 1


def test_horizon_rule_for_api_values_and_for_labels():
    assert horizon(8) == 8 and horizon(np.int64(8)) == 8 and horizon(10_000_000) == 10_000_000
    for bad in (0, -1, True, 8.0, "8", 10_000_001, None, math.nan):
        assert horizon(bad) is None, bad
    assert horizon(3, at_least=4) is None and horizon(4, at_least=4) == 4 and horizon(1, at_least=0) == 1
    # Labels (metadata, span attributes): integral floats and digit strings are how budgets arrive.
    assert horizon(8.0, labels=True) == 8 and horizon(" 12 ", labels=True) == 12
    for bad in (8.5, math.inf, "8 steps", "1" * 12, "0", True):
        assert horizon(bad, labels=True) is None, bad


def test_every_capture_side_horizon_check_agrees():
    acc = Accumulator(idle_timeout=None)
    for v in (1, 5, np.int64(7), 0, 8.0, "8", True, 10**8, 8.5, "9"):
        for n_steps in (0, 6):
            assert acc._horizon_ok("t", v, n_steps) == (horizon(v, at_least=n_steps) is not None), (v, n_steps)
