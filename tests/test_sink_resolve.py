"""Grades that arrive in another process: `JsonlSink(path).resolve(...)` appends the resolution
line `report` applies, so the report equals the accumulator that resolved its runs itself."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.online import Accumulator, JsonlSink

GRADES = {f"run-{i}": i % 3 != 0 for i in range(40)}


def _record(acc: Accumulator) -> None:
    for i, tid in enumerate(GRADES):
        for t in range(1 + i % 4):
            acc.observe(tid, {"verbal": round(0.2 + 0.015 * i + 0.05 * t, 4)})
        acc.stop(tid, "clean" if i % 5 else "max_steps", horizon=None if i % 5 else 6)


def test_a_grader_in_another_process_resolves_through_the_file(tmp_path):
    path = tmp_path / "runs.jsonl"
    acc = Accumulator(predictors=["verbal"], sink=path)
    _record(acc)  # the service stops (outcomes pending)
    acc.close()
    grader = textwrap.dedent(
        f"""
        from tps_tracer.online import JsonlSink
        grades = {GRADES!r}
        with JsonlSink({str(path)!r}) as sink:
            for tid, ok in grades.items():
                if int(tid.split("-")[1]) % 5:          # clean stops get their grade
                    sink.resolve(tid, outcome=ok)
                else:                                    # budget stops get a q_z estimate
                    sink.resolve(tid, q_z=0.25)
        """
    )
    subprocess.run([sys.executable, "-c", grader], check=True)

    same = Accumulator(predictors=["verbal"])  # the same runs resolved in one process
    _record(same)
    for tid, ok in GRADES.items():
        if int(tid.split("-")[1]) % 5:
            same.resolve(tid, outcome=int(ok))
        else:
            same.resolve(tid, q_z=0.25)
    got, expected = report_from_path(path, ReportOptions(bootstrap=100)), same.snapshot(bootstrap=100)
    assert got["audit"]["pending_outcome"] == 0 and got["audit"]["censored_with_q_z"] == 8
    assert len(got["scores"]) == len(expected["scores"]) > 0
    for a, b in zip(got["scores"], expected["scores"], strict=True):
        key = ("predictor", "rule", "weights", "censoring", "n")
        assert [a[k] for k in key] == [b[k] for k in key]
        assert a["mean"] == pytest.approx(b["mean"], rel=1e-12)
        assert a["ci_low"] == pytest.approx(b["ci_low"], rel=1e-12)


@pytest.mark.parametrize(
    ("tid", "kwargs", "message"),
    [
        ("", {"outcome": 1}, "non-empty str"),
        ("a", {}, "an outcome or a q_z"),
        ("a", {"outcome": 2}, "an outcome must be"),
        ("a", {"q_z": float("nan")}, "q_z must be"),
        ("a", {"q_z": 1.5}, "q_z must be"),
        ("a", {"q_z": True}, "q_z must be"),
    ],
)
def test_invalid_resolutions_raise_and_write_nothing(tmp_path, tid, kwargs, message):
    path = tmp_path / "runs.jsonl"
    with JsonlSink(path) as sink, pytest.raises(ValueError, match=message):
        sink.resolve(tid, **kwargs)
    assert path.read_text() == ""
