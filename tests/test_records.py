"""Reading the interchange format: clear errors naming line and field, counted skips, round trips."""

import json

import pytest

from tps_tracer import TrajectoryFileError, read_trajectories, write_trajectories
from tps_tracer.records import parse_lines, to_arrays

GOOD = {
    "trajectory_id": "a",
    "stop_reason": "clean",
    "outcome": 1,
    "steps": [{"t": 1, "forecasts": {"v": 0.9}}, {"t": 2, "forecasts": {"v": 0.8}}],
}


def _line(**changes):
    d = json.loads(json.dumps(GOOD))
    d.update(changes)
    return json.dumps(d)


def _error_of(lines):
    with pytest.raises(TrajectoryFileError) as exc:
        parse_lines([ln if ln.endswith("\n") else ln + "\n" for ln in lines])
    return exc.value


@pytest.mark.parametrize(
    "line, field, message",
    [
        (_line(outcome=None), "", "needs an outcome"),
        (_line(outcome=2), "outcome", "0, 1"),
        (_line(stop_reason="crashed"), "stop_reason", "max_steps"),
        (_line(horizon=1), "", "horizon (1) is smaller"),
        (_line(q_z=1.5), "q_z", "less than or equal to 1"),
        (
            '{"trajectory_id": "a", "stop_reason": "max_steps", "q_z": NaN, "steps": []}',
            "q_z",
            "finite",
        ),
        (_line(steps=[{"t": 1, "forecasts": {"v": float("nan")}}]), "steps[0].forecasts.v", "NaN"),
        (
            _line(steps=[{"t": 1, "forecasts": {"v": 1.3}}]),
            "steps[0].forecasts.v",
            "outside [0, 1]",
        ),
        (_line(steps=[{"t": 2, "forecasts": {"v": 0.3}}]), "", "expected 1"),
        (_line(trajectory_id=""), "trajectory_id", "at least 1"),
        ("[1, 2]", "", "JSON object"),
    ],
)
def test_bad_records_name_line_and_field(line, field, message):
    err = _error_of([_line(trajectory_id="ok"), line])
    assert err.errors[0].line == 2
    assert err.errors[0].field == field
    assert message in err.errors[0].message


def test_empty_file_is_an_error(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n\n")
    with pytest.raises(TrajectoryFileError, match="no trajectories"):
        read_trajectories(p)


def test_truncated_last_line_is_reported_as_truncation(tmp_path):
    p = tmp_path / "cut.jsonl"
    p.write_text(_line(trajectory_id="x") + "\n" + _line(trajectory_id="y")[:40])
    with pytest.raises(TrajectoryFileError, match="truncated") as exc:
        read_trajectories(p)
    assert exc.value.errors[0].line == 2


def test_duplicate_ids_are_set_aside_with_the_first_line_or_refused_when_strict():
    with pytest.raises(TrajectoryFileError) as exc:
        parse_lines([_line(), _line()], strict=True)
    assert "first seen on line 1" in exc.value.errors[0].message
    records = parse_lines([_line(), _line(outcome=0)])
    assert len(records) == 1 and records[0].outcome == 1  # the first record of the id is kept
    assert records.set_aside.as_dict() == {
        "duplicate_id": {"count": 1, "first": "line 2: duplicate id 'a' (first seen on line 1)"}
    }


def test_all_problems_are_listed_not_just_the_first():
    err = _error_of([_line(outcome=5, trajectory_id="p"), _line(outcome=None, trajectory_id="q")])
    assert [e.line for e in err.errors] == [1, 2]


def test_missing_file():
    with pytest.raises(TrajectoryFileError, match="not found"):
        read_trajectories("/nonexistent/file.jsonl")


def test_missing_and_non_numeric_forecasts_are_counted_skips_not_errors():
    recs = parse_lines(
        [
            _line(trajectory_id="a"),
            _line(trajectory_id="b", steps=[{"forecasts": {"v": 0.5}}, {"forecasts": {}}]),
            _line(trajectory_id="c", steps=[{"forecasts": {"v": "high"}}]),
            _line(trajectory_id="d", steps=[{"forecasts": {"v": True}}]),
            json.dumps({"trajectory_id": "e", "stop_reason": "parse_error", "steps": []}),
        ]
    )
    col = to_arrays(recs).predictors["v"]
    assert col.usable.tolist() == [True, False, False, False, False]
    assert col.skipped == {"missing": 1, "non_numeric": 2, "no_steps": 1}


def test_round_trip_keeps_every_field(tmp_path):
    rec = parse_lines([_line(q_z=None, metadata={"agent": "planner"}, extra_field=[1, 2])])
    path = tmp_path / "out.jsonl"
    assert write_trajectories(rec, path) == 1
    back = read_trajectories(path)
    assert back[0].model_dump() == rec[0].model_dump()
    assert back[0].model_extra == {"extra_field": [1, 2]}
