"""Hostile record files (issue 35): every command x every hostile file ends in exit 2 with one line
on stderr naming the file, the line and the field, in bounded memory; none is an internal error (3).

Each command runs in its own process, as a user runs it, and reports its own peak RSS (VmHWM, read
in the child: getrusage's ru_maxrss of a child starts at the forking parent's size). The bounds are
those of records/limits.py (docs/records-limits.md). Files are generated small where the bound
allows it; the record-size cases are just beyond the bound (a line of 257 MiB), the garbage line
is a sparse 1 GiB file (its first byte decides, so it is never read whole).

Before this issue: 100,000 predictor names took > 6 GiB and exit 3; a 1 GiB garbage line 91 s and
4.2 GiB; a 1 GiB metadata string 68 s and 4.5 GiB; a 5,000-digit integer gave Python's
set_int_max_str_digits advice with no file or line; depth 1,000 passed four commands and failed two;
duplicate keys were read as the last one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tps_tracer.constants import MAX_DEPTH, MAX_PREDICTORS, MAX_RECORD_BYTES

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20

# Runs the CLI and writes the process's own peak RSS (kB) to the file named by argv[1].
_RUN = """
import sys
from tps_tracer.cli.main import main
peak_file = sys.argv.pop(1)
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as fh:
        peak = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
    with open(peak_file, "w") as fh:
        fh.write(peak)
sys.exit(code)
"""


def ok(i: int) -> dict[str, object]:
    return {
        "trajectory_id": f"r{i}",
        "stop_reason": "clean",
        "outcome": i % 2,
        "steps": [{"t": 1, "forecasts": {"verbal": 0.6}}, {"t": 2, "forecasts": {"verbal": 0.7}}],
    }


OK_LINES = "".join(json.dumps(ok(i)) + "\n" for i in range(40))
HEAD = '{"trajectory_id": "h", "stop_reason": "clean", "outcome": 1, '


@dataclass
class Hostile:
    name: str
    line: int  # the line the message must name
    field: str | None  # the field it must name (None: the line as a whole)
    words: str  # a phrase of the message
    ceiling_mb: int  # peak RSS of the command's process


def _write_names(path: Path) -> None:
    """40 plain records, then one record per new predictor name: the 1,000th new name (line 1040)
    is the 1,001st distinct name of the file."""
    with path.open("w") as fh:
        fh.write(OK_LINES)
        for i in range(2 * MAX_PREDICTORS):
            fh.write(json.dumps({**ok(1000 + i), "steps": [{"forecasts": {f"p{i}": 0.5}}]}) + "\n")


def _write_garbage(path: Path) -> None:
    """Three plain lines, then a 1 GiB line starting with "garbage" (sparse: the rest is a hole)."""
    with path.open("wb") as fh:
        fh.write("".join(OK_LINES.splitlines(keepends=True)[:3]).encode())
        fh.write(b"garbage")
        fh.truncate(1 << 30)
    with path.open("ab") as fh:
        fh.write(b"\n")


def _write_long_string(path: Path) -> None:
    """Three plain lines, then a record whose metadata string makes it 1 MiB longer than the bound."""
    with path.open("wb") as fh:
        fh.write("".join(json.dumps(ok(i)) + "\n" for i in range(3)).encode())
        fh.write((HEAD + '"metadata": {"note": "').encode())
        block = b"a" * (8 * MB)
        for _ in range(MAX_RECORD_BYTES // len(block) + 1):
            fh.write(block)
        fh.write(b'"}}\n')


def _line6(text: str) -> str:
    lines = OK_LINES.splitlines(keepends=True)
    return "".join(lines[:5]) + text + "\n" + "".join(lines[5:])


CASES: dict[str, tuple[Hostile, object]] = {
    "names": (
        Hostile("names", 40 + MAX_PREDICTORS, f"steps[0].forecasts.p{MAX_PREDICTORS - 1}", "distinct predictor", 300),
        _write_names,
    ),
    "garbage-1gib": (Hostile("garbage", 4, None, "not a JSON object", 300), _write_garbage),
    "long-string": (
        Hostile("long", 4, None, "longer than 256 MiB", MAX_RECORD_BYTES // MB + 300),
        _write_long_string,
    ),
    "duplicate-key": (
        Hostile("dup", 6, "outcome", "duplicate key", 300),
        _line6(HEAD + '"outcome": 0, "steps": []}'),
    ),
    "duplicate-metadata-key": (
        Hostile("dupmeta", 6, "metadata.a", "duplicate key", 300),
        _line6(HEAD + '"metadata": {"a": 1, "b": 2, "a": 3}}'),
    ),
    "duplicate-key-in-a-resolution": (  # the chunked reader applies resolutions itself: same rule
        Hostile("dupres", 42, "outcome", "duplicate key", 300),
        OK_LINES
        + '{"trajectory_id": "p", "stop_reason": "clean", "outcome_pending": true, "steps": []}\n'
        + '{"resolves": "p", "outcome": 1, "outcome": 0}\n',
    ),
    "depth-300": (
        Hostile("deep300", 6, "metadata.x[0]...", f"nested more than {MAX_DEPTH}", 300),
        _line6(HEAD + '"metadata": {"x": ' + "[" * 300 + "]" * 300 + "}}"),
    ),
    "depth-1000": (
        Hostile("deep1000", 6, None, f"nested more than {MAX_DEPTH}", 300),
        _line6(HEAD + '"metadata": {"x": ' + "[" * 1000 + "]" * 1000 + "}}"),
    ),
    "integer-5000-digits": (
        Hostile("bigint", 6, "metadata.n", "5000 digits", 300),
        _line6(HEAD + '"metadata": {"n": ' + "7" * 5000 + "}}"),
    ),
    "horizon-2^63": (
        Hostile("horizon", 6, "horizon", "less than or equal to 10000000", 300),
        _line6('{"trajectory_id": "h", "stop_reason": "max_steps", "horizon": ' + str(2**63) + "}"),
    ),
}

COMMANDS = {
    "report": lambda f, d: ["report", str(f)],
    "gate": lambda f, d: ["gate", str(f), "--min", "-5"],
    "calibrate": lambda f, d: ["calibrate", str(f), "-o", str(d / "cal.json")],
    "censoring": lambda f, d: ["censoring", str(f)],
    "plot": lambda f, d: ["plot", str(f), "-o", str(d / "plot.png")],
    "convert": lambda f, d: ["convert", str(f), str(d / "out.parquet")],
}


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    for case, make in CASES.values():
        path = d / f"{case.name}.jsonl"
        if callable(make):
            make(path)
        else:
            path.write_text(str(make))
    return d


def run_cli(argv: list[str], work: Path) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in MB) of `tps-tracer ARGV` in its own process."""
    peak = work / "peak"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(peak), *argv], capture_output=True, text=True, timeout=120, env=env
    )
    return proc.returncode, proc.stderr, int(peak.read_text()) // 1024


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("key", list(CASES))
def test_a_hostile_file_is_one_line_exit_2_in_bounded_memory(hostile_dir, tmp_path, key, command):
    case = CASES[key][0]
    path = hostile_dir / f"{case.name}.jsonl"
    code, err, peak_mb = run_cli(COMMANDS[command](path, tmp_path), tmp_path)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err  # one line, no traceback
    assert err.startswith(f"tps-tracer {command}: bad input: {path}: line {case.line}"), err
    if case.field is not None:
        assert f"line {case.line}, field '{case.field}'" in err, err
    assert case.words in err, err
    assert peak_mb < case.ceiling_mb, f"peak RSS {peak_mb} MB"
    assert not [p for p in tmp_path.iterdir() if p.name not in ("peak",)]  # no output, no temp file


