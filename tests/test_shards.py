"""Directories of record files as users write them (records/reading.py): resolution lines in a shard
of their own, empty shards, a Parquet file with a repeated id, a 0-row Parquet file, outcome 1.0,
a gzip-compressed file. The reference is always the same records in one concatenated file, read
by the single-file readers."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scale_support import assert_reports_equal, trajectory_dicts

from tps_tracer.evaluation.chunked import read_arrays, report_from_path
from tps_tracer.evaluation.gate import GateCriteria, gate_paths
from tps_tracer.evaluation.report import reports_by
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import TrajectoryFileError, read_trajectories, to_arrays
from tps_tracer.records.convert import jsonl_to_parquet, parquet_to_jsonl
from tps_tracer.records.reading import exact_records, parquet_records

OPTIONS = ReportOptions(rules=["log", "brier"], bootstrap=200)
CHUNK = 3_000  # bytes: every shard spans several chunks
CRIT = GateCriteria(min_score=-5.0, bootstrap=200)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _graded_later(n: int, seed: int) -> tuple[list[str], list[str]]:
    """(record lines with every clean outcome pending, the grading job's resolution lines in a
    shuffled order; some also give a censored run's q_z)."""
    rng = random.Random(seed)
    records, grades = [], []
    for rec in trajectory_dicts(n, seed=seed):
        res: dict[str, Any] = {}
        if rec["stop_reason"] == "clean" and rec.get("outcome") is not None:
            res["outcome"] = rec.pop("outcome")
            rec["outcome_pending"] = True
        if rec["stop_reason"] == "max_steps" and rec.get("q_z") is not None and rng.random() < 0.5:
            res["q_z"] = rec.pop("q_z")
        records.append(json.dumps(rec))
        if res:
            grades.append(json.dumps({"resolves": rec["trajectory_id"], **res}))
    rng.shuffle(grades)
    return records, grades


@pytest.fixture
def graded(tmp_path: Path) -> dict[str, Any]:
    """xs/a.jsonl (pending records), xs/b.jsonl (only the grades) and the same lines in one file."""
    records, grades = _graded_later(300, seed=5)
    xs = tmp_path / "xs"
    xs.mkdir()
    a, b = _write(xs / "a.jsonl", records), _write(xs / "b.jsonl", grades)
    one = _write(tmp_path / "one.jsonl", [*records, *grades])
    return {"dir": xs, "a": a, "b": b, "one": one, "n_grades": len(grades)}


def test_a_shard_of_resolution_lines_grades_the_other_shards_as_one_file(graded, monkeypatch):
    expected = report_from_path(graded["one"], OPTIONS)
    assert expected["audit"]["n_trajectories"] == 300 and graded["n_grades"] > 50
    assert "input" not in expected  # every grade found its record
    # The plain case stays on the chunked fast path: the exact whole-input read is not needed.
    monkeypatch.setattr("tps_tracer.records.reading.read_shards", _forbidden)
    for chunk_bytes in (CHUNK, 32 << 20):
        assert_reports_equal(report_from_path(graded["dir"], OPTIONS, chunk_bytes=chunk_bytes), expected)
    # The grades arrive on the records: the outcomes are those of the file where they follow them.
    got, ref = read_arrays(graded["dir"], CHUNK), to_arrays(read_trajectories(graded["one"]))
    assert got.ids == ref.ids
    _assert_same_arrays(got, ref)


def _assert_same_arrays(got: Any, ref: Any) -> None:
    assert got.ids == ref.ids
    for name in ("outcome", "q_z", "stop_code", "horizon"):
        assert getattr(got, name).tolist() == pytest.approx(getattr(ref, name).tolist(), nan_ok=True), name


def _forbidden(*_a: Any, **_k: Any) -> None:
    raise AssertionError("the plain case must not need the exact whole-input read")


def test_every_reading_path_agrees_on_shards_with_resolution_lines(graded, tmp_path):
    ref = read_trajectories(graded["one"])
    dumped = [r.model_dump(mode="json") for r in ref]
    # The exact way (what the fast path falls back to) and convert (directory -> JSON Lines).
    assert [r.model_dump(mode="json") for r in exact_records(graded["dir"])] == dumped
    assert [r.model_dump(mode="json") for r in parquet_records(graded["dir"])] == dumped
    back = tmp_path / "back.jsonl"
    assert parquet_to_jsonl(graded["dir"], back).trajectories == 300
    assert [r.model_dump(mode="json") for r in read_trajectories(back)] == dumped
    # A Parquet shard's records are graded by a JSON Lines shard's resolution lines too.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    jsonl_to_parquet(graded["a"], mixed / "a.parquet")
    (mixed / "b.jsonl").write_bytes(graded["b"].read_bytes())
    expected = report_from_path(graded["one"], OPTIONS)
    assert_reports_equal(report_from_path(mixed, OPTIONS, chunk_bytes=CHUNK), expected)
    # (Parquet stores an absent forecast as null, in schema order: the same arrays, not the same dicts)
    _assert_same_arrays(to_arrays(exact_records(mixed)), to_arrays(ref))
    # `report --by` reads records whole: the same groups, the same reports.
    assert_reports_equal(reports_by(graded["dir"], "agent", OPTIONS), reports_by(graded["one"], "agent", OPTIONS))
    # The gate: a directory, and the two files given together, both as the one file.
    gate_one = gate_paths([graded["one"]], CRIT)
    assert_reports_equal(gate_paths([graded["dir"]], CRIT, chunk_bytes=CHUNK), gate_one)
    assert_reports_equal(gate_paths([graded["a"], graded["b"]], CRIT, chunk_bytes=CHUNK), gate_one)
    assert_reports_equal(gate_paths([graded["b"], graded["a"]], CRIT), gate_one)  # grades first: same


def test_grades_before_their_records_and_an_orphan_are_read_as_in_one_file(graded, tmp_path):
    """A grade in an earlier shard than its record belongs to it (no record above: the first one);
    one naming an id no shard holds is set aside, counted and named by shard and line."""
    ys = tmp_path / "ys"
    ys.mkdir()
    grades = graded["b"].read_text().splitlines()
    grades.insert(7, json.dumps({"resolves": "nobody", "outcome": 1}))
    _write(ys / "0-grades.jsonl", grades)
    (ys / "1-runs.jsonl").write_bytes(graded["a"].read_bytes())
    one = _write(tmp_path / "one2.jsonl", [*grades, *graded["a"].read_text().splitlines()])
    expected = report_from_path(one, OPTIONS)
    for read in (lambda: report_from_path(ys, OPTIONS, chunk_bytes=CHUNK), lambda: report_from_path(ys, OPTIONS)):
        got = read()
        aside = got.pop("input")["set_aside"]
        assert aside == {
            "orphan_resolution": {
                "count": 1,
                "first": f"{ys / '0-grades.jsonl'} line 8: no trajectory 'nobody' in the input",
            }
        }
        assert expected["input"]["set_aside"]["orphan_resolution"]["count"] == 1
        assert_reports_equal(got, {k: v for k, v in expected.items() if k != "input"})


def test_a_conflicting_grade_in_another_shard_names_its_shard_and_line(graded, tmp_path):
    first = next(json.loads(x) for x in graded["b"].read_text().splitlines() if "outcome" in json.loads(x))
    with graded["b"].open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"resolves": first["resolves"], "outcome": 1 - first["outcome"]}) + "\n")
    for read in (
        lambda: report_from_path(graded["dir"], OPTIONS, chunk_bytes=CHUNK),
        lambda: exact_records(graded["dir"]),
    ):
        with pytest.raises(TrajectoryFileError) as exc:
            read()
        assert exc.value.source == str(graded["b"])
        assert exc.value.errors[0].line == graded["n_grades"] + 1 and exc.value.errors[0].field == "outcome"


