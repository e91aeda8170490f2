"""The Python API takes what its names promise and says so when given something else:
`gate_paths` a single path, `evaluate` records (not dicts, not a path) with unique ids,
`score` one outcome per forecast."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_support import ok_records

import tps_tracer as tt
from tps_tracer.evaluation.gate import GateCriteria, GateInputError, evaluate_gate, gate_paths
from tps_tracer.evaluation.report import build_report
from tps_tracer.records.arrays import to_arrays

rows = ok_records  # the newcomer trial's hand-written file


@pytest.fixture()
def ok(tmp_path) -> Path:
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    return path


def test_gate_paths_takes_one_str_or_pathlike_as_one_path(ok, monkeypatch):
    crit = GateCriteria(min_score=-1.0, bootstrap=200)
    listed = gate_paths([ok], crit)
    for one in (str(ok), ok):
        assert gate_paths(one, crit) == listed
    monkeypatch.chdir(ok.parent)
    assert gate_paths("ok.jsonl", crit) == listed  # relative: used to be read as 'o', 'k', '.', ...
    # Mean log TPS by hand: linear-front weights (2/3, 1/3), half the outcomes 1.
    w = np.array([2 / 3, 1 / 3])
    expected = 0.5 * (w @ np.log([0.6, 0.7])) + 0.5 * (w @ np.log([0.4, 0.3]))
    assert math.isclose(listed["score"]["mean"], expected, rel_tol=1e-12)


def test_evaluate_rejects_a_duplicate_id_instead_of_counting_it_twice(ok):
    records = tt.read_trajectories(ok)
    with pytest.raises(ValueError, match=r"duplicate trajectory id\(s\) 'r0': each trajectory must appear once"):
        tt.evaluate([*records, records[0]], tt.ReportOptions(bootstrap=0))
    with pytest.raises(ValueError, match="duplicate trajectory id"):
        build_report(to_arrays([*records, records[0]]), tt.ReportOptions(bootstrap=0))
    with pytest.raises(GateInputError, match="duplicate trajectory id"):
        evaluate_gate([*records, records[0]], GateCriteria(min_score=-1.0, bootstrap=200))
    report = tt.evaluate(records, tt.ReportOptions(bootstrap=0, rules=["log"]))
    row = next(r for r in report["scores"] if r["predictor"] == "verbal" and r["censoring"] == "simple")
    assert row["n"] == 40


@pytest.mark.parametrize("given", ["path-str", "path", "dicts"])
def test_evaluate_says_to_read_the_file_first(ok, given):
    arg = {"path-str": str(ok), "path": ok, "dicts": rows(3)}[given]
    with pytest.raises(TypeError, match=r"use tps_tracer.read_trajectories\(path\)"):
        tt.evaluate(arg)


def test_score_rejects_mismatched_lengths_but_keeps_scalars_and_2d_broadcasting():
    with pytest.raises(ValueError, match="3 forecasts but 1 outcomes"):
        tt.score([0.5, 0.6, 0.7], [1], "log")
    np.testing.assert_allclose(tt.score([0.5, 0.6, 0.7], 1, "log"), np.log([0.5, 0.6, 0.7]))
    np.testing.assert_allclose(tt.score(0.6, [1, 0], "log"), np.log([0.6, 0.4]))
    np.testing.assert_allclose(tt.score([0.6, 0.2], [1, 0], "brier"), [-(0.4**2), -(0.2**2)])
    grid = tt.score(np.array([[0.6, 0.2]]), np.array([[1.0], [0.0]]), "log")  # branches x forecasts
    np.testing.assert_allclose(grid, np.log([[0.6, 0.2], [0.4, 0.8]]))
