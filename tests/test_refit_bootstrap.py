"""`calibrate --refit-maps`: the raw-vs-Platt Delta with the maps refitted in every replicate (issue 30).

The conditional Delta's CI reuses the fitted maps; the refit one fits both cross-fitted maps
again on each Poisson resample, so it covers the effect of the procedure, not of one fit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_support import call

from tps_tracer.evaluation.bootstrap import replicate_weights, trajectory_keys
from tps_tracer.evaluation.calibration import cross_fit_platt, fit_platt, refit_tps_deltas, step_weights
from tps_tracer.records import write_trajectories
from tps_tracer.records.arrays import STOP_REASONS, to_arrays
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.synthetic import simulate_runs, to_records

P = "overconfident"


@pytest.fixture(scope="module")
def small():
    return to_records(simulate_runs(50, seed=3), [P])


def test_a_replicates_maps_are_the_fit_on_the_resample_written_out(small):
    """Poisson weight k on a trajectory = its steps k times in the training data (same halves)."""
    arrays = to_arrays(small)
    w = replicate_weights(trajectory_keys(arrays.ids), [3], 0)[0]
    refit = cross_fit_platt(arrays, P, trajectory_weights=w)
    col = arrays.predictors[P]
    clean = np.asarray(arrays.stop_code) == STOP_REASONS.index(StopReason.CLEAN)
    complete = np.repeat(clean & ~np.isnan(arrays.outcome) & col.usable, arrays.lengths)
    reps = np.repeat(w, arrays.lengths).astype(int)
    step_w, step_y = step_weights(arrays), np.repeat(np.nan_to_num(arrays.outcome), arrays.lengths)
    step_half = np.repeat(refit.half, arrays.lengths)
    for h in (0, 1):
        train = complete & (step_half == h)
        idx = np.repeat(np.flatnonzero(train), reps[train])  # each step written out k times
        m = fit_platt(col.values[idx], step_y[idx], step_w[idx])
        got = refit.maps[h]
        assert (got.a, got.b, got.mu, got.sigma) == pytest.approx((m.a, m.b, m.mu, m.sigma), abs=1e-9)
    assert not np.allclose(refit.values, cross_fit_platt(arrays, P).values, equal_nan=True)


def test_refit_ci_is_wider_than_the_conditional_one_at_small_n(small, tmp_path, capsys):
    path = tmp_path / "small.jsonl"
    write_trajectories(small, path)
    out = tmp_path / "cal.json"
    code, text, err = call(["calibrate", str(path), "-o", str(out), "--bootstrap", "200", "--refit-maps"], capsys)
    assert code == 0, err
    ev = json.loads(out.read_text())["cross_fit"][P]
    for mode in ("complete-only", "simple"):
        cond, refit = ev["tps_log"][mode], ev["tps_log_refit"][mode]
        assert refit["delta"] == pytest.approx(cond["delta"], abs=1e-12)  # the same point estimate
        assert refit["ci_high"] - refit["ci_low"] > cond["ci_high"] - cond["ci_low"]
        direct = refit_tps_deltas(to_arrays(small), P, n_replicates=200, seed=0)[mode]
        assert (refit["ci_low"], refit["ci_high"]) == (direct.ci_low, direct.ci_high)
    assert "TPS_log simple (refit)" in text and "'(refit)' rows of --refit-maps" in text
