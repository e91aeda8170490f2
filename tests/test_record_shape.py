"""The accumulator's sink lines are built by `records/record_shape.record_object`, the shape the reader validates."""

from __future__ import annotations

import json

from tps_tracer.online.accumulator import Accumulator
from tps_tracer.records.jsonl import read_trajectories, record_json
from tps_tracer.records.record_shape import record_object


def test_a_sink_line_is_record_object_and_reads_back_as_written(tmp_path):
    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(sink=str(sink), idle_timeout=None)
    acc.observe("r1", {"verbal": 0.8})
    acc.observe("r1", {"verbal": 0.6})
    acc.stop("r1", "clean", metadata={"k": "v"})
    acc.observe("r2", {"verbal": 0.3})
    acc.stop("r2", "max_steps", horizon=4, q_z=0.25)
    acc.close()
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    assert lines[0] == record_object(
        "r1", "clean", outcome=None, horizon=None, q_z=None,
        steps=[{"verbal": 0.8}, {"verbal": 0.6}], metadata={"k": "v"}, outcome_pending=True,
    )  # fmt: skip
    assert lines[0]["outcome_pending"] is True and [s["t"] for s in lines[0]["steps"]] == [1, 2]
    assert "outcome_pending" not in lines[1] and (lines[1]["horizon"], lines[1]["q_z"]) == (4, 0.25)
    records = read_trajectories(sink)
    # The file writer writes what the accumulator wrote (same fields, same values).
    assert [json.loads(record_json(r)) for r in records] == lines
