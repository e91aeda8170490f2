"""pyarrow is the `parquet` extra: everything but Parquet works without it, and Parquet without it is one
clear line (exit 2) naming the extra, never a traceback.

Each case runs the real command line in a subprocess whose `PYTHONPATH` starts with a directory
holding a `pyarrow.py` that raises ImportError, so `import pyarrow` fails there as it does in an
install without the extra (the test environment itself has pyarrow, for the Parquet tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scale_support import assert_reports_equal, trajectory_dicts, write_jsonl

from tps_tracer.errors import install_hint
from tps_tracer.records.convert import jsonl_to_parquet

try:  # Python 3.11+; tomli (a core dependency before 3.11) otherwise
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def blocked(tmp_path_factory) -> dict[str, str]:
    """The environment of a process in which pyarrow cannot be imported."""
    d = tmp_path_factory.mktemp("no-pyarrow")
    (d / "pyarrow.py").write_text('raise ImportError("pyarrow is blocked for this test")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(d), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("TPS_TRACER_DEBUG", None)
    return env


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("runs")
    jsonl = write_jsonl(d / "runs.jsonl", trajectory_dicts(600, seed=31))
    parquet = d / "runs.parquet"
    jsonl_to_parquet(jsonl, parquet)
    shards = d / "shards"
    shards.mkdir()
    jsonl_to_parquet(jsonl, shards / "part-0.parquet")
    return {"jsonl": jsonl, "parquet": parquet, "shards": shards, "d": d}


# What this installation's hint is (a checkout, a wheel or a git commit: tests/test_error_classes.py);
# never the index form `pip install 'tps-tracer[parquet]'`, which finds nothing.
HINT = install_hint("parquet")
assert HINT.endswith("[parquet]'") and HINT != "pip install 'tps-tracer[parquet]'"


def run(
    args: list[str], env: dict[str, str] | None = None, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    prefix = ["-c", code] if code else ["-m", "tps_tracer.cli.main"]
    return subprocess.run([sys.executable, *prefix, *args], capture_output=True, text=True, env=env, timeout=300)


def test_the_block_really_blocks(blocked):
    out = run([], blocked, "import pyarrow")
    assert out.returncode == 1 and "pyarrow is blocked for this test" in out.stderr
    assert run([], None, "import pyarrow").returncode == 0


def test_report_on_json_lines_without_pyarrow_equals_the_normal_run(blocked, files):
    args = ["report", str(files["jsonl"]), "--rules", "log,brier", "--weights", "all", "--bootstrap", "200", "--json"]
    normal = run(args)
    without = run(args, blocked)
    assert normal.returncode == 0 and without.returncode == 0, without.stderr
    report = json.loads(without.stdout)
    assert len(report["scores"]) > 3
    assert_reports_equal(json.loads(normal.stdout), report)


def test_json_lines_take_the_fast_reader_without_pyarrow(blocked, files):
    """Not the slow exact path as a silent fallback: every chunk is read columnar, and pyarrow is never imported."""
    code = (
        "import sys; from tps_tracer.records.reading import iter_chunks; "
        "chunks = list(iter_chunks(sys.argv[1], chunk_bytes=20_000)); "
        "assert len(chunks) > 3 and all(c.fast for c in chunks), [c.fast for c in chunks]; "
        "import tps_tracer, tps_tracer.cli.main; "
        "assert not [m for m in sys.modules if m.startswith('pyarrow')]"
    )
    out = run([str(files["jsonl"])], blocked, code)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["gate", "--min", "-5", "--bootstrap", "100", "--max-skipped-share", "1", "--json"],  # many lack a forecast
        ["calibrate", "--bootstrap", "50", "--json"],
        ["censoring", "--bootstrap", "50", "--json"],
    ],
    ids=lambda c: c[0],
)
def test_other_commands_on_json_lines_work_without_pyarrow(blocked, files, command, tmp_path):
    extra = ["-o", str(tmp_path / "cal.json")] if command[0] == "calibrate" else []
    args = [*command, str(files["jsonl"]), *extra]
    normal, without = run(args), run(args, blocked)
    assert without.returncode == normal.returncode == 0, without.stderr
    assert_reports_equal(json.loads(normal.stdout), json.loads(without.stdout))


@pytest.mark.parametrize(
    "args, what",
    [
        (["report", "{parquet}", "--bootstrap", "10"], "reading Parquet ({parquet})"),
        (["report", "{shards}", "--bootstrap", "10"], "reading Parquet ({shards}/part-0.parquet)"),
        (["gate", "{parquet}", "--min", "-5", "--bootstrap", "100"], "reading Parquet ({parquet})"),
        (["calibrate", "{parquet}", "-o", "{d}/cal.json"], "reading Parquet ({parquet})"),
        (["convert", "{jsonl}", "{d}/out.parquet"], "writing Parquet ({d}/out.parquet)"),
        (["convert", "{parquet}", "{d}/out.jsonl"], "reading Parquet ({parquet})"),
    ],
    ids=["report", "report-shards", "gate", "calibrate", "convert-to-parquet", "convert-from-parquet"],
)
def test_parquet_without_pyarrow_is_one_line_naming_the_extra(blocked, files, args, what):
    fill = {k: str(v) for k, v in files.items()}
    out = run([a.format(**fill) for a in args], blocked)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr == f"tps-tracer {args[0]}: {what.format(**fill)} needs pyarrow, which is not installed: {HINT}\n"
    assert not (files["d"] / "out.parquet").exists() and not (files["d"] / "out.jsonl").exists()


def test_pyarrow_is_an_extra_not_a_core_dependency():
    """The install footprint (issue 19): the core and the demo's extra never pull pyarrow; Parquet and Ray do."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = [d.split(";")[0].strip().lower() for d in project["dependencies"]]
    assert not [d for d in core if d.startswith("pyarrow")]
    assert any(d.startswith("orjson") for d in core)
    extras = project["optional-dependencies"]
    assert extras["parquet"] == ["pyarrow>=14"]
    assert "tps-tracer[parquet]" in extras["ray"]
    assert not [d for d in extras["langchain"] if "pyarrow" in d or "parquet" in d]
    makefile = (ROOT / "Makefile").read_text()
    demo = next(line for line in makefile.splitlines() if line.startswith("extras_demo"))
    test = next(line for line in makefile.splitlines() if line.startswith("extras_test"))
    assert "parquet" not in demo and "ray" not in demo
    assert "parquet" in test.split(":=")[1].split(",")


