"""Files people write by hand: a UTF-8 byte-order mark, CRLF line ends, `"outcome": true`,
a huge last line without a newline; and `ReportOptions` that fail at once, naming the field."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tps_tracer.cli.main import main
from tps_tracer.evaluation.censoring.continuations import parse_continuations, read_continuations
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import OptionError, ReportOptions
from tps_tracer.records import TrajectoryFileError, read_trajectories, to_arrays
from tps_tracer.synthetic import example_records

LINES = [
    {"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"v": 0.8}}]},
    {"trajectory_id": "b", "stop_reason": "clean", "outcome": 0, "steps": [{"forecasts": {"v": 0.3}}]},
    {"trajectory_id": "c", "stop_reason": "max_steps", "q_z": 0.25, "steps": [{"forecasts": {"v": 0.5}}]},
]


def _dumped(records) -> list[dict]:
    return [r.model_dump() for r in records]


@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_bom_and_crlf_read_like_plain_lines(tmp_path, bom, newline):
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(o) + "\n" for o in LINES))
    other = tmp_path / "other.jsonl"
    other.write_bytes((b"\xef\xbb\xbf" if bom else b"") + "".join(json.dumps(o) + newline for o in LINES).encode())
    assert _dumped(read_trajectories(other)) == _dumped(read_trajectories(plain))
    # ... also as an open stream (the BOM arrives as U+FEFF on the first line).
    text = other.read_bytes().decode("utf-8")
    assert _dumped(read_trajectories(io.StringIO(text))) == _dumped(read_trajectories(plain))


def test_bom_and_crlf_in_a_continuation_file(tmp_path):
    path = tmp_path / "branches.jsonl"
    lines = [{"source_trajectory_id": "c", "branch": m, "stop_reason": "clean", "outcome": m % 2} for m in range(4)]
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(o) + "\r\n" for o in lines).encode())
    branches = read_continuations(path)
    assert [b.outcome for b in branches] == [0, 1, 0, 1]


def test_outcome_true_false_is_read_as_1_0_everywhere(tmp_path):
    """Decision (README "Input"): JSON booleans are accepted as outcomes, true = 1 and false = 0, in
    records, resolution lines and continuation branches alike; strings like "true" are rejected."""
    path = tmp_path / "bools.jsonl"
    rows = [
        {"trajectory_id": "a", "stop_reason": "clean", "outcome": True, "steps": [{"forecasts": {"v": 0.8}}]},
        {"trajectory_id": "b", "stop_reason": "clean", "outcome": False, "steps": [{"forecasts": {"v": 0.3}}]},
        {"trajectory_id": "p", "stop_reason": "clean", "outcome_pending": True, "steps": [{"forecasts": {"v": 0.6}}]},
        {"resolves": "p", "outcome": True},
    ]
    path.write_text("".join(json.dumps(o) + "\n" for o in rows))
    assert [r.outcome for r in read_trajectories(path)] == [1, 0, 1]
    assert to_arrays(read_trajectories(path)).outcome.tolist() == [1.0, 0.0, 1.0]
    lines = [
        json.dumps({"source_trajectory_id": "c", "branch": 0, "stop_reason": "clean", "outcome": True}),
        json.dumps({"source_trajectory_id": "c", "branch": 1, "stop_reason": "clean", "outcome": False}),
    ]
    assert [b.outcome for b in parse_continuations(lines)] == [1, 0]
    path.write_text(json.dumps({**rows[0], "outcome": "true"}) + "\n")
    with pytest.raises(TrajectoryFileError, match=r"outcome must be one of 0, 1 \(or 0\.0, 1\.0\), true, false"):
        read_trajectories(path)
    with pytest.raises(TrajectoryFileError, match="outcome 0 or 1"):
        parse_continuations([json.dumps({"source_trajectory_id": "c", "stop_reason": "clean", "outcome": "true"})])


def _huge_record(n_notes: int) -> str:
    """A valid record line of over 50 MB (long free-text metadata, as a harness might attach)."""
    notes = ",".join(json.dumps(f"note {i}: " + "x" * 1_000_000) for i in range(n_notes))
    steps = '[{"forecasts": {"v": 0.123456789012}}, {"forecasts": {"v": 0.5}}]'
    return (
        '{"trajectory_id": "huge", "stop_reason": "clean", "outcome": 1, "steps": '
        + steps
        + ', "metadata": {"notes": ['
        + notes
        + "]}}"
    )


@pytest.fixture(scope="module")
def huge() -> str:
    text = _huge_record(52)
    assert len(text) > 50_000_000
    return text


def test_a_50mb_last_line_without_newline_is_read(tmp_path, huge):
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n" + huge)  # no final newline
    records = read_trajectories(path)
    assert [len(r.steps) for r in records] == [1, 2]
    assert len(records[1].metadata["notes"]) == 52


def test_a_50mb_last_line_with_an_error_inside_is_not_called_truncated(tmp_path, huge):
    path = tmp_path / "broken.jsonl"
    middle = huge.index('","note 26')
    broken = huge[:middle] + '"}' + huge[middle + 1 :]  # one stray brace in the middle, the end intact
    path.write_text(json.dumps(LINES[0]) + "\n" + broken)
    with pytest.raises(TrajectoryFileError) as err:
        read_trajectories(path)
    [problem] = err.value.errors
    assert problem.line == 2 and "invalid JSON" in problem.message
    assert "truncated" not in str(err.value)


def test_a_really_cut_last_line_is_called_truncated(tmp_path, huge):
    for cut in (
        huge[: len(huge) // 2],
        huge[: huge.index('"stop_reason"') + 5],
        huge[:-1],
        huge[: huge.index("0.12") + 2],
    ):
        path = tmp_path / "cut.jsonl"
        path.write_text(json.dumps(LINES[0]) + "\n" + cut)
        with pytest.raises(TrajectoryFileError, match="the file looks truncated"):
            read_trajectories(path)
    # a cut line that does end in a newline was not cut by a killed writer
    path.write_text(json.dumps(LINES[0]) + "\n" + huge[:1000] + "\n")
    with pytest.raises(TrajectoryFileError) as err:
        read_trajectories(path)
    assert "truncated" not in str(err.value)


# ---------------------------------------------------------------- ReportOptions validation


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("bootstrap", -1, "must be an integer >= 0"),
        ("bootstrap", 2.5, "must be an integer >= 0"),
        ("bootstrap", True, "must be an integer >= 0"),
        ("rules", [], "is empty"),
        ("rules", "log", "must be a list"),
        ("rules", ["logg"], "unknown score rule 'logg'"),
        ("schedules", [], "is empty"),
        ("schedules", ["sideways"], "unknown weight schedule"),
        ("predictors", "verbal", "must be a list"),
        ("predictors", ["verbal", ""], "non-empty strings"),
        ("ece_bins", 0, "must be an integer >= 1"),
        ("seed", "zero", "must be an integer"),
        ("policy", "default", "must be a CensoringPolicy"),
        ("base_rate", "yes", "must be true or false"),
        ("calibrate", "isotonic", "unknown method 'isotonic'"),
    ],
)
def test_report_options_reject_a_bad_field_by_name(field, value, message):
    with pytest.raises(OptionError, match=message) as err:
        ReportOptions(**{field: value})
    assert err.value.field == field and str(err.value).startswith(f"ReportOptions.{field}: ")


def test_report_options_accept_what_they_did_before():
    import numpy as np

    ReportOptions(predictors=[], bootstrap=np.int64(10), rules=("log",), schedules=["uniform"], seed=-3)
    rep = build_report(to_arrays(example_records()[:80]), ReportOptions(rules=["log"], bootstrap=0))
    assert rep["scores"]


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["--bootstrap", "-1"],
            "tps-tracer report: --bootstrap: must be an integer >= 0 (0: no confidence intervals), got -1",
        ),
        (["--ece-bins", "0"], "tps-tracer report: --ece-bins: must be an integer >= 1, got 0"),
        (["--rules", ","], "tps-tracer report: --rules: no score rule given"),
    ],
)
def test_the_cli_names_the_flag_of_a_bad_report_option(tmp_path, capsys, args, line):
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in LINES))
    assert main(["report", str(path), *args]) == 2
    assert capsys.readouterr().err.strip() == line


def test_truncation_hint_is_not_shown_for_a_complete_file(tmp_path):
    """Regression guard for the message of a broken middle line."""
    path = Path(tmp_path / "mid.jsonl")
    path.write_text(json.dumps(LINES[0]) + "\n{broken\n" + json.dumps(LINES[1]) + "\n")
    with pytest.raises(TrajectoryFileError) as err:
        read_trajectories(path)
    assert "line 2: invalid JSON" in str(err.value) and "truncated" not in str(err.value)
