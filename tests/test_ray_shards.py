"""`--engine ray` on directories as users write them (records/reading.py): a shard of resolution lines,
an empty shard. Ray reads each block alone, so such inputs go to the local reader: the same report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")  # the `ray` extra; `make test` installs it
pytestmark = pytest.mark.slow

from scale_support import assert_reports_equal, trajectory_dicts  # noqa: E402
from test_shards import OPTIONS, _graded_later, _write  # noqa: E402

from tps_tracer.distributed import init_ray, report_from_path_ray  # noqa: E402
from tps_tracer.evaluation.chunked import report_from_path  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    init_ray()
    yield
    ray.shutdown()


def test_ray_reads_a_graded_directory_and_counts_an_empty_shard_as_the_local_reader(local_ray, tmp_path: Path):
    records, grades = _graded_later(200, seed=7)
    xs = tmp_path / "xs"
    xs.mkdir()
    _write(xs / "a.jsonl", records)
    _write(xs / "b.jsonl", grades)
    expected = report_from_path(_write(tmp_path / "one.jsonl", [*records, *grades]), OPTIONS)
    assert_reports_equal(report_from_path_ray(xs, OPTIONS), expected)
    ds = tmp_path / "ds"
    ds.mkdir()
    lines = [json.dumps(r) for r in trajectory_dicts(80, seed=2)]
    _write(ds / "a.jsonl", lines[:40])
    _write(ds / "b.jsonl", lines[40:])
    (ds / "c.jsonl").write_text("")
    got = report_from_path_ray(ds, OPTIONS)
    assert got.pop("input") == {"set_aside": {"empty_shard": {"count": 1, "first": str(ds / "c.jsonl")}}}
    assert_reports_equal(got, report_from_path(_write(tmp_path / "ab.jsonl", lines), OPTIONS))
