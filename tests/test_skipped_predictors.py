"""Which predictors a command scores (evaluation/skipped_predictors.py).

A file whose steps carry no forecast at all (the newcomer's "forecast" for "forecasts")
used to give `report` exit 0 with base-rate rows only; now report, evaluate and gate fail on
it as calibrate and plot do: one line, exit 2, "no predictor in the file". The misspelled key
itself stays a step extra (kept for Parquet round trips).

A user predictor may not take a name the evaluation creates itself: `base_rate` (the
reference row) and `<p>+platt` (the recalibrated stream of p). Both used to lose data
silently: the user's column replaced the reference (still disclosed as the constant), or the
recalibrated stream overwrote the user's column. Now: one clear error naming the predictor.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_support import call

import tps_tracer as tt
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.skipped_predictors import ReservedNameError
from tps_tracer.records.arrays import to_arrays


def typo_rows(n: int = 40, key: str = "forecast") -> list[dict]:
    return [
        {
            "trajectory_id": f"r{i}",
            "stop_reason": "clean",
            "outcome": i % 2,
            "steps": [{"t": 1, key: {"verbal": 0.6}}, {"t": 2, key: {"verbal": 0.7}}],
        }
        for i in range(n)
    ]


@pytest.fixture()
def typo(tmp_path) -> Path:
    path = tmp_path / "typo_all.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in typo_rows()))
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{f}"],
        ["report", "{f}", "--json", "--bootstrap", "0"],
        ["gate", "{f}", "--min", "-1", "--bootstrap", "200"],
        ["gate", "{f}", "--vs-base-rate", "--bootstrap", "200"],
        ["calibrate", "{f}", "-o", "{d}/c.json"],
        ["plot", "{f}", "-o", "{d}/p"],
    ],
    ids=["report", "report-json", "gate-min", "gate-vs-base-rate", "calibrate", "plot"],
)
def test_every_command_fails_on_a_file_without_any_predictor(typo, tmp_path, capsys, argv):
    code, out, err = call([a.format(f=typo, d=tmp_path) for a in argv], capsys)
    assert code == 2, (code, out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "no predictor in the file" in err


def test_the_misspelled_key_is_kept_as_a_step_extra_through_parquet(tmp_path, capsys):
    """(A file with no predictor at all cannot be converted yet: records/parquet.py, not this fix.)"""
    rows = [*typo_rows(2, key="forecasts"), *typo_rows(1)]
    rows[-1]["trajectory_id"] = "x"
    src = tmp_path / "mixed.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq, back = tmp_path / "mixed.parquet", tmp_path / "back.jsonl"
    assert call(["convert", str(src), str(pq)], capsys)[0] == 0
    assert call(["convert", str(pq), str(back)], capsys)[0] == 0
    last = json.loads(back.read_text().splitlines()[-1])
    assert last["steps"][0]["forecast"] == {"verbal": 0.6}


def test_evaluate_raises_and_an_explicit_empty_selection_still_works(typo):
    records = tt.read_trajectories(typo)
    with pytest.raises(ValueError, match="no predictor in the file: no step has a forecast under 'forecasts'"):
        tt.evaluate(records, tt.ReportOptions(bootstrap=0))
    # predictors=[]: the caller asked for no predictor (a monitor before any forecast): the base rate alone.
    report = build_report(to_arrays(records), tt.ReportOptions(predictors=[], rules=["log"], bootstrap=0))
    simple = [r for r in report["scores"] if r["censoring"] == "simple"]
    assert [r["predictor"] for r in simple] == ["base_rate"]
    assert math.isclose(simple[0]["mean"], math.log(0.5), rel_tol=1e-12)  # outcomes alternate: p = 1/2


def test_one_misspelled_line_in_a_good_file_is_still_counted_as_missing(tmp_path, capsys):
    """The misspelled run states no verbal forecast: scored at 0.5 throughout (carry-forward) and
    counted as a run whose every step is a gap, never dropped silently."""
    good = typo_rows(5, key="forecasts")
    bad = {"trajectory_id": "x", "stop_reason": "clean", "outcome": 1, "steps": [{"t": 1, "forecast": {"verbal": 0.5}}]}
    path = tmp_path / "wrong_fields2.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*good, bad]))
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "0", "--rules", "log"], capsys)
    assert code == 0, err
    report = json.loads(out)
    verbal = next(r for r in report["scores"] if r["predictor"] == "verbal" and r["censoring"] == "simple")
    assert verbal["n"] == 6
    gaps = report["missing_forecasts"]["predictors"]["verbal"]
    assert (gaps["missing_steps"], gaps["runs_affected"], gaps["runs"]) == (1, 1, 6)


def rows(forecasts_of, n: int = 40) -> list[dict]:
    return [
        {
            "trajectory_id": f"r{i}",
            "stop_reason": "clean",
            "outcome": i % 2,
            "steps": [{"forecasts": forecasts_of(i % 2)}],
        }
        for i in range(n)
    ]


def write(path: Path, data: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return path


@pytest.fixture()
def base_rate_file(tmp_path) -> Path:
    # The newcomer's file: a forecaster named "base_rate" that is nearly perfect (0.9 / 0.1).
    return write(tmp_path / "pred_base_rate.jsonl", rows(lambda y: {"base_rate": 0.9 if y else 0.1}))


@pytest.fixture()
def platt_file(tmp_path) -> Path:
    # "verbal" plus the user's own "verbal+platt" column (a constant 0.5).
    return write(tmp_path / "pred_platt.jsonl", rows(lambda y: {"verbal": 0.7 if y else 0.3, "verbal+platt": 0.5}))


def one_line_exit_2(code: int, out: str, err: str, name: str) -> None:
    assert code == 2, (code, out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"predictor {name!r}: the name is reserved" in err, err


def test_report_rejects_a_predictor_named_base_rate(base_rate_file, capsys):
    one_line_exit_2(*call(["report", str(base_rate_file)], capsys), "base_rate")
    one_line_exit_2(*call(["report", str(base_rate_file), "--bootstrap", "0", "--json"], capsys), "base_rate")


def test_evaluate_rejects_it_unless_another_predictor_is_selected(base_rate_file):
    records = tt.read_trajectories(base_rate_file)
    with pytest.raises(ReservedNameError, match="predictor 'base_rate': the name is reserved"):
        tt.evaluate(records, tt.ReportOptions(bootstrap=0))


def test_an_unselected_column_of_that_name_collides_with_nothing(tmp_path, capsys):
    data = rows(lambda y: {"verbal": 0.6, "base_rate": 0.9 if y else 0.1})
    path = write(tmp_path / "both.jsonl", data)
    code, out, err = call(
        ["report", str(path), "--predictors", "verbal", "--rules", "log", "--bootstrap", "0", "--json"], capsys
    )
    assert code == 0, err
    report = json.loads(out)
    ref = [r for r in report["scores"] if r["predictor"] == "base_rate" and r["censoring"] == "simple"]
    # The reference is the constant mean outcome (1/2): log(1/2) on every trajectory, not the user's 0.9/0.1.
    assert len(ref) == 1 and math.isclose(ref[0]["mean"], math.log(0.5), rel_tol=1e-12)


def test_gate_rejects_it_instead_of_finding_no_forecasts(base_rate_file, capsys):
    one_line_exit_2(*call(["gate", str(base_rate_file), "--vs-base-rate", "--bootstrap", "200"], capsys), "base_rate")
    one_line_exit_2(
        *call(["gate", str(base_rate_file), "--min", "-1", "--predictor", "base_rate"], capsys), "base_rate"
    )


def test_recalibration_rejects_a_user_column_named_like_its_stream(platt_file, tmp_path, capsys):
    one_line_exit_2(
        *call(["report", str(platt_file), "--calibrate", "platt", "--bootstrap", "0"], capsys), "verbal+platt"
    )
    one_line_exit_2(*call(["calibrate", str(platt_file), "-o", str(tmp_path / "c.json")], capsys), "verbal+platt")
    one_line_exit_2(
        *call(["plot", str(platt_file), "-o", str(tmp_path / "p"), "--calibrate", "platt"], capsys), "verbal+platt"
    )
    assert not (tmp_path / "c.json").exists()


def test_without_recalibration_such_a_column_is_an_ordinary_predictor(platt_file, capsys):
    code, out, err = call(["report", str(platt_file), "--rules", "log", "--bootstrap", "0", "--json"], capsys)
    assert code == 0, err
    simple = {r["predictor"]: r["mean"] for r in json.loads(out)["scores"] if r["censoring"] == "simple"}
    # One step of weight 1: the mean log score of 0.5 is log 0.5; verbal scores log 0.7 on every run.
    assert math.isclose(simple["verbal+platt"], math.log(0.5), rel_tol=1e-12)
    assert math.isclose(simple["verbal"], math.log(0.7), rel_tol=1e-12)
