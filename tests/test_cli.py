"""The real console script, in a subprocess: exit codes, JSON schema, text sections."""

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tps_tracer.records import read_trajectories, to_arrays, write_trajectories
from tps_tracer.synthetic import example_records

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "trajectories.jsonl"


def _cli():
    exe = shutil.which("tps-tracer", path=str(Path(sys.executable).parent))
    assert exe, "console script 'tps-tracer' is not installed in this environment"
    return exe


def run(*args):
    return subprocess.run([_cli(), *args], capture_output=True, text=True, timeout=120)


def test_example_file_is_the_generator_output(tmp_path):
    fresh = tmp_path / "fresh.jsonl"
    write_trajectories(example_records(), fresh)
    assert fresh.read_text() == EXAMPLE.read_text(), "regenerate examples/trajectories.jsonl"


def test_report_json_schema_and_values():
    args = ("report", str(EXAMPLE), "--json", "--bootstrap", "200", "--seed", "3")
    args += ("--rules", "log,brier,beta(2,4)", "--weights", "linear-front,uniform")
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    audit = rep["audit"]
    assert sum(audit["stop_reasons"].values()) == audit["n_trajectories"] == 400
    assert audit["roles"]["complete"] == audit["stop_reasons"]["clean"]
    assert audit["roles"]["censored"] == audit["stop_reasons"]["max_steps"]
    keys = {"predictor", "rule", "weights", "censoring", "n", "mean", "se", "ci_low", "ci_high"}
    for row in rep["scores"]:
        assert keys <= row.keys()
        assert row["ci_low"] <= row["mean"] <= row["ci_high"]
    assert {r["censoring"] for r in rep["scores"]} == {"complete-only", "simple", "exact"}
    assert {r["rule"] for r in rep["scores"]} == {"log", "brier", "beta(2,4)"}
    assert {r["weights"] for r in rep["scores"]} == {"linear-front", "uniform"}
    for row in rep["diagnostics"]:
        assert {"predictor", "n", "auroc", "auprc", "aurc", "t_ece", "t_brier"} <= row.keys()
    # The truthful stream beats its distortions under every proper rule (complete-only).
    means = {
        (r["predictor"], r["rule"]): r["mean"]
        for r in rep["scores"]
        if r["censoring"] == "complete-only" and r["weights"] == "linear-front"
    }
    for rule in ("log", "brier", "beta(2,4)"):
        for other in ("overconfident", "underconfident", "noisy", "base_rate"):
            assert means[("truthful", rule)] > means[(other, rule)]
    # Deterministic given the seed.
    again = run(*args)
    assert again.stdout == proc.stdout


def test_report_text_has_every_section():
    proc = run("report", str(EXAMPLE), "--bootstrap", "50")
    assert proc.returncode == 0, proc.stderr
    for heading in (
        "Termination audit",
        "TPS, mean",
        "Delta_practice",
        "Diagnostics",
        "Scalar AUQ",
        "Disclosure",
        "How to read this report",
    ):
        assert heading in proc.stdout


def test_treat_as_censored_moves_parse_errors_into_the_working_sample():
    base = json.loads(run("report", str(EXAMPLE), "--json", "--bootstrap", "0").stdout)
    sens = json.loads(
        run(
            "report",
            str(EXAMPLE),
            "--json",
            "--bootstrap",
            "0",
            "--treat-as-censored",
            "parse_error",
        ).stdout
    )
    n_parse = base["audit"]["stop_reasons"]["parse_error"]
    assert n_parse > 0
    assert sens["audit"]["roles"]["censored"] == base["audit"]["roles"]["censored"] + n_parse
    assert sens["audit"]["default_policy"] is False


