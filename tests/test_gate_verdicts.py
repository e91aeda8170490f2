"""Issue 30: a gate verdict that means what it says.

The gated quantity never moves with the candidate's data, asymmetries between candidate and
baseline are named and the comparison runs on what both sides score, the hypothesis test is
explicit (with its power), and the output names every failing check within 100 columns.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from cli_support import call
from scipy.stats import norm

import tps_tracer as tt
from tps_tracer.cli.gate_cmd import render_gate_text
from tps_tracer.evaluation.gate import GateCriteria, evaluate_gate, evaluate_gate_on_report
from tps_tracer.records import StopReason, write_trajectories
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.synthetic import World, simulate_runs, to_records


def renamed(records: list[TrajectoryRecord], keep: dict[str, str | None]) -> list[TrajectoryRecord]:
    """Each step's forecasts as {new name: value of old name} (None as the old name: a null stream)."""
    return [
        r.model_copy(
            update={
                "steps": [
                    s.model_copy(
                        update={"forecasts": {new: (s.forecasts[old] if old else None) for new, old in keep.items()}}
                    )
                    for s in r.steps
                ]
            }
        )
        for r in records
    ]


@pytest.fixture(scope="module")
def sim():
    return simulate_runs(400, seed=21)


def _mean(records: list[TrajectoryRecord], censoring: str = "simple", predictor: str = "p") -> float:
    rep = tt.evaluate(records, tt.ReportOptions(rules=["log"], bootstrap=0))
    return next(r["mean"] for r in rep["scores"] if r["predictor"] == predictor and r["censoring"] == censoring)


def test_a_candidate_that_lost_the_baselines_predictor_is_unusable_not_switched(sim, tmp_path, capsys):
    # The baseline states its confidence ("verbal") and has token probabilities; a prompt change
    # dropped the candidate's "Confidence:" line, so its verbal stream is null on every step.
    base = renamed(
        to_records(sim, ["truthful", "overconfident"]), {"verbal": "truthful", "token_prob": "overconfident"}
    )
    cand = renamed(to_records(sim, ["truthful", "overconfident"]), {"verbal": None, "token_prob": "overconfident"})
    res = evaluate_gate(cand, GateCriteria(bootstrap=200), baseline=base)
    assert res["verdict"] == "unusable" and res["exit_code"] == 2
    assert res["score"]["predictor"] == "verbal" and res["failed_checks"] == ["gated_predictor"]
    (reason,) = res["reasons"]
    assert "the candidate cannot score predictor 'verbal'" in reason and "predictors with data: token_prob" in reason
    write_trajectories(cand, tmp_path / "cand.jsonl")
    write_trajectories(base, tmp_path / "base.jsonl")
    code, out, _ = call(["gate", str(tmp_path / "cand.jsonl"), "--baseline", str(tmp_path / "base.jsonl")], capsys)
    assert code == 2 and out.startswith("tps-tracer gate: UNUSABLE") and "on verbal (the baseline's" in out
    assert "unusable: gated_predictor: the candidate cannot score predictor 'verbal'" in " ".join(out.split())
    # Without a baseline the file's first predictor is gated, with or without data: no silent switch either.
    code, out, _ = call(["gate", str(tmp_path / "cand.jsonl"), "--min", "-5"], capsys)
    assert code == 2 and "cannot score predictor 'verbal'" in out
    # Named explicitly, the candidate's own stream is gated on both sides.
    named = evaluate_gate(cand, GateCriteria(predictor="token_prob", bootstrap=200), baseline=base)
    assert named["verdict"] == "pass" and named["checks"][-1]["estimate"] == 0.0


