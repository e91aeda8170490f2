"""The gate says what it left out: runs without a forecast of the gated predictor, clean runs
waiting for an outcome, the runs its censoring mode drops, and the replicates behind the interval,
in text, Markdown and JSON, on both routes (records and snapshot); a large skipped share is refused.

The files are written by hand with one step per run, so every expected number is computed here
from the rows themselves: a one-step run's log score is log p if it succeeded, log(1 - p) if it
failed or (cen-simple, q_Z ~ 0) was stopped by the step budget.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from cli_support import call


def _run(i: str, stop: str, outcome: int | None, p: float | None, q_z: float | None = None) -> dict[str, Any]:
    steps = [] if p == -1 else [{"t": 1, "forecasts": {"verbal": p}}]
    return {"trajectory_id": i, "stop_reason": stop, "outcome": outcome, "q_z": q_z, "steps": steps}


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

    code, res, text, md = _gate(path, capsys, "--predictor", "verbal", "--vs-base-rate", "--bootstrap", "300")
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
    line = "gated 80 of 115 working-sample runs; no verbal forecast: 35 (missing 30, no_steps 5)"
    for out in (text, md):
        assert line in " ".join(out.split()) and "CI from 300 bootstrap replicates" in " ".join(out.split())
        assert "--max-skipped-share >= 0.304" in " ".join(out.split())
    # The censoring warning quotes the rate among the 80 gated runs (25%), not the sample's 20/115
    # (17.4%, under the 20% threshold: the old gate said nothing at all).
    assert any(w.startswith("censoring rate 25.0% among the 80 gated runs (20 stopped") for w in res["warnings"])

    code, res, text, _ = _gate(path, capsys, "--vs-base-rate", "--max-skipped-share", "0.5", "--bootstrap", "300")
    assert code in (0, 1) and res["verdict"] in ("pass", "fail")
    skip_check = next(c for c in res["checks"] if c["name"] == "skipped_share")
    assert skip_check["passed"] and skip_check["threshold"] == 0.5
    assert "35 of 115 working-sample runs (30.4%) are not scored: no verbal forecast" in " ".join(res["warnings"])
    assert "warning: 35 of 115 working-sample runs (30.4%) are not scored" in " ".join(text.split())


def test_a_small_skipped_share_is_gated_with_the_count_shown(tmp_path, capsys):
    rows = [r for r in _subset_rows() if not r["trajectory_id"].startswith("m")][:-10]  # 5 no_steps of 85
    rows += [_run("m0", "clean", 0, None), _run("m1", "clean", 0, None)]
    path = _write(tmp_path / "few.jsonl", rows)
    code, res, text, md = _gate(path, capsys, "--min", "-5", "--bootstrap", "200")
    assert code == 0 and res["coverage"]["skipped"] == {"missing": 2, "no_steps": 5}
    assert res["coverage"]["skipped_share"] == pytest.approx(7 / 87)  # below 10%: counted, not warned
    assert not any("are not scored" in w for w in res["warnings"])
    assert "no verbal forecast: 7 (missing 2, no_steps 5)" in " ".join(text.split())
    assert "no verbal forecast: 7 (missing 2, no_steps 5)" in " ".join(md.split())


def test_runs_dropped_by_cen_exact_are_counted_apart(tmp_path, capsys):
    rows = _subset_rows(with_q_z=8)
    path = _write(tmp_path / "cand.jsonl", rows)
    _, res, _, _ = _gate(
        path, capsys, "--min", "-5", "--censoring", "exact", "--max-skipped-share", "1", "--bootstrap", "200"
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
        assert "gated 40 of 40 working-sample runs" in flat and "clean runs waiting for an outcome: 30" in flat
        assert warning in flat


def test_the_snapshot_route_says_its_replicates_and_what_it_left_out(tmp_path, capsys):
    path = _write(tmp_path / "cand.jsonl", _subset_rows())
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "250", "--rules", "log"], capsys)
    assert code == 0, err
    snap = tmp_path / "snapshot.json"
    snap.write_text(out)
    flags = ("--min", "-5", "--max-skipped-share", "0.5")
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
    code, out, err = call(["gate", str(cand), "--baseline", str(base), "--bootstrap", "200", "--json"], capsys)
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


def test_a_live_accumulator_snapshot_gets_the_records_coverage(tmp_path, capsys):
    """The same runs observed by a real Accumulator and written to a file: the snapshot route
    counts what the records route counts (its replicates its own)."""
    from tps_tracer import Accumulator

    rows = _subset_rows()
    acc = Accumulator(rules=["log"], bootstrap=300)
    for r in rows:
        for step in r["steps"]:
            acc.observe(r["trajectory_id"], step["forecasts"])
        acc.stop(r["trajectory_id"], r["stop_reason"], q_z=r["q_z"], outcome=r["outcome"])
    snap = tmp_path / "live.json"
    snap.write_text(json.dumps(acc.snapshot()))
    acc.close()
    flags = ["--min", "-5", "--max-skipped-share", "0.5", "--json"]
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
    config.write_text("[gate]\nmin = -5.0\nmax-skipped-share = 0.35\nbootstrap = 200\n")
    code, out, err = call(["gate", str(path), "--config", str(config), "--json"], capsys)
    check = next(c for c in json.loads(out)["checks"] if c["name"] == "skipped_share")
    assert code == 0 and check["passed"] and check["threshold"] == 0.35, err
    code, _, _ = call(["gate", str(path), "--config", str(config), "--max-skipped-share", "0.3"], capsys)
    assert code == 2  # the flag wins over the file: 35/115 = 0.304 > 0.3