def test_empty_shards_are_named_and_counted_and_no_trajectory_at_all_is_an_error(graded, tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    lines = [json.dumps(r) for r in trajectory_dicts(50, seed=2)]
    _write(ds / "a.jsonl", lines)
    (ds / "b.jsonl").write_text("")
    (ds / "c.jsonl").write_text("\n  \n")
    expected = report_from_path(_write(tmp_path / "a_only.jsonl", lines), OPTIONS)
    for chunk_bytes in (CHUNK, 32 << 20):
        got = report_from_path(ds, OPTIONS, chunk_bytes=chunk_bytes)
        assert got.pop("input") == {"set_aside": {"empty_shard": {"count": 2, "first": str(ds / "b.jsonl")}}}
        assert_reports_equal(got, expected)
    assert exact_records(ds).set_aside.as_dict() == {"empty_shard": {"count": 2, "first": str(ds / "b.jsonl")}}
    (ds / "a.jsonl").unlink()
    for read in (lambda: report_from_path(ds, OPTIONS), lambda: gate_paths([ds], CRIT), lambda: exact_records(ds)):
        with pytest.raises(TrajectoryFileError, match="the directory holds no trajectories"):
            read()


def _parquet_with_repeat(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A Parquet file whose row 31 repeats the id of row 5 (a re-run appended to the same table, written
    with pyarrow: convert itself sets a repeat aside), the same rows as JSON Lines, the lines without it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = [json.dumps(r) for r in trajectory_dicts(60, seed=9)]
    clean = tmp_path / "clean.parquet"
    jsonl_to_parquet(_write(tmp_path / "clean.jsonl", lines), clean)
    table = pq.read_table(clean)
    pq_path = tmp_path / "dup.parquet"
    pq.write_table(pa.concat_tables([table.slice(0, 30), table.slice(4, 1), table.slice(30)]), pq_path)
    with_repeat = _write(tmp_path / "dup.jsonl", [*lines[:30], lines[4], *lines[30:]])
    return pq_path, with_repeat, lines


def test_a_repeated_id_in_parquet_is_set_aside_and_counted_as_in_json_lines(tmp_path):
    pq_path, jsonl_path, lines = _parquet_with_repeat(tmp_path)
    from_jsonl = report_from_path(jsonl_path, OPTIONS)
    assert from_jsonl["input"]["set_aside"]["duplicate_id"]["count"] == 1
    got = report_from_path(pq_path, OPTIONS)
    assert got["input"] == {
        "set_aside": {"duplicate_id": {"count": 1, "first": "row 31: duplicate id 'run-9-4' (first seen on row 5)"}}
    }
    assert_reports_equal(
        {k: v for k, v in got.items() if k != "input"}, {k: v for k, v in from_jsonl.items() if k != "input"}
    )
    gated = gate_paths([pq_path], CRIT)
    assert gated.pop("input") == got["input"]  # the gate shows the repeat as report does
    assert_reports_equal(gated, gate_paths([tmp_path / "clean.jsonl"], CRIT))
    back = tmp_path / "back.jsonl"
    assert parquet_to_jsonl(pq_path, back).trajectories == 60  # convert: the same records, the repeat left out
    assert [json.loads(x)["trajectory_id"] for x in back.read_text().splitlines()] == [
        json.loads(x)["trajectory_id"] for x in lines
    ]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tps_tracer.cli.main", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_cli_reports_a_directory_whose_grades_are_a_shard_of_their_own(graded, tmp_path):
    """The trial's case (a new user's notes): exit 2, "xs/b.jsonl: the file holds no trajectories"."""
    ok = _cli("report", str(graded["dir"]), "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["audit"]["n_trajectories"] == 300


def test_cli_refuses_a_0_row_parquet_file_in_convert_as_in_report(tmp_path):
    """convert once wrote an empty file, exit 0, while report refused the same file."""
    import pyarrow.parquet as pq

    pq_path, _, _ = _parquet_with_repeat(tmp_path)
    pq.write_table(pq.read_table(pq_path).slice(0, 0), tmp_path / "empty.parquet")
    for args in (["report", "empty.parquet"], ["convert", "empty.parquet", "out.jsonl"]):
        proc = _cli(*args, cwd=tmp_path)
        assert proc.returncode == 2 and "empty.parquet: the file holds no trajectories" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_cli_says_a_gzip_file_looks_compressed(graded, tmp_path):
    (tmp_path / "runs.jsonl.gz").write_bytes(gzip.compress(graded["one"].read_bytes()))
    proc = _cli("report", "runs.jsonl.gz", cwd=tmp_path)
    assert proc.returncode == 2
    assert "not UTF-8 text (invalid start byte); it looks like gzip-compressed data" in proc.stderr
    assert "gunzip -k" in proc.stderr
    # Plain text that is not UTF-8 keeps the plain message (no guess).
    (tmp_path / "latin1.jsonl").write_bytes('{"trajectory_id": "é"}\n'.encode("latin-1"))
    proc = _cli("report", "latin1.jsonl", cwd=tmp_path)
    assert proc.returncode == 2 and "not UTF-8 text (invalid continuation byte)" in proc.stderr
    assert "looks like" not in proc.stderr


def test_outcome_one_point_zero_is_the_outcome_one_and_the_message_says_so(tmp_path):
    rec = {"trajectory_id": "a", "stop_reason": "clean", "steps": [{"forecasts": {"v": 0.8}}]}
    path = _write(
        tmp_path / "f.jsonl",
        [json.dumps({**rec, "outcome": 1.0}), json.dumps({**rec, "trajectory_id": "b", "outcome": 0.0})],
    )
    assert [r.outcome for r in read_trajectories(path)] == [1, 0]
    assert read_arrays(path).outcome.tolist() == [1.0, 0.0]  # the fast reader agrees
    _write(path, [json.dumps({**rec, "outcome": 0.5})])
    with pytest.raises(TrajectoryFileError) as exc:
        read_trajectories(path)
    assert exc.value.errors[0].message == "an outcome must be one of 0, 1 (or 0.0, 1.0), true, false or null, got 0.5"


def test_a_rerun_appended_to_one_shard_is_set_aside_as_in_a_file_read_alone(tmp_path):
    # The file alone set the repeat aside; inside a directory the same file was a hard error
    # ("duplicate id 'x' (in d/a.jsonl, first seen in d/a.jsonl)").
    lines = [json.dumps(r) for r in trajectory_dicts(120, seed=9)]
    rerun = json.loads(lines[7])
    rerun["steps"] = rerun["steps"][:1]
    shard_a = [*lines[:60], json.dumps(rerun)]
    d = tmp_path / "d"
    d.mkdir()
    _write(d / "a.jsonl", shard_a)
    _write(d / "b.jsonl", lines[60:])
    one = _write(tmp_path / "one.jsonl", [*shard_a, *lines[60:]])
    got = report_from_path(d, OPTIONS, chunk_bytes=CHUNK)
    assert_reports_equal(got, report_from_path(one, OPTIONS, chunk_bytes=CHUNK))
    assert got["input"]["set_aside"]["duplicate_id"]["count"] == 1
    assert got["audit"]["n_trajectories"] == 120
    # The same id in two shards stays an error, naming both shards.
    _write(d / "c.jsonl", [lines[3]])
    with pytest.raises(TrajectoryFileError, match=r"in .*c\.jsonl, first seen in .*a\.jsonl"):
        report_from_path(d, OPTIONS, chunk_bytes=CHUNK)