def test_one_sided_q_z_under_cen_exact_compares_what_both_sides_score(sim):
    """The issue's example: the same runs, only the candidate carrying q_z, --censoring exact."""
    with_q = renamed(to_records(sim, ["truthful"]), {"p": "truthful"})
    without = renamed(to_records(sim, ["truthful"], record_q_z=False), {"p": "truthful"})
    n_cens = sum(r.stop_reason is StopReason.MAX_STEPS for r in with_q)
    assert n_cens >= 50
    res = evaluate_gate(with_q, GateCriteria(censoring="exact", bootstrap=300), baseline=without)
    check = res["checks"][-1]
    assert res["verdict"] == "pass" and check["name"] == "vs_baseline"
    assert check["estimate"] == 0.0 and check["ci_low"] == 0.0 and check["ci_high"] == 0.0  # the same runs
    cmp = res["comparison"]
    assert cmp["paired"] and cmp["baseline_unscored_runs"] - cmp["candidate_unscored_runs"] == n_cens
    assert cmp["candidate_unpaired_runs"] == n_cens and cmp["baseline_unpaired_runs"] == 0
    complete = sum(r.stop_reason is StopReason.CLEAN for r in with_q)
    assert cmp["common_tasks"] == complete
    text = f"q_z on the candidate only (candidate {n_cens} of {n_cens} censored runs, baseline 0 of {n_cens})"
    assert cmp["asymmetries"] == [text] and any(w.startswith(text + ": under cen-exact") for w in res["warnings"])
    text = render_gate_text(res, "runs_q.jsonl")  # a difference without variance renders (SE 0)
    assert "vs_baseline: the difference does not vary under resampling (SE 0)" in " ".join(text.split())
    # The candidate's own score keeps its censored runs (cen-exact, as the report scores it).
    assert res["score"]["mean"] == pytest.approx(_mean(with_q, "exact"), abs=1e-12)
    # The other way round the candidate cannot score the gated quantity: unusable, with the reason.
    rev = evaluate_gate(without, GateCriteria(censoring="exact", bootstrap=300), baseline=with_q)
    assert rev["verdict"] == "unusable" and rev["failed_checks"] == ["q_z_for_exact"]
    assert f"none of the candidate's {n_cens} censored runs carries one" in rev["reasons"][0]


def test_pairing_on_the_common_tasks_when_one_side_has_a_parse_error(sim):
    cand = renamed(to_records(sim, ["truthful"]), {"p": "truthful"})
    base = renamed(to_records(sim, ["overconfident"]), {"p": "overconfident"})
    k = next(i for i, r in enumerate(base) if r.stop_reason is StopReason.CLEAN)
    base[k] = base[k].model_copy(update={"stop_reason": StopReason.PARSE_ERROR, "outcome": None})
    crit = GateCriteria(bootstrap=400)
    res = evaluate_gate(cand, crit, baseline=base)
    check, cmp = res["checks"][-1], res["comparison"]
    assert cmp["paired"] and cmp["candidate_unpaired_runs"] == 1 and cmp["baseline_unpaired_runs"] == 0
    assert cmp["baseline_unscored_runs"] == cmp["candidate_unscored_runs"] + 1
    assert "left out of the paired difference: candidate 1 scored run(s)" in " ".join(res["notes"])
    # The difference is that of the report's means on the tasks both scored.
    keep = [i for i in range(len(cand)) if i != k]
    c_common, b_common = [cand[i] for i in keep], [base[i] for i in keep]
    assert check["estimate"] == pytest.approx(_mean(c_common) - _mean(b_common), abs=1e-12)
    # ...and its CI is that of the runs restricted to those tasks (the same task-keyed weights).
    restricted = evaluate_gate(c_common, crit, baseline=b_common)["checks"][-1]
    assert (check["ci_low"], check["ci_high"]) == (restricted["ci_low"], restricted["ci_high"])
    # Paired is tighter than the unpaired comparison the old gate fell back to.
    shifted = [r.model_copy(update={"trajectory_id": "x" + r.trajectory_id}) for r in base]
    unpaired = evaluate_gate(cand, crit, baseline=shifted)["checks"][-1]
    assert "unpaired" in unpaired["detail"]
    assert unpaired["ci_high"] - unpaired["ci_low"] > check["ci_high"] - check["ci_low"]


def test_repeated_tasks_are_resampled_as_clusters(sim):
    cand = renamed(to_records(sim, ["truthful"]), {"p": "truthful"})
    base = renamed(to_records(sim, ["overconfident"]), {"p": "overconfident"})
    tagged = [r.model_copy(update={"metadata": {"task_id": f"t{i // 2}"}}) for i, r in enumerate(cand)]
    base_tagged = [r.model_copy(update={"metadata": {"task_id": f"t{i // 2}"}}) for i, r in enumerate(base)]
    res = evaluate_gate(tagged, GateCriteria(bootstrap=300), baseline=base_tagged)
    check = res["checks"][-1]
    assert res["comparison"]["paired"] and "tasks repeat: resampled by task" in check["detail"]
    assert check["estimate"] == pytest.approx(_mean(cand) - _mean(base), abs=1e-12)


