"""`calibrate` and `plot` read through the columnar reader (issue 17): the same output as the
exact per-record reader, which a clean file never reaches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scale_support import assert_reports_equal, trajectory_dicts, write_jsonl

from tps_tracer.cli.main import main
from tps_tracer.evaluation import chunked
from tps_tracer.records import errors, jsonl


def _run(command: str, path: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    if command == "calibrate":
        assert main(["calibrate", str(path), "-o", str(out / "cal.json"), "--bootstrap", "50", "--json"]) == 0
        capsys.readouterr()
        result = json.loads((out / "cal.json").read_text(encoding="utf-8"))
        result["fitted_on"].pop("source")
        return result
    assert main(["plot", str(path), "-o", str(out / "plots"), "--format", "svg"]) == 0
    capsys.readouterr()
    return json.loads((out / "plots" / "plot-data.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("command", ["calibrate", "plot"])
def test_fast_reader_output_equals_the_exact_reader(command, tmp_path, capsys, monkeypatch):
    path = write_jsonl(tmp_path / "runs.jsonl", trajectory_dicts(400, seed=4, predictors=("verbal", "token_prob")))
    real_exact = jsonl.read_trajectories

    def no_exact_read(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a clean file must not be read record by record")

    with monkeypatch.context() as m:
        m.setattr(jsonl, "read_trajectories", no_exact_read)
        m.setattr(jsonl, "parse_lines", no_exact_read)  # the per-record validation (what read_records used)
        (tmp_path / "fast").mkdir()
        fast = _run(command, path, tmp_path / "fast", capsys)

    def whole_file_only(*_a: Any, **_k: Any) -> Any:
        raise errors.whole_file("forced for the test")
        yield  # a generator, like the real iter_chunks

    monkeypatch.setattr(chunked, "iter_chunks", whole_file_only)
    monkeypatch.setattr(jsonl, "read_trajectories", real_exact)
    (tmp_path / "exact").mkdir()
    exact = _run(command, path, tmp_path / "exact", capsys)
    assert_reports_equal(fast, exact)
