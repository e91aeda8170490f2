"""`--engine ray` and tps_tracer.distributed on a real local Ray cluster (2 CPUs, 127.0.0.1)."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout

import pytest

ray = pytest.importorskip("ray")  # the `ray` extra; `make test` installs it

import tps_tracer as tt  # noqa: E402
from tps_tracer.cli.main import main  # noqa: E402
from tps_tracer.distributed import evaluate, init_ray, report_from_path_ray, states_from_path  # noqa: E402
from tps_tracer.evaluation.chunked import report_from_path  # noqa: E402
from tps_tracer.evaluation.partial_state import StateSpec  # noqa: E402
from tps_tracer.online import Accumulator  # noqa: E402
from tps_tracer.records.convert import jsonl_to_parquet  # noqa: E402
from tps_tracer.records.jsonl import TrajectoryFileError, write_trajectories  # noqa: E402
from tps_tracer.synthetic import example_records  # noqa: E402

pytestmark = pytest.mark.slow
OPTS = tt.ReportOptions(schedules=("linear-front", "uniform"), bootstrap=150, seed=3)


@pytest.fixture(scope="module")
def local_ray():
    init_ray()  # local: num_cpus=2, bound to 127.0.0.1, token auth as Ray >= 2.59 sets it up
    nodes = ray.nodes()
    assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]
    assert ray.cluster_resources()["CPU"] == 2
    yield ray
    ray.shutdown()


def _key(r):
    return (r["predictor"], r["rule"], r["weights"], r["censoring"])


def assert_same(a, b, tol=1e-12):
    """Every row of the two reports: same keys in the same order, counts equal, numbers <= tol."""

    def same(x, y, where):
        if isinstance(x, float) or isinstance(y, float):
            assert (x is None and y is None) or math.isclose(x, y, rel_tol=0, abs_tol=tol), (where, x, y)
        elif isinstance(x, dict):
            assert x.keys() == y.keys(), where
            for k in x:
                same(x[k], y[k], (*where, k))
        elif isinstance(x, list):
            assert len(x) == len(y), where
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                same(u, v, (*where, i))
        else:
            assert x == y, (where, x, y)

    assert [_key(r) for r in a["scores"]] == [_key(r) for r in b["scores"]]
    same(a, b, ())


def _shards(tmp_path, records, k):
    d = tmp_path / "shards"
    d.mkdir()
    for i in range(k):
        write_trajectories(records[i::k], d / f"part-{i}.jsonl")
    return d


def test_jsonl_file_equals_single_process(local_ray, tmp_path):
    path = tmp_path / "runs.jsonl"
    write_trajectories(example_records(), path)
    states = states_from_path(path, StateSpec.from_options(OPTS), num_blocks=3)  # the Ray path, no fallback
    assert len(states) >= 2 and sum(s.n for s in states) == 400
    assert_same(report_from_path_ray(path, OPTS, num_blocks=3), report_from_path(path, OPTS))


def test_parquet_directory_equals_single_process(local_ray, tmp_path):
    records = example_records()
    src = _shards(tmp_path, records, 4)
    pq = tmp_path / "pq"
    pq.mkdir()
    for f in sorted(src.iterdir()):
        jsonl_to_parquet(f, pq / (f.stem + ".parquet"))
    states = states_from_path(pq, StateSpec.from_options(OPTS), num_blocks=4)
    assert len(states) >= 2 and sum(s.n for s in states) == 400  # several blocks, merged
    ray_report = report_from_path_ray(pq, OPTS, num_blocks=4)
    assert_same(ray_report, report_from_path(pq, OPTS))
    assert_same(ray_report, tt.evaluate(records, OPTS))  # shards order does not matter either
    assert {m for m in (_key(r)[3] for r in ray_report["scores"])} == {"complete-only", "simple", "exact"}


def test_jsonl_directory_and_policy_equal_single_process(local_ray, tmp_path):
    d = _shards(tmp_path, example_records(), 3)
    opts = tt.ReportOptions(
        bootstrap=80, policy=tt.records.CensoringPolicy.treating_as_censored(["parse_error"]), predictors=["noisy"]
    )
    assert_same(report_from_path_ray(d, opts, num_blocks=5), report_from_path(d, opts))


def test_bad_input_gives_the_single_process_error(local_ray, tmp_path):
    path = tmp_path / "bad.jsonl"
    write_trajectories(example_records()[:5], path)
    with path.open("a") as fh:
        fh.write('{"trajectory_id": "x", "stop_reason": "nope", "steps": []}\n')
    with pytest.raises(TrajectoryFileError) as ray_err:
        report_from_path_ray(path, OPTS)
    with pytest.raises(TrajectoryFileError) as local_err:
        report_from_path(path, OPTS)
    assert str(ray_err.value) == str(local_err.value) and "line 6" in str(ray_err.value)
    dup = tmp_path / "dup"
    dup.mkdir()
    for i in range(2):
        write_trajectories(example_records()[:3], dup / f"{i}.jsonl")
    with pytest.raises(TrajectoryFileError, match="duplicate id"):
        report_from_path_ray(dup, OPTS)


def test_cli_engine_ray_json_equals_local(local_ray, tmp_path):
    path = tmp_path / "runs.jsonl"
    write_trajectories(example_records(), path)
    outs = []
    for engine in ("local", "ray"):
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert main(["report", str(path), "--json", "--bootstrap", "50", "--engine", engine]) == 0
        outs.append(json.loads(buf.getvalue()))
    assert_same(outs[1], outs[0])


def test_evaluate_a_ray_dataset_of_rollouts(local_ray):
    """RL rollouts as a Ray Dataset in the Parquet schema: reduced block by block on the cluster."""
    from tps_tracer.records.convert import ConvertSummary, records_table

    records = example_records()
    predictors = list(records[0].steps[0].forecasts)
    table = records_table(records, predictors, ConvertSummary())
    ds = ray.data.from_arrow(table).repartition(4)
    assert_same(evaluate(ds, OPTS), tt.evaluate(records, OPTS))


def test_evaluate_partial_states_of_accumulator_replicas_on_ray_tasks(local_ray):
    """N Ray tasks each run an accumulator over their rollouts; the driver merges their states."""
    records = example_records()

    @ray.remote
    def replica(part, mode):
        acc = Accumulator(weights=OPTS.schedules, bootstrap=OPTS.bootstrap, seed=OPTS.seed, mode=mode)
        for rec in part:
            for step in rec.steps:
                acc.observe(rec.trajectory_id, step.forecasts)
            if rec.q_z is not None and rec.steps:
                acc.resolve(rec.trajectory_id, q_z=rec.q_z)
            acc.stop(rec.trajectory_id, rec.stop_reason, rec.horizon)
            if rec.outcome is not None:
                acc.resolve(rec.trajectory_id, outcome=rec.outcome)
            if rec.q_z is not None and not rec.steps:
                acc.resolve(rec.trajectory_id, q_z=rec.q_z)
        return acc.partial_state().to_dict()

    for mode in ("rows", "summary"):
        states = ray.get([replica.remote(records[i::4], mode) for i in range(4)])
        merged = evaluate(states, OPTS)
        single = tt.evaluate(records, OPTS)
        assert [_key(r) for r in merged["scores"]] and {_key(r) for r in merged["scores"]} == {
            _key(r) for r in single["scores"]
        }
        a, b = {_key(r): r for r in merged["scores"]}, {_key(r): r for r in single["scores"]}
        for k in a:
            assert a[k]["n"] == b[k]["n"]
            for f in ("mean", "ci_low", "ci_high"):
                assert (a[k][f] is None and b[k][f] is None) or math.isclose(a[k][f], b[k][f], abs_tol=1e-12)
        assert merged["audit"] == single["audit"]
    with pytest.raises(ValueError, match="other rules"):
        evaluate(states, tt.ReportOptions(bootstrap=7))


def _gate(argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["gate", *argv, "--json"])
    return code, json.loads(buf.getvalue())


def test_gate_engine_ray_equals_local_score_and_verdict(local_ray, tmp_path):
    d = tmp_path / "runs.jsonl"  # the local gate reads directories of Parquet shards only
    # Without q_z, so that the censoring warning is due: Ray gives the same warnings (issue 30).
    write_trajectories([r.model_copy(update={"q_z": None}) for r in example_records()], d)
    for threshold, verdict in (("-5", "pass"), ("0", "fail")):
        argv = [str(d), "--min", threshold, "--predictor", "truthful", "--bootstrap", "300"]
        local_code, local = _gate(argv)
        ray_code, on_ray = _gate([*argv, "--engine", "ray"])
        assert (local_code, local["verdict"]) == (ray_code, on_ray["verdict"]) and on_ray["verdict"] == verdict
        assert local["score"].keys() == on_ray["score"].keys()
        for k, v in local["score"].items():
            w = on_ray["score"][k]
            assert v == w if not isinstance(v, float) else math.isclose(v, w, rel_tol=0, abs_tol=1e-12), k
        assert [c["name"] for c in local["checks"]] == [c["name"] for c in on_ray["checks"]]
        assert local["warnings"] == on_ray["warnings"] and any(
            w.startswith("censoring rate") for w in local["warnings"]
        )
    # --vs-base-rate, --max-flip and --baseline run on Ray too: tests/test_ray_gate.py.
