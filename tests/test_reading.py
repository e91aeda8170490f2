"""records/reading.py: the one decision between fast, exact and whole-file reading.

The readers' results are checked against the exact whole-file reader (`read_trajectories` ->
`to_arrays` -> `build_report`), computed independently of the chunked path. The shard cases are
the ones where a shard among many falls back to its whole-file read after its first chunks were
already given: before reading._midway read only the rest, the shard's whole read was given again and the report
failed with "duplicate id" errors naming the shard twice.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from scale_support import assert_reports_equal, trajectory_dicts

from tps_tracer.constants import MAX_HORIZON
from tps_tracer.evaluation.chunked import report_from_path, with_set_aside
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import TrajectoryFileError, parse_lines, read_trajectories, to_arrays
from tps_tracer.records.arrays import concat_arrays
from tps_tracer.records.errors import NotFast
from tps_tracer.records.jsonl_fast import arrays_from_jsonl
from tps_tracer.records.limits import SetAside
from tps_tracer.records.reading import first_that_reads, iter_chunks, read_jsonl_chunk

OPTIONS = ReportOptions(rules=["log", "brier"], bootstrap=200)
CHUNK = 2_000  # bytes: shard a spans many chunks
PACKAGE = Path(__file__).resolve().parents[1] / "tps_tracer"


def _lines(recs: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(r) for r in recs]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _exact_report(files: list[Path]) -> dict[str, Any]:
    """The report of the shards read one by one the exact whole-file way."""
    reads = [read_trajectories(f) for f in files]
    set_aside = SetAside()
    for r in reads:
        set_aside.merge(r.set_aside)
    return with_set_aside(build_report(concat_arrays([to_arrays(r) for r in reads]), OPTIONS), set_aside)


def _shard_a(case: str) -> list[str]:
    lines = _lines(trajectory_dicts(120, seed=3))
    if case == "orphan resolution at the end":
        lines.append(json.dumps({"resolves": "nobody", "outcome": 1}))
    elif case == "a repeated id in a later chunk":
        # three short copies: at least two share a chunk, which the fast path refuses (a text forecast)
        # and whose strict exact read then fails on the repeat (the whole-file read sets it aside)
        steps = [{"forecasts": {"verbal": "high"}}]
        repeat = json.dumps({"trajectory_id": "again", "stop_reason": "clean", "outcome": 1, "steps": steps})
        lines[100:100] = [repeat] * 3
    return lines


# (An orphan resolution in a shard once took this midway fallback too; resolution lines now apply
# across shards, so it sends the whole input to the exact read: tests/test_shards.py.)
@pytest.mark.parametrize("case", ["a repeated id in a later chunk"])
def test_a_shard_falling_back_midway_gives_each_trajectory_once(tmp_path, case):
    shards = tmp_path / "shards"
    shards.mkdir()
    a = _write(shards / "a.jsonl", _shard_a(case))
    b = _write(shards / "b.jsonl", _lines(trajectory_dicts(80, seed=4)))
    expected = _exact_report([a, b])
    assert expected["input"]["set_aside"]  # the exclusion is counted, not lost
    chunks = list(iter_chunks(shards, CHUNK))
    assert sum(c.source == str(a) for c in chunks) > 3  # the fallback came after chunks were given
    last_of_a = [c for c in chunks if c.source == str(a)][-1]
    assert not last_of_a.fast and last_of_a.set_aside  # the rest of shard a, read the whole-file way
    got = report_from_path(shards, OPTIONS, chunk_bytes=CHUNK)
    assert got["audit"]["n_trajectories"] == expected["audit"]["n_trajectories"] >= 200
    assert_reports_equal(got, expected)


def test_a_shard_whose_given_part_the_exact_read_reads_otherwise_is_not_changed_silently(tmp_path):
    """run-3-0 repeated in a later chunk, then its resolution: the exact read gives it to the repeat (set
    aside), the chunks gave it to the first record. No rewrite of what was given: with resolution lines
    in the input, the whole input is read the exact way (records/reading.py), as the concatenated file."""
    lines = _lines(trajectory_dicts(120, seed=3))
    first = json.loads(lines[0])
    assert first["stop_reason"] == "clean"
    first.pop("outcome")
    lines[0] = json.dumps({**first, "outcome_pending": True})
    lines += [
        json.dumps({**first, "outcome_pending": True}),
        json.dumps({"resolves": first["trajectory_id"], "outcome": 1}),
    ]
    lines.append(json.dumps({"resolves": "nobody", "outcome": 1}))  # the fallback, after the chunks
    shards = tmp_path / "shards"
    shards.mkdir()
    a = _write(shards / "a.jsonl", lines)
    b = _write(shards / "b.jsonl", _lines(trajectory_dicts(10, seed=4)))
    got = report_from_path(shards, OPTIONS, chunk_bytes=CHUNK)
    one = _write(tmp_path / "one.jsonl", [*a.read_text().splitlines(), *b.read_text().splitlines()])
    expected = report_from_path(one, OPTIONS)
    aside = got.pop("input")["set_aside"]
    assert (
        {k: v["count"] for k, v in aside.items()}
        == {k: v["count"] for k, v in expected.pop("input")["set_aside"].items()}
        == {"duplicate_id": 1, "duplicate_resolution": 1, "orphan_resolution": 1}
    )
    assert aside["orphan_resolution"]["first"] == f"{a} line 123: no trajectory 'nobody' in the input"
    assert_reports_equal(got, expected)


def test_the_cascade_tries_the_next_way_and_passes_a_whole_file_refusal_on():
    calls: list[str] = []

    def refuse(name: str, whole: bool = False) -> Any:
        def way() -> str:
            calls.append(name)
            raise NotFast(name, whole_file=whole)

        return way

    assert first_that_reads(refuse("arrow"), refuse("orjson"), lambda: "exact") == "exact"
    assert calls == ["arrow", "orjson"]
    with pytest.raises(NotFast) as exc:
        first_that_reads(refuse("stream", whole=True), lambda: "exact")
    assert exc.value.whole_file and exc.value.reason == "stream"


def test_a_chunk_goes_fast_exact_or_whole_file_as_the_exact_reader_reads_it():
    plain = b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"v": 0.25}}]}\n'
    text = plain.replace(b"0.25", b'"high"')  # a non-numeric forecast: a skip the exact path counts
    bad = plain.replace(b"0.25", b"1.5")  # out of range: an error with its line number
    arrays, fast = read_jsonl_chunk(plain, "<chunk>")
    assert fast and arrays.predictors["v"].values.tolist() == [0.25]
    arrays, fast = read_jsonl_chunk(text, "<chunk>")
    assert not fast and arrays.predictors["v"].skipped == {"non_numeric": 1}
    with pytest.raises(NotFast) as exc:
        read_jsonl_chunk(bad, "<chunk>")
    assert exc.value.whole_file
    with pytest.raises(NotFast) as exc:
        read_jsonl_chunk(plain + b'{"resolves": "a", "q_z": 0.5}\n', "<chunk>")
    assert exc.value.whole_file and exc.value.reason == "resolution lines"


def test_the_readers_have_one_fall_back_exception():
    """Every exception class defined in records/ (the readers) is NotFast; errors are TrajectoryFileError
    (records/errors.py, an InputError) and the like, defined as subclasses of the error base."""
    defined = []
    for path in [*sorted((PACKAGE / "records").glob("*.py")), PACKAGE / "evaluation" / "chunked.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "Exception" for b in node.bases
            ):
                defined.append(f"{path.name}:{node.name}")
    assert defined == ["errors.py:NotFast"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("forecast", 0.0),
        ("forecast", 1.0),
        ("forecast", -0.0),
        ("forecast", 1.0000001),
        ("forecast", -1e-300),
        ("forecast", 5e-324),
        ("horizon", 3),
        ("horizon", 2),
        ("horizon", MAX_HORIZON),
        ("horizon", MAX_HORIZON + 1),
        ("horizon", 0),
    ],
)
def test_forecast_and_horizon_validity_are_the_same_rule_on_every_path(field, value):
    """At the bounds, the fast path (arrays.validated_arrays, through orjson) takes exactly what the
    exact path (pydantic + jsonl.forecast_problem) accepts, with the same arrays; tps_tracer/validity.py
    holds both rules. Independent expectation: the bounds as the paper states them, [0, 1] and
    [max(1, steps), MAX_HORIZON]."""
    steps = [{"forecasts": {"v": value if field == "forecast" else 0.5}} for _ in range(3)]
    rec: dict[str, Any] = {"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": steps}
    if field == "horizon":
        rec["horizon"] = value
    chunk = (json.dumps(rec) + "\n").encode()
    valid = 0.0 <= value <= 1.0 if field == "forecast" else 3 <= value <= MAX_HORIZON
    try:
        exact = to_arrays(parse_lines([chunk.decode()], "<chunk>"))
    except TrajectoryFileError:
        exact = None
    assert (exact is not None) == valid
    try:
        fast = arrays_from_jsonl(chunk)
    except NotFast:
        fast = None
    assert (fast is not None) == valid
    if valid:
        assert fast is not None and exact is not None
        assert fast.predictors["v"].values.tolist() == exact.predictors["v"].values.tolist()
        assert fast.horizon.tolist() == exact.horizon.tolist()
