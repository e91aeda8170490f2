"""The command line describes itself truthfully: every option has help and shows its default,
inputs say they may be Parquet or shard directories (and are), `--version` works, and a gate
config without its [gate] table is an error rather than silently ignored."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import call

import tps_tracer
from tps_tracer.cli.main import build_parser


def rows(n: int = 40) -> list[dict]:
    return [
        {
            "trajectory_id": f"r{i}",
            "stop_reason": "clean" if i % 5 else "max_steps",
            "horizon": 3,
            "outcome": (i // 2) % 2 if i % 5 else None,
            "steps": [{"t": 1, "forecasts": {"verbal": 0.3 + 0.01 * (i % 40)}}, {"t": 2, "forecasts": {"verbal": 0.6}}],
        }
        for i in range(n)
    ]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_version(capsys):
    code, out, _ = call(["--version"], capsys)
    assert code == 0 and out.strip() == f"tps-tracer {tps_tracer.__version__}"
    proc = subprocess.run([sys.executable, "-m", "tps_tracer.cli.main", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == f"tps-tracer {tps_tracer.__version__}"


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_option_has_help_and_shows_a_real_default(name):
    parser = subcommands()[name]
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        assert action.help, f"{name} {action.option_strings or action.dest}: no help"
    text = " ".join(parser.format_help().split())
    assert "(default: None)" not in text and "(default: False)" not in text
    for action in parser._actions:
        real = action.option_strings and action.default not in (None, False, "", argparse.SUPPRESS)
        if real and "default" not in (action.help or ""):
            assert f"(default: {action.default})" in text, f"{name} {action.option_strings}: default not shown"


def test_defaults_read_as_expected_in_the_help():
    helps = {n: " ".join(p.format_help().split()) for n, p in subcommands().items()}
    assert "--bins BINS quantile bins of the reliability diagram (default: 10)" in helps["plot"]
    assert "--format {png,svg} image format of the plots (default: png)" in helps["plot"]
    assert "--seed SEED bootstrap seed (default: 0)" in helps["calibrate"]
    assert "(0: no CIs; at most 100000) (default: 1000)" in helps["censoring"]
    for name in ("plot", "calibrate", "censoring", "report"):
        assert "file trajectory records: JSON Lines, Parquet, or a directory of .parquet/.jsonl shards" in helps[name]
        assert "file trajectory records (JSON Lines)" not in helps[name]


@pytest.fixture()
def inputs(tmp_path, capsys) -> dict[str, Path]:
    src = tmp_path / "runs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    shards = tmp_path / "shards"
    shards.mkdir()
    assert call(["convert", str(src), str(shards / "part-0.parquet")], capsys)[0] == 0
    return {"jsonl": src, "parquet": shards / "part-0.parquet", "dir": shards}


@pytest.mark.parametrize("kind", ["parquet", "dir"])
@pytest.mark.parametrize("command", ["calibrate", "censoring", "plot"])
def test_the_commands_read_parquet_and_shard_directories_as_the_help_says(inputs, tmp_path, capsys, kind, command):
    path = str(inputs[kind])
    argv = {
        "calibrate": ["calibrate", path, "-o", str(tmp_path / "c.json"), "--bootstrap", "20", "--json"],
        "censoring": ["censoring", path, "--bootstrap", "0", "--artificial", "none", "--json"],
        "plot": ["plot", path, "-o", str(tmp_path / "p")],
    }[command]
    code, out, err = call(argv, capsys)
    assert code == 0, err
    argv_jsonl = [str(inputs["jsonl"]) if a == path else a for a in argv]
    if command == "plot":
        argv_jsonl[argv_jsonl.index("-o") + 1] = str(tmp_path / "p2")
    code2, out2, err2 = call(argv_jsonl, capsys)
    assert code2 == 0, err2
    if command == "plot":
        assert sorted(p.name for p in (tmp_path / "p").iterdir()) == sorted(p.name for p in (tmp_path / "p2").iterdir())
    else:
        got, want = json.loads(out), json.loads(out2)
        if command == "calibrate":  # the artifact names its source file
            assert got["fitted_on"].pop("source") == path and want["fitted_on"].pop("source") == str(inputs["jsonl"])
        assert got == want


def test_a_gate_config_without_its_table_is_an_error(inputs, tmp_path, capsys):
    cfg = tmp_path / "gate.toml"
    cfg.write_text("min = -1\nbootstrap = 200\n")  # settings, but not under [gate]
    code, out, err = call(["gate", str(inputs["jsonl"]), "--config", str(cfg)], capsys)
    assert code == 2 and out == ""
    assert (
        err.strip() == f"tps-tracer gate: {cfg}: no [gate] table (found: min, bootstrap); put the settings under [gate]"
    )
    cfg.write_text("[gate]\nmin = -5\nbootstrap = 200\nmin-n = 10\n")
    code, _, err = call(["gate", str(inputs["jsonl"]), "--config", str(cfg)], capsys)
    assert code == 0, err


def test_help_stays_light():
    """--help must not import numpy/scipy (the parsers import only names and defaults)."""
    code = (
        "import sys; from tps_tracer.cli.main import build_parser; build_parser(); "
        "print(sorted(m for m in ('numpy', 'scipy', 'pydantic') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", tps_tracer.__version__)
