"""Artifacts are replaced atomically: a failure or a kill mid-write leaves the old file (or none).

Every failure here is real: a record that cannot be serialised, a string that cannot be
encoded, a process killed with SIGKILL while its temporary file is half written.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from handler_output import write_handler_output

from tps_tracer import output
from tps_tracer.cli.main import main
from tps_tracer.output import atomic_write, write_text
from tps_tracer.records import read_trajectories, write_trajectories
from tps_tracer.records.schema import StepRecord, TrajectoryRecord

OLD = "the old content, intact\n"


def _leftovers(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.endswith(".tmp")]


def test_a_failure_midway_leaves_the_old_file(tmp_path):
    target = tmp_path / "artifact.txt"
    target.write_text(OLD)
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write("half of the new content")
        fh.flush()
        raise RuntimeError("disk full, say")
    assert target.read_text() == OLD
    assert _leftovers(tmp_path) == []


def test_no_file_is_created_when_the_first_write_fails(tmp_path):
    target = tmp_path / "new.txt"
    with pytest.raises(UnicodeEncodeError):
        write_text(target, "fine so far \ud800 a lone surrogate cannot be encoded")
    assert not target.exists() and _leftovers(tmp_path) == []


def test_permissions_follow_the_old_file_or_the_umask(tmp_path):
    target = tmp_path / "kept-mode.txt"
    target.write_text(OLD)
    os.chmod(target, 0o640)
    write_text(target, "new\n")
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640
    fresh = tmp_path / "fresh.txt"
    write_text(fresh, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert (fresh.stat().st_mode & 0o777) == 0o666 & ~umask


def test_append_keeps_the_old_content_and_a_failed_append_changes_nothing(tmp_path):
    target = tmp_path / "summary.md"
    target.write_text(OLD)
    write_text(target, "more\n", append=True)
    assert target.read_text() == OLD + "more\n"
    with pytest.raises(UnicodeEncodeError):
        write_text(target, "broken \udc80\n", append=True)
    assert target.read_text() == OLD + "more\n" and _leftovers(tmp_path) == []


def test_a_killed_writer_leaves_the_old_file(tmp_path):
    """SIGKILL while the new content is half written: the target still holds the old bytes."""
    target = tmp_path / "records.jsonl"
    target.write_text(OLD)
    script = textwrap.dedent(
        f"""
        import sys, time
        from tps_tracer.output import atomic_write
        with atomic_write({str(target)!r}) as fh:
            fh.write("x" * 1_000_000)
            fh.flush()
            print("half written", flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "half written"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert target.read_text() == OLD
    # The kill left the temporary file (nothing can clean up after SIGKILL), never a torn target.
    [tmp] = _leftovers(tmp_path)
    assert (tmp_path / tmp).stat().st_size == 1_000_000


def _record(i: int, meta: object = "ok") -> TrajectoryRecord:
    return TrajectoryRecord(
        trajectory_id=f"r{i}",
        stop_reason="clean",
        outcome=1,
        steps=[StepRecord(forecasts={"v": 0.5})],
        metadata={"m": meta},
    )


def test_write_records_failing_midway_keeps_the_old_file(tmp_path):
    """The 3rd of 5 records carries metadata that cannot be serialised: the writer fails after two
    lines of the new file were written; the old file must be untouched."""
    target = tmp_path / "runs.jsonl"
    write_trajectories([_record(i) for i in range(3)], target)
    before = target.read_bytes()
    records = [_record(i, "new" if i != 2 else object()) for i in range(5)]
    with pytest.raises(ValueError, match="Unable to serialize"):
        write_trajectories(records, target)
    assert target.read_bytes() == before
    assert [r.metadata["m"] for r in read_trajectories(target)] == ["ok"] * 3
    assert _leftovers(tmp_path) == []


def test_a_nan_forecast_is_written_as_null(tmp_path):
    """Strict JSON: an undefined forecast is written as null (a missing forecast when read back)."""
    target = tmp_path / "nan.jsonl"
    rec = TrajectoryRecord(
        trajectory_id="a", stop_reason="clean", outcome=1, steps=[StepRecord(forecasts={"v": math.nan})]
    )
    write_trajectories([rec], target)
    assert json.loads(target.read_text())["steps"][0]["forecasts"] == {"v": None}


@pytest.fixture(scope="module")
def ones_file(tmp_path_factory) -> Path:
    """Handler output where every graded run succeeded: no Platt map can be fitted."""
    d = tmp_path_factory.mktemp("ones")
    good = write_handler_output(d / "good.jsonl", n_tasks=40)
    lines = [json.loads(line) for line in good.read_text().splitlines()]
    ones = d / "ones.jsonl"
    ones.write_text(
        "".join(
            json.dumps({**r, "outcome": 1} if "resolves" in r or r.get("outcome") is not None else r) + "\n"
            for r in lines
        )
    )
    return ones


def test_calibrate_on_an_unfittable_sample_keeps_the_old_artifact(ones_file, tmp_path, capsys):
    """The issue's case: on main this exit-2 run left a truncated calibrator JSON behind."""
    out = tmp_path / "calibrator.json"
    out.write_text(OLD)
    assert main(["calibrate", str(ones_file), "-o", str(out), "--predictors", "verbal"]) == 2
    assert "no predictor to calibrate: verbal: cross-fitted Platt needs" in capsys.readouterr().err
    assert out.read_text() == OLD and _leftovers(tmp_path) == []
    fresh = tmp_path / "fresh.json"
    assert main(["calibrate", str(ones_file), "-o", str(fresh), "--predictors", "verbal,token_prob"]) == 2
    assert not fresh.exists()


def test_gate_markdown_failing_midway_keeps_the_old_summary(ones_file, tmp_path, capsys, monkeypatch):
    import tps_tracer.cli.gate_cmd as gate_cmd

    summary = tmp_path / "summary.md"
    summary.write_text(OLD)
    real = gate_cmd.render_gate_markdown
    monkeypatch.setattr(gate_cmd, "render_gate_markdown", lambda *a: real(*a) + "\ud800 unencodable tail\n")
    args = ["gate", str(ones_file), "--min", "-9", "--min-n", "5", "--bootstrap", "200", "--markdown", str(summary)]
    with pytest.raises(UnicodeEncodeError):  # not an expected failure: the boundary would call it a bug
        gate_cmd.cmd_gate(gate_cmd_args(args))
    assert summary.read_text() == OLD and _leftovers(tmp_path) == []
    monkeypatch.setattr(gate_cmd, "render_gate_markdown", real)
    assert main(args) == 0
    assert summary.read_text().startswith(OLD) and "tps-tracer gate: PASS" in summary.read_text()


def gate_cmd_args(argv):
    from tps_tracer.cli.main import build_parser

    return build_parser().parse_args(argv)


def test_plot_replaces_its_files_atomically_and_writes_nothing_on_failure(ones_file, tmp_path, capsys):
    out = tmp_path / "plots"
    assert main(["plot", str(ones_file), "-o", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["plot", str(ones_file), "-o", str(out), "--calibrate", "platt"]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_strict_json_writes_undefined_numbers_as_null():
    obj = {"a": float("nan"), "b": [np.float64("inf"), np.int64(3), np.bool_(True)], "c": np.array([1.0, np.nan])}
    text = output.dumps(obj, indent=None)
    assert json.loads(text) == {"a": None, "b": [None, 3, True], "c": [1.0, None]}
    assert "NaN" not in text and "Infinity" not in text
