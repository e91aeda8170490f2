"""The gate shows what its readers set aside (records/set_aside.py): re-runs appended to the file, an
empty shard of a directory. The counts are those of the exact reader (`exact_records`), in every output
form (`--json` `input.set_aside`, text, `--markdown`) and on `--snapshot`; the verdict and the score are
those of the same file without the set-aside lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scale_support import assert_reports_equal, trajectory_dicts

from tps_tracer.cli.main import main
from tps_tracer.evaluation.gate import GateCriteria, gate_paths
from tps_tracer.records.shards import exact_records

CRIT = GateCriteria(min_score=-5.0, bootstrap=200, max_skipped_share=1.0)
ARGS = ["--min", "-5", "--bootstrap", "200", "--max-skipped-share", "1"]
CHUNK = 3_000  # bytes: many chunks, so the chunked read meets the repeats and falls back to the exact read


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def reruns(tmp_path: Path) -> tuple[Path, Path]:
    """(a file with 3 re-runs appended: the same ids with other steps and outcomes, the file without them)."""
    records = trajectory_dicts(150, seed=4)
    rerun = []
    for i in (9, 40, 41):
        again = json.loads(json.dumps(records[i]))
        again["steps"] = again["steps"][:1]
        again["stop_reason"], again["outcome"] = "clean", 1 - int(records[i].get("outcome") or 0)
        rerun.append(again)
    return _write(tmp_path / "sink.jsonl", records + rerun), _write(tmp_path / "clean.jsonl", records)


def _without_input(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "input"}


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().out


def test_gate_json_counts_the_reruns_and_judges_the_file_without_them(reruns):
    sink, clean = reruns
    expected = exact_records(sink).set_aside.as_dict()
    assert expected["duplicate_id"]["count"] == 3 and list(expected) == ["duplicate_id"]
    reference = gate_paths(clean, CRIT)
    assert "input" not in reference  # a clean file's result is unchanged
    for chunk_bytes in (CHUNK, 32 << 20):
        got = gate_paths(sink, CRIT, chunk_bytes=chunk_bytes)
        assert got["input"] == {"set_aside": expected}
        assert got["verdict"] == reference["verdict"] and got["verdict"] != "unusable"
        assert_reports_equal(_without_input(got), reference)


def test_gate_text_markdown_and_json_show_one_set_aside_line(reruns, tmp_path, capsys):
    sink, clean = reruns
    first = exact_records(sink).set_aside.as_dict()["duplicate_id"]["first"]
    line = f"set aside (not scored): duplicate_id 3 (first: {first})"
    md = tmp_path / "summary.md"
    code, text = _cli(capsys, ["gate", str(sink), *ARGS, "--markdown", str(md)])
    clean_code, clean_text = _cli(capsys, ["gate", str(clean), *ARGS])
    assert code == clean_code
    assert line in " ".join(text.split())  # the terminal wraps long lines
    assert "set aside" not in clean_text
    assert f"- {line}" in md.read_text(encoding="utf-8")
    code, out = _cli(capsys, ["gate", str(sink), *ARGS, "--json"])
    assert json.loads(out)["input"]["set_aside"]["duplicate_id"] == {"count": 3, "first": first}


def _snapshot(capsys: pytest.CaptureFixture[str], records: Path, to: Path) -> Path:
    _, report = _cli(capsys, ["report", str(records), "--json", "--bootstrap", "200"])
    to.write_text(report, encoding="utf-8")
    return to


def test_snapshot_gate_takes_the_reports_own_input_block(reruns, tmp_path, capsys):
    sink, clean = reruns
    snap = _snapshot(capsys, sink, tmp_path / "snap.json")
    assert json.loads(snap.read_text())["input"]["set_aside"] == exact_records(sink).set_aside.as_dict()
    code, out = _cli(capsys, ["gate", "--snapshot", str(snap), *ARGS, "--json"])
    got = json.loads(out)
    assert got["input"] == {"set_aside": exact_records(sink).set_aside.as_dict()}
    clean_code, clean_out = _cli(
        capsys, ["gate", "--snapshot", str(_snapshot(capsys, clean, tmp_path / "c.json")), *ARGS, "--json"]
    )
    assert code == clean_code
    assert_reports_equal(_without_input(got), json.loads(clean_out))
    _, text = _cli(capsys, ["gate", "--snapshot", str(snap), *ARGS])
    assert "set aside (not scored): duplicate_id 3 (first: " in " ".join(text.split())


def test_a_directory_with_an_empty_shard_names_it(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    records = trajectory_dicts(80, seed=6)
    _write(ds / "a.jsonl", records)
    (ds / "b.jsonl").write_text("")
    expected = exact_records(ds).set_aside.as_dict()
    assert expected == {"empty_shard": {"count": 1, "first": str(ds / "b.jsonl")}}
    reference = gate_paths(_write(tmp_path / "alone.jsonl", records), CRIT)
    for chunk_bytes in (CHUNK, 32 << 20):
        got = gate_paths(ds, CRIT, chunk_bytes=chunk_bytes)
        assert got["input"] == {"set_aside": expected}
        assert_reports_equal(_without_input(got), reference)


def test_the_baselines_set_aside_lines_are_shown_on_its_side(reruns, tmp_path, capsys):
    sink, clean = reruns
    cand = _write(tmp_path / "cand.jsonl", trajectory_dicts(150, seed=8))
    expected = exact_records(sink).set_aside.as_dict()
    reference = gate_paths(cand, CRIT, baseline=clean)
    got = gate_paths(cand, CRIT, baseline=sink)
    assert got["input"] == {"baseline": {"set_aside": expected}}
    assert_reports_equal(_without_input(got), reference)
    _, text = _cli(capsys, ["gate", str(cand), "--baseline", str(sink), *ARGS])
    flat = " ".join(text.split())
    assert "baseline: set aside (not scored): duplicate_id 3 (first: " in flat
    assert flat.count("set aside (not scored)") == 1  # the candidate set nothing aside
    # A candidate with re-runs paired with a baseline: its task-id pass keeps the first of each id too.
    got = gate_paths(sink, CRIT, baseline=cand)
    assert got["input"] == {"set_aside": expected}
    assert_reports_equal(_without_input(got), gate_paths(clean, CRIT, baseline=cand))
