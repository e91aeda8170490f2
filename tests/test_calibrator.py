"""The calibrator artifact, `report --calibrate/--calibrator`, `tps-tracer calibrate`, fixed-rank sensitivity."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from tps_tracer.cli.main import main
from tps_tracer.constants import COMPLETE_ONLY, SIMPLE
from tps_tracer.evaluation.calibration import (
    Calibrator,
    ScheduleMismatch,
    cross_fit_platt,
    fit_calibrator,
    fixed_rank_sensitivity,
    step_weights,
)
from tps_tracer.evaluation.diagnostics import auroc_failure
from tps_tracer.evaluation.pairs import pair_table_from_arrays, score_matrix
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES
from tps_tracer.records import to_arrays, write_trajectories
from tps_tracer.scoring import parse_rules, parse_schedules
from tps_tracer.synthetic import simulate_runs, to_records

PRED = "overconfident"


def _records(n=300, seed=4):
    return to_records(simulate_runs(n, seed=seed), forecasters=(PRED, "truthful"), seed=seed)


@pytest.fixture(scope="module")
def arrays():
    return to_arrays(_records())


def test_full_data_map_equals_sklearn_on_all_complete_steps(arrays):
    cal = fit_calibrator(arrays, [PRED])
    col = arrays.predictors[PRED]
    complete = ~np.isnan(arrays.outcome) & col.usable
    steps = np.repeat(complete, arrays.lengths)
    f, w = col.values[steps], step_weights(arrays)[steps]
    y = np.repeat(np.nan_to_num(arrays.outcome), arrays.lengths)[steps]
    x = np.log(np.clip(f, 1e-6, 1 - 1e-6)) - np.log1p(-np.clip(f, 1e-6, 1 - 1e-6))
    mu = np.average(x, weights=w)
    sd = np.sqrt(np.average((x - mu) ** 2, weights=w))
    lr = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(((x - mu) / sd)[:, None], y, sample_weight=w)
    m = cal.maps[PRED]
    assert (m.a, m.b, m.mu, m.sigma) == pytest.approx((lr.intercept_[0], lr.coef_[0, 0], mu, sd), abs=1e-6)
    assert m.n_trajectories == int(complete.sum())


def test_artifact_round_trips_and_applies_to_new_forecasts(arrays, tmp_path):
    cal = fit_calibrator(arrays, [PRED, "truthful"], schedule="uniform")
    path = tmp_path / "cal.json"
    cal.save(path)
    again = Calibrator.load(path)
    grid = np.linspace(0, 1, 101)
    assert np.array_equal(again.apply(PRED, grid), cal.apply(PRED, grid))
    assert again.schedule == "uniform"
    hook = again.hooks()[PRED]
    assert hook(0.93) == pytest.approx(float(cal.apply(PRED, [0.93])[0]), abs=0)
    with pytest.raises(KeyError, match="no map"):
        again.apply("verbal", [0.5])
    with pytest.raises(ValueError, match="probabilities"):
        again.apply(PRED, [np.nan])


def test_schedule_mismatch_warns_or_raises(arrays):
    cal = fit_calibrator(arrays, [PRED])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cal.check_schedule("linear-front") is True
    with pytest.warns(ScheduleMismatch, match="uniform"):
        assert cal.check_schedule("uniform") is False
    with pytest.raises(ValueError, match="refit"):
        cal.check_schedule("uniform", strict=True)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.update(kind="something"), "not a tps-tracer calibrator"),
        (lambda d: d["maps"]["overconfident"].pop("sigma"), "missing or invalid field"),
        (lambda d: d["maps"]["overconfident"].update(b=-1.0), "invalid map parameters"),
        (lambda d: d.update(schedule="zigzag"), "zigzag"),
    ],
)
def test_malformed_artifacts_are_rejected_clearly(arrays, mutate, match):
    data = json.loads(json.dumps(fit_calibrator(arrays, [PRED]).as_dict()))
    mutate(data)
    with pytest.raises(ValueError, match=match):
        Calibrator.from_dict(data)


def test_report_calibrate_platt_rows_and_paired_deltas_match_an_independent_computation(arrays):
    rep = build_report(arrays, ReportOptions(rules=["log"], bootstrap=300, seed=3, calibrate="platt"))
    assert rep["settings"]["calibration"]["method"].startswith("platt (cross-fitted")
    names = list(dict.fromkeys(r["predictor"] for r in rep["scores"]))
    assert names == [PRED, PRED + "+platt", "truthful", "truthful+platt", "base_rate"]
    # Independent: the cross-fitted stream scored directly.
    fit = cross_fit_platt(arrays, PRED)
    with_platt = arrays.with_predictor("p", fit.values)
    sm = score_matrix(with_platt, [PRED, "p"], parse_rules("log"), parse_schedules("linear-front"))
    cols = {(k.predictor, k.censoring): c for k, c in zip(sm.keys, sm.columns, strict=True)}
    block = next(r for r in rep["recalibration"] if r["predictor"] == PRED)
    for mode in (COMPLETE_ONLY, SIMPLE, "exact"):
        row = next(c for c in block["comparisons"] if c["statistic"] == f"tps log linear-front {mode}")
        want = np.nanmean(cols[("p", mode)]) - np.nanmean(cols[(PRED, mode)])
        assert row["delta"] == pytest.approx(want, abs=1e-12)
    simple = next(c for c in block["comparisons"] if c["statistic"] == "tps log linear-front simple")
    assert simple["z"] > 5  # a saturated stream: recalibration moves TPS by many SE
    au = next(c for c in block["comparisons"] if c["statistic"] == "auroc phi_w")
    table = pair_table_from_arrays(with_platt, [PRED, "p"], parse_rules("log"), parse_schedules("linear-front"))
    w = AGGREGATOR_NAMES.index("phi_w")
    clean = ~np.isnan(table.outcome)
    y = table.outcome[clean]
    want = roc_auc_score(1 - y, -table.predictors["p"].aggregates[clean, w]) - roc_auc_score(
        1 - y, -table.predictors[PRED].aggregates[clean, w]
    )
    assert au["delta"] == pytest.approx(want, abs=1e-12)
    assert abs(au["z"]) < 3


def test_report_text_discloses_recalibration(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    write_trajectories(_records(200, 5), path)
    assert main(["report", str(path), "--calibrate", "platt", "--bootstrap", "50", "--rules", "log"]) == 0
    out = capsys.readouterr().out
    assert "Recalibration: platt (cross-fitted" in out
    # The Delta CI reuses the fitted maps in every replicate: the text says what it covers (issue 30).
    assert "CI conditional on the fitted maps: they are not refitted in each replicate" in out
    assert "forecasts evaluated raw" not in out
    assert "'+platt' are recalibrated" in out
    assert main(["report", str(path), "--bootstrap", "0"]) == 0
    assert "forecasts evaluated raw" in capsys.readouterr().out
    live = _records(200, 5)
    for rec in live:
        for step in rec.steps:
            step.forecasts["truthful+cal"] = step.forecasts.pop("truthful")
    write_trajectories(live, path)
    assert main(["report", str(path), "--bootstrap", "0"]) == 0
    out = capsys.readouterr().out
    assert "truthful+cal arrived recalibrated in the file" in out and "forecasts evaluated raw" not in out


def test_calibrate_cli_writes_a_loadable_artifact_with_its_cross_fitted_evaluation(tmp_path, capsys):
    path, out = tmp_path / "r.jsonl", tmp_path / "cal.json"
    records = _records(300, 6)
    write_trajectories(records, path)
    args = ["calibrate", str(path), "-o", str(out), "--bootstrap", "100", "--fixed-rank", PRED, "--json"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    cal = Calibrator.load(out)
    arrays = to_arrays(records)
    ref = fit_calibrator(arrays, [PRED, "truthful"])
    assert cal.maps[PRED] == ref.maps[PRED]
    ev = cal.cross_fit[PRED]
    assert [d["fit_on_half"] for d in ev["splits"]] == [0, 1]
    fit = cross_fit_platt(arrays, PRED)
    assert ev["splits"][0]["b"] == fit.maps[0].b
    lo, hi = ev["splits"][0]["value_range"]
    applied = np.repeat(fit.half == 1, arrays.lengths) & ~np.isnan(fit.values)
    assert (lo, hi) == (fit.values[applied].min(), fit.values[applied].max())
    assert ev["tps_log"][SIMPLE]["z"] > 5
    assert next(r["transform"] for r in printed["fixed_rank"]["rows"]) == "identity"
    # Text mode renders the same artifact.
    assert main(["calibrate", str(path), "-o", str(out), "--bootstrap", "20"]) == 0
    text = capsys.readouterr().out
    assert "Cross-fitted evaluation" in text
    assert "the CI is conditional on the cross-fitted maps, which are not\nrefitted in each replicate" in text


def test_calibrate_cli_rejects_unknown_predictors(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    write_trajectories(_records(50, 1), path)
    assert main(["calibrate", str(path), "-o", str(tmp_path / "c.json"), "--predictors", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_fixed_rank_rank_metrics_are_fixed_while_tps_moves(arrays):
    rows = fixed_rank_sensitivity(arrays, PRED)
    assert [r["transform"] for r in rows] == ["identity", "affine 0.4+0.2x", "sqrt", "square", "platt (cross-fitted)"]
    table = pair_table_from_arrays(arrays, [PRED], parse_rules("log"), parse_schedules("linear-front"))
    clean = ~np.isnan(table.outcome)
    phi = table.predictors[PRED].aggregates[clean, AGGREGATOR_NAMES.index("phi_w")]
    y = table.outcome[clean]
    for r in rows:
        assert r["auroc"] == auroc_failure(phi, y) == pytest.approx(roc_auc_score(1 - y, -phi), abs=1e-12)
    # TPS of the affine stream by a direct per-trajectory loop over steps.
    col = arrays.predictors[PRED]
    total, n = 0.0, 0
    for i in np.flatnonzero(clean):
        f = 0.4 + 0.2 * col.values[arrays.offsets[i] : arrays.offsets[i + 1]]
        big_t = arrays.horizon[i]
        t = np.arange(1, f.size + 1)
        w = 2 * (big_t - t + 1) / (big_t * (big_t + 1))
        total += np.sum(w * (np.log(f) if arrays.outcome[i] == 1 else np.log1p(-f)))
        n += 1
    affine = next(r for r in rows if r["transform"] == "affine 0.4+0.2x")
    assert affine["tps"] == pytest.approx(total / n, abs=1e-12)
    spread = max(r["tps"] for r in rows) - min(r["tps"] for r in rows)
    assert spread > 0.3


def test_with_predictor_skips_trajectories_with_missing_steps(arrays):
    values = arrays.predictors[PRED].values.copy()
    values[arrays.offsets[3]] = np.nan
    out = arrays.with_predictor("x", values)
    assert not out.predictors["x"].usable[3] and out.predictors["x"].usable.sum() == arrays.n - 1
    assert out.predictors["x"].skipped == {"missing": 1}
    assert "x" not in arrays.predictors
    with pytest.raises(ValueError, match="step values"):
        arrays.with_predictor("y", values[:-1])


def test_calibrator_hooks_plug_into_the_live_feeder(arrays):
    from tps_tracer.capture.step_signals import RawStep
    from tps_tracer.tracking.tracker import CaptureWorker as Feeder

    cal = fit_calibrator(arrays, [PRED])
    hooks = {"verbal": cal.hooks()[PRED]}  # a map fitted on one stream, applied live to another name
    feeder = Feeder(accumulator=None, calibration=hooks, background=False)  # type: ignore[arg-type]
    out = feeder.forecasts(RawStep("Thought: looks right. Confidence: 0.9\nAction: search[x]"))
    assert out["verbal"] == pytest.approx(0.9)
    assert out["verbal+cal"] == pytest.approx(float(cal.apply(PRED, [0.9])[0]), abs=1e-15)


def _one_map_calibrator():
    from tps_tracer.evaluation.calibration import Calibrator, PlattMap

    m = PlattMap(a=0.3, b=1.5, mu=0.1, sigma=2.0, fallback=False, n_steps=10, n_trajectories=5)
    return Calibrator(schedule="linear-front", penalty=1.0, maps={"verbal": m})


def _platt_by_hand(p: float) -> float:
    """sigmoid(a + b (logit(p) - mu) / sigma) of the map above, written out (EPS clip: 1e-6)."""
    import math

    logit = math.log(min(max(p, 1e-6), 1 - 1e-6) / (1 - min(max(p, 1e-6), 1 - 1e-6)))
    z = 0.3 + 1.5 * (logit - 0.1) / 2.0
    return min(max(1 / (1 + math.exp(-z)), 1e-6), 1 - 1e-6)


@pytest.mark.parametrize("bad", [float("nan"), 2.0, -0.1, "0.5", True, None, [0.5, "x"]])
def test_apply_and_hooks_follow_one_rule_for_invalid_forecasts(bad):
    """apply (batch) raises, a hook (live) returns NaN: neither turns an invalid forecast into a
    calibrated probability (hooks used to map 2.0 to 0.999999, apply took the string "0.5")."""
    import math

    cal = _one_map_calibrator()
    with pytest.raises(ValueError, match=r"'verbal': forecasts must be probabilities in \[0, 1\]"):
        cal.apply("verbal", bad)
    if not isinstance(bad, list):
        assert math.isnan(cal.hooks()["verbal"](bad))


def test_apply_and_hooks_agree_on_valid_forecasts():
    import math

    cal = _one_map_calibrator()
    ps = [0.0, 0.2, 0.5, 0.9, 1.0, 1]
    got = cal.apply("verbal", ps)
    for p, g in zip(ps, got, strict=True):
        assert math.isclose(g, _platt_by_hand(p), rel_tol=1e-12)
        assert cal.hooks()["verbal"](p) == g
