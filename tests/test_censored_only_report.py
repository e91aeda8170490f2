"""A sample with censored runs but no complete one yet still gets its cen-simple / cen-exact TPS.

The paper defines TPS^cen,simple (q_Z ~ 0) and TPS^cen,exact (with q_Z) on censored prefixes
alone (Sections "Exact reduced censored beta score", "Simple censored score"); only the base-rate
reference needs complete outcomes (its forecast is their mean). So a user whose first runs all
hit the step budget sees the predictors' censored rows, the base rate listed in
`skipped_predictors` with the reason, complete-only columns at n=0 (as any empty column), in
row mode, summary mode, the chunked reader and the whole-file report alike.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scale_support import assert_reports_equal, write_jsonl

from tps_tracer.cli.main import main
from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.skipped_predictors import BASE_RATE
from tps_tracer.online import Accumulator
from tps_tracer.records import read_trajectories, to_arrays

RULES = ("log", "brier")
B = 40

# Two budget stops (max_steps): a with budget T=4 and two steps, b with T=2 and one step;
# a carries q_Z = 0.25, b none (so cen-exact has n=1 and counts b as missing q_z).
TINY = [
    {
        "trajectory_id": "a",
        "stop_reason": "max_steps",
        "horizon": 4,
        "q_z": 0.25,
        "steps": [{"forecasts": {"v": 0.8}}, {"forecasts": {"v": 0.6}}],
    },
    {"trajectory_id": "b", "stop_reason": "max_steps", "horizon": 2, "steps": [{"forecasts": {"v": 0.3}}]},
]


def _w(t: int, T: int) -> float:
    """Linear-front weight w_t = 2(T - t + 1) / (T (T + 1)), truncated at the stop, not renormalised."""
    return 2 * (T - t + 1) / (T * (T + 1))


def _hand() -> dict[tuple[str, str], tuple[float, int]]:
    """(rule, mode) -> (mean, n), written out from the paper's formulas for the two runs above."""
    s1 = {"log": math.log, "brier": lambda f: -((1 - f) ** 2)}
    s0 = {"log": lambda f: math.log(1 - f), "brier": lambda f: -(f**2)}
    out = {}
    for rule in RULES:
        simple_a = _w(1, 4) * s0[rule](0.8) + _w(2, 4) * s0[rule](0.6)
        simple_b = _w(1, 2) * s0[rule](0.3)
        q = 0.25
        exact_a = _w(1, 4) * (q * s1[rule](0.8) + (1 - q) * s0[rule](0.8)) + _w(2, 4) * (
            q * s1[rule](0.6) + (1 - q) * s0[rule](0.6)
        )
        out[(rule, "simple")] = ((simple_a + simple_b) / 2, 2)
        out[(rule, "exact")] = (exact_a, 1)
    return out


def _options(**kw) -> ReportOptions:
    return ReportOptions(rules=RULES, schedules=("linear-front",), bootstrap=B, **kw)


def _feed(acc: Accumulator, records: list[dict]) -> None:
    for rec in records:
        for step in rec["steps"]:
            acc.observe(rec["trajectory_id"], step["forecasts"])
        acc.stop(rec["trajectory_id"], rec["stop_reason"], rec.get("horizon"), q_z=rec.get("q_z"))
        if rec.get("outcome") is not None:
            acc.resolve(rec["trajectory_id"], outcome=rec["outcome"])


def _snapshots(records: list[dict], **kw) -> tuple[dict, dict]:
    """(row mode, summary mode) snapshots without their "online" section."""
    out = []
    for mode in ("rows", "summary"):
        acc = Accumulator(rules=RULES, weights=("linear-front",), bootstrap=B, mode=mode, batch_size=1, **kw)
        _feed(acc, records)
        snap = acc.snapshot()
        snap.pop("online")
        out.append(snap)
    return out[0], out[1]


def _all_paths(tmp_path: Path, records: list[dict], **kw) -> dict[str, dict]:
    path = write_jsonl(tmp_path / "runs.jsonl", records)
    opts = _options(**kw)
    rows, summary = _snapshots(records, **kw)
    return {
        "build_report": build_report(to_arrays(read_trajectories(path)), opts),
        "report_from_path": report_from_path(path, opts, chunk_bytes=150),  # one trajectory per chunk
        "rows": rows,
        "summary": summary,
    }


