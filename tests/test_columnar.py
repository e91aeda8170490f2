"""Parquet and the columnar readers: the same arrays and reports as the exact JSON Lines path.

(Needs the `parquet` extra, which `make test` installs; tests/test_without_pyarrow.py covers its absence.)
"""

from __future__ import annotations

import io
import json
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from scale_support import assert_reports_equal, trajectory_dicts, write_jsonl

from tps_tracer.cli.main import main
from tps_tracer.evaluation.chunked import read_arrays, report_from_path
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import TrajectoryFileError, parse_lines, read_trajectories, to_arrays
from tps_tracer.records.arrays import raw_from_arrow, validated_arrays
from tps_tracer.records.convert import jsonl_to_parquet
from tps_tracer.records.errors import NotFast
from tps_tracer.records.jsonl_fast import arrays_from_jsonl
from tps_tracer.records.reading import iter_chunks, parquet_records


def _same_arrays(a, b):
    assert a.ids == b.ids
    for name in ("offsets", "horizon", "stop_code", "outcome", "q_z"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert list(a.predictors) == list(b.predictors)
    for name, col in a.predictors.items():
        other = b.predictors[name]
        np.testing.assert_array_equal(col.values, other.values, err_msg=name)
        np.testing.assert_array_equal(col.usable, other.usable, err_msg=name)
        assert col.skipped == other.skipped, name
    assert a.outcome_on_unscored == b.outcome_on_unscored


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory) -> Path:
    recs = trajectory_dicts(700, seed=11)
    recs[5]["extra_field"] = {"kept": True}  # unknown fields survive the round trip
    recs[6]["steps"] and recs[6]["steps"][0].update({"text": "thought"})
    return write_jsonl(tmp_path_factory.mktemp("pq") / "runs.jsonl", recs)


def test_columnar_reader_gives_the_exact_arrays(jsonl):
    exact = to_arrays(read_trajectories(jsonl))
    _same_arrays(exact, read_arrays(jsonl, chunk_bytes=10_000))


def test_parquet_report_equals_jsonl_report(jsonl, tmp_path):
    out = tmp_path / "runs.parquet"
    summary = jsonl_to_parquet(jsonl, out)
    assert summary.trajectories == 700 and summary.non_numeric_as_null == 0
    assert pq.ParquetFile(out).schema_arrow.field("steps").type.value_type.field("forecasts").type.num_fields == 3
    opts = ReportOptions(bootstrap=120)
    expected = build_report(to_arrays(read_trajectories(jsonl)), opts)
    assert_reports_equal(expected, report_from_path(out, opts))
    assert all(c.fast for c in iter_chunks(out))


def test_a_directory_of_shards_is_one_sample(jsonl, tmp_path):
    table = pq.read_table(_parquet(jsonl, tmp_path))
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, start in enumerate(range(0, table.num_rows, 250)):
        pq.write_table(table.slice(start, 250), shards / f"part-{i:03d}.parquet")
    opts = ReportOptions(bootstrap=80, rules=["log", "brier"])
    assert_reports_equal(build_report(to_arrays(read_trajectories(jsonl)), opts), report_from_path(shards, opts))


