"""`gate --engine ray` with a baseline (and --vs-base-rate, --max-flip) on a real local Ray cluster
(2 CPUs): the per-trajectory rows computed block by block give the local engine's result."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest
from scale_support import trajectory_dicts, write_jsonl

ray = pytest.importorskip("ray")  # the `ray` extra; `make test` installs it

from tps_tracer.cli.main import main  # noqa: E402
from tps_tracer.distributed import gate_path_ray, init_ray, sample_from_path_ray  # noqa: E402
from tps_tracer.evaluation.gate import GateCriteria, gate_paths, sample_from_paths  # noqa: E402
from tps_tracer.records.convert import jsonl_to_parquet  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    init_ray(num_cpus=2)
    assert ray.cluster_resources()["CPU"] == 2
    yield ray
    ray.shutdown()


def _run(path, n, seed, predictors=("verbal", "token_prob")):
    recs = trajectory_dicts(n, seed=seed, predictors=predictors)
    for i, rec in enumerate(recs):
        rec["metadata"] = {"task_id": f"task-{i}"}  # both runs solve the same tasks
    return write_jsonl(path, recs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    cand, base = _run(d / "cand.jsonl", 1500, 1), _run(d / "base.jsonl", 1400, 2)
    jsonl_to_parquet(cand, d / "cand.parquet")
    jsonl_to_parquet(base, d / "base.parquet")
    return d


def test_blocks_give_the_local_pair_table(local_ray, runs):
    crit = GateCriteria(rule="log", weights="uniform")
    local = sample_from_paths([runs / "cand.jsonl"], crit, True)
    for name in ("cand.jsonl", "cand.parquet"):
        on_ray = sample_from_path_ray(runs / name, crit, True, num_blocks=4)
        assert on_ray.task_ids == local.task_ids
        assert on_ray.table.ids == local.table.ids
        for p, col in local.table.predictors.items():
            other = on_ray.table.predictors[p]
            assert (col.usable == other.usable).all()
            assert col.pairs.tobytes() == other.pairs.tobytes()


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_gate_with_baseline_on_ray_equals_local(local_ray, runs, kind):
    crit = GateCriteria(bootstrap=400, vs_base_rate=True, max_flip=0.5)
    cand, base = runs / f"cand.{kind}", runs / f"base.{kind}"
    local = gate_paths([cand], crit, base)
    on_ray = gate_path_ray(cand, crit, base, num_blocks=3)
    assert on_ray == local  # same numbers to the bit: same rows, same resampling
    assert {c["name"] for c in local["checks"]} >= {"vs_baseline"}


def test_cli_gate_baseline_engine_ray(local_ray, runs):
    argv = [str(runs / "cand.jsonl"), "--baseline", str(runs / "base.jsonl"), "--bootstrap", "300", "--json"]
    outputs = []
    for extra in ([], ["--engine", "ray"]):
        buf = io.StringIO()
        with redirect_stdout(buf):
            code = main(["gate", *argv, *extra])
        outputs.append((code, json.loads(buf.getvalue())))
    (lc, local), (rc, on_ray) = outputs
    assert lc == rc
    assert on_ray["notes"][0] == "per-trajectory rows computed with --engine ray"
    assert on_ray["notes"][1:] == local["notes"]
    assert {k: v for k, v in on_ray.items() if k != "notes"} == {k: v for k, v in local.items() if k != "notes"}


def test_an_input_with_an_error_is_gated_the_local_way(local_ray, runs, tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = (runs / "cand.jsonl").read_text().splitlines()
    bad.write_text("\n".join([*lines[:10], '{"trajectory_id": "x", "stop_reason": "nope"}', *lines[10:]]) + "\n")
    crit = GateCriteria(bootstrap=100)
    with pytest.raises(Exception, match="line 11") as local:
        gate_paths([bad], crit, runs / "base.jsonl")
    with pytest.raises(type(local.value), match="line 11"):
        gate_path_ray(bad, crit, runs / "base.jsonl", num_blocks=3)