def test_asymmetric_predictor_sets_and_censoring_rates_are_named(sim):
    cand = renamed(to_records(sim, ["truthful", "noisy"]), {"p": "truthful", "extra": "noisy"})
    short = simulate_runs(400, seed=21, world=World(budget=5))
    base = renamed(to_records(short, ["truthful"]), {"p": "truthful"})
    res = evaluate_gate(cand, GateCriteria(bootstrap=200), baseline=base)
    asym = res["comparison"]["asymmetries"]
    assert "predictor sets differ: candidate only extra; baseline only none" in asym
    rc, rb = res["audit"]["censoring_rate"], None
    rb_text = next(a for a in asym if a.startswith("censoring rate"))
    rb = float(rb_text.split("baseline ")[1].rstrip("%")) / 100
    assert rb > rc + 0.1
    assert any(
        w.startswith(f"censoring rate candidate {rc:.1%}, baseline") and "differ significantly" in w
        for w in res["warnings"]
    )


@pytest.fixture(scope="module")
def twins():
    """Two independent runs of the same agent on the same tasks: a true difference of zero."""
    a = renamed(to_records(simulate_runs(400, seed=1), ["truthful"]), {"p": "truthful"})
    b = renamed(to_records(simulate_runs(400, seed=2), ["truthful"]), {"p": "truthful"})
    return a, b


def _se_from_ci(check: dict) -> float:
    return (check["ci_high"] - check["ci_low"]) / (2 * norm.isf(0.025))


def test_the_default_test_is_regression_detection_and_non_inferiority_is_explicit(twins):
    a, b = twins
    res = evaluate_gate(a, GateCriteria(bootstrap=1000), baseline=b)
    check = res["checks"][-1]
    assert res["settings"]["test"] == check["test"] == "regression" and res["settings"]["alpha_one_sided"] == 0.025
    assert check["passed"] == (check["ci_high"] >= 0.0) and check["passed"]
    ni = evaluate_gate(a, GateCriteria(test="non-inferiority", bootstrap=1000), baseline=b)["checks"][-1]
    assert ni["passed"] == (ni["ci_low"] >= 0.0) and not ni["passed"]  # margin 0: a superiority test


def test_a_fail_an_identical_candidate_gets_often_is_cannot_decide(twins):
    """Issue 47 item 1: non-inferiority at a margin below what the sample resolves FAILed an unchanged
    agent most of the time (exit 1); it is CANNOT DECIDE (exit 2), naming the margin and the sample
    that decide."""
    a, b = twins
    res = evaluate_gate(a, GateCriteria(test="non-inferiority", margin=0.02, bootstrap=2000), baseline=b)
    check = res["checks"][-1]
    assert (res["verdict"], res["exit_code"], res["failed_checks"]) == ("cannot decide", 2, [])  # was FAIL, exit 1
    pw = check["power"]
    se = _se_from_ci(check)  # independent of the replicates' sd the gate uses
    assert pw["se"] == pytest.approx(se, rel=0.1)
    assert pw["smallest_margin"] == pytest.approx((norm.isf(0.025) + norm.isf(0.05)) * se, rel=0.1)
    assert pw["p_fail_identical"] == pytest.approx(norm.cdf(norm.isf(0.025) - 0.02 / pw["se"]), abs=1e-9)
    assert pw["p_fail_identical"] > 0.05 and pw["underpowered"]
    assert check["ci_low"] < -0.02 <= check["ci_high"]  # neither ruled out nor shown
    assert res["undecided_checks"] == ["vs_baseline"] and not check["passed"]
    n = res["comparison"]["common_tasks"]
    needed = math.ceil(n * (pw["smallest_margin"] / 0.02) ** 2)  # the SE shrinks as 1/sqrt(n)
    assert check["decides_at"] == {"margin": pw["smallest_margin"], "n": needed}
    flat = " ".join(render_gate_text(res, "a").split())
    assert flat.startswith("tps-tracer gate: CANNOT DECIDE (a)")
    assert (
        f"cannot decide: vs_baseline: the 95% CI [{check['ci_low']:.4g}, {check['ci_high']:.4g}] neither rules out "
        f"a drop beyond the margin nor shows one, and an identical candidate would fail at this sample with "
        f"probability ~{pw['p_fail_identical']:.2f}, above the 5% false-alarm bound: it decides at margin "
        f"{pw['smallest_margin']:.3g} or more, or about {needed} tasks both sides score (now {n}) at margin 0.02"
    ) in flat
    # At the margin it names, the same sample decides.
    wide = evaluate_gate(a, GateCriteria(test="non-inferiority", margin=1.01 * pw["smallest_margin"]), baseline=b)
    assert wide["verdict"] == "pass" and not wide["checks"][-1]["power"]["underpowered"]
    # A drop beyond the margin that the data show is a FAIL, underpowered or not.
    worse = renamed(to_records(simulate_runs(400, seed=1), ["overconfident"]), {"p": "overconfident"})
    bad = evaluate_gate(worse, GateCriteria(test="non-inferiority", margin=0.02), baseline=b)
    assert bad["checks"][-1]["power"]["underpowered"] and bad["checks"][-1]["ci_high"] < -0.02
    assert (bad["verdict"], bad["failed_checks"], bad["undecided_checks"]) == ("fail", ["vs_baseline"], [])
    reg = evaluate_gate(a, GateCriteria(margin=0.01, bootstrap=2000), baseline=b)["checks"][-1]["power"]
    assert reg["detectable_drop"] == pytest.approx(0.01 + (norm.isf(0.025) + norm.isf(0.2)) * se, rel=0.1)
    assert not reg["underpowered"]  # the regression test's FAIL has probability 2.5% for an identical candidate


