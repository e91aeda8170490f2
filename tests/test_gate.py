"""The deployment gate on record sets with known answers, through the API and the real console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tps_tracer as tt
from tps_tracer.evaluation.gate import GateCriteria, GateInputError, evaluate_gate
from tps_tracer.records import StopReason, write_trajectories
from tps_tracer.synthetic import World, simulate_runs, to_records


def _cli():
    exe = shutil.which("tps-tracer", path=str(Path(sys.executable).parent))
    assert exe
    return exe


def gate(*args):
    return subprocess.run([_cli(), "gate", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def runs():
    return simulate_runs(600, seed=11)


def only(records, name, rename="p"):
    """Keep one forecaster's stream, renamed, so candidate and baseline look alike."""
    return [
        r.model_copy(
            update={"steps": [s.model_copy(update={"forecasts": {rename: s.forecasts[name]}}) for s in r.steps]}
        )
        for r in records
    ]


@pytest.fixture(scope="module")
def truthful(runs):
    return only(to_records(runs, ["truthful"]), "truthful")


@pytest.fixture(scope="module")
def overconfident(runs):
    return only(to_records(runs, ["overconfident"]), "overconfident")


@pytest.fixture(scope="module")
def files(tmp_path_factory, truthful, overconfident):
    d = tmp_path_factory.mktemp("gate")
    paths = {"truthful": d / "truthful.jsonl", "overconfident": d / "overconfident.jsonl"}
    write_trajectories(truthful, paths["truthful"])
    write_trajectories(overconfident, paths["overconfident"])
    return paths


def test_calibrated_passes_and_saturated_overconfident_fails_against_the_base_rate(files):
    # Non-inferiority with a 0.05 nats margin: the truthful stream is about as good as the base
    # rate on this world's weakly informative early steps; the saturated one is far worse.
    good = gate(str(files["truthful"]), "--vs-base-rate", "--margin", "0.05", "--bootstrap", "500", "--json")
    bad = gate(str(files["overconfident"]), "--vs-base-rate", "--margin", "0.05", "--bootstrap", "500", "--json")
    assert good.returncode == 0 and bad.returncode == 1, (good.stderr, bad.stderr)
    g, b = json.loads(good.stdout), json.loads(bad.stdout)
    assert g["verdict"] == "pass" and b["verdict"] == "fail"
    check = {c["name"]: c for c in b["checks"]}["vs_base_rate"]
    assert check["ci_high"] < 0 and check["flip_probability"] == 0.0  # clearly worse: a stable verdict


def test_gated_score_and_ci_equal_the_report(truthful):
    result = evaluate_gate(truthful, GateCriteria(min_score=-5.0, bootstrap=300, seed=4))
    rep = tt.evaluate(truthful, tt.ReportOptions(rules=["log"], bootstrap=300, seed=4))
    row = next(r for r in rep["scores"] if r["predictor"] == "p" and r["censoring"] == "simple")
    s = result["score"]
    assert s["n"] == row["n"]
    assert s["mean"] == pytest.approx(row["mean"], abs=1e-12)
    assert s["ci_low"] == pytest.approx(row["ci_low"], abs=1e-12) and s["ci_high"] == pytest.approx(
        row["ci_high"], abs=1e-12
    )
    delta = {c["name"]: c for c in evaluate_gate(truthful, GateCriteria(vs_base_rate=True, bootstrap=300))["checks"]}
    base = next(r for r in rep["scores"] if r["predictor"] == "base_rate" and r["censoring"] == "simple")
    # Every trajectory with a step has both scores, so the delta is the difference of the report's means.
    assert delta["vs_base_rate"]["estimate"] == pytest.approx(row["mean"] - base["mean"], abs=1e-12)


def test_flip_probability_is_a_coin_flip_at_the_threshold_and_zero_far_from_it(truthful):
    far = evaluate_gate(truthful, GateCriteria(min_score=-50.0, bootstrap=400))
    assert far["checks"][1]["flip_probability"] == 0.0 and far["verdict"] == "pass"
    lo = far["score"]["ci_low"]
    edge = evaluate_gate(truthful, GateCriteria(min_score=lo, bootstrap=400))
    assert edge["verdict"] == "pass"  # lo >= lo
    assert 0.35 < edge["checks"][1]["flip_probability"] < 0.65


def test_baseline_paired_by_task_and_unpaired_otherwise(truthful, overconfident, files, tmp_path):
    res = evaluate_gate(truthful, GateCriteria(bootstrap=400), baseline=overconfident)
    check = {c["name"]: c for c in res["checks"]}["vs_baseline"]
    a = tt.evaluate(truthful, tt.ReportOptions(rules=["log"], bootstrap=0))
    b = tt.evaluate(overconfident, tt.ReportOptions(rules=["log"], bootstrap=0))
    mean = lambda rep: next(r["mean"] for r in rep["scores"] if r["predictor"] == "p" and r["censoring"] == "simple")  # noqa: E731
    assert check["estimate"] == pytest.approx(mean(a) - mean(b), abs=1e-12)
    # No metadata.task_id in these runs: the trajectory ids paired them, and the detail says so.
    assert check["passed"] and "paired by trajectory id over" in check["detail"]
    assert "(no metadata.task_id)" in check["detail"] and "task id" not in check["detail"].replace("task_id", "")
    worse = evaluate_gate(overconfident, GateCriteria(bootstrap=400), baseline=truthful)
    assert worse["verdict"] == "fail"
    # Paired resampling is tighter than unpaired on the same data (the runs share tasks).
    shifted = [r.model_copy(update={"trajectory_id": "x" + r.trajectory_id}) for r in overconfident[:-1]]
    unpaired = {c["name"]: c for c in evaluate_gate(truthful, GateCriteria(bootstrap=400), baseline=shifted)["checks"]}
    assert "unpaired" in unpaired["vs_baseline"]["detail"]
    width = lambda c: c["ci_high"] - c["ci_low"]  # noqa: E731
    assert width(unpaired["vs_baseline"]) > width(check)
    proc = gate(
        str(files["overconfident"]), "--baseline", str(files["truthful"]), "--margin", "0.05", "--bootstrap", "300"
    )
    assert proc.returncode == 1 and "vs_baseline" in proc.stdout