@pytest.mark.parametrize(
    "content, expect",
    [
        ("", "no trajectories"),
        ('{"trajectory_id": "a", "stop_reason": "clean", "steps": []}\n', "needs an outcome"),
        (
            '{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"v": 2}}]}\n',
            "outside [0, 1]",
        ),
        (
            '{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"v": NaN}}]}\n',
            "NaN",
        ),
        ('{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "ste', "truncated"),
        (  # budget stops alone are scored (cen-simple); only excluded stops leave nothing to score
            '{"trajectory_id": "a", "stop_reason": "tool_error", "steps": [{"forecasts": {"v": 0.2}}]}\n',
            "no complete trajectory",
        ),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(tmp_path, content, expect):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    proc = run("report", str(p))
    assert proc.returncode == 2
    assert expect in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--rules", "logg"],
        ["--weights", "backwards"],
        ["--predictors", "nope"],
        ["--treat-as-censored", "sunspots"],
        ["--bootstrap", "-1"],
    ],
)
def test_bad_options_exit_2(args):
    proc = run("report", str(EXAMPLE), *args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_gate_refuses_an_unknown_censored_reason_as_a_user_error(tmp_path):
    """Was an internal error (exit 3, "'sunspots' is not a valid StopReason"): flag and config alike."""
    config = tmp_path / "gate.toml"
    config.write_text('[gate]\ntreat_as_censored = "parse_error, sunspots"\n')
    for args in (["--treat-as-censored", "sunspots"], ["--config", str(config)]):
        proc = run("gate", str(EXAMPLE), "--min", "-5", *args)
        assert proc.returncode == 2, proc.stderr
        assert "--treat-as-censored: unknown stop reason(s) sunspots (known: clean, max_steps," in proc.stderr


def test_demo_runs_end_to_end(tmp_path):
    """The main job: real LangGraph runs with the handler, records, report, the two findings."""
    proc = run("demo", "--out", str(tmp_path), "--tasks", "80", "--bootstrap", "200")
    assert proc.returncode == 0, proc.stderr
    assert "TPS report" in proc.stdout and "Finding 1" in proc.stdout and "Finding 2" in proc.stdout
    for name in ("truthful", "overconfident", "overconfident+platt"):
        assert len(read_trajectories(tmp_path / f"{name}.jsonl")) == 80
    # The Platt file scores like any record file, through the real console script.
    assert run("report", str(tmp_path / "overconfident+platt.jsonl"), "--bootstrap", "50").returncode == 0


def test_demo_json_findings_match_an_independent_computation(tmp_path):
    """Finding 1 re-derived from the written files: TPS_log moves by far more SEs than AUROC."""
    proc = run("demo", "--out", str(tmp_path), "--tasks", "120", "--bootstrap", "300", "--json")
    assert proc.returncode == 0, proc.stderr
    f = json.loads(proc.stdout)
    records = read_trajectories(tmp_path / "overconfident+platt.jsonl")
    arrays = to_arrays(records)
    from tps_tracer.constants import SIMPLE
    from tps_tracer.evaluation.pairs import score_matrix
    from tps_tracer.scoring import parse_rules, parse_schedules

    sm = score_matrix(
        arrays, ["verbal", "verbal+platt"], parse_rules("log"), parse_schedules("linear-front"), modes=(SIMPLE,)
    )
    raw, cal = (float(np.nanmean(c)) for c in sm.columns)
    tps = f["recalibration"]["tps_log"]
    assert (tps["a"], tps["b"]) == pytest.approx((raw, cal), abs=1e-12)
    assert tps["delta"] > 0 and tps["z"] > 5  # the saturated stream gains a lot from recalibration
    assert abs(f["recalibration"]["auroc"]["z"]) < 3  # while its ranking barely moves
    stops = Counter(r.stop_reason.value for r in records)
    assert f["censoring"]["n_censored"] == stops["max_steps"] > 0


def test_report_on_an_accumulator_sink_reproduces_the_snapshot(tmp_path):
    """The sink (records, pending outcomes, resolution lines) read by the real console script."""
    from tps_tracer.online import Accumulator

    sink = tmp_path / "sink.jsonl"
    acc = Accumulator(sink=sink, bootstrap=100, seed=5)
    records = example_records()[:150]
    for rec in records:
        for step in rec.steps:
            acc.observe(rec.trajectory_id, step.forecasts)
        acc.stop(rec.trajectory_id, rec.stop_reason, rec.horizon)
        if rec.q_z is not None:
            acc.resolve(rec.trajectory_id, q_z=rec.q_z)
    for rec in records[:-10]:  # the last ten grades have not arrived yet
        if rec.outcome is not None:
            acc.resolve(rec.trajectory_id, outcome=rec.outcome)
    snap = acc.snapshot()
    acc.close()
    proc = run("report", str(sink), "--json", "--bootstrap", "100", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    pending = sum(r.stop_reason == "clean" for r in records[-10:])
    assert rep["audit"]["pending_outcome"] == snap["audit"]["pending_outcome"] == pending > 0
    assert rep["audit"] == snap["audit"]
    online = {(r["predictor"], r["rule"], r["weights"], r["censoring"]): r for r in snap["scores"]}
    for row in rep["scores"]:
        other = online[(row["predictor"], row["rule"], row["weights"], row["censoring"])]
        assert row["n"] == other["n"]
        for key in ("mean", "ci_low", "ci_high"):
            assert row[key] == pytest.approx(other[key], abs=1e-12)
    text = run("report", str(sink), "--bootstrap", "0")
    assert f"waiting for their outcome (not scored): {pending}" in text.stdout


def test_a_cut_string_says_at_once(tmp_path):
    """json's "Unterminated string starting at" already ends in "at": the message said "at at column"."""
    p = tmp_path / "cut.jsonl"
    p.write_text('{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"v')
    proc = run("report", str(p))
    assert proc.returncode == 2
    assert "Unterminated string starting at column 87" in proc.stderr, proc.stderr
    assert "at at" not in proc.stderr


@pytest.mark.parametrize("command", [["report"], ["gate", "--min", "-5"], ["plot", "-o", "plots"]])
def test_an_empty_parquet_file_says_it_holds_no_trajectories(tmp_path, command):
    """A valid Parquet file with the records' schema and 0 rows: its whole-file read went to the JSON
    Lines reader, which said "not UTF-8 text (invalid start byte)"."""
    from tps_tracer.records.convert import jsonl_to_parquet

    src, full, empty = tmp_path / "one.jsonl", tmp_path / "one.parquet", tmp_path / "empty.parquet"
    record = {"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"v": 0.5}}]}
    src.write_text(json.dumps(record) + "\n")
    jsonl_to_parquet(src, full)
    import pyarrow.parquet as pq

    table = pq.read_table(full)
    pq.write_table(table.slice(0, 0), empty)
    argv = [command[0], str(empty), *command[1:]]
    if command[0] == "plot":
        argv[-1] = str(tmp_path / "plots")
    proc = run(*argv)
    assert proc.returncode == 2, proc.stderr
    assert "empty.parquet: the file holds no trajectories" in proc.stderr, proc.stderr