def test_the_test_is_named_in_the_config_and_the_output(twins, tmp_path, capsys):
    a, b = twins
    write_trajectories(a, tmp_path / "a.jsonl")
    write_trajectories(b, tmp_path / "b.jsonl")
    cfg = tmp_path / "gate.toml"
    cfg.write_text('[gate]\ntest = "non-inferiority"\nmargin = 0.5\nbootstrap = 300\n')
    code, out, _ = call(
        ["gate", str(tmp_path / "a.jsonl"), "--baseline", str(tmp_path / "b.jsonl"), "--config", str(cfg), "--json"],
        capsys,
    )
    res = json.loads(out)
    assert code == 0 and res["settings"]["test"] == "non-inferiority" and res["checks"][-1]["test"] == "non-inferiority"
    code, out, _ = call(
        ["gate", str(tmp_path / "a.jsonl"), "--baseline", str(tmp_path / "b.jsonl"), "--config", str(cfg)], capsys
    )
    assert "test: non-inferiority, margin 0.5: PASS only if the 95% CI lower bound" in out
    cfg.write_text('[gate]\ntest = "superiority"\n')
    code, _, err = call(
        ["gate", str(tmp_path / "a.jsonl"), "--baseline", str(tmp_path / "b.jsonl"), "--config", str(cfg)], capsys
    )
    assert code == 2 and "--test: must be one of regression, non-inferiority" in err


def test_text_output_fits_100_columns_explains_its_symbols_and_names_every_failure(tmp_path, capsys):
    runs = simulate_runs(300, seed=3, world=World(budget=6, parse_error_rate=0.08))
    recs = renamed(to_records(runs, ["overconfident"], record_q_z=False), {"p": "overconfident"})
    path = tmp_path / "runs.jsonl"
    write_trajectories(recs, path)
    argv = [
        "gate",
        str(path),
        "--min",
        "100",
        "--vs-base-rate",
        "--test",
        "non-inferiority",
        "--max-excluded-share",
        "0.05",
    ]
    code, out, _ = call([*argv, "--bootstrap", "300"], capsys)
    assert code == 1
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "  failed: excluded_share, absolute, vs_base_rate" in lines
    text = " ".join(out.split())
    assert "warning: censoring rate" in text  # the long warnings are wrapped, not cut
    for term in ("P(flip): share of bootstrap replicates", "pass if:", "cen-simple: a run stopped by the step budget"):
        assert term in text
    assert "CI low >= 100" in out and "CI low >= -0" not in out
    # An unusable sample names every failing check, not only the first.
    tiny = tmp_path / "tiny.jsonl"
    write_trajectories(recs[:25], tiny)
    code, out, _ = call(
        ["gate", str(tiny), "--min", "-50", "--max-excluded-share", "0.01", "--bootstrap", "200"], capsys
    )
    assert code == 2 and "failed: sample_size, excluded_share" in out and "unusable: sample_size:" in out
    md = tmp_path / "summary.md"
    call(["gate", str(path), "--min", "-50", "--markdown", str(md), "--bootstrap", "200"], capsys)
    assert "<summary>legend</summary>" in md.read_text() and "| pass if |" in md.read_text()