def test_budget_stops_alone_get_their_censored_scores_checked_by_hand(tmp_path):
    reports = _all_paths(tmp_path, TINY)
    hand = _hand()
    for name, rep in reports.items():
        rows = {(r["predictor"], r["rule"], r["censoring"]): r for r in rep["scores"]}
        assert {p for p, _, _ in rows} == {"v"}, name  # no base-rate row: it needs a complete outcome
        for (rule, mode), (mean, n) in hand.items():
            row = rows[("v", rule, mode)]
            assert row["n"] == n, (name, rule, mode)
            assert math.isclose(row["mean"], mean, rel_tol=0, abs_tol=1e-12), (name, rule, mode, row["mean"], mean)
            assert row["ci_low"] is not None and row["ci_low"] <= row["ci_high"]
        for rule in RULES:  # an empty column, reported as every empty column is: n=0, no mean
            empty = rows[("v", rule, "complete-only")]
            assert empty["n"] == 0 and empty["mean"] is None and empty["ci_low"] is None
        assert rows[("v", "log", "exact")]["n_missing_q_z"] == 1
        assert {d["comparison"] for d in rep["deltas"]} == {"simple - complete-only", "exact - complete-only"}
        assert all(d["delta"] is None for d in rep["deltas"])  # no complete-only reference to compare with
        assert [d["n"] for d in rep["diagnostics"]] == [0]  # diagnostics are on complete trajectories
        assert rep["settings"]["base_rate"] is None
        (skip,) = rep["skipped_predictors"]
        assert skip["predictor"] == BASE_RATE and "complete trajectory" in skip["reason"]
        assert rep["coverage"] == [{"predictor": "v", "usable": 2, "skipped": {}}]
        assert rep["audit"]["roles"]["censored"] == 2 and rep["audit"]["censored_with_q_z"] == 1
    for name in ("report_from_path", "rows", "summary"):
        assert_reports_equal(reports["build_report"], reports[name], where=name)


def test_without_the_base_rate_nothing_is_skipped(tmp_path):
    reports = _all_paths(tmp_path, TINY, base_rate=False)
    for name, rep in reports.items():
        assert rep["skipped_predictors"] == [], name
        assert {r["predictor"] for r in rep["scores"]} == {"v"}
    for name in ("report_from_path", "rows", "summary"):
        assert_reports_equal(reports["build_report"], reports[name], where=name)


def test_a_predictor_unusable_on_the_censored_runs_is_skipped_with_its_reason(tmp_path):
    records = [*TINY, {"trajectory_id": "c", "stop_reason": "max_steps", "steps": [{"forecasts": {"w": None}}]}]
    reports = _all_paths(tmp_path, records)
    for name, rep in reports.items():
        assert [s["predictor"] for s in rep["skipped_predictors"]] == ["w", BASE_RATE], name
        assert {r["predictor"] for r in rep["scores"]} == {"v"}
    for name in ("report_from_path", "rows", "summary"):
        assert_reports_equal(reports["build_report"], reports[name], where=name)


def test_the_first_complete_run_brings_the_base_rate_back(tmp_path):
    records = [
        *TINY,
        {"trajectory_id": "c", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"v": 0.9}}]},
    ]
    reports = _all_paths(tmp_path, records)
    for name, rep in reports.items():
        assert rep["skipped_predictors"] == [], name
        assert {r["predictor"] for r in rep["scores"]} == {"v", BASE_RATE}
        assert rep["settings"]["base_rate"] == 1.0
    for name in ("report_from_path", "rows", "summary"):
        assert_reports_equal(reports["build_report"], reports[name], where=name)


def test_complete_runs_without_usable_forecasts_snapshot_alike_in_both_modes():
    """Row mode reports the base rate alone (allow_empty); summary mode used to raise 'no predictor to score'."""
    records = [
        {"trajectory_id": f"r{i}", "stop_reason": "clean", "outcome": i % 2, "steps": [{"forecasts": {"v": None}}]}
        for i in range(4)
    ]
    rows, summary = _snapshots(records)
    assert [s["predictor"] for s in rows["skipped_predictors"]] == ["v"]
    assert {r["predictor"] for r in rows["scores"]} == {BASE_RATE}
    assert_reports_equal(rows, summary)


def test_no_working_sample_is_still_an_error_or_an_empty_snapshot(tmp_path):
    """Only excluded stops (informative: tool_error): nothing any TPS can score."""
    records = [{"trajectory_id": "x", "stop_reason": "tool_error", "steps": [{"forecasts": {"v": 0.4}}]}]
    path = write_jsonl(tmp_path / "excluded.jsonl", records)
    with pytest.raises(ValueError, match="no complete trajectory"):
        build_report(to_arrays(read_trajectories(path)), _options())
    with pytest.raises(ValueError, match="no complete trajectory"):
        report_from_path(path, _options())
    rows, summary = _snapshots(records)
    assert rows["scores"] == [] and rows == summary


def test_the_cli_report_shows_the_censored_scores_and_says_why_the_base_rate_is_missing(tmp_path, capsys):
    path = write_jsonl(tmp_path / "budget.jsonl", TINY)
    assert main(["report", str(path), "--rules", "log", "--bootstrap", "20"]) == 0
    text = capsys.readouterr().out
    assert "cen-simple (q_Z~0)" in text and "cen-exact (q_z)" in text
    assert "base_rate:" in text and "complete trajectory" in text
    assert main(["report", str(path), "--rules", "log", "--bootstrap", "20", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    simple = next(r for r in rep["scores"] if r["censoring"] == "simple")
    assert math.isclose(simple["mean"], _hand()[("log", "simple")][0], rel_tol=0, abs_tol=1e-12)