@pytest.mark.parametrize(
    "command",
    [["gate", "--min", "-5", "--bootstrap", "100", "--max-skipped-share", "1", "--json"], ["censoring", "--json"]],
)
def test_a_directory_of_json_lines_shards_needs_no_pyarrow(blocked, files, tmp_path, command):
    """Shard directories may hold .jsonl files (README): the commands that read whole records (gate,
    calibrate, censoring, plot) read them as JSON Lines, equal to the one file. (On the old reader they
    went to the Parquet reader: "Parquet magic bytes not found".)"""
    lines = files["jsonl"].read_text().splitlines(keepends=True)
    shards = tmp_path / "jsonl-shards"
    shards.mkdir()
    (shards / "part-0.jsonl").write_text("".join(lines[:250]))
    (shards / "part-1.jsonl").write_text("".join(lines[250:]))
    whole, sharded = run([*command, str(files["jsonl"])]), run([*command, str(shards)], blocked)
    assert whole.returncode == sharded.returncode == 0, sharded.stderr
    assert_reports_equal(json.loads(whole.stdout), json.loads(sharded.stdout))


def test_duplicate_ids_across_json_lines_shards_are_named(files, tmp_path):
    from tps_tracer.records import TrajectoryFileError
    from tps_tracer.records.reading import read_records

    lines = files["jsonl"].read_text().splitlines(keepends=True)
    shards = tmp_path / "dups"
    shards.mkdir()
    (shards / "a.jsonl").write_text("".join(lines[:100]))
    (shards / "b.jsonl").write_text("".join(lines[99:200]))
    with pytest.raises(TrajectoryFileError) as exc:
        read_records(shards)
    dup = json.loads(lines[99])["trajectory_id"]
    assert exc.value.errors[0].message == f"duplicate id {dup!r} (also in an earlier shard)"
    assert exc.value.source.endswith("b.jsonl")
