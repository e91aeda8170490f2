"""Every command on the handler's own output for a native tool-calling agent.

The file is written by the real `TPSCallbackHandler` on LangChain's real `create_agent` loop
(only the chat model is scripted): `action_token_prob` and `action_entropy_conf` are null on
every step. Each command must work on it without `--predictors`, skip exactly those two
predictors with the reason (text and JSON), and give for every other predictor exactly what it
gives on the same records with the two null predictors removed (the independent reference).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from handler_output import ACTION_PREDICTORS, write_handler_output

from tps_tracer.cli.main import main
from tps_tracer.evaluation.calibration import Calibrator

KEPT = ("verbal", "token_prob", "entropy_conf")
BOOT = ["--bootstrap", "200", "--seed", "5"]


def _reject_constant(name: str) -> None:
    raise AssertionError(f"non-strict JSON token {name}")


def strict_loads(text: str):
    return json.loads(text, parse_constant=_reject_constant)


@pytest.fixture(scope="module")
def handler_file(tmp_path_factory) -> Path:
    return write_handler_output(tmp_path_factory.mktemp("handler") / "runs.jsonl", n_tasks=80, seed=21)


@pytest.fixture(scope="module")
def stripped_file(handler_file) -> Path:
    """The same records without the two all-null predictors (the reference for every comparison)."""
    out = handler_file.with_name("stripped.jsonl")
    lines = []
    for line in handler_file.read_text().splitlines():
        obj = json.loads(line)
        for step in obj.get("steps", []):
            for name in ACTION_PREDICTORS:
                del step["forecasts"][name]
        lines.append(json.dumps(obj))
    out.write_text("\n".join(lines) + "\n")
    return out


def run(argv, capsys) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _skipped_are_the_action_predictors(skipped) -> None:
    assert [s["predictor"] for s in skipped] == list(ACTION_PREDICTORS)
    for s in skipped:
        # scoring commands: no statement at all; recalibration and plots read every step of a run
        assert s["reason"].startswith(("no trajectory states a forecast", "no trajectory has a forecast at every step"))


def test_the_file_has_the_handlers_shape(handler_file):
    records = [json.loads(line) for line in handler_file.read_text().splitlines()]
    steps = [s for r in records for s in r.get("steps", [])]
    assert len(steps) > 100
    assert all(s["forecasts"][a] is None for s in steps for a in ACTION_PREDICTORS)
    assert all(isinstance(s["forecasts"][k], float) for s in steps for k in KEPT)
    stops = {r["stop_reason"] for r in records if "stop_reason" in r}
    assert {"clean", "max_steps"} <= stops


def _rows(report, key="scores"):
    return {(r["predictor"], r["rule"], r["weights"], r["censoring"]): r for r in report[key]}


@pytest.mark.parametrize("extra", [[], ["--calibrate", "platt"]])
def test_report_skips_the_null_predictors_and_scores_the_rest_exactly(handler_file, stripped_file, capsys, extra):
    got = strict_loads(run(["report", handler_file, "--json", *BOOT, *extra], capsys))
    ref = strict_loads(run(["report", stripped_file, "--json", *BOOT, *extra], capsys))
    _skipped_are_the_action_predictors(got["skipped_predictors"])
    assert ref["skipped_predictors"] == []
    assert _rows(got) == _rows(ref)
    assert got["recalibration"] == ref["recalibration"]
    assert got["diagnostics"] == ref["diagnostics"]
    names = {r["predictor"] for r in got["scores"]}
    assert not names & set(ACTION_PREDICTORS)
    if extra:
        assert {p + "+platt" for p in KEPT} <= names
    text = run(["report", handler_file, *BOOT, *extra], capsys)
    assert "Skipped predictors" in text
    for name in ACTION_PREDICTORS:
        assert f"  {name}: no trajectory states a forecast" in text


def test_predictors_combine_with_calibrate(handler_file, capsys):
    """`--predictors verbal --calibrate platt` crashed with KeyError('verbal+platt'); its rows must equal
    the verbal rows of the full --calibrate run (per-predictor fits, replicate weights by trajectory id)."""
    one = strict_loads(
        run(["report", handler_file, "--json", *BOOT, "--predictors", "verbal", "--calibrate", "platt"], capsys)
    )
    full = strict_loads(run(["report", handler_file, "--json", *BOOT, "--calibrate", "platt"], capsys))
    rows = _rows(one)
    assert {k[0] for k in rows} == {"verbal", "verbal+platt", "base_rate"}
    full_rows = _rows(full)
    for key, row in rows.items():
        assert row == full_rows[key]
    assert one["recalibration"] == [r for r in full["recalibration"] if r["predictor"] == "verbal"]
    assert one["skipped_predictors"] == []


def test_predictors_naming_a_null_predictor_with_calibrate_skips_it(handler_file, capsys):
    rep = strict_loads(
        run(
            [
                "report",
                handler_file,
                "--json",
                *BOOT,
                "--predictors",
                "verbal,action_token_prob",
                "--calibrate",
                "platt",
            ],
            capsys,
        )
    )
    [skipped] = rep["skipped_predictors"]
    assert skipped["predictor"] == "action_token_prob"
    assert skipped["reason"].startswith("no trajectory states a forecast")
    assert {r["predictor"] for r in rep["recalibration"]} == {"verbal"}


def test_calibrate_fits_the_usable_predictors_and_notes_the_rest(handler_file, stripped_file, tmp_path, capsys):
    out = tmp_path / "cal.json"
    text = run(["calibrate", handler_file, "-o", out, "--bootstrap", "100"], capsys)
    assert "Skipped predictors" in text and "action_token_prob: no trajectory has a forecast" in text
    artifact = strict_loads(out.read_text())
    _skipped_are_the_action_predictors(artifact["skipped_predictors"])
    ref_out = tmp_path / "ref.json"
    run(["calibrate", stripped_file, "-o", ref_out, "--bootstrap", "100"], capsys)
    ref = strict_loads(ref_out.read_text())
    assert list(artifact["maps"]) == list(KEPT)
    assert artifact["maps"] == ref["maps"] and artifact["cross_fit"] == ref["cross_fit"]
    cal = Calibrator.load(out)  # the artifact round-trips, skipped list included
    assert cal.skipped == artifact["skipped_predictors"]
    assert (
        strict_loads(run(["calibrate", handler_file, "-o", out, "--bootstrap", "100", "--json"], capsys))[
            "skipped_predictors"
        ]
        == artifact["skipped_predictors"]
    )


def test_plot_draws_the_usable_predictors(handler_file, tmp_path, capsys):
    out = tmp_path / "plots"
    text = run(["plot", handler_file, "-o", out, "--calibrate", "platt"], capsys)
    assert "Skipped predictors" in text
    data = strict_loads((out / "plot-data.json").read_text())
    _skipped_are_the_action_predictors(data["skipped_predictors"])
    assert [r["predictor"] for r in data["reliability"]] == list(KEPT)
    assert data["traces"]["predictor"] == "verbal"
    for name in ("reliability", "traces-verbal", "step-scores", *(f"calibration-{p}" for p in KEPT)):
        assert (out / f"{name}.png").stat().st_size > 1000
    # The step bars sum to the report's cen-simple TPS (log, linear-front), predictor by predictor.
    rep = strict_loads(run(["report", handler_file, "--json", "--bootstrap", "0", "--rules", "log"], capsys))
    rows = _rows(rep)
    for s in data["step_scores"]:
        assert s["tps"] == pytest.approx(rows[(s["predictor"], "log", "linear-front", "simple")]["mean"], abs=1e-12)


def test_censoring_checks_the_usable_predictors(handler_file, stripped_file, capsys):
    got = strict_loads(run(["censoring", handler_file, "--json", *BOOT], capsys))
    ref = strict_loads(run(["censoring", stripped_file, "--json", *BOOT], capsys))
    _skipped_are_the_action_predictors(got.pop("skipped_predictors"))
    assert ref.pop("skipped_predictors") == []
    assert got == ref
    assert {r["predictor"] for r in got["artificial"]} == set(KEPT)
    assert "Skipped predictors" in run(["censoring", handler_file, *BOOT], capsys)


def test_gate_default_predictor_skips_null_predictors_listed_first(handler_file, tmp_path, capsys):
    """The handler writes verbal first; a file whose first predictor is all null must still gate on verbal."""
    reordered = tmp_path / "action-first.jsonl"
    lines = []
    for line in handler_file.read_text().splitlines():
        obj = json.loads(line)
        for step in obj.get("steps", []):
            f = step["forecasts"]
            step["forecasts"] = {**{a: f[a] for a in ACTION_PREDICTORS}, **{k: f[k] for k in KEPT}}
        lines.append(json.dumps(obj))
    reordered.write_text("\n".join(lines) + "\n")
    args = ["--min", "-5", "--min-n", "5", "--bootstrap", "300", "--json"]
    got = strict_loads(run(["gate", reordered, *args], capsys))
    explicit = strict_loads(run(["gate", reordered, *args, "--predictor", "verbal"], capsys))
    # Only the action predictors (null by design for native tool calls) are passed over (issue 30).
    source = got["score"].pop("predictor_source")
    assert source == "the first predictor in the candidate's file" and explicit["score"].pop("predictor_source")
    assert got["score"] == explicit["score"] and got["score"]["predictor"] == "verbal"
    _skipped_are_the_action_predictors(got["skipped_predictors"])
    assert explicit["skipped_predictors"] == []
    assert sum("default predictor: skipped" in n for n in got["notes"]) == 2


def test_report_with_a_saved_calibrator_on_the_handler_file(handler_file, stripped_file, tmp_path, capsys):
    """`calibrate` then `report --calibrator`: the saved maps apply to the usable predictors; the null
    ones are skipped once (no data), exactly as on the stripped file."""
    cal = tmp_path / "cal.json"
    run(["calibrate", handler_file, "-o", cal, "--bootstrap", "100"], capsys)
    got = strict_loads(run(["report", handler_file, "--json", *BOOT, "--calibrator", cal], capsys))
    ref = strict_loads(run(["report", stripped_file, "--json", *BOOT, "--calibrator", cal], capsys))
    _skipped_are_the_action_predictors(got["skipped_predictors"])
    assert _rows(got) == _rows(ref) and got["recalibration"] == ref["recalibration"]
    assert {r["recalibrated"] for r in got["recalibration"]} == {p + "+platt" for p in KEPT}


def test_a_calibrator_without_a_map_for_a_predictor_notes_it(handler_file, tmp_path, capsys):
    cal = tmp_path / "verbal-only.json"
    run(["calibrate", handler_file, "-o", cal, "--bootstrap", "100", "--predictors", "verbal"], capsys)
    rep = strict_loads(run(["report", handler_file, "--json", "--bootstrap", "0", "--calibrator", cal], capsys))
    notes = {s["predictor"]: s["reason"] for s in rep["skipped_predictors"]}
    assert notes["token_prob"] == notes["entropy_conf"] == "not recalibrated: the calibrator has no map for it"
    assert {r["predictor"] for r in rep["recalibration"]} == {"verbal"}
    assert {r["predictor"] for r in rep["scores"]} == {
        "verbal",
        "verbal+platt",
        "token_prob",
        "entropy_conf",
        "base_rate",
    }