def _write_wide_parquet(path: Path) -> None:
    """A Parquet file in the project's schema whose forecasts struct has MAX_PREDICTORS + 1 fields."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tps_tracer.records.parquet import arrow_schema

    names = [f"p{i}" for i in range(MAX_PREDICTORS + 1)]
    rows = [
        {
            "trajectory_id": f"r{i}",
            "stop_reason": "clean",
            "outcome": i % 2,
            "steps": [{"t": 1, "forecasts": {n: 0.5 for n in names}, "extra": None}],
            "metadata": "{}",
        }
        for i in range(3)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(names)), path)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_parquet_file_with_too_many_predictors_is_refused_before_its_rows_are_read(tmp_path, command):
    path = tmp_path / "wide.parquet"
    _write_wide_parquet(path)
    argv = COMMANDS[command](path, tmp_path)
    if command == "convert":
        argv[-1] = str(tmp_path / "out.jsonl")
    code, err, peak_mb = run_cli(argv, tmp_path)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"tps-tracer {command}: bad input: {path}: field 'steps.forecasts' has 1001 fields"), err
    assert peak_mb < 300


def test_names_spread_over_chunks_are_counted_over_the_whole_input(tmp_path):
    """Each chunk has fewer than MAX_PREDICTORS names, the file more: the line of the 1,001st is named
    (the chunked reader, with chunks of ~4 kB, and the whole-file reader agree)."""
    from tps_tracer.evaluation.chunked import read_arrays
    from tps_tracer.records import TrajectoryFileError, read_trajectories

    path = tmp_path / "spread.jsonl"
    _write_names(path)
    for read in (lambda: read_arrays(path, chunk_bytes=4096), lambda: read_trajectories(path)):
        with pytest.raises(TrajectoryFileError) as exc:
            read()
        [error] = exc.value.errors
        assert (error.line, error.field) == (40 + MAX_PREDICTORS, f"steps[0].forecasts.p{MAX_PREDICTORS - 1}")


def test_the_bounds_themselves_are_accepted(tmp_path):
    """MAX_PREDICTORS names, a record nested MAX_DEPTH deep, a 4,300-digit integer: read, not refused."""
    from tps_tracer.evaluation.chunked import read_arrays
    from tps_tracer.records import read_trajectories

    path = tmp_path / "at-the-bounds.jsonl"
    with path.open("w") as fh:
        fh.write(OK_LINES)
        for i in range(MAX_PREDICTORS - 1):  # "verbal" is the first name
            fh.write(json.dumps({**ok(1000 + i), "steps": [{"forecasts": {f"p{i}": 0.5}}]}) + "\n")
        # record (1) -> metadata (2) -> MAX_DEPTH - 2 nested lists
        fh.write(HEAD + '"metadata": {"x": ' + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "}}\n")
        fh.write(HEAD.replace('"h"', '"h2"') + '"metadata": {"n": ' + "7" * 4300 + "}}\n")
    for arrays in (read_arrays(path), read_arrays(path, chunk_bytes=4096)):
        assert len(arrays.predictors) == MAX_PREDICTORS and arrays.n == 40 + MAX_PREDICTORS - 1 + 2
    records = read_trajectories(path)
    assert records[-2].metadata["x"] == json.loads("[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2))
    assert records[-1].metadata["n"] == int("7" * 4300)
    deeper = tmp_path / "one-deeper.jsonl"
    deeper.write_text(HEAD + '"metadata": {"x": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}}\n")
    with pytest.raises(Exception, match=f"nested more than {MAX_DEPTH}"):
        read_arrays(deeper)
