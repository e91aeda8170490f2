"""Files with resolution lines (what the online sinks write) take the chunked reader: the same
report and gate as the exact whole-file reader, which only the unusual cases still reach."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scale_support import assert_reports_equal, trajectory_dicts

from tps_tracer.evaluation.chunked import report_from_path, with_set_aside
from tps_tracer.evaluation.gate import GateCriteria, evaluate_gate, gate_paths
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import (
    TrajectoryFileError,
    jsonl,  # the exact reader, imported by chunked.py where used
    read_trajectories,
    to_arrays,
)

OPTIONS = ReportOptions(rules=["log", "brier"], bootstrap=200)


def _with_resolutions(n: int, seed: int) -> tuple[list[str], list[dict[str, Any]]]:
    """Lines of n trajectories where most clean outcomes and some q_z arrive on later lines."""
    rng = random.Random(seed)
    recs = trajectory_dicts(n, seed=seed)
    lines: list[str] = []
    later: list[str] = []
    for rec in recs:
        rec = dict(rec)
        res: dict[str, Any] = {}
        if rec["stop_reason"] == "clean" and rng.random() < 0.8:
            res["outcome"] = rec.pop("outcome")
            rec["outcome_pending"] = True
        if rec["stop_reason"] == "max_steps" and "q_z" in rec and rng.random() < 0.5:
            res["q_z"] = rec.pop("q_z")
        lines.append(json.dumps(rec))
        if res:
            later.append(json.dumps({"resolves": rec["trajectory_id"], **res}))
        if later and rng.random() < 0.3:  # resolutions interleaved with later trajectories
            lines.append(later.pop(0))
    lines.extend(later)
    return lines, recs


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _forbid_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_exact_read(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a plain file with resolution lines must not be read the whole-file way")

    monkeypatch.setattr(jsonl, "read_trajectories", no_exact_read)


@pytest.mark.parametrize("chunk_bytes", [3_000, 40_000, 32 << 20])
def test_report_with_resolution_lines_equals_the_exact_reader(tmp_path, monkeypatch, chunk_bytes):
    lines, _ = _with_resolutions(600, seed=1)
    path = _write(tmp_path / "runs.jsonl", lines)
    assert sum('"resolves"' in line for line in lines) > 150
    expected = build_report(to_arrays(read_trajectories(path)), OPTIONS)
    _forbid_exact(monkeypatch)
    assert_reports_equal(report_from_path(path, OPTIONS, chunk_bytes=chunk_bytes), expected)


def test_gate_with_resolution_lines_equals_the_exact_reader(tmp_path, monkeypatch):
    lines, _ = _with_resolutions(600, seed=2)
    path = _write(tmp_path / "runs.jsonl", lines)
    crit = GateCriteria(min_score=-3.0, vs_base_rate=True, bootstrap=200)
    expected = evaluate_gate(read_trajectories(path), crit)
    _forbid_exact(monkeypatch)
    assert_reports_equal(gate_paths([path], crit, chunk_bytes=5_000), expected)


def test_a_trajectory_mentioning_resolves_in_its_metadata_is_a_trajectory(tmp_path, monkeypatch):
    lines, _ = _with_resolutions(80, seed=3)
    extra = {"trajectory_id": "odd", "stop_reason": "clean", "outcome": 1, "steps": [{"forecasts": {"verbal": 0.4}}]}
    extra["metadata"] = {"note": 'this text says "resolves" twice: "resolves"'}
    lines.insert(5, json.dumps(extra))
    path = _write(tmp_path / "runs.jsonl", lines)
    expected = build_report(to_arrays(read_trajectories(path)), OPTIONS)
    _forbid_exact(monkeypatch)
    got = report_from_path(path, OPTIONS, chunk_bytes=2_000)
    assert_reports_equal(got, expected)
    assert got["audit"]["n_trajectories"] == 81


UNUSUAL = {
    "unknown id": {"resolves": "nobody", "outcome": 1},
    "conflicting outcome": "CONFLICT",
    "outcome on a non-clean stop": "NONCLEAN",
    "invalid resolution": {"resolves": "x", "outcome": 3},
    "resolution without a value": {"resolves": "x"},
    "escaped key": "ESCAPED",
}


@pytest.mark.parametrize("case", list(UNUSUAL))
def test_unusual_resolutions_give_the_exact_readers_result_or_error(tmp_path, case):
    lines, recs = _with_resolutions(60, seed=4)
    clean = next(r for r in recs if r["stop_reason"] == "clean" and "outcome" in r)
    other = next(r for r in recs if r["stop_reason"] not in ("clean",))
    special = UNUSUAL[case]
    if special == "CONFLICT":
        line = json.dumps({"resolves": clean["trajectory_id"], "outcome": 1 - clean["outcome"]})
    elif special == "NONCLEAN":
        line = json.dumps({"resolves": other["trajectory_id"], "outcome": 1})
    elif special == "ESCAPED":
        line = json.dumps({"resolves": clean["trajectory_id"], "outcome": clean["outcome"]}).replace(
            '"resolves"', '"resolv\\u0065s"'
        )
    else:
        line = json.dumps(special)
    lines.append(line)
    path = _write(tmp_path / "runs.jsonl", lines)
    try:
        records = read_trajectories(path)
        # a resolution of an absent id is set aside and counted ("input"), by both paths
        expected: Any = with_set_aside(build_report(to_arrays(records), OPTIONS), records.set_aside)
    except TrajectoryFileError as exc:
        with pytest.raises(TrajectoryFileError) as got:
            report_from_path(path, OPTIONS, chunk_bytes=2_000)
        assert str(got.value) == str(exc)
        return
    assert_reports_equal(report_from_path(path, OPTIONS, chunk_bytes=2_000), expected)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), chunk_bytes=st.integers(200, 20_000), dup=st.booleans(), shuffle=st.booleans())
def test_random_interleavings_equal_the_exact_reader(tmp_path, seed, chunk_bytes, dup, shuffle):
    lines, _ = _with_resolutions(40, seed=seed)
    if shuffle:  # resolutions may also come before their trajectory
        random.Random(seed).shuffle(lines)
    if dup:  # a resolution repeated (same values: accepted by both) after everything else
        lines.append(next(line for line in lines if '"resolves"' in line))
    path = _write(tmp_path / f"runs-{seed}-{chunk_bytes}.jsonl", lines)
    opts = ReportOptions(rules=["log"], bootstrap=30)
    expected = build_report(to_arrays(read_trajectories(path)), opts)
    assert_reports_equal(report_from_path(path, opts, chunk_bytes=chunk_bytes), expected)


def test_errors_of_many_resolutions_are_capped_like_line_errors(tmp_path):
    lines = [json.dumps({"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": []})]
    lines += [json.dumps({"resolves": f"nobody-{i}", "outcome": 1}) for i in range(5_000)]
    path = _write(tmp_path / "res.jsonl", lines)
    assert read_trajectories(path).set_aside.counts == {"orphan_resolution": 5_000}  # lenient: counted
    with pytest.raises(TrajectoryFileError) as exc:
        read_trajectories(path, strict=True)
    assert len(exc.value.errors) == 20 and exc.value.truncated
    assert len(exc.value.summary().splitlines()) == 20 and "further errors not shown" in exc.value.summary()


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_resolution_on_the_first_line_after_a_bom(tmp_path, monkeypatch, newline):
    lines, _ = _with_resolutions(50, seed=9)
    first = next(i for i, line in enumerate(lines) if '"resolves"' in line)
    lines.insert(0, lines.pop(first))  # a resolution before its trajectory, on line 1
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + newline.join(lines).encode("utf-8") + newline.encode())
    expected = build_report(to_arrays(read_trajectories(path)), OPTIONS)
    _forbid_exact(monkeypatch)
    assert_reports_equal(report_from_path(path, OPTIONS, chunk_bytes=1_500), expected)


class _CountingReads:
    """Opens of one file and the bytes read from it (`Path.open` is how the chunked reader opens it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
        self.opens, self.bytes = 0, 0
        real = Path.open
        counter = self

        class Counted:
            def __init__(self, fh: Any) -> None:
                self.fh = fh

            def read(self, n: int = -1) -> bytes:
                data = self.fh.read(n)
                counter.bytes += len(data)
                return data

            def __getattr__(self, name: str) -> Any:
                return getattr(self.fh, name)

            def __enter__(self) -> Counted:
                return self

            def __exit__(self, *exc: object) -> None:
                self.fh.close()

        def counted_open(self: Path, *args: Any, **kwargs: Any) -> Any:
            fh = real(self, *args, **kwargs)
            if self == path:
                counter.opens += 1
                return Counted(fh)
            return fh

        monkeypatch.setattr(Path, "open", counted_open)


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 32 << 20])
def test_a_file_without_resolution_lines_is_read_in_one_pass(tmp_path, monkeypatch, chunk_bytes):
    recs = trajectory_dicts(1_500, seed=3)
    lines = [json.dumps({**r, "metadata": {"pad": "x" * 6_000}}) for r in recs]  # > 8 MB
    path = _write(tmp_path / "runs.jsonl", lines)
    assert path.stat().st_size > 8 << 20
    expected = build_report(to_arrays(read_trajectories(path)), OPTIONS)
    _forbid_exact(monkeypatch)
    reads = _CountingReads(monkeypatch, path)
    assert_reports_equal(report_from_path(path, OPTIONS, chunk_bytes=chunk_bytes), expected)
    assert (reads.opens, reads.bytes) == (1, path.stat().st_size)


def test_a_resolution_line_after_the_first_chunk_restarts_the_read(tmp_path, monkeypatch):
    lines, _ = _with_resolutions(600, seed=4)
    first = [line for line in lines if '"resolves"' not in line]
    late = [line for line in lines if '"resolves"' in line]  # every resolution after every trajectory
    path = _write(tmp_path / "runs.jsonl", first + late)
    expected = build_report(to_arrays(read_trajectories(path)), OPTIONS)
    _forbid_exact(monkeypatch)
    reads = _CountingReads(monkeypatch, path)
    assert_reports_equal(report_from_path(path, OPTIONS, chunk_bytes=20_000), expected)
    assert reads.opens == 3  # read until the first resolution line, then its scan and the read again
