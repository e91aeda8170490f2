"""`--engine ray --address` against a simulated two-node cluster (ray.cluster_utils.Cluster, 127.0.0.1)."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # nodes on 127.0.0.1 (see distributed.init_ray)
ray = pytest.importorskip("ray")

import tps_tracer as tt  # noqa: E402
from tps_tracer.distributed import report_from_path_ray  # noqa: E402
from tps_tracer.evaluation.chunked import report_from_path  # noqa: E402
from tps_tracer.records.convert import jsonl_to_parquet  # noqa: E402
from tps_tracer.records.jsonl import write_trajectories  # noqa: E402
from tps_tracer.synthetic import example_records  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def two_nodes():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_two_node_cluster_equals_single_process(two_nodes, tmp_path):
    src, pq = tmp_path / "src", tmp_path / "pq"
    src.mkdir(), pq.mkdir()
    records = example_records()
    for i in range(4):
        write_trajectories(records[i::4], src / f"{i}.jsonl")
        jsonl_to_parquet(src / f"{i}.jsonl", pq / f"{i}.parquet")
    opts = tt.ReportOptions(bootstrap=120, seed=5)
    on_ray = report_from_path_ray(pq, opts, address=two_nodes.address, num_blocks=4)
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    local = report_from_path(pq, opts)
    a = {(r["predictor"], r["rule"], r["weights"], r["censoring"]): r for r in on_ray["scores"]}
    b = {(r["predictor"], r["rule"], r["weights"], r["censoring"]): r for r in local["scores"]}
    assert list(a) == list(b)
    for k in a:
        assert a[k]["n"] == b[k]["n"]
        for f in ("mean", "se", "ci_low", "ci_high"):
            assert (a[k][f] is None and b[k][f] is None) or math.isclose(a[k][f], b[k][f], abs_tol=1e-12)
    assert on_ray["audit"] == local["audit"] and on_ray["coverage"] == local["coverage"]
