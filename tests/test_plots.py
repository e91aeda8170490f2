"""`tps-tracer plot`: the plotted numbers are the report's numbers, and the files are real images."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tps_tracer.cli.main import main
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.plots import forecast_traces, reliability_bins, step_contributions
from tps_tracer.records import to_arrays, write_trajectories
from tps_tracer.synthetic import simulate_runs, to_records

PREDS = ["overconfident", "truthful"]


@pytest.fixture(scope="module")
def records():
    return to_records(simulate_runs(400, seed=8), forecasters=PREDS, seed=8)


@pytest.fixture(scope="module")
def report(records):
    opts = ReportOptions(rules=["log", "brier"], schedules=["linear-front", "uniform"], bootstrap=0)
    return build_report(to_arrays(records), opts)


@pytest.mark.parametrize("mode", ["complete-only", "simple", "exact"])
@pytest.mark.parametrize("rule", ["log", "brier"])
@pytest.mark.parametrize("weights", ["linear-front", "uniform"])
def test_step_contributions_sum_to_the_reported_tps(records, report, mode, rule, weights):
    arrays = to_arrays(records)
    for p in PREDS:
        c = step_contributions(arrays, p, rule, weights, mode)
        row = next(
            r
            for r in report["scores"]
            if (r["predictor"], r["rule"], r["weights"], r["censoring"]) == (p, rule, weights, mode)
        )
        assert c.total == pytest.approx(row["mean"], abs=1e-12)
        assert c.n == row["n"]
        assert c.reached[0] == c.n and all(c.reached[:-1] >= c.reached[1:])


def test_reliability_bins_reproduce_the_reported_t_ece(records, report):
    arrays = to_arrays(records)
    for p in PREDS:
        bins = reliability_bins(arrays, p)
        diag = next(d for d in report["diagnostics"] if d["predictor"] == p)
        assert bins.ece == pytest.approx(diag["t_ece"], abs=1e-12)
        assert bins.count.sum() == diag["n"]
        assert all(0 <= v <= 1 for v in [*bins.mean_forecast, *bins.observed_rate])


def test_traces_carry_outcome_and_stop_reason(records):
    traces = forecast_traces(to_arrays(records), "truthful", limit=50)
    assert len(traces) == 50
    for tr, rec in zip(traces, records[:50], strict=True):
        assert tr["trajectory_id"] == rec.trajectory_id and tr["stop_reason"] == rec.stop_reason.value
        assert tr["outcome"] == rec.outcome
        assert tr["forecasts"] == [s.forecasts["truthful"] for s in rec.steps]


def test_plot_cli_writes_images_and_the_plotted_numbers(records, report, tmp_path, capsys):
    src = tmp_path / "runs.jsonl"
    write_trajectories(records, src)
    out = tmp_path / "png"
    assert main(["plot", str(src), "-o", str(out), "--calibrate", "platt", "--censoring", "exact"]) == 0
    written = capsys.readouterr().out.split()
    names = {p.rsplit("/", 1)[1] for p in written}
    assert names == {
        "reliability.png",
        "traces-overconfident.png",
        "step-scores.png",
        "calibration-overconfident.png",
        "calibration-truthful.png",
        "plot-data.json",
    }
    for name in names - {"plot-data.json"}:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    data = json.loads((out / "plot-data.json").read_text())
    exact = {s["predictor"]: s["tps"] for s in data["step_scores"]}
    for p in PREDS:
        row = next(
            r
            for r in report["scores"]
            if (r["predictor"], r["rule"], r["weights"], r["censoring"]) == (p, "log", "linear-front", "exact")
        )
        assert exact[p] == pytest.approx(row["mean"], abs=1e-12)
    # The calibrated panel's TPS is the report's '+platt' row.
    cal = build_report(to_arrays(records), ReportOptions(rules=["log"], bootstrap=0, calibrate="platt"))
    platt = next(r for r in cal["scores"] if (r["predictor"], r["censoring"]) == ("overconfident+platt", "exact"))
    assert data["calibration"][0]["step_scores"]["tps"] == pytest.approx(platt["mean"], abs=1e-12)


def test_plot_cli_svg_and_bad_input(records, tmp_path, capsys):
    src = tmp_path / "runs.jsonl"
    write_trajectories(records, src)
    assert main(["plot", str(src), "-o", str(tmp_path / "svg"), "--format", "svg", "--predictors", "truthful"]) == 0
    root = ET.parse(tmp_path / "svg" / "reliability.svg").getroot()
    assert root.tag.endswith("svg")
    capsys.readouterr()
    assert main(["plot", str(src), "-o", str(tmp_path / "x"), "--predictors", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_the_traces_legend_names_every_stop_reason_drawn():
    """Every StopReason has its own marker, and the legend lists each one that was drawn (it used to
    miss env_terminated, timeout and other: markers without a legend entry)."""
    from tps_tracer.plots import _STOP_MARKERS, traces_figure
    from tps_tracer.records.stop_reasons import StopReason

    assert set(_STOP_MARKERS) == {r.value for r in StopReason}
    assert len(set(_STOP_MARKERS.values())) == len(_STOP_MARKERS)  # distinguishable
    reasons = [r.value for r in StopReason]
    traces = [
        {"forecasts": [0.4, 0.6], "outcome": 1 if r == "clean" else None, "stop_reason": r} for r in reasons[::-1]
    ]
    fig = traces_figure(traces, "verbal")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert [lab for lab in labels if lab.startswith("stop: ")] == [f"stop: {r}" for r in _STOP_MARKERS]
    drawn = traces_figure(traces[:1], "verbal")  # only "other" drawn: only its entry
    labels = [t.get_text() for t in drawn.axes[0].get_legend().get_texts()]
    assert [lab for lab in labels if lab.startswith("stop: ")] == [f"stop: {reasons[-1]}"]
