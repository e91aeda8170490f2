"""`convert` JSON Lines -> Parquet in one streamed pass (records/convert.py): the same file as
the exact per-record converter writes, read back to the same arrays and the same report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scale_support import assert_reports_equal, trajectory_dicts, write_jsonl

pq = pytest.importorskip("pyarrow.parquet")

from tps_tracer.evaluation.chunked import read_arrays, report_from_path  # noqa: E402
from tps_tracer.evaluation.report_options import ReportOptions  # noqa: E402
from tps_tracer.records import read_trajectories  # noqa: E402
from tps_tracer.records.convert import _exact_convert, jsonl_to_parquet  # noqa: E402
from tps_tracer.records.reading import parquet_records  # noqa: E402
from tps_tracer.records.schema import TrajectoryRecord  # noqa: E402
from tps_tracer.scoring import parse_rules, parse_schedules  # noqa: E402

OPTS = ReportOptions(rules=parse_rules("log,brier"), schedules=parse_schedules("all"), bootstrap=200)


def _dumped(records) -> list[dict]:
    return [r.model_dump() for r in records]


def _exact(src: Path, dst: Path) -> None:
    """The converter's exact path alone (validated records), the independent reference."""
    _exact_convert(src, str(dst))


@pytest.fixture
def validations(monkeypatch):
    """How many record models are built (the streamed path builds none for a plain file)."""
    count = {"n": 0}
    original = TrajectoryRecord.model_validate.__func__

    def counting(cls, *args, **kwargs):
        count["n"] += 1
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(TrajectoryRecord, "model_validate", classmethod(counting))
    return count


def test_plain_file_is_converted_without_record_models_and_equals_the_exact_converter(tmp_path, validations):
    recs = trajectory_dicts(3000, seed=3)
    for i, rec in enumerate(recs[:50]):  # fields outside the schema, per record and per step, kept
        rec["note"] = {"k": [i, "x:y"]}
        if rec["steps"]:
            rec["steps"][0]["tool"] = f"search-{i}"
    src = write_jsonl(tmp_path / "in.jsonl", recs)
    out = tmp_path / "out.parquet"
    summary = jsonl_to_parquet(src, out, chunk_bytes=64 << 10)
    assert validations["n"] == 0
    assert summary.trajectories == 3000
    assert pq.ParquetFile(out).metadata.num_row_groups > 5  # one per chunk: bounded by the chunk
    _exact(src, tmp_path / "exact.parquet")
    assert validations["n"] > 0
    assert pq.read_schema(out) == pq.read_schema(tmp_path / "exact.parquet")
    # Parquet has a column per name, so an absent forecast reads back as null: the exact converter's
    # file is the reference, and both keep every other field of the JSON Lines records.
    expected = _dumped(parquet_records(tmp_path / "exact.parquet"))
    assert _dumped(parquet_records(out)) == expected
    assert [r["trajectory_id"] for r in expected] == [r.trajectory_id for r in read_trajectories(src)]
    assert expected[0]["note"] == {"k": [0, "x:y"]}
    assert expected[0]["steps"][0]["tool"] == "search-0" or not recs[0]["steps"]


def test_parquet_arrays_are_the_jsonl_arrays_bit_for_bit_and_the_reports_agree(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", trajectory_dicts(4000, seed=5))
    out = tmp_path / "out.parquet"
    jsonl_to_parquet(src, out, chunk_bytes=128 << 10)
    a, b = read_arrays(src), read_arrays(out)
    assert a.ids == b.ids
    for name in ("offsets", "horizon", "stop_code", "outcome", "q_z"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert list(a.predictors) == list(b.predictors)
    for name, col in a.predictors.items():
        assert col.values.tobytes() == b.predictors[name].values.tobytes(), name
        np.testing.assert_array_equal(col.usable, b.predictors[name].usable)
    assert_reports_equal(report_from_path(src, OPTS), report_from_path(out, OPTS))


def test_a_predictor_first_named_in_a_later_chunk_widens_the_earlier_row_groups(tmp_path):
    early = trajectory_dicts(600, seed=1, predictors=("verbal",))
    late = trajectory_dicts(600, seed=2, predictors=("verbal", "judge"))
    src = write_jsonl(tmp_path / "in.jsonl", early + late)
    out = tmp_path / "out.parquet"
    summary = jsonl_to_parquet(src, out, chunk_bytes=16 << 10)
    assert summary.predictors == ("verbal", "judge")
    assert [f.name for f in pq.read_schema(out).field("steps").type.value_type.field("forecasts").type] == [
        "verbal",
        "judge",
    ]
    assert not [p.name for p in tmp_path.iterdir() if p.name not in ("in.jsonl", "out.parquet")]  # segments gone
    _exact(src, tmp_path / "exact.parquet")
    assert _dumped(parquet_records(out)) == _dumped(parquet_records(tmp_path / "exact.parquet"))
    first = pq.read_table(out).slice(0, 600).column("steps").combine_chunks().values.field("forecasts")
    assert first.field("judge").null_count == len(first)  # the early rows never name it


def test_chunks_the_fast_checks_refuse_go_the_exact_way(tmp_path):
    recs = trajectory_dicts(400, seed=7)
    recs[10]["steps"] = [{"t": 1, "forecasts": {"verbal": "high"}}]  # not a number: null, counted
    recs[20]["metadata"] = {"big": 2**70, "neg": -(2**66)}  # beyond 64 bits: kept exact
    recs[300]["trajectory_id"] = recs[5]["trajectory_id"]  # a repeat in a later chunk: set aside
    src = write_jsonl(tmp_path / "in.jsonl", recs)
    out = tmp_path / "out.parquet"
    summary = jsonl_to_parquet(src, out, chunk_bytes=8 << 10)
    assert summary.non_numeric_as_null == 1
    back = {r.trajectory_id: r for r in parquet_records(out)}
    assert len(back) == 399
    assert back[recs[20]["trajectory_id"]].metadata == {"big": 2**70, "neg": -(2**66)}
    assert back[recs[5]["trajectory_id"]].stop_reason.value == recs[5]["stop_reason"]
    assert back[recs[10]["trajectory_id"]].steps[0].forecasts == {"verbal": None, "token_prob": None, "entropy": None}


def test_resolution_lines_and_errors_take_the_whole_file_way(tmp_path):
    recs = trajectory_dicts(200, seed=9)
    recs[0] = {**recs[0], "stop_reason": "clean", "outcome": None, "outcome_pending": True}
    lines = [json.dumps(r) for r in recs] + [json.dumps({"resolves": recs[0]["trajectory_id"], "outcome": 1})]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.parquet"
    jsonl_to_parquet(src, out, chunk_bytes=4 << 10)
    assert next(iter(parquet_records(out))).outcome == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:100], '{"trajectory_id": "x", "stop_reason": "nope"}']) + "\n")
    with pytest.raises(Exception, match="line 101"):
        jsonl_to_parquet(bad, tmp_path / "bad.parquet", chunk_bytes=4 << 10)
    assert not (tmp_path / "bad.parquet").exists()
