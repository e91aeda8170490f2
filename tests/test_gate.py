"""The deployment gate on record sets with known answers, through the API and the real console script.

The gate says what it left out: runs without a forecast of the gated predictor, clean runs
waiting for an outcome, the runs its censoring mode drops, and the replicates behind the interval,
in text, Markdown and JSON, on both routes (records and snapshot); a large skipped share is refused.

The coverage tests' files are written by hand with one step per run, so every expected number is computed here
from the rows themselves: a one-step run's log score is log p if it succeeded, log(1 - p) if it
failed or (cen-simple, q_Z ~ 0) was stopped by the step budget.

The gate shows what its readers set aside (records/limits.py): re-runs appended to the file, an
empty shard of a directory. The counts are those of the exact reader (`exact_records`), in every output
form (`--json` `input.set_aside`, text, `--markdown`) and on `--snapshot`; the verdict and the score are
those of the same file without the set-aside lines.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import call
from scale_support import assert_reports_equal, trajectory_dicts

import tps_tracer as tt
from tps_tracer.cli.main import main
from tps_tracer.evaluation.gate import GateCriteria, GateInputError, evaluate_gate, gate_paths
from tps_tracer.records import StopReason, write_trajectories
from tps_tracer.records.reading import exact_records
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
    assert "(task ids, where given, equal them)" in check["detail"]
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


def test_pairing_is_decided_by_the_task_overlap_never_by_min_n(truthful, overconfident):
    """Issue 47: with min_n 100 and 98 common scored tasks the comparison went unpaired and its standard
    error doubled. The overlap (98 of the smaller side's scored tasks, >= PAIRING_OVERLAP) decides now;
    min_n still gates each side's sample size on its own."""
    crit = GateCriteria(bootstrap=400, min_n=100)
    scored = [r for r in truthful if r.stop_reason in ("clean", "max_steps")]
    ids = [r.trajectory_id for r in scored[:130]]
    cand = [r for r in truthful if r.trajectory_id in set(ids)]
    base_shared = [r for r in overconfident if r.trajectory_id in set(ids[:98])]
    extra = [r.model_copy(update={"trajectory_id": "x" + r.trajectory_id}) for r in overconfident[-40:]]
    res = evaluate_gate(cand, crit, baseline=base_shared + extra)
    cmp = res["comparison"]
    assert cmp["common_tasks"] == 98 and cmp["paired"], cmp["how"]
    assert {c["name"]: c["passed"] for c in res["checks"]}["sample_size"]  # both sides >= 100 scored runs
    # Pairing removes the between-task variance: the same comparison unpaired (no common ids) is wider.
    width = lambda r: (lambda c: c["ci_high"] - c["ci_low"])({c["name"]: c for c in r["checks"]}["vs_baseline"])  # noqa: E731
    apart = [r.model_copy(update={"trajectory_id": "y" + r.trajectory_id}) for r in base_shared]
    unpaired = evaluate_gate(cand, crit, baseline=apart + extra)
    assert not unpaired["comparison"]["paired"] and "no common task ids" in unpaired["comparison"]["how"]
    assert width(unpaired) > width(res)
    # A small overlap (10 of 130) is compared unpaired, and the gate says why.
    few = [r for r in overconfident if r.trajectory_id in set(ids[:10])] + extra
    small = evaluate_gate(cand, GateCriteria(bootstrap=400, min_n=30), baseline=few)
    assert (
        not small["comparison"]["paired"]
        and "only 10 common tasks of 46 (< 50% of the smaller side)" in small["comparison"]["how"]
    )


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


def _run(i: str, stop: str, outcome: int | None, p: float | None, q_z: float | None = None) -> dict[str, Any]:
    steps = [] if p == -1 else [{"t": 1, "forecasts": {"verbal": p}}]
    return {"trajectory_id": i, "stop_reason": stop, "outcome": outcome, "q_z": q_z, "steps": steps}


# The skip checks below run under drop-run, the policy that still skips runs with a gap (skip-renormalise
# skips the runs without any statement); the proper default scores them (test_silent_runs_are_scored_...).
DROP = ("--missing", "drop-run")


def _subset_rows(with_q_z: int = 0) -> list[dict[str, Any]]:
    """60 clean runs and 20 budget stops with a forecast (the first `with_q_z` carrying q_z), 30 clean
    failures whose step has none, 5 clean runs without steps, 10 parse errors (outside the working sample)."""
    rows = [_run(f"c{i}", "clean", i % 2, 0.3 + 0.05 * (i % 9)) for i in range(60)]
    rows += [_run(f"b{i}", "max_steps", None, 0.4 + 0.05 * (i % 5), 0.3 if i < with_q_z else None) for i in range(20)]
    rows += [_run(f"m{i}", "clean", 0, None) for i in range(30)]
    rows += [_run(f"e{i}", "clean", 1, -1) for i in range(5)]
    rows += [_run(f"x{i}", "parse_error", None, 0.5) for i in range(10)]
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _one_step_score(r: dict[str, Any]) -> float:
    p = r["steps"][0]["forecasts"]["verbal"]
    return math.log(p) if r["outcome"] == 1 else math.log(1 - p)


def _gate(path: Path, capsys: Any, *flags: str) -> tuple[int, dict[str, Any], str, str]:
    """(exit code, --json result, text output, Markdown) of one gate call per form."""
    code, out, err = call(["gate", str(path), *flags, "--json"], capsys)
    assert code in (0, 1, 2), err
    text_code, text, _ = call(["gate", str(path), *flags], capsys)
    md = path.with_suffix(".md")
    md.unlink(missing_ok=True)
    md_code, _, _ = call(["gate", str(path), *flags, "--markdown", str(md)], capsys)
    assert code == text_code == md_code
    return code, json.loads(out), text, md.read_text()


def test_a_large_skipped_share_is_counted_and_refused(tmp_path, capsys):
    rows = _subset_rows()
    path = _write(tmp_path / "cand.jsonl", rows)
    scored = [r for r in rows if r["stop_reason"] in ("clean", "max_steps") and r["steps"]]
    scored = [r for r in scored if r["steps"][0]["forecasts"]["verbal"] is not None]
    working = sum(r["stop_reason"] in ("clean", "max_steps") for r in rows)
    n_cens = sum(r["stop_reason"] == "max_steps" for r in scored)
    assert (len(scored), working, n_cens) == (80, 115, 20)

    code, res, text, md = _gate(path, capsys, "--predictor", "verbal", "--vs-base-rate", "--bootstrap", "300", *DROP)
    cov = res["coverage"]
    assert cov["working_sample"] == working and cov["gated"] == res["score"]["n"] == len(scored)
    assert cov["skipped"] == {"missing": 30, "no_steps": 5}
    assert cov["skipped_share"] == pytest.approx(35 / 115)
    assert cov["pending_outcome"] == 0 and cov["replicates"] == 300
    assert cov["censored_gated"] == n_cens and cov["censoring_rate_gated"] == pytest.approx(20 / 80)
    # The gated mean is the mean over exactly the runs with a forecast (budget stops as failures).
    expected = sum(_one_step_score({**r, "outcome": r["outcome"] or 0}) for r in scored) / len(scored)
    assert res["score"]["mean"] == pytest.approx(expected, rel=1e-12)
    # 30% of the working sample unscored: refused (exit 2), like capture loss, and said in every form.
    assert code == 2 and res["verdict"] == "unusable" and res["failed_checks"] == ["skipped_share"]
    assert res["reasons"][0].startswith(
        "skipped_share: 35 of 115 working-sample runs have no verbal forecast to score (missing 30, no_steps 5)"
    )
    line = "scored 80 of 115 working-sample runs; no verbal forecast: 35 (missing 30, no_steps 5)"
    for out in (text, md):
        assert line in " ".join(out.split()) and "CI from 300 bootstrap replicates" in " ".join(out.split())
        assert "--max-skipped-share >= 0.304" in " ".join(out.split())
    # The censoring warning quotes the rate among the 80 gated runs (25%), not the sample's 20/115
    # (17.4%, under the 20% threshold: the old gate said nothing at all).
    assert any(w.startswith("censoring rate 25.0% among the 80 gated runs (20 stopped") for w in res["warnings"])

    code, res, text, _ = _gate(
        path, capsys, "--vs-base-rate", "--max-skipped-share", "0.5", "--bootstrap", "300", *DROP
    )
    assert code in (0, 1) and res["verdict"] in ("pass", "fail")
    skip_check = next(c for c in res["checks"] if c["name"] == "skipped_share")
    assert skip_check["passed"] and skip_check["threshold"] == 0.5
    assert "35 of 115 working-sample runs (30.4%) are not scored: no verbal forecast" in " ".join(res["warnings"])
    assert "warning: 35 of 115 working-sample runs (30.4%) are not scored" in " ".join(text.split())


def test_report_table_and_gate_count_one_denominator_in_the_same_words(tmp_path, capsys):
    """Issue 47 item 5: the report said "90 usable" (the 10 parse errors' forecasts counted too), its
    table n = 80 and the gate "gated 80 of 115": three counts for one fact. Now each says "scored 80 of
    115 working-sample runs", and the table's column is named `scored`."""
    rows = _subset_rows()
    path = _write(tmp_path / "cand.jsonl", rows)
    working = [r for r in rows if r["stop_reason"] in ("clean", "max_steps")]
    scored = [r for r in working if r["steps"] and r["steps"][0]["forecasts"]["verbal"] is not None]
    fact = f"scored {len(scored)} of {len(working)} working-sample runs"
    assert fact == "scored 80 of 115 working-sample runs"
    code, report, err = call(["report", str(path), "--bootstrap", "100", "--rules", "log", *DROP], capsys)
    assert code == 0, err
    flat = " ".join(report.split())
    assert f"verbal: {fact}, 35 not (reasons over all 125 runs in the file: missing 30, no_steps 5)" in flat
    assert "usable" not in flat
    table = report.split("TPS, mean")[1].split("\n\n")[0].splitlines()
    header = table[1].split()
    assert header[-1] == "scored"
    simple = next(line.split() for line in table if line.split()[:2] == ["verbal", "cen-simple"])
    assert simple[-1] == str(len(scored))
    _, res, text, md = _gate(path, capsys, "--min", "-5", "--max-skipped-share", "0.5", "--bootstrap", "100", *DROP)
    assert res["score"]["n"] == res["coverage"]["gated"] == len(scored)
    for out in (text, md):
        assert f"coverage: {fact};" in " ".join(out.split()) and f"over {len(scored)} scored runs" in out


def test_silent_runs_are_scored_by_the_proper_default_not_dropped(tmp_path, capsys):
    """Issue 47 item 3: the 30 failures that never state a forecast were dropped (the gate then refused
    the sample, exit 2, and the score covered only the runs the agent spoke on). Under carry-forward
    each forecasts 0.5 (log 0.5 for a failure), so silence costs what it should and nothing is refused."""
    rows = _subset_rows()
    path = _write(tmp_path / "cand.jsonl", rows)
    code, res, text, _ = _gate(path, capsys, "--predictor", "verbal", "--min", "-5", "--bootstrap", "300")
    cov = res["coverage"]
    assert code == 0 and cov["skipped"] == {"no_steps": 5} and cov["gated"] == res["score"]["n"] == 110
    scored = [r for r in rows if r["stop_reason"] in ("clean", "max_steps") and r["steps"]]
    filled = [
        _one_step_score({**r, "outcome": r["outcome"] or 0})
        if r["steps"][0]["forecasts"]["verbal"] is not None
        else math.log(0.5)
        for r in scored
    ]
    assert res["score"]["mean"] == pytest.approx(sum(filled) / len(filled), rel=1e-12)
    gaps = cov["missing_forecasts"]
    assert (gaps["policy"], gaps["missing_steps"], gaps["steps"], gaps["runs_affected"], gaps["runs"]) == (
        "carry-forward",
        30,
        110,
        30,
        110,
    )
    assert gaps["success_rate_affected"] == 0.0 and gaps["success_rate_unaffected"] == pytest.approx(30 / 60)
    assert gaps["cost"] == 0.0  # no run has a statement to renormalise from: the estimate cannot be formed
    line = "steps without a verbal forecast: 30 of 110 (27.3%), in 30 of 110 runs (27.3%, 30 of them without any)"
    assert line in " ".join(text.split())


def test_a_small_skipped_share_is_gated_with_the_count_shown(tmp_path, capsys):
    rows = [r for r in _subset_rows() if not r["trajectory_id"].startswith("m")][:-10]  # 5 no_steps of 85
    rows += [_run("m0", "clean", 0, None), _run("m1", "clean", 0, None)]
    path = _write(tmp_path / "few.jsonl", rows)
    code, res, text, md = _gate(path, capsys, "--min", "-5", "--bootstrap", "200", *DROP)
    assert code == 0 and res["coverage"]["skipped"] == {"missing": 2, "no_steps": 5}
    assert res["coverage"]["skipped_share"] == pytest.approx(7 / 87)  # below 10%: counted, not warned
    assert not any("are not scored" in w for w in res["warnings"])
    assert "no verbal forecast: 7 (missing 2, no_steps 5)" in " ".join(text.split())
    assert "no verbal forecast: 7 (missing 2, no_steps 5)" in " ".join(md.split())


def test_runs_dropped_by_cen_exact_are_counted_apart(tmp_path, capsys):
    rows = _subset_rows(with_q_z=8)
    path = _write(tmp_path / "cand.jsonl", rows)
    _, res, _, _ = _gate(
        path, capsys, "--min", "-5", "--censoring", "exact", "--max-skipped-share", "1", "--bootstrap", "200", *DROP
    )
    cov = res["coverage"]
    without_q_z = sum(r["stop_reason"] == "max_steps" and r["q_z"] is None for r in rows)
    assert cov["dropped_by_censoring_mode"] == without_q_z == 12
    assert cov["working_sample"] == cov["gated"] + sum(cov["skipped"].values()) + cov["dropped_by_censoring_mode"]
    assert cov["gated"] == res["score"]["n"] == 60 + 8


def test_clean_runs_waiting_for_an_outcome_are_shown(tmp_path, capsys):
    rows = [_run(f"c{i}", "clean", i % 2, 0.6 if i % 2 else 0.4) for i in range(40)]
    rows += [{**_run(f"p{i}", "clean", None, 0.5), "outcome_pending": True} for i in range(30)]
    path = _write(tmp_path / "pend.jsonl", rows)
    code, res, text, md = _gate(path, capsys, "--vs-base-rate", "--bootstrap", "200")
    assert code == 0 and res["coverage"]["pending_outcome"] == 30 and res["score"]["n"] == 40
    assert res["coverage"]["skipped"] == {}  # pending runs are outside the working sample, not skipped
    warning = "30 of 70 clean runs (42.9%) still wait for their outcome and are not scored"
    assert any(w.startswith(warning) for w in res["warnings"])
    for out in (text, md):
        flat = " ".join(out.split())
        assert "scored 40 of 40 working-sample runs" in flat and "clean runs waiting for an outcome: 30" in flat
        assert warning in flat


def test_the_snapshot_route_says_its_replicates_and_what_it_left_out(tmp_path, capsys):
    path = _write(tmp_path / "cand.jsonl", _subset_rows())
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "250", "--rules", "log", *DROP], capsys)
    assert code == 0, err
    snap = tmp_path / "snapshot.json"
    snap.write_text(out)
    flags = ("--min", "-5", "--max-skipped-share", "0.5", *DROP)
    _, on_records, _, _ = _gate(path, capsys, *flags, "--bootstrap", "400")
    code, out, err = call(["gate", "--snapshot", str(snap), *flags, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    cov, rec = res["coverage"], on_records["coverage"]
    assert rec["replicates"] == 400 and cov["replicates"] == 250
    for key in ("working_sample", "gated", "skipped_share", "censored_gated", "censoring_rate_gated"):
        assert cov[key] == rec[key], key
    assert cov["skipped"] == {"unscored": 35}  # the report splits reasons over the whole file only
    assert cov["skip_reasons_in_file"] == {"missing": 30, "no_steps": 5}
    assert (
        "the interval rests on the snapshot's 250 bootstrap replicates (seed 0); gating the records draws 2000 "
        "(--bootstrap 250 --seed 0 on the records gives this interval)"
    ) in res["notes"]
    _, same, _, _ = _gate(path, capsys, *flags, "--bootstrap", "250", "--seed", "0")
    for bound in ("ci_low", "ci_high"):  # the same interval, to the last bits of the summation order
        assert same["score"][bound] == pytest.approx(res["score"][bound], rel=1e-12, abs=0)
    assert on_records["score"]["ci_low"] != res["score"]["ci_low"]  # 400 replicates: another interval
    code, text, _ = call(["gate", "--snapshot", str(snap), *flags], capsys)
    assert code == 0
    assert "CI from 250 bootstrap replicates (the snapshot's)" in " ".join(text.split())
    code, _, _ = call(["gate", "--snapshot", str(snap), "--min", "-5"], capsys)
    assert code == 2  # 35 of 115 skipped: refused on this route too


def test_max_skipped_share_is_checked_by_flag(tmp_path, capsys):
    path = _write(tmp_path / "cand.jsonl", _subset_rows())
    code, _, err = call(["gate", str(path), "--min", "-5", "--max-skipped-share", "1.5"], capsys)
    assert code == 2 and "--max-skipped-share: is a share: must lie in [0, 1], got 1.5" in err


def test_a_baseline_is_held_to_the_same_skipped_limit(tmp_path, capsys):
    base = _write(tmp_path / "base.jsonl", _subset_rows())
    cand = _write(tmp_path / "cand.jsonl", [r for r in _subset_rows() if r["trajectory_id"][0] not in "me"])
    code, out, err = call(["gate", str(cand), "--baseline", str(base), "--bootstrap", "200", "--json", *DROP], capsys)
    res = json.loads(out)
    assert code == 2 and res["failed_checks"] == ["skipped_share"], err
    assert res["coverage"]["skipped"] == {} and res["comparison"]["baseline_coverage"]["skipped"] == {
        "missing": 30,
        "no_steps": 5,
    }
    assert res["reasons"] == [
        "skipped_share: baseline: 35 of 115 working-sample runs have no verbal forecast to score (missing 30, "
        "no_steps 5); the gate refuses to judge the rest alone (exit 2) unless --max-skipped-share >= 0.304"
    ]


def test_every_gate_row_says_which_side_it_is(tmp_path, capsys):
    """Issue 47 item 5: with a baseline, both sides have a skipped_share (and capture_loss) row, and the
    table showed two rows named skipped_share with nothing to tell them apart."""
    base = _write(tmp_path / "base.jsonl", _subset_rows())
    cand = _write(tmp_path / "cand.jsonl", _subset_rows())
    flags = ("--baseline", str(base), "--max-skipped-share", "0.1", "--bootstrap", "200", *DROP)
    _, res, text, md = _gate(cand, capsys, *flags)
    sides = [(c["name"], c["side"]) for c in res["checks"]]
    assert sides == [
        ("sample_size", "candidate"),
        ("skipped_share", "candidate"),
        ("baseline_size", "baseline"),
        ("skipped_share", "baseline"),
        ("vs_baseline", "both"),
    ]
    rows = [line.split() for line in text.splitlines() if line.startswith("    ") and line.split()[0] in dict(sides)]
    assert [r[:2] for r in rows if r[0] == "skipped_share"] == [
        ["skipped_share", "candidate"],
        ["skipped_share", "baseline"],
    ]
    assert "failed: skipped_share (candidate), skipped_share (baseline)" in text
    assert "| skipped_share | baseline | FAIL |" in md and "| skipped_share | candidate | FAIL |" in md
    flat = " ".join(text.split())
    for side in ("candidate", "baseline"):  # each side's coverage, labelled
        assert f"coverage ({side}): scored 80 of 115 working-sample runs" in flat


def test_a_live_accumulator_snapshot_gets_the_records_coverage(tmp_path, capsys):
    """The same runs observed by a real Accumulator and written to a file: the snapshot route
    counts what the records route counts (its replicates its own)."""
    from tps_tracer import Accumulator

    rows = _subset_rows()
    acc = Accumulator(rules=["log"], bootstrap=300, missing="drop-run")
    for r in rows:
        for step in r["steps"]:
            acc.observe(r["trajectory_id"], step["forecasts"])
        acc.stop(r["trajectory_id"], r["stop_reason"], q_z=r["q_z"], outcome=r["outcome"])
    snap = tmp_path / "live.json"
    snap.write_text(json.dumps(acc.snapshot()))
    acc.close()
    flags = ["--min", "-5", "--max-skipped-share", "0.5", "--json", *DROP]
    code, out, err = call(["gate", "--snapshot", str(snap), *flags], capsys)
    assert code == 0, err
    live = json.loads(out)["coverage"]
    code, out, err = call(["gate", str(_write(tmp_path / "same.jsonl", rows)), *flags], capsys)
    on_records = json.loads(out)["coverage"]
    assert live["replicates"] == 300 and on_records["replicates"] == 2000
    for key in ("working_sample", "gated", "skipped_share", "censored_gated", "pending_outcome"):
        assert live[key] == on_records[key], key
    assert sum(live["skipped"].values()) == sum(on_records["skipped"].values()) == 35


def test_max_skipped_share_comes_from_the_config_file_too(tmp_path, capsys):
    path = _write(tmp_path / "cand.jsonl", _subset_rows())
    config = tmp_path / "gate.toml"
    config.write_text('[gate]\nmin = -5.0\nmax-skipped-share = 0.35\nbootstrap = 200\nmissing = "drop-run"\n')
    code, out, err = call(["gate", str(path), "--config", str(config), "--json"], capsys)
    check = next(c for c in json.loads(out)["checks"] if c["name"] == "skipped_share")
    assert code == 0 and check["passed"] and check["threshold"] == 0.35, err
    code, _, _ = call(["gate", str(path), "--config", str(config), "--max-skipped-share", "0.3"], capsys)
    assert code == 2  # the flag wins over the file: 35/115 = 0.304 > 0.3


CRIT = GateCriteria(min_score=-5.0, bootstrap=200, max_skipped_share=1.0)
ARGS = ["--min", "-5", "--bootstrap", "200", "--max-skipped-share", "1"]
CHUNK = 3_000  # bytes: many chunks, so the chunked read meets the repeats and falls back to the exact read


@pytest.fixture
def reruns(tmp_path: Path) -> tuple[Path, Path]:
    """(a file with 3 re-runs appended: the same ids with other steps and outcomes, the file without them)."""
    records = trajectory_dicts(150, seed=4)
    rerun = []
    for i in (9, 40, 41):
        again = json.loads(json.dumps(records[i]))
        again["steps"] = again["steps"][:1]
        again["stop_reason"], again["outcome"] = "clean", 1 - int(records[i].get("outcome") or 0)
        rerun.append(again)
    return _write(tmp_path / "sink.jsonl", records + rerun), _write(tmp_path / "clean.jsonl", records)


def _without_input(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "input"}


def _run_main(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().out


def test_gate_json_counts_the_reruns_and_judges_the_file_without_them(reruns):
    sink, clean = reruns
    expected = exact_records(sink).set_aside.as_dict()
    assert expected["duplicate_id"]["count"] == 3 and list(expected) == ["duplicate_id"]
    reference = gate_paths(clean, CRIT)
    assert "input" not in reference  # a clean file's result is unchanged
    for chunk_bytes in (CHUNK, 32 << 20):
        got = gate_paths(sink, CRIT, chunk_bytes=chunk_bytes)
        assert got["input"] == {"set_aside": expected}
        assert got["verdict"] == reference["verdict"] and got["verdict"] != "unusable"
        assert_reports_equal(_without_input(got), reference)


def test_gate_text_markdown_and_json_show_one_set_aside_line(reruns, tmp_path, capsys):
    sink, clean = reruns
    first = exact_records(sink).set_aside.as_dict()["duplicate_id"]["first"]
    line = f"set aside (not scored): duplicate_id 3 (first: {first})"
    md = tmp_path / "summary.md"
    code, text = _run_main(capsys, ["gate", str(sink), *ARGS, "--markdown", str(md)])
    clean_code, clean_text = _run_main(capsys, ["gate", str(clean), *ARGS])
    assert code == clean_code
    assert line in " ".join(text.split())  # the terminal wraps long lines
    assert "set aside" not in clean_text
    assert f"- {line}" in md.read_text(encoding="utf-8")
    code, out = _run_main(capsys, ["gate", str(sink), *ARGS, "--json"])
    assert json.loads(out)["input"]["set_aside"]["duplicate_id"] == {"count": 3, "first": first}


def _snapshot(capsys: pytest.CaptureFixture[str], records: Path, to: Path) -> Path:
    _, report = _run_main(capsys, ["report", str(records), "--json", "--bootstrap", "200"])
    to.write_text(report, encoding="utf-8")
    return to


def test_snapshot_gate_takes_the_reports_own_input_block(reruns, tmp_path, capsys):
    sink, clean = reruns
    snap = _snapshot(capsys, sink, tmp_path / "snap.json")
    assert json.loads(snap.read_text())["input"]["set_aside"] == exact_records(sink).set_aside.as_dict()
    code, out = _run_main(capsys, ["gate", "--snapshot", str(snap), *ARGS, "--json"])
    got = json.loads(out)
    assert got["input"] == {"set_aside": exact_records(sink).set_aside.as_dict()}
    clean_code, clean_out = _run_main(
        capsys, ["gate", "--snapshot", str(_snapshot(capsys, clean, tmp_path / "c.json")), *ARGS, "--json"]
    )
    assert code == clean_code
    assert_reports_equal(_without_input(got), json.loads(clean_out))
    _, text = _run_main(capsys, ["gate", "--snapshot", str(snap), *ARGS])
    assert "set aside (not scored): duplicate_id 3 (first: " in " ".join(text.split())


def test_a_directory_with_an_empty_shard_names_it(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    records = trajectory_dicts(80, seed=6)
    _write(ds / "a.jsonl", records)
    (ds / "b.jsonl").write_text("")
    expected = exact_records(ds).set_aside.as_dict()
    assert expected == {"empty_shard": {"count": 1, "first": str(ds / "b.jsonl")}}
    reference = gate_paths(_write(tmp_path / "alone.jsonl", records), CRIT)
    for chunk_bytes in (CHUNK, 32 << 20):
        got = gate_paths(ds, CRIT, chunk_bytes=chunk_bytes)
        assert got["input"] == {"set_aside": expected}
        assert_reports_equal(_without_input(got), reference)


def test_the_baselines_set_aside_lines_are_shown_on_its_side(reruns, tmp_path, capsys):
    sink, clean = reruns
    cand = _write(tmp_path / "cand.jsonl", trajectory_dicts(150, seed=8))
    expected = exact_records(sink).set_aside.as_dict()
    reference = gate_paths(cand, CRIT, baseline=clean)
    got = gate_paths(cand, CRIT, baseline=sink)
    assert got["input"] == {"baseline": {"set_aside": expected}}
    assert_reports_equal(_without_input(got), reference)
    _, text = _run_main(capsys, ["gate", str(cand), "--baseline", str(sink), *ARGS])
    flat = " ".join(text.split())
    assert "baseline: set aside (not scored): duplicate_id 3 (first: " in flat
    assert flat.count("set aside (not scored)") == 1  # the candidate set nothing aside
    # A candidate with re-runs paired with a baseline: its task-id pass keeps the first of each id too.
    got = gate_paths(sink, CRIT, baseline=cand)
    assert got["input"] == {"set_aside": expected}
    assert_reports_equal(_without_input(got), gate_paths(clean, CRIT, baseline=cand))
