"""Numeric options are checked before any data is read: a NaN threshold, a share outside
[0, 1], a replicate count or a horizon beyond the documented bound fail at once with one
line naming the flag (CLI) or the argument (Python API), never a verdict on "nan" or a
MemoryError (exit 3).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_support import call, ok_records
from scale_support import write_jsonl

import tps_tracer as tt
from tps_tracer.constants import MAX_REPLICATES
from tps_tracer.evaluation.bootstrap import bootstrap_means, trajectory_keys
from tps_tracer.evaluation.gate import GateCriteria, GateOptionError, evaluate_gate
from tps_tracer.evaluation.report_options import OptionError
from tps_tracer.scoring import MAX_HORIZON, custom_schedule


@pytest.fixture()
def ok(tmp_path) -> Path:
    return write_jsonl(tmp_path / "ok.jsonl", ok_records())


GATE_CASES = [
    (["--min", "nan"], "--min: must be a finite number"),
    (["--min", "inf"], "--min: must be a finite number"),
    (["--min", "-1", "--max-flip", "2"], "--max-flip: is a share: must lie in [0, 1]"),
    (["--min", "-1", "--max-flip", "nan"], "--max-flip: must be a finite number"),
    (["--vs-base-rate", "--margin", "-1"], "--margin: must be >= 0"),
    (["--vs-base-rate", "--margin", "nan"], "--margin: must be a finite number"),
    (["--min", "-1", "--max-excluded-share", "5"], "--max-excluded-share: is a share: must lie in [0, 1]"),
    (["--min", "-1", "--bootstrap", "1000000000"], f"--bootstrap: must be an integer in [100, {MAX_REPLICATES}]"),
    (["--min", "-1", "--bootstrap", "10"], "--bootstrap: must be an integer in [100,"),
    (["--min", "-1", "--min-n", "0"], "--min-n: must be an integer >= 1"),
]


@pytest.mark.parametrize("extra, expect", GATE_CASES, ids=[" ".join(a) for a, _ in GATE_CASES])
def test_gate_rejects_bad_numbers_by_flag_with_exit_2(ok, capsys, extra, expect):
    code, out, err = call(["gate", str(ok), *extra], capsys)
    assert code == 2, (code, out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert expect in err, err


def test_gate_config_values_are_checked_like_flags(ok, tmp_path, capsys):
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[gate]\nmin = nan\n")  # TOML has nan; it must not reach a verdict
    code, _, err = call(["gate", str(ok), "--config", str(cfg)], capsys)
    assert code == 2 and "--min: must be a finite number" in err


def test_a_valid_share_and_threshold_still_pass(ok, capsys):
    # The hand file's log TPS: linear-front weights (2/3, 1/3) on steps (0.6, 0.7); half the outcomes are 1.
    w = np.array([2 / 3, 1 / 3])
    expected = 0.5 * (w @ np.log([0.6, 0.7])) + 0.5 * (w @ np.log([0.4, 0.3]))
    code, out, err = call(
        [
            "gate",
            str(ok),
            "--min",
            "-5",
            "--max-flip",
            "0.5",
            "--max-excluded-share",
            "0",
            "--bootstrap",
            "200",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    result = json.loads(out)
    assert math.isclose(result["score"]["mean"], expected, rel_tol=1e-12)


@pytest.mark.parametrize(
    "field, value, expect",
    [
        ("min_score", float("nan"), "must be a finite number"),
        ("rule", 3, "must be a rule name or a score rule, got 3"),
        ("margin", -1.0, "must be >= 0"),
        ("max_flip", 2.0, "must lie in [0, 1]"),
        ("max_excluded_share", -0.1, "must lie in [0, 1]"),
        ("high_censoring", float("nan"), "must be a finite number"),
        ("bootstrap", 10**9, f", {MAX_REPLICATES}]"),
        ("bootstrap", 500.0, "must be an integer"),
        ("min_n", True, "must be an integer"),
        ("seed", "0", "must be an integer"),
    ],
)
def test_gate_criteria_name_the_python_argument(field, value, expect):
    crit = GateCriteria(min_score=0.0, bootstrap=200)
    setattr(crit, field, value)
    with pytest.raises(GateOptionError) as info:
        evaluate_gate([], crit)
    assert info.value.field == field
    assert str(info.value).startswith(f"GateCriteria.{field}: ") and expect in str(info.value)


def test_gate_on_a_snapshot_checks_the_values_too():
    from tps_tracer.evaluation.gate import evaluate_gate_on_report

    with pytest.raises(GateOptionError, match=r"GateCriteria.min_score: must be a finite number"):
        evaluate_gate_on_report({"scores": [], "audit": {}}, GateCriteria(min_score=float("nan")))


def test_report_bootstrap_has_a_documented_upper_bound(ok, capsys):
    with pytest.raises(OptionError, match=rf"ReportOptions.bootstrap: must be at most {MAX_REPLICATES} \(memory grows"):
        tt.ReportOptions(bootstrap=10**9)
    tt.ReportOptions(bootstrap=MAX_REPLICATES)  # the bound itself is allowed
    code, out, err = call(["report", str(ok), "--bootstrap", "1000000000"], capsys)
    assert (
        code == 2
        and out == ""
        and f"--bootstrap: must be at most {MAX_REPLICATES} (memory grows as replicates x score columns)" in err
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["calibrate", "{ok}", "-o", "{d}/c.json", "--bootstrap", "1000000000"],
        ["censoring", "{ok}", "--bootstrap", "1000000000"],
        ["demo", "--out", "{d}/demo", "--bootstrap", "1000000000"],
    ],
    ids=["calibrate", "censoring", "demo"],
)
def test_every_command_bounds_bootstrap(ok, tmp_path, capsys, argv):
    code, _, err = call([a.format(ok=ok, d=tmp_path) for a in argv], capsys)
    assert code == 2, err
    assert "--bootstrap: must be an integer in [" in err and f", {MAX_REPLICATES}]" in err
    assert not (tmp_path / "demo").exists()  # nothing ran


def test_bootstrap_means_refuses_more_than_the_bound():
    keys = trajectory_keys(["a", "b"])
    with pytest.raises(ValueError, match=rf"n_replicates must lie in \[0, {MAX_REPLICATES}\]"):
        bootstrap_means(np.ones((2, 1)), keys, MAX_REPLICATES + 1)


def test_weights_bound_the_horizon_before_allocating():
    assert MAX_HORIZON == 10_000_000  # the capture path's bound, shared
    for bad in (MAX_HORIZON + 1, 10**9, float("inf"), float("nan"), 0, 2.5, True, "3"):
        with pytest.raises(ValueError, match=r"horizon must be an integer in \[1, MAX_HORIZON = 10000000\]"):
            tt.weights("uniform", bad)
    np.testing.assert_allclose(tt.weights("linear-front", 3), [3 / 6, 2 / 6, 1 / 6])
    np.testing.assert_allclose(tt.weights("uniform", 4.0), [0.25] * 4)


def test_a_custom_schedule_bounds_its_numeric_normalisation():
    sched = custom_schedule("flat", lambda t, h: np.ones_like(t))
    with pytest.raises(ValueError, match="horizon must be at most MAX_HORIZON"):
        sched.step_weights([1.0], [float(MAX_HORIZON + 1)])
    np.testing.assert_allclose(sched.step_weights([1.0, 2.0], [4.0, 4.0]), [0.25, 0.25])
