"""The gate reads its files chunk by chunk (issue 17): the same verdict, estimates, CIs and flip
probabilities as the gate on validated records, for JSON Lines (fast path, exact fallback) and
Parquet, without ever holding the records."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scale_support import assert_reports_equal

from tps_tracer.evaluation.gate import GateCriteria, GateInputError, evaluate_gate, gate_paths
from tps_tracer.records import (
    CensoringPolicy,
    jsonl,  # the exact reader, imported by chunked.py where used
    read_trajectories,
    write_trajectories,
)
from tps_tracer.records.convert import jsonl_to_parquet
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.synthetic import simulate_runs, to_records

SMALL_CHUNKS = 20_000  # bytes: a few dozen trajectories per chunk


def _with_tasks(records: list[TrajectoryRecord], prefix: str, seed: int) -> list[TrajectoryRecord]:
    """Task ids in metadata that differ from the trajectory ids; a first predictor without data; shuffled."""
    out = []
    for i, r in enumerate(records):
        steps = [s.model_copy(update={"forecasts": {"dead": None, **s.forecasts}}) for s in r.steps]
        meta = {"task_id": f"task-{i}", "agent": prefix}
        out.append(r.model_copy(update={"trajectory_id": f"{prefix}-{i}", "steps": steps, "metadata": meta}))
    random.Random(seed).shuffle(out)
    return out


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    sim = simulate_runs(400, seed=5)
    cand = _with_tasks(to_records(sim, ["truthful", "overconfident"], missing_rate=0.0), "cand", 1)
    base = _with_tasks(to_records(sim, ["overconfident", "truthful"], seed=3), "base", 2)
    return {"cand": cand, "base": base}


@pytest.fixture(scope="module")
def files(runs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gate-paths")
    out = {}
    for name, recs in runs.items():
        write_trajectories(recs, d / f"{name}.jsonl")
        jsonl_to_parquet(d / f"{name}.jsonl", d / f"{name}.parquet")
        out[name], out[f"{name}.parquet"] = d / f"{name}.jsonl", d / f"{name}.parquet"
    return out


CRITERIA = {
    "named predictor, absolute": GateCriteria(predictor="truthful", min_score=-0.9, bootstrap=300),
    "vs base rate, exact, brier, uniform": GateCriteria(
        predictor="overconfident", rule="brier", weights="uniform", censoring="exact", vs_base_rate=True, bootstrap=300
    ),
    "policy, flip check": GateCriteria(
        min_score=-0.8,
        max_flip=0.2,
        predictor="truthful",
        max_excluded_share=0.5,
        policy=CensoringPolicy.treating_as_censored(["parse_error"]),
        bootstrap=300,
    ),
}


@pytest.mark.parametrize("name", list(CRITERIA))
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_gate_on_files_equals_the_gate_on_records(runs, files, name, fmt, monkeypatch):
    crit = CRITERIA[name]
    expected = evaluate_gate(runs["cand"], crit)

    def no_exact_read(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a clean file must not be read record by record")

    monkeypatch.setattr(jsonl, "read_trajectories", no_exact_read)
    path = files["cand"] if fmt == "jsonl" else files["cand.parquet"]
    got = gate_paths([path], crit, chunk_bytes=SMALL_CHUNKS)
    assert_reports_equal(got, expected)
    assert got["score"]["predictor"] == (crit.predictor or "truthful")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_default_predictor_without_data_is_unusable_never_switched(runs, files, fmt):
    """The first predictor in the file ("dead") has no data: the gate names it and those with data,
    exit 2, rather than gating on the next one (issue 30)."""
    crit = GateCriteria(min_score=-0.9, bootstrap=300)
    got = gate_paths([files["cand" if fmt == "jsonl" else "cand.parquet"]], crit, chunk_bytes=SMALL_CHUNKS)
    assert_reports_equal(got, evaluate_gate(runs["cand"], crit))
    assert got["verdict"] == "unusable" and got["exit_code"] == 2 and got["score"]["predictor"] == "dead"
    (reason,) = got["reasons"]
    assert reason.startswith("gated_predictor: the candidate cannot score predictor 'dead'")
    assert "predictors with data: truthful, overconfident" in reason


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_baseline_pairs_by_metadata_task_id_read_from_the_files(runs, files, fmt):
    crit = GateCriteria(vs_base_rate=True, bootstrap=300, margin=0.02)
    expected = evaluate_gate(runs["cand"], crit, baseline=runs["base"])
    suffix = "" if fmt == "jsonl" else ".parquet"
    got = gate_paths([files["cand" + suffix]], crit, files["base" + suffix], chunk_bytes=SMALL_CHUNKS)
    assert_reports_equal(got, expected)
    check = {c["name"]: c for c in got["checks"]}["vs_baseline"]
    # Trajectory ids differ (cand-i / base-i) and the files are in different orders: tasks pair them.
    assert f"paired by task id over {got['score']['n']} tasks" in check["detail"]


def test_baseline_missing_tasks_pairs_on_the_common_ones_and_a_run_split_over_two_files(runs, files, tmp_path):
    crit = GateCriteria(min_score=-2.0, bootstrap=200)
    half = len(runs["cand"]) // 2
    write_trajectories(runs["cand"][:half], tmp_path / "a.jsonl")
    write_trajectories(runs["cand"][half:], tmp_path / "b.jsonl")
    jsonl_to_parquet(tmp_path / "b.jsonl", tmp_path / "b.parquet")
    base = runs["base"][:-7]  # fewer tasks: unpaired
    write_trajectories(base, tmp_path / "base.jsonl")
    expected = evaluate_gate(runs["cand"], crit, baseline=base)
    got = gate_paths([tmp_path / "a.jsonl", tmp_path / "b.parquet"], crit, tmp_path / "base.jsonl", chunk_bytes=9_000)
    assert_reports_equal(got, expected)
    # The baseline lacks 7 tasks: paired on the tasks both sides scored, the rest counted (issue 30).
    detail = {c["name"]: c for c in got["checks"]}["vs_baseline"]["detail"]
    cmp = got["comparison"]
    assert f"paired by task id over {cmp['common_tasks']} tasks" in detail and cmp["paired"]
    dropped = {r.metadata["task_id"] for r in runs["base"][-7:]}
    assert 0 < cmp["candidate_unpaired_runs"] <= 7 and cmp["baseline_unpaired_runs"] == 0
    assert cmp["candidate_paired_runs"] + cmp["candidate_unpaired_runs"] == got["score"]["n"]
    assert cmp["common_tasks"] == cmp["candidate_paired_runs"] == cmp["baseline_paired_runs"]
    assert len(dropped) == 7
    # Disjoint task ids: compared unpaired, and said so.
    other = [r.model_copy(update={"metadata": {**r.metadata, "task_id": "x" + r.metadata["task_id"]}}) for r in base]
    write_trajectories(other, tmp_path / "other.jsonl")
    got = gate_paths([tmp_path / "a.jsonl", tmp_path / "b.parquet"], crit, tmp_path / "other.jsonl", chunk_bytes=9_000)
    assert_reports_equal(got, evaluate_gate(runs["cand"], crit, baseline=other))
    assert "unpaired" in got["comparison"]["how"] and "no common task ids" in got["comparison"]["how"]


def test_resolution_lines_give_the_same_result(runs, tmp_path):
    recs = runs["cand"][:120]
    pending = [r for r in recs if r.stop_reason == "clean"][:5]
    lines = []
    for r in recs:
        obj = json.loads(r.model_dump_json(exclude_none=True))
        if r in pending:
            obj.pop("outcome")
            obj["outcome_pending"] = True
        lines.append(json.dumps(obj))
    lines += [json.dumps({"resolves": r.trajectory_id, "outcome": r.outcome}) for r in pending]
    path = tmp_path / "resolved.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    crit = GateCriteria(min_score=-2.0, bootstrap=200)
    assert_reports_equal(gate_paths([path], crit, chunk_bytes=5_000), evaluate_gate(read_trajectories(path), crit))
    assert_reports_equal(gate_paths([path], crit, chunk_bytes=5_000), evaluate_gate(recs, crit))


def test_duplicate_ids_across_files_are_errors_within_a_file_set_aside(runs, tmp_path):
    recs = runs["cand"][:50]
    write_trajectories(recs, tmp_path / "a.jsonl")
    write_trajectories(recs[10:12], tmp_path / "b.jsonl")
    crit = GateCriteria(min_score=-2.0, bootstrap=100)
    with pytest.raises(GateInputError, match=r"b\.jsonl: trajectory id .* also appears in an earlier file"):
        gate_paths([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], crit)
    before = gate_paths([tmp_path / "a.jsonl"], crit, chunk_bytes=2_000)
    with (tmp_path / "a.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(recs[3].model_copy(update={"steps": recs[3].steps[:1]}).model_dump_json() + "\n")
    # Within one file a repeated id is a re-run appended to the sink: the first record is kept,
    # the repeat set aside (records/limits.py), so the gate's numbers are the file's without it.
    # The result says so (input.set_aside, tests/test_gate.py).
    after = gate_paths([tmp_path / "a.jsonl"], crit, chunk_bytes=2_000)
    assert after.pop("input")["set_aside"]["duplicate_id"]["count"] == 1
    assert_reports_equal(after, before)
    with pytest.raises(ValueError, match=r"line 51.*duplicate"):  # strict: the exact reader names the line
        read_trajectories(tmp_path / "a.jsonl", strict=True)


def test_the_console_script_gates_parquet_against_a_jsonl_baseline(runs, files):
    exe = shutil.which("tps-tracer", path=str(Path(sys.executable).parent))
    assert exe
    args = ["--vs-base-rate", "--bootstrap", "300", "--json"]
    proc = subprocess.run(
        [exe, "gate", str(files["cand.parquet"]), "--baseline", str(files["base"]), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr
    expected = evaluate_gate(runs["cand"], GateCriteria(vs_base_rate=True, bootstrap=300), baseline=runs["base"])
    assert_reports_equal(json.loads(proc.stdout), json.loads(json.dumps(expected)))
