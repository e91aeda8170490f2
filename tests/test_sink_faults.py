"""Record files that always read back (issue 29): a sink meeting a full disk, rotation, an
unopenable path, ids the reader refuses, and re-runs; every command then reads what was counted
written, and counts what it sets aside.

Faults are injected at the sink's one seam, `JsonlSink._open_file`: the real file object is
wrapped so its `write` raises OSError(ENOSPC) (after writing part of the line, as a full disk
does) while the "disk" is full. The files, the accumulator and the CLI are the real ones.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from cli_support import call
from scale_support import assert_reports_equal

from tps_tracer.online import Accumulator, JsonlSink
from tps_tracer.records import TrajectoryFileError, read_trajectories
from tps_tracer.records.jsonl import parse_lines


class Disk:
    """A disk that fills: while `capacity` is set, the file may not grow past it. A write that does
    not fit writes what fits and returns the short count; the next one raises ENOSPC, as write(2)
    on a full tmpfs does. Bytes the sink cuts off again (ftruncate) are free again."""

    def __init__(self) -> None:
        self.capacity: int | None = None


class _FullableFile:
    def __init__(self, fh: Any, disk: Disk):
        self._fh, self._disk = fh, disk

    def write(self, data: bytes) -> int:
        if self._disk.capacity is None:
            return int(self._fh.write(data))
        room = self._disk.capacity - os.fstat(self._fh.fileno()).st_size
        if room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(self._fh.write(data[:room]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


class FaultySink(JsonlSink):
    def __init__(self, path: Path, disk: Disk, **kwargs: Any):
        self.disk = disk
        super().__init__(path, **kwargs)

    def _open_file(self) -> Any:
        return _FullableFile(super()._open_file(), self.disk)


def _run(acc: Accumulator, ids: list[str], forecast: float = 0.7, start: int = 0) -> None:
    for i, tid in enumerate(ids, start=start):
        acc.observe(tid, {"verbal": forecast})
        acc.observe(tid, {"verbal": 0.2 + 0.6 * (i % 5) / 4})
        acc.stop(tid, "clean")  # the grade comes later: a resolution line


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_disk_full_mid_run_loses_only_counted_lines_and_no_resolution_of_a_lost_record(tmp_path, capsys):
    disk = Disk()
    path = tmp_path / "runs.jsonl"
    sink = FaultySink(path, disk)
    acc = Accumulator(predictors=["verbal"], sink=sink, bootstrap=200)
    ids = [f"t{i:05d}" for i in range(300)]
    _run(acc, ids[:100])
    disk.capacity = path.stat().st_size + 40  # full: 40 bytes of each line fit, then ENOSPC
    _run(acc, ids[100:226], start=100)
    disk.capacity = None  # freed: the grades (short lines, which would have fit) arrive now
    _run(acc, ids[226:], start=226)
    for i, tid in enumerate(ids):
        assert acc.resolve(tid, outcome=i % 3 == 0)
    acc.close()

    lost = set(ids[100:226])
    lines = _lines(path)
    assert len(lines) == sink.written == 174 + 174  # each surviving record and its resolution
    assert sink.failed == 126
    resolved = [json.loads(ln)["resolves"] for ln in lines if '"resolves"' in ln]
    assert len(resolved) == 174 and not lost & set(resolved)  # no line resolves a lost record
    errors = acc.health.category("error")
    assert errors == {"sink": 126, "sink_resolution_of_lost_record": 126}
    assert acc.snapshot()["online"]["sink"] == {
        "path": str(path),
        "lines_written": 348,
        "lines_failed": 126,
        "reopened": 0,
    }

    code, out, err = call(["report", str(path), "--json", "--bootstrap", "200"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["audit"]["n_trajectories"] == 174 and report["audit"]["pending_outcome"] == 0
    assert "input" not in report  # nothing set aside: the file is whole
    kept = [i for i, tid in enumerate(ids) if tid not in lost]
    expected = sum(
        (2 / 3) * _log(0.7, i % 3 == 0) + (1 / 3) * _log(0.2 + 0.6 * (i % 5) / 4, i % 3 == 0) for i in kept
    ) / len(kept)
    score = next(
        r for r in report["scores"] if (r["predictor"], r["rule"], r["censoring"]) == ("verbal", "log", "complete-only")
    )
    assert score["mean"] == pytest.approx(expected, abs=1e-12)


def _log(p: float, y: bool) -> float:
    return math.log(p if y else 1 - p)


def test_an_old_file_with_orphan_resolutions_is_scored_with_the_orphans_counted(tmp_path, capsys, caplog):
    """The file issue 29 found (written before the fix): resolutions of records that never reached
    the file. Every command read it as exit 2; now the survivors are scored and the orphans named once."""
    path = tmp_path / "old.jsonl"
    recs = [
        {
            "trajectory_id": f"t{i}",
            "stop_reason": "clean",
            "outcome_pending": True,
            "outcome": None,
            "steps": [{"t": 1, "forecasts": {"verbal": 0.25 + 0.5 * (i % 2)}}],
        }
        for i in range(6)
    ]
    lines = [json.dumps(r) for r in recs if r["trajectory_id"] != "t3"]
    lines += [json.dumps({"resolves": f"t{i}", "outcome": i % 2}) for i in range(6)]
    path.write_text("\n".join(lines) + "\n")
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "100"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["audit"]["n_trajectories"] == 5 and report["audit"]["pending_outcome"] == 0
    assert report["input"] == {
        "set_aside": {"orphan_resolution": {"count": 1, "first": "line 9: no trajectory 't3' in the file"}}
    }
    named = [r.getMessage() for r in caplog.records if "no trajectory 't3'" in r.getMessage()]
    assert len(named) == 1 and "old.jsonl: set aside (not scored): 1 resolution line(s)" in named[0]  # once
    code, out, _ = call(["report", str(path), "--bootstrap", "100"], capsys)
    assert code == 0 and "orphan_resolution: 1 (first: line 9: no trajectory 't3' in the file)" in out
    with pytest.raises(TrajectoryFileError, match="line 9, field 'resolves': no trajectory 't3'"):
        read_trajectories(path, strict=True)


@pytest.mark.parametrize("how", ["rename", "delete"])
def test_rotation_reopens_the_path_and_every_line_is_readable(tmp_path, how, capsys):
    path = tmp_path / "runs.jsonl"
    acc = Accumulator(predictors=["verbal"], sink=path, bootstrap=100)
    _run(acc, [f"a{i}" for i in range(5)])
    rotated = tmp_path / "runs.jsonl.1"
    if how == "rename":
        path.rename(rotated)
    else:
        path.unlink()
    _run(acc, [f"b{i}" for i in range(7)])
    for i in range(7):
        acc.resolve(f"b{i}", outcome=i % 2)
    acc.close()
    assert acc.sink is not None and acc.sink.reopened == 1 and acc.sink.written == 5 + 14
    assert [r.trajectory_id for r in read_trajectories(path)] == [f"b{i}" for i in range(7)]
    if how == "rename":
        assert len(_lines(rotated)) == 5
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "100"], capsys)
    assert code == 0, err
    assert json.loads(out)["audit"]["n_trajectories"] == 7


def test_an_unopenable_sink_never_raises_counts_and_retries(tmp_path, capsys):
    """The directory cannot be created (a file stands where it should be; as root, a chmod'ed
    directory would not stop us): construction does not raise, lines fail counted, the path is
    retried at most every retry_interval, and once it can be opened lines land again."""
    blocker = tmp_path / "logs"
    blocker.write_text("not a directory")
    path = blocker / "runs.jsonl"
    now = [0.0]
    sink = JsonlSink(path, retry_interval=5.0, clock=lambda: now[0])
    assert sink.open_error is not None and "cannot open" in sink.open_error
    acc = Accumulator(predictors=["verbal"], sink=sink, bootstrap=100)
    _run(acc, ["x0", "x1"])
    assert acc.health.category("error") == {"sink": 2} and sink.failed == 2
    blocker.unlink()  # the operator fixes the path
    _run(acc, ["x2"])  # within the retry interval: not retried yet
    assert sink.failed == 3 and not path.exists()
    now[0] = 5.0
    _run(acc, ["x3", "x4"])
    for tid in ("x0", "x1", "x2", "x3", "x4"):
        acc.resolve(tid, outcome=1)
    acc.close()
    assert sink.open_error is None and sink.written == 4  # x3, x4 and their resolutions
    assert [r.trajectory_id for r in read_trajectories(path)] == ["x3", "x4"]
    assert acc.health.category("error")["sink_resolution_of_lost_record"] == 3


def test_a_read_only_directory_at_construction_is_counted_not_raised(tmp_path):
    class ReadOnly(JsonlSink):
        def _open_file(self) -> Any:
            raise PermissionError(errno.EACCES, "Permission denied")

    acc = Accumulator(predictors=["verbal"], sink=ReadOnly(tmp_path / "r.jsonl", retry_interval=0.0), bootstrap=100)
    _run(acc, ["a"])
    acc.resolve("a", outcome=1)
    assert acc.health.category("error") == {"sink": 1, "sink_resolution_of_lost_record": 1}
    assert acc.snapshot()["audit"]["n_trajectories"] == 1  # the score is kept in memory


def test_a_lone_surrogate_id_is_refused_online_by_the_readers_rule(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    acc = Accumulator(predictors=["verbal"], sink=path, bootstrap=100)
    assert not acc.observe("bad\ud800", {"verbal": 0.5})
    assert not acc.stop("bad\ud800", "clean", outcome=1)
    assert not acc.resolve("bad\ud800", outcome=1)
    _run(acc, ["ok", "naïve-ü-😀"])  # any valid text round-trips
    acc.resolve("ok", outcome=1)
    acc.resolve("naïve-ü-😀", outcome=0)
    acc.close()
    assert acc.rejected == {"invalid_id": 3}
    assert [r.trajectory_id for r in read_trajectories(path)] == ["ok", "naïve-ü-😀"]
    with pytest.raises(ValueError, match="lone surrogate"):
        JsonlSink(path).resolve("bad\udfff", outcome=1)
    # the reader refuses what the sink would have written: the rule is the same one
    with pytest.raises(TrajectoryFileError, match="unicode"):
        parse_lines([json.dumps({"trajectory_id": "bad\ud800", "stop_reason": "clean", "outcome": 1})], strict=True)
    code, _, err = call(["report", str(path), "--bootstrap", "100"], capsys)
    assert code == 0, err


def _rerun(path: Path, flip: int) -> None:
    acc = Accumulator(predictors=["verbal"], sink=path, bootstrap=100)
    ids = [f"t{i}" for i in range(20)]
    _run(acc, ids, forecast=0.6 if flip else 0.7)
    for i, tid in enumerate(ids):
        acc.resolve(tid, outcome=(i + flip) % 2)
    acc.close()


def test_a_rerun_into_the_same_sink_keeps_the_first_run_and_counts_the_repeats(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    _rerun(path, 0)
    first = tmp_path / "first.jsonl"
    first.write_text(path.read_text())
    _rerun(path, 1)  # the script run again: it appends (documented), with the same 20 ids
    assert len(_lines(path)) == 80
    records = read_trajectories(path)
    assert [r.model_dump() for r in records] == [r.model_dump() for r in read_trajectories(first)]
    assert records.set_aside.counts == {"duplicate_id": 20, "duplicate_resolution": 20}
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "100"], capsys)
    assert code == 0, err
    report = json.loads(out)
    _, expected, _ = call(["report", str(first), "--json", "--bootstrap", "100"], capsys)
    assert report.pop("input") == {
        "set_aside": {
            "duplicate_id": {"count": 20, "first": "line 41: duplicate id 't0' (first seen on line 1)"},
            "duplicate_resolution": {"count": 20, "first": "line 61: resolves the repeated 't0' of line 41"},
        }
    }
    assert_reports_equal(report, json.loads(expected))  # the first run's numbers (read another way)
    out_dir = tmp_path / "out"
    for argv in (
        ["gate", str(path), "--min", "-5", "--min-n", "10", "--bootstrap", "100"],
        ["calibrate", str(path), "-o", str(out_dir / "cal.json"), "--bootstrap", "100"],
        ["censoring", str(path), "--artificial", "0.5", "--bootstrap", "100"],
        ["plot", str(path), "-o", str(out_dir / "plots")],
        ["convert", str(path), str(out_dir / "runs.parquet")],
    ):
        out_dir.mkdir(exist_ok=True)
        code, _, err = call(argv, capsys)
        assert code == 0, (argv[0], err)
    parquet = read_trajectories_any(out_dir / "runs.parquet")
    assert [r.trajectory_id for r in parquet] == [f"t{i}" for i in range(20)]
    with pytest.raises(TrajectoryFileError, match="duplicate id 't0'"):
        read_trajectories(path, strict=True)


def read_trajectories_any(path: Path) -> list[Any]:
    from tps_tracer.records.reading import parquet_records

    return list(parquet_records(path))


def _one_run(path: Path, tid: str, forecast: float, outcome: int) -> Accumulator:
    acc = Accumulator(sink=str(path))
    acc.observe(tid, {"verbal": forecast})
    acc.stop(tid, "clean", outcome=outcome)
    acc.close()
    return acc


def test_appending_to_a_file_whose_last_line_has_no_line_end_keeps_both_records(tmp_path, capsys, caplog):
    """A hand-written file without its final line end (`"\\n".join(...)`, an editor): the new record
    starts on its own line. On the old sink it was glued onto the last line and `report` failed
    ("line 1: invalid JSON (Extra data ...)") on the whole file."""
    path = tmp_path / "runs.jsonl"
    hand = {"trajectory_id": "h1", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"verbal": 0.6}}]}
    path.write_text(json.dumps(hand))  # no "\n"
    with caplog.at_level("WARNING", logger="tps_tracer"):
        acc = _one_run(path, "x1", 0.3, 0)
    assert acc.sink is not None and acc.sink.line_ends_added == 1
    assert "had no line end" in caplog.text
    assert [r.trajectory_id for r in read_trajectories(path)] == ["h1", "x1"]
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "0"], capsys)
    assert code == 0, err
    assert json.loads(out)["audit"]["stop_reasons"]["clean"] == 2
    _one_run(path, "x2", 0.4, 1)  # a file that ends well gets nothing added
    assert path.read_text().count("\n") == 3 and "\n\n" not in path.read_text()


def test_a_record_cut_by_a_killed_writer_stays_the_only_bad_line(tmp_path, capsys):
    """A writer killed mid-line leaves a cut last line; the next run's record must not be glued onto
    it: the readers then name the cut line, and the new record is intact on the next one."""
    path = tmp_path / "runs.jsonl"
    _one_run(path, "a", 0.5, 1)
    path.write_bytes(path.read_bytes() + b'{"trajectory_id":"cut","stop_reason":"cle')
    _one_run(path, "b", 0.7, 1)
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["trajectory_id"] == "b"
    code, _, err = call(["report", str(path), "--bootstrap", "0"], capsys)
    assert code == 2 and "line 2: invalid JSON" in err, err
