"""Issue 36: an unknown predictor, a repeated trajectory id and the report object are each decided
in one place (skipped_predictors.check_known_predictors, records/limits.py,
report.report_from_state), so every entry point says the same thing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from cli_support import call

from tps_tracer.evaluation.calibration import fit_calibrator
from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.gate import GateCriteria, GateInputError, evaluate_gate
from tps_tracer.evaluation.pairs import pair_table_from_arrays
from tps_tracer.evaluation.partial_state import PartialState, StateSpec
from tps_tracer.evaluation.report import build_report, report_from_state, report_from_table
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.skipped_predictors import UnknownPredictorError
from tps_tracer.online import Accumulator
from tps_tracer.records import read_trajectories, to_arrays, write_trajectories
from tps_tracer.records.errors import TrajectoryFileError
from tps_tracer.records.limits import DuplicateIdError, repeated_keys
from tps_tracer.scoring import get_rule, get_schedule
from tps_tracer.synthetic import example_records

RECORDS = example_records()[:120]


@pytest.fixture()
def example(tmp_path) -> Path:
    path = tmp_path / "ex.jsonl"
    write_trajectories(RECORDS, path)
    return path


def _accumulator(mode: str) -> Accumulator:
    acc = Accumulator(rules=["log"], weights=["linear-front"], bootstrap=0, mode=mode)
    for rec in RECORDS[:30]:
        for step in rec.steps:
            acc.observe(rec.trajectory_id, step.forecasts)
        acc.stop(rec.trajectory_id, rec.stop_reason, outcome=rec.outcome, q_z=rec.q_z)
    return acc


def test_an_unknown_predictor_is_one_error_from_every_entry_point(example, capsys):
    arrays = to_arrays(RECORDS)
    expected = f"unknown predictor(s): nope; found: {', '.join(arrays.predictors)}"
    opts = ReportOptions(predictors=["nope"], rules=["log"], bootstrap=0)
    table = pair_table_from_arrays(arrays, list(arrays.predictors), [get_rule("log")], [get_schedule("linear-front")])
    state = PartialState.from_arrays(arrays, StateSpec.from_options(dataclasses.replace(opts, predictors=None)))
    calls = {
        "build_report": lambda: build_report(arrays, opts),
        "report_from_table": lambda: report_from_table(table, opts),
        "chunked file report": lambda: report_from_path(example, opts),
        "merged states (engines)": lambda: report_from_state(state, opts),
        "fit_calibrator": lambda: fit_calibrator(arrays, ["nope"], "linear-front"),
    }
    for where, fn in calls.items():
        with pytest.raises(UnknownPredictorError) as exc:
            fn()
        assert str(exc.value) == expected, where
    for mode in ("rows", "summary"):  # the snapshot knows the predictors it has seen so far
        acc = _accumulator(mode)
        with pytest.raises(UnknownPredictorError, match=r"^unknown predictor\(s\): nope; found: ") as exc:
            acc.snapshot(predictors=["nope"])
        seen = str(exc.value).split("found: ")[1].split(", ")
        assert set(seen) == set(arrays.predictors), mode
    for argv in (
        ["report", str(example), "--predictors", "nope"],
        ["calibrate", str(example), "-o", str(example.parent / "c.json"), "--predictors", "nope"],
        ["censoring", str(example), "--predictors", "nope"],
    ):
        code, _, err = call(argv, capsys)
        assert code == 2 and expected in err, argv
    code, _, err = call(["gate", str(example), "--min", "-1", "--predictor", "nope"], capsys)
    assert code == 2 and f"--predictor: {expected}" in err


def test_a_repeated_id_is_one_decision_with_one_wording(tmp_path):
    records = RECORDS[:20]
    twice = [*records, records[3]]
    tid = records[3].trajectory_id
    with pytest.raises(DuplicateIdError, match=rf"duplicate trajectory id\(s\) '{tid}'") as exc:
        build_report(to_arrays(twice), ReportOptions(bootstrap=0))
    with pytest.raises(GateInputError) as gate_exc:
        evaluate_gate(twice, GateCriteria(min_score=-1.0, bootstrap=100))
    assert str(gate_exc.value) == str(exc.value)
    # The whole-file reader sets the repeat aside, naming the first line; strict makes it an error.
    one = tmp_path / "one.jsonl"
    write_trajectories(twice, one)
    aside = read_trajectories(one).set_aside.as_dict()["duplicate_id"]
    assert aside["count"] == 1 and aside["first"] == f"line 21: duplicate id '{tid}' (first seen on line 4)"
    with pytest.raises(TrajectoryFileError, match=rf"duplicate id '{tid}' \(first seen on line 4\)"):
        read_trajectories(one, strict=True)
    # Across two shards the chunked reader finds it by key, and says it the same way.
    shards = tmp_path / "shards"
    shards.mkdir()
    write_trajectories(records, shards / "a.jsonl")
    (shards / "b.jsonl").write_text(json.dumps(records[3].model_dump(mode="json")) + "\n")
    with pytest.raises(TrajectoryFileError) as file_exc:
        report_from_path(shards, ReportOptions(bootstrap=0))
    assert f"duplicate id '{tid}' (in " in str(file_exc.value) and "first seen in" in str(file_exc.value)


def test_repeated_keys_across_chunks():
    keys = [np.array([5, 1, 2], dtype=np.uint64), np.array([2, 3, 3, 9], dtype=np.uint64), np.zeros(0, np.uint64)]
    assert repeated_keys(keys).tolist() == [2, 3]
    assert repeated_keys([np.arange(4, dtype=np.uint64)]).size == 0 and repeated_keys([]).size == 0


def test_the_recalibration_section_comes_from_the_state_replicates():
    """The one builder fills the recalibration section from the state's columns: each paired TPS
    delta is the difference of the two score rows' means (checked here on the printed rows)."""
    report = build_report(to_arrays(RECORDS), ReportOptions(rules=["log", "brier"], bootstrap=50, calibrate="platt"))
    means = {(r["predictor"], r["rule"], r["weights"], r["censoring"]): r["mean"] for r in report["scores"]}
    assert report["recalibration"]
    for section in report["recalibration"]:
        raw, cal = section["predictor"], section["recalibrated"]
        tps = [c for c in section["comparisons"] if c["statistic"].startswith("tps ")]
        assert len(tps) == sum(1 for k in means if k[0] == raw)
        for row in tps:
            _, rule, weights, censoring = row["statistic"].split(" ")
            expected = means[(cal, rule, weights, censoring)] - means[(raw, rule, weights, censoring)]
            assert row["delta"] == pytest.approx(expected, abs=1e-12)
            assert row["ci_low"] <= row["ci_high"]
        assert [c["statistic"] for c in section["comparisons"]][-1] == "auroc phi_w"
    assert report["settings"]["calibration"]["method"].startswith("platt")
