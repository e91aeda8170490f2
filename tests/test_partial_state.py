"""The chunked, mergeable path gives today's report to 1e-12: every mean, CI, delta and diagnostic.

The reference is the whole-file path (`read_trajectories` -> `to_arrays` -> `build_report`), whose
bootstrap is `bootstrap_means` on the full score matrix with the id-keyed Poisson weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scale_support import assert_reports_equal, trajectory_dicts, write_jsonl

from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.partial_state import PartialState, StateSpec, merge_states
from tps_tracer.evaluation.report import build_report, report_from_state
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import CensoringPolicy, TrajectoryFileError, read_trajectories, to_arrays
from tps_tracer.records.reading import iter_chunks
from tps_tracer.scoring import parse_rules, parse_schedules

OPTIONS = {
    "default": ReportOptions(bootstrap=200),
    "all": ReportOptions(rules=parse_rules("log,brier,beta(2,4)"), schedules=parse_schedules("all"), bootstrap=150),
    "sensitivity": ReportOptions(
        rules=parse_rules("log"), bootstrap=100, seed=7, policy=CensoringPolicy.treating_as_censored(["parse_error"])
    ),
    "subset": ReportOptions(predictors=["token_prob"], base_rate=False, bootstrap=50, ece_bins=5),
    "no-bootstrap": ReportOptions(bootstrap=0),
    "calibrate": ReportOptions(bootstrap=60, calibrate="platt"),
}


def _whole_file(path: Path, opts: ReportOptions) -> dict:
    return build_report(to_arrays(read_trajectories(path)), opts)


@pytest.fixture(scope="module")
def records_file(tmp_path_factory) -> Path:
    return write_jsonl(
        tmp_path_factory.mktemp("scale") / "runs.jsonl", trajectory_dicts(900, seed=1, capture_lost=True)
    )


@pytest.mark.parametrize("name", list(OPTIONS))
def test_chunked_report_equals_whole_file_report(records_file, name):
    opts = OPTIONS[name]
    expected = _whole_file(records_file, opts)
    assert expected["audit"]["censored_with_q_z"] > 0 and all(expected["audit"]["stop_reasons"].values())
    for chunk_bytes in (3_000, 40_000, 10**9):  # many chunks, a few, one
        assert_reports_equal(expected, report_from_path(records_file, opts, chunk_bytes=chunk_bytes))


def test_chunks_really_are_chunks(records_file):
    chunks = list(iter_chunks(records_file, chunk_bytes=20_000))
    assert len(chunks) > 5
    assert sum(c.arrays.n for c in chunks) == 900
    assert all(c.fast for c in chunks)  # the generated file is all plain numbers: no chunk needed the slow path


def test_merge_in_any_order_gives_the_same_report(records_file):
    opts = OPTIONS["all"]
    spec = StateSpec.from_options(opts)
    chunks = iter_chunks(records_file, chunk_bytes=15_000)
    states = [PartialState.from_arrays(c.arrays, spec, origin=c.origin) for c in chunks]
    forward = report_from_state(merge_states(states), opts)
    rng = np.random.default_rng(3)
    order = rng.permutation(len(states))
    shuffled = report_from_state(merge_states([states[i] for i in order]), opts)
    assert_reports_equal(forward, shuffled)
    assert_reports_equal(_whole_file(records_file, opts), forward)


def test_predictor_first_seen_in_a_later_chunk(tmp_path):
    recs = trajectory_dicts(200, seed=4, predictors=("verbal",))
    for r in recs[150:]:
        for s in r["steps"]:
            s["forecasts"]["late"] = 0.25  # only the last chunk has it: earlier trajectories are "missing"
    path = write_jsonl(tmp_path / "late.jsonl", recs)
    opts = ReportOptions(bootstrap=80)
    expected = _whole_file(path, opts)
    assert [c["predictor"] for c in expected["coverage"]] == ["verbal", "late", "base_rate"]
    assert_reports_equal(expected, report_from_path(path, opts, chunk_bytes=4_000))


def test_unusual_values_take_the_exact_slow_path_per_chunk(tmp_path):
    recs = trajectory_dicts(300, seed=5)
    recs[250]["steps"][0]["forecasts"]["verbal"] = "high"  # non-numeric: a counted gap, not an error
    recs[260]["metadata"] = {"agent": 3}  # mixed metadata types across rows
    recs[270]["steps"][0]["t"] = 1.0  # pydantic's lax int
    path = write_jsonl(tmp_path / "odd.jsonl", recs)
    opts = ReportOptions(bootstrap=50)
    expected = _whole_file(path, opts)
    verbal = next(c for c in expected["coverage"] if c["predictor"] == "verbal")
    assert "non_numeric" not in verbal["skipped"]  # scored: carry-forward fills the step, counted as a gap
    assert expected["missing_forecasts"]["predictors"]["verbal"]["missing_steps"] >= 1
    chunks = list(iter_chunks(path, chunk_bytes=8_000))
    assert not all(c.fast for c in chunks) and any(c.fast for c in chunks)
    assert_reports_equal(expected, report_from_path(path, opts, chunk_bytes=8_000))


def test_crlf_lines_read_like_lf(tmp_path):
    recs = trajectory_dicts(120, seed=6)
    opts = ReportOptions(bootstrap=40)
    expected = _whole_file(write_jsonl(tmp_path / "lf.jsonl", recs), opts)
    assert_reports_equal(expected, report_from_path(write_jsonl(tmp_path / "crlf.jsonl", recs, "\r\n"), opts))


def test_a_utf8_bom_is_read_like_no_bom(tmp_path):
    recs = trajectory_dicts(120, seed=12)
    opts = ReportOptions(bootstrap=40)
    expected = _whole_file(write_jsonl(tmp_path / "plain.jsonl", recs), opts)
    with_bom = write_jsonl(tmp_path / "bom.jsonl", recs, "\r\n", bom=True)
    assert all(c.fast for c in iter_chunks(with_bom, chunk_bytes=5_000))
    assert_reports_equal(expected, report_from_path(with_bom, opts, chunk_bytes=5_000))


def test_resolution_lines_give_the_whole_file_result(tmp_path):
    recs = trajectory_dicts(150, seed=7)
    recs[3] = {**recs[3], "stop_reason": "clean", "outcome": None, "outcome_pending": True}
    lines = [*recs, {"resolves": recs[3]["trajectory_id"], "outcome": 1}]
    path = write_jsonl(tmp_path / "late.jsonl", [lines[-1], *lines[:-1]])  # resolution before its record
    opts = ReportOptions(bootstrap=30)
    assert_reports_equal(_whole_file(path, opts), report_from_path(path, opts, chunk_bytes=5_000))


def _slow_error(path: Path) -> str:
    with pytest.raises(TrajectoryFileError) as exc:
        read_trajectories(path)
    return str(exc.value)


@pytest.mark.parametrize(
    "damage",
    [
        lambda lines: lines.__setitem__(250, lines[250].replace('"stop_reason": ', '"stop_reason": 3, "x": ')),
        lambda lines: lines.__setitem__(260, lines[260][:40]),  # broken JSON in a late chunk
        lambda lines: lines.__setitem__(280, lines[280].replace("0.", "1.", 1)),  # forecast outside [0, 1]
        lambda lines: lines.__setitem__(290, lines[290].replace('"steps": [', '"steps": [{"t": 5}, ', 1)),
    ],
    ids=["bad-field", "bad-json", "out-of-range", "step-order"],  # a duplicate id: test_sink_faults.py
)
def test_bad_lines_give_exactly_the_slow_path_error(tmp_path, damage):
    path = write_jsonl(tmp_path / "bad.jsonl", trajectory_dicts(300, seed=8))
    lines = path.read_text().splitlines(keepends=True)
    damage(lines)
    path.write_text("".join(lines))
    expected = _slow_error(path)
    with pytest.raises(TrajectoryFileError) as exc:
        report_from_path(path, ReportOptions(bootstrap=10), chunk_bytes=6_000)
    assert str(exc.value) == expected


def test_state_round_trips_through_its_arrays(records_file):
    """A state is plain arrays: what issue 18 ships between processes."""
    opts = OPTIONS["default"]
    spec = StateSpec.from_options(opts)
    chunk = next(iter(iter_chunks(records_file, chunk_bytes=20_000)))
    state = PartialState.from_arrays(chunk.arrays, spec)
    again = PartialState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert_reports_equal(report_from_state(state, opts), report_from_state(again, opts))


def test_predictor_order_is_first_seen_whatever_the_reader_threads_do(tmp_path):
    """to_arrays lists predictors in the order records first mention them, null values included;
    the columnar reader must too, even when a name is spelled earlier outside the forecasts."""
    recs = trajectory_dicts(3000, seed=9, predictors=("zeta", "alpha", "mid"))
    recs[0]["metadata"] = {"alpha": "spelled here first, not a forecast"}
    recs[0]["steps"] = [{"forecasts": {"mid": None, "zeta": 0.5}}, {"forecasts": {"alpha": 0.1}}]
    path = write_jsonl(tmp_path / "order.jsonl", recs)
    expected = list(to_arrays(read_trajectories(path)).predictors)
    assert expected == ["mid", "zeta", "alpha"]
    for _ in range(6):  # the threaded reader's own order varies from run to run
        for chunk in iter_chunks(path, chunk_bytes=10**9):  # one chunk, parsed in several threaded blocks
            assert chunk.fast and list(chunk.arrays.predictors) == expected


def test_a_predictor_without_data_is_skipped_as_in_the_whole_file_report(tmp_path):
    """The handler writes null action predictors for tool-calling agents: skipped with the same reason."""
    recs = trajectory_dicts(200, seed=13, predictors=("verbal",))
    for r in recs:
        for s in r["steps"]:
            s["forecasts"]["action_token_prob"] = None
    path = write_jsonl(tmp_path / "handler.jsonl", recs)
    opts = ReportOptions(bootstrap=30)
    expected = _whole_file(path, opts)
    assert [s["predictor"] for s in expected["skipped_predictors"]] == ["action_token_prob"]
    assert_reports_equal(expected, report_from_path(path, opts, chunk_bytes=6_000))