def _parquet(jsonl: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy.parquet"
    jsonl_to_parquet(jsonl, out)
    return out


def test_round_trip_keeps_every_field(jsonl, tmp_path):
    back = tmp_path / "back.jsonl"
    assert main(["convert", str(_parquet(jsonl, tmp_path)), str(back)]) == 0
    original = [json.loads(line) for line in jsonl.read_text().splitlines()]
    again = [json.loads(line) for line in back.read_text().splitlines()]
    exact = [json.loads(r.model_dump_json()) for r in read_trajectories(jsonl)]
    assert again == [json.loads(r.model_dump_json(exclude={"outcome_pending"})) | {} for r in read_trajectories(back)]
    assert [r["trajectory_id"] for r in again] == [r["trajectory_id"] for r in original]
    assert again[5]["extra_field"] == {"kept": True} and exact[5]["extra_field"] == {"kept": True}
    for a, b in zip(exact, again, strict=True):
        a.pop("outcome_pending")
        for step in a["steps"]:  # absent forecasts come back as explicit nulls (both: "missing")
            step["forecasts"] = {k: v for k, v in step["forecasts"].items() if v is not None}
        for step in b["steps"]:
            step["forecasts"] = {k: v for k, v in step["forecasts"].items() if v is not None}
        assert a == b


def test_bad_parquet_row_names_row_and_field(tmp_path):
    rows = [
        {
            "trajectory_id": f"r{i}",
            "stop_reason": "clean",
            "outcome": 1,
            "q_z": None,
            "steps": [{"t": 1, "forecasts": {"p": 0.5}}],
        }
        for i in range(5)
    ]
    rows[3]["q_z"] = 1.5
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(TrajectoryFileError) as exc:
        report_from_path(path, ReportOptions(bootstrap=10))
    assert exc.value.errors[0].line == 4 and exc.value.errors[0].field == "q_z"
    assert "Parquet" in exc.value.source


def test_non_numeric_forecasts_are_counted_when_converting(tmp_path):
    recs = trajectory_dicts(40, seed=2)
    recs[7]["steps"] = [{"forecasts": {"verbal": "high"}}]
    summary = jsonl_to_parquet(write_jsonl(tmp_path / "odd.jsonl", recs), tmp_path / "odd.parquet")
    assert summary.non_numeric_as_null == 1
    assert "1 non-numeric forecasts written as null" in summary.describe("x")
    assert len(list(parquet_records(tmp_path / "odd.parquet"))) == 40


@pytest.mark.parametrize(
    "row, why",
    [
        ({"trajectory_id": "", "stop_reason": "clean", "outcome": 1}, "trajectory_id"),
        ({"trajectory_id": "a", "stop_reason": "cleaned", "outcome": 1}, "stop_reason"),
        ({"trajectory_id": "a", "stop_reason": "clean", "outcome": 2}, "outcome"),
        ({"trajectory_id": "a", "stop_reason": "clean"}, "outcome"),
        ({"trajectory_id": "a", "stop_reason": "max_steps", "q_z": float("nan")}, "q_z"),
        (
            {
                "trajectory_id": "a",
                "stop_reason": "max_steps",
                "horizon": 1,
                "steps": [{"forecasts": {"p": 0.1}}, {"forecasts": {"p": 0.2}}],
            },
            "horizon",
        ),
        ({"trajectory_id": "a", "stop_reason": "max_steps", "steps": [{"t": 2, "forecasts": {"p": 0.1}}]}, "t"),
        ({"trajectory_id": "a", "stop_reason": "max_steps", "steps": [{"forecasts": {"p": 1.5}}]}, "forecasts.p"),
        ({"trajectory_id": "a", "stop_reason": "max_steps", "steps": [{"forecasts": {"p": "x"}}]}, "forecasts.p"),
    ],
)
def test_columnar_validation_refuses_what_the_exact_path_refuses_or_reads_differently(row, why):
    """Each row is rejected (or read as a non-numeric skip) by pydantic; the columnar path must not accept it."""
    text = "\n".join(json.dumps(r) for r in [{"trajectory_id": "ok", "stop_reason": "clean", "outcome": 0}, row])
    table = pj.read_json(io.BytesIO(text.encode()))  # an Arrow table, as Parquet gives
    with pytest.raises(NotFast, match=why.split(".")[0]):
        validated_arrays(raw_from_arrow(table, from_json=True))
    with pytest.raises(NotFast, match=why.split(".")[0] + "|orjson"):  # NaN: orjson refuses the literal
        arrays_from_jsonl(text.encode())  # the JSON Lines fast path
    with (
        pytest.raises(TrajectoryFileError)
        if why != "forecasts.p" or row["steps"][0]["forecasts"]["p"] != "x"
        else nullcontext()
    ):
        to_arrays(parse_lines(text.splitlines()))


def test_gate_reads_parquet_like_jsonl(jsonl, tmp_path, capsys):
    pq_path = _parquet(jsonl, tmp_path)
    # --max-skipped-share 1: the generated runs often lack a forecast; the reading is what is compared
    args = ["gate", "--min", "-5", "--bootstrap", "200", "--max-skipped-share", "1", "--json"]
    assert main([*args, str(jsonl)]) == 0
    from_jsonl = json.loads(capsys.readouterr().out)
    assert main([*args, str(pq_path)]) == 0
    assert_reports_equal(from_jsonl, json.loads(capsys.readouterr().out))


def test_duplicate_ids_across_parquet_shards_are_an_error(jsonl, tmp_path):
    table = pq.read_table(_parquet(jsonl, tmp_path))
    shards = tmp_path / "dups"
    shards.mkdir()
    pq.write_table(table.slice(0, 400), shards / "a.parquet")
    pq.write_table(table.slice(390, 310), shards / "b.parquet")  # rows 390-399 in both
    with pytest.raises(TrajectoryFileError) as exc:
        report_from_path(shards, ReportOptions(bootstrap=10))
    assert len(exc.value.errors) == 10
    assert "duplicate id" in str(exc.value) and "a.parquet" in str(exc.value)


def test_progress_line_only_on_a_terminal(jsonl, monkeypatch):
    import tps_tracer.cli.main as progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress.progress_for(jsonl, io.StringIO()) is None
    monkeypatch.setattr(progress, "SHOW_AFTER_SECONDS", 0.0)
    out = Terminal()
    report_from_path(jsonl, ReportOptions(bootstrap=5), chunk_bytes=50_000, progress=progress.progress_for(jsonl, out))
    assert out.getvalue().count("\r") > 3 and "100.0%" in out.getvalue() and out.getvalue().endswith("\n")


@pytest.mark.parametrize(
    "command",
    [
        ["calibrate", "--bootstrap", "50", "--json"],
        ["censoring", "--bootstrap", "50", "--json"],
        ["plot", "--format", "png"],
    ],
)
def test_every_command_reads_parquet_like_jsonl(jsonl, tmp_path, capsys, command):
    pq_path = _parquet(jsonl, tmp_path)
    outputs = []
    for i, path in enumerate((jsonl, pq_path)):
        args = [*command, str(path)]
        if command[0] == "calibrate":
            args += ["-o", str(tmp_path / f"cal{i}.json")]
        if command[0] == "plot":
            args += ["-o", str(tmp_path / f"plots{i}")]
        assert main(args) == 0
        out = capsys.readouterr().out
        if command[0] == "plot":
            outputs.append(json.loads((tmp_path / f"plots{i}" / "plot-data.json").read_text()))
        else:
            outputs.append(json.loads(out))
    if command[0] == "calibrate":
        outputs = [json.loads((tmp_path / f"cal{i}.json").read_text()) for i in range(2)]
        for o in outputs:
            o["fitted_on"].pop("source")  # the file's own name
    assert_reports_equal(outputs[0], outputs[1])
