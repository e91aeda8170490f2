"""Random records and faults through the sink; the CLI reads back every record counted written (issue 29).

Each example drives a real Accumulator with a real JsonlSink through a random script: trajectories
(any text id, lone surrogates included; any stop reason; any number of steps), late grades, a
disk that fills (each line then partly fits before ENOSPC) and frees, and rotations by rename.
The rotated files and the live one, concatenated in order, are then read by `tps-tracer report`
(the CLI in-process) and by the Python reader. What the accumulator and sink counted decides the
expectation, independently of the reader: every record whose write was counted is read back, with
its grade exactly when the grade's line was counted written, and nothing else is in the files
(no line the reader sets aside).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cli_support import call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sink_faults import Disk, FaultySink

from tps_tracer.online import Accumulator
from tps_tracer.records import read_trajectories
from tps_tracer.records.record_shape import id_problem

REASONS = ("clean", "max_steps", "parse_error", "tool_error", "timeout", "other")

ids = st.text(st.characters(blacklist_categories=()), min_size=0, max_size=6)  # surrogates (Cs) included
run = st.tuples(
    st.just("run"),
    ids,
    st.sampled_from(REASONS),
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=0, max_size=4),
    st.sampled_from([None, 0, 1]),  # an outcome known at the stop
)
grade = st.tuples(st.just("grade"), st.integers(0, 10_000), st.sampled_from([0, 1]))
fault = st.tuples(st.sampled_from(["fill", "free", "rotate"]), st.integers(0, 120))
scripts = st.lists(st.one_of(run, run, grade, fault), min_size=1, max_size=40)


@settings(
    max_examples=25,  # each example runs the CLI report (~1 s on the shared machine)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=scripts)
def test_the_cli_reads_back_every_record_counted_written(tmp_path_factory, capsys, script):
    folder = tmp_path_factory.mktemp("sink")
    path = folder / "runs.jsonl"
    disk = Disk()
    sink = FaultySink(path, disk)
    acc = Accumulator(predictors=["verbal"], sink=sink, bootstrap=100)
    written: dict[str, dict[str, Any]] = {}  # id -> what its record says, for records counted written
    stopped: list[str] = []
    rotations = 0
    # One graded run with forecasts first, so the report always has a predictor to score.
    acc.observe("anchor", {"verbal": 0.6})
    acc.stop("anchor", "clean", outcome=1)
    written["anchor"] = {"reason": "clean", "steps": 1, "outcome": 1}
    stopped.append("anchor")
    for op in script:
        if op[0] == "run":
            _, tid, reason, forecasts, outcome = op
            for p in forecasts:
                acc.observe(tid, {"verbal": p})
            before = sink.written
            accepted = acc.stop(tid, reason, outcome=outcome if reason == "clean" else None)
            assert accepted == (id_problem(tid) is None and tid not in stopped)
            if accepted:
                stopped.append(tid)
            if sink.written > before:
                y = outcome if reason == "clean" else None
                written[tid] = {"reason": reason, "steps": len(forecasts), "outcome": y}
        elif op[0] == "grade":
            if not stopped:
                continue
            tid = stopped[op[1] % len(stopped)]
            before = sink.written
            acc.resolve(tid, outcome=op[2])
            if sink.written > before:  # only a record that reached the file gets a resolution line
                assert tid in written and written[tid]["outcome"] is None
                written[tid]["outcome"] = op[2]  # (on a non-clean stop: kept, ignored by scoring)
        elif op[0] == "fill":
            size = path.stat().st_size if path.exists() else 0
            disk.capacity = size + op[1]  # op[1] bytes of the next line fit, then ENOSPC
        elif op[0] == "free":
            disk.capacity = None
        elif path.exists():  # rotate: a rename the sink must notice (kept as a .jsonl shard)
            rotations += 1
            path.rename(folder / f"runs-{rotations}.jsonl")
    acc.close()

    # The rotated files and the live one, in order, as one file (`cat runs-*.jsonl runs.jsonl`): a
    # grade written after a rotation resolves a record in an earlier file.
    shards = [folder / f"runs-{i}.jsonl" for i in range(1, rotations + 1)] + ([path] if path.exists() else [])
    whole = folder / "all.txt"
    whole.write_text("".join(f.read_text(encoding="utf-8") for f in shards), encoding="utf-8")
    assert len(whole.read_text(encoding="utf-8").splitlines()) == sink.written  # every counted line, whole
    code, out, err = call(["report", str(whole), "--json", "--bootstrap", "100"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert "input" not in report  # nothing set aside: no orphan resolution, no repeated id
    audit = report["audit"]
    assert audit["n_trajectories"] == len(written)
    assert audit["stop_reasons"] == {r: sum(w["reason"] == r for w in written.values()) for r in audit["stop_reasons"]}
    pending = sum(w["reason"] == "clean" and w["outcome"] is None for w in written.values())
    assert audit["pending_outcome"] == pending
    got = {r.trajectory_id: r for r in read_trajectories(whole)}  # and by the Python reader
    assert set(got) == set(written)
    for tid, w in written.items():
        rec = got[tid]
        assert (rec.stop_reason.value, len(rec.steps), rec.outcome) == (w["reason"], w["steps"], w["outcome"])


def test_the_fault_model_is_the_real_one(tmp_path: Path) -> None:
    """The fuzz relies on Disk/FaultySink behaving as a full disk does: a line that does not fit
    leaves the file as it was, and the sink counts it failed."""
    path = tmp_path / "x.jsonl"
    disk = Disk()
    sink = FaultySink(path, disk)
    sink.write({"a": 1})
    disk.capacity = os.path.getsize(path) + 5
    try:
        sink.write({"b": "0123456789"})
    except OSError as exc:
        assert exc.errno == 28
    else:
        raise AssertionError("the write should not fit")
    assert path.read_text() == '{"a":1}\n' and (sink.written, sink.failed) == (1, 1)