def test_a_fragile_verdict_is_warned_about(twins):
    a, _ = twins
    far = evaluate_gate(a, GateCriteria(min_score=-50.0, bootstrap=400))
    assert not any(w.startswith("fragile") for w in far["warnings"])
    edge = evaluate_gate(a, GateCriteria(min_score=far["score"]["ci_low"], bootstrap=400))
    flip = edge["checks"][-1]["flip_probability"]
    assert flip > 0.2 and edge["verdict"] == "pass"
    assert f"fragile verdict: absolute passes, but P(flip) is {flip:.3f} (> 0.2)" in " ".join(edge["warnings"])
    # --max-flip: a verdict that resampling reverses this often is no verdict either way (it was a FAIL).
    checked = evaluate_gate(a, GateCriteria(min_score=far["score"]["ci_low"], bootstrap=400, max_flip=0.2))
    assert (checked["verdict"], checked["exit_code"], checked["failed_checks"]) == ("cannot decide", 2, [])
    assert checked["undecided_checks"] == ["stability"]
    assert checked["reasons"] == [
        f"stability: the verdict flips in {flip:.1%} of the bootstrap replicates (more than --max-flip 0.2): a "
        "new sample of the same size could reverse it"
    ]


def test_snapshots_get_the_same_censoring_warnings_as_records(tmp_path):
    runs = simulate_runs(300, seed=4, world=World(budget=6))
    recs = renamed(to_records(runs, ["truthful"], record_q_z=False), {"p": "truthful"})
    crit = GateCriteria(min_score=-5.0, bootstrap=300)
    on_records = evaluate_gate(recs, crit)
    report = json.loads(json.dumps(tt.evaluate(recs, tt.ReportOptions(rules=["log"], bootstrap=300))))
    on_snapshot = evaluate_gate_on_report(report, crit)
    censoring = [w for w in on_records["warnings"] if w.startswith("censoring rate")]
    assert len(censoring) == 1 and [w for w in on_snapshot["warnings"] if w.startswith("censoring rate")] == censoring
    n_cens = sum(r.stop_reason is StopReason.MAX_STEPS for r in recs)
    working = sum(r.stop_reason in (StopReason.CLEAN, StopReason.MAX_STEPS) for r in recs)
    assert on_records["coverage"]["gated"] == working  # every run has a forecast: the rate is the sample's
    assert censoring[0].startswith(
        f"censoring rate {n_cens / working:.1%} among the {working} gated runs ({n_cens} stopped by the step budget)"
        " with only the simple form"
    )
    assert "q_Z source: no q_z in the records" in on_snapshot["notes"]
    exact = evaluate_gate_on_report(report, GateCriteria(min_score=-5.0, censoring="exact"))
    assert exact["verdict"] == "unusable" and exact["failed_checks"] == ["q_z_for_exact"]
    assert np.isfinite(on_snapshot["checks"][-1]["estimate"])


def test_a_tiny_baseline_is_unusable_not_a_lenient_pass(sim, tmp_path, capsys):
    """A baseline of a few runs gives a CI so wide that no drop is significant: no verdict instead."""
    cand = renamed(to_records(sim, ["overconfident"]), {"p": "overconfident"})
    base = renamed(to_records(sim, ["truthful"]), {"p": "truthful"})[:20]
    res = evaluate_gate(cand, GateCriteria(bootstrap=300), baseline=base)
    n_base = sum(r.stop_reason in (StopReason.CLEAN, StopReason.MAX_STEPS) for r in base)
    assert res["verdict"] == "unusable" and res["failed_checks"][0] == "baseline_size"
    assert res["reasons"] == [
        f"baseline_size: {n_base} scored trajectories, fewer than min_n 30: too small for a CI-based verdict"
    ]
    write_trajectories(cand, tmp_path / "cand.jsonl")
    write_trajectories(base, tmp_path / "base.jsonl")
    code, out, _ = call(["gate", str(tmp_path / "cand.jsonl"), "--baseline", str(tmp_path / "base.jsonl")], capsys)
    assert (
        code == 2
        and ["baseline_size", "baseline", "FAIL"] in [line.split()[:3] for line in out.splitlines()]
        and "n >= 30" in out
    )