def test_high_parse_error_share_fails_and_tiny_samples_are_unusable(tmp_path):
    world = World(parse_error_rate=0.08)
    recs = only(to_records(simulate_runs(300, seed=3, world=world), ["truthful"]), "truthful")
    share = sum(r.stop_reason is StopReason.PARSE_ERROR for r in recs) / len(recs)
    assert share > 0.1
    path = tmp_path / "errors.jsonl"
    write_trajectories(recs, path)
    proc = gate(str(path), "--vs-base-rate", "--max-excluded-share", "0.1", "--bootstrap", "200", "--json")
    assert proc.returncode == 1
    check = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}["excluded_share"]
    assert not check["passed"] and check["estimate"] == pytest.approx(
        sum(r.stop_reason not in (StopReason.CLEAN, StopReason.MAX_STEPS) for r in recs) / len(recs)
    )
    tiny = tmp_path / "tiny.jsonl"
    write_trajectories(recs[:12], tiny)
    proc = gate(str(tiny), "--min", "-10", "--bootstrap", "200")
    assert proc.returncode == 2 and "too small" in proc.stdout


def test_bad_input_and_missing_criteria_exit_2(files, tmp_path):
    assert gate(str(files["truthful"])).returncode == 2  # no criterion
    proc = gate(str(files["truthful"]), "--min", "0", "--predictor", "nope")
    assert proc.returncode == 2 and "--predictor: unknown predictor(s): nope; found: " in proc.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"trajectory_id": "a", "stop_reason": "clean"}\n')
    proc = gate(str(broken), "--min", "0")
    assert proc.returncode == 2 and "line 1" in proc.stderr
    with pytest.raises(GateInputError, match=r"GateCriteria\.censoring: must be one of"):
        evaluate_gate([], GateCriteria(min_score=0, censoring="both"))


def test_config_file_flags_override_and_markdown_summary(files, tmp_path):
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[gate]\nvs-base-rate = true\nmargin = 0.05\nmin = 100\nbootstrap = 300\nseed = 2\n")
    assert gate(str(files["truthful"]), "--config", str(cfg)).returncode == 1  # min = 100 is impossible
    md = tmp_path / "summary.md"
    proc = gate(str(files["truthful"]), "--config", str(cfg), "--min", "-5", "--markdown", str(md))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = md.read_text()
    assert text.startswith("## ✅ tps-tracer gate: PASS") and "| vs_base_rate | pass |" in text
    bad = tmp_path / "bad.toml"
    bad.write_text("[gate]\nminimum = 3\n")
    assert gate(str(files["truthful"]), "--config", str(bad)).returncode == 2


def test_deterministic_given_the_seed(files):
    args = (str(files["truthful"]), "--vs-base-rate", "--min", "-1", "--bootstrap", "300", "--seed", "9", "--json")
    assert gate(*args).stdout == gate(*args).stdout


def test_gate_on_an_accumulator_snapshot(truthful, tmp_path):
    acc = tt.Accumulator(predictors=["p"], rules=["log"], bootstrap=400)
    for rec in truthful:
        for s in rec.steps:
            acc.observe(rec.trajectory_id, s.forecasts)
        acc.stop(rec.trajectory_id, rec.stop_reason, rec.horizon)
        if rec.outcome is not None:
            acc.resolve(rec.trajectory_id, outcome=rec.outcome)
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(acc.snapshot()))
    proc = gate("--snapshot", str(snap), "--min", "-1", "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    row = next(r for r in acc.snapshot()["scores"] if r["predictor"] == "p" and r["censoring"] == "simple")
    assert res["score"]["ci_low"] == row["ci_low"]
    assert gate("--snapshot", str(snap), "--vs-base-rate").returncode == 2
    assert 0.0 <= res["checks"][-1]["flip_probability"] < 0.01


def test_budget_stops_alone_are_gated_on_their_censored_score_like_the_report(runs, tmp_path):
    """No complete run yet: the cen-simple score is defined (as in the report), the base rate is not."""
    recs = [r for r in only(to_records(runs, ["truthful"]), "truthful") if r.stop_reason == StopReason.MAX_STEPS]
    assert len(recs) >= 30
    report = tt.evaluate(recs, tt.ReportOptions(rules=["log"], bootstrap=0))
    row = next(r for r in report["scores"] if r["predictor"] == "p" and r["censoring"] == "simple")
    res = evaluate_gate(recs, GateCriteria(min_score=row["mean"] - 1.0, bootstrap=300))
    assert res["verdict"] == "pass" and res["score"]["n"] == len(recs) == row["n"]
    assert res["score"]["mean"] == pytest.approx(row["mean"], rel=1e-12)
    with pytest.raises(GateInputError, match="no base rate to compare with"):
        evaluate_gate(recs, GateCriteria(vs_base_rate=True, bootstrap=300))
