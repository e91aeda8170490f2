"""records/parquet.py: the read with a column projection gives the same arrays and errors, and the
one row -> record converter (`row_json`) gives the chunked and the whole-file read the same records.

(Needs the `parquet` extra.)
"""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scale_support import trajectory_dicts
from test_jsonl_fast import assert_same_arrays

from tps_tracer.evaluation.chunked import read_arrays
from tps_tracer.records import TrajectoryFileError, read_trajectories, to_arrays
from tps_tracer.records.arrays import concat_arrays
from tps_tracer.records.convert import jsonl_to_parquet, parquet_to_jsonl
from tps_tracer.records.parquet import projected_batches, projection
from tps_tracer.records.reading import iter_chunks, parquet_records


def _jsonl(tmp_path, n=40):
    recs = trajectory_dicts(n, seed=3, predictors=("verbal", "token_prob"))
    for i, r in enumerate(recs):
        r["metadata"] = {"agent": "planner", "note": f"run {i}"}
        r["model"] = "m-1"  # an unknown field: kept in `extra`
        for s in r["steps"]:
            s["text"] = "thought"  # an unknown step field: kept in the step's `extra`
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_only_the_scored_columns_are_read(tmp_path):
    src = _jsonl(tmp_path)
    dst = tmp_path / "runs.parquet"
    jsonl_to_parquet(src, dst)
    pf = pq.ParquetFile(dst)
    assert {"metadata", "extra"} <= set(pf.schema_arrow.names)  # the file has them ...
    cols = projection(pf)
    assert cols is not None
    assert not any(c.startswith(("metadata", "extra")) or c.endswith(".extra") for c in cols)  # ... not read
    assert [c for c in cols if c.startswith("steps")] == ["steps.list.element.t", "steps.list.element.forecasts"]
    _, batch, _ = next(projected_batches(pf, 1000))
    assert set(batch.schema.names) == {
        "trajectory_id",
        "stop_reason",
        "outcome",
        "outcome_pending",
        "horizon",
        "q_z",
        "steps",
    }
    assert [f.name for f in batch.schema.field("steps").type.value_type] == ["t", "forecasts"]
    assert_same_arrays(read_arrays(dst), to_arrays(read_trajectories(src)))


def test_a_refused_batch_is_read_whole_and_names_its_row(tmp_path):
    """Small row groups and smaller batches: the exact path gets the right rows (all columns), so the
    error names the same row as a whole-file read of the table would."""
    src = _jsonl(tmp_path)
    dst = tmp_path / "runs.parquet"
    jsonl_to_parquet(src, dst)
    table = pq.read_table(dst)
    horizon = table.column("horizon").to_pylist()
    lengths = [len(s) for s in table.column("steps").to_pylist()]
    bad = next(i for i in range(12, len(lengths)) if lengths[i] >= 2)  # in the second row group, not its first batch
    horizon[bad] = 1  # below the number of steps: refused by the fast path, an error on the exact path
    table = table.set_column(table.schema.get_field_index("horizon"), "horizon", pa.array(horizon, pa.int64()))
    pq.write_table(table, dst, row_group_size=7)
    assert pq.ParquetFile(dst).metadata.num_row_groups > 2
    with pytest.raises(TrajectoryFileError) as info:
        list(iter_chunks(dst, batch_rows=3))
    assert [e.line for e in info.value.errors] == [bad + 1]
    assert "horizon" in info.value.errors[0].message


def test_refused_batches_that_are_valid_give_the_exact_arrays(tmp_path):
    """A batch the fast path refuses but the exact path accepts (a float horizon column: pydantic's lax
    int) is read whole and gives the exact reader's arrays, across row groups and batches."""
    src = _jsonl(tmp_path)
    dst = tmp_path / "runs.parquet"
    jsonl_to_parquet(src, dst)
    table = pq.read_table(dst)
    i = table.schema.get_field_index("horizon")
    table = table.set_column(i, "horizon", table.column("horizon").cast(pa.float64()))
    pq.write_table(table, dst, row_group_size=7)
    chunks = list(iter_chunks(dst, batch_rows=3))
    assert not any(c.fast for c in chunks)
    assert_same_arrays(concat_arrays([c.arrays for c in chunks]), to_arrays(read_trajectories(src)))


def _hand_made(path, rows):
    """A Parquet file written by pyarrow, not by `convert`: string forecasts (the fast read refuses
    the batch), nullable metadata, extras as JSON text."""
    forecasts = pa.struct([pa.field("v", pa.string())])
    step = pa.struct([pa.field("t", pa.int64()), pa.field("forecasts", forecasts), pa.field("extra", pa.string())])
    schema = pa.schema(
        [
            ("trajectory_id", pa.string()),
            ("stop_reason", pa.string()),
            ("outcome", pa.int8()),
            ("q_z", pa.float64()),
            ("steps", pa.list_(step)),
            ("metadata", pa.string()),
            ("extra", pa.string()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


_ROWS = [
    {
        "trajectory_id": "a",
        "stop_reason": "clean",
        "outcome": 1,
        "q_z": None,
        "steps": [
            {"t": 1, "forecasts": {"v": "0.5"}, "extra": json.dumps({"text": "x"})},
            {"t": None, "forecasts": {"v": None}, "extra": None},
        ],
        "metadata": None,
        "extra": json.dumps({"model": "m-1"}),
    },
    {
        "trajectory_id": "b",
        "stop_reason": "max_steps",
        "outcome": None,
        "q_z": 0.5,
        "steps": [{"t": 1, "forecasts": {"v": "0.7"}, "extra": None}],
        "metadata": json.dumps({"task_id": "t1"}),
        "extra": None,
    },
]


def test_the_chunked_and_the_whole_file_read_turn_rows_into_the_same_records(tmp_path):
    """There were two row converters: the chunked read's exact path refused a null `metadata` (which
    the fast path and the whole-file read take as absent), and the whole-file read crashed with a bare
    ValueError on a NaN (the chunked read named its row and field). Now one converter, both readers:
    null metadata is absent, extras are merged back, a NaN is named by row and field."""
    ok = _hand_made(tmp_path / "ok.parquet", _ROWS)
    records = list(parquet_records(ok))
    assert [(r.trajectory_id, r.metadata, r.model_extra) for r in records] == [
        ("a", {}, {"model": "m-1"}),
        ("b", {"task_id": "t1"}, {}),
    ]
    assert [s.model_extra for s in records[0].steps] == [{"text": "x"}, {}] and records[0].steps[1].t is None
    chunks = list(iter_chunks(ok))
    assert not any(c.fast for c in chunks)  # string forecasts: the exact per-row path
    assert_same_arrays(concat_arrays([c.arrays for c in chunks]), to_arrays(records))
    parquet_to_jsonl(ok, tmp_path / "back.jsonl")
    back = [json.loads(line) for line in (tmp_path / "back.jsonl").read_text().splitlines()]
    assert back[0]["model"] == "m-1" and back[0]["steps"][0]["text"] == "x" and back[0]["metadata"] == {}

    nan = _hand_made(tmp_path / "nan.parquet", [dict(_ROWS[1], trajectory_id="c"), dict(_ROWS[1], q_z=math.nan)])
    for read in (lambda: list(parquet_records(nan)), lambda: list(iter_chunks(nan))):
        with pytest.raises(TrajectoryFileError) as exc:
            read()
        assert [(e.line, e.field) for e in exc.value.errors] == [(2, "q_z")]
