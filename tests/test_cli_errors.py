"""The CLI's error boundary: every subcommand x every expected failure kind -> exit 2, one line
on stderr naming what and where, no traceback; --debug / TPS_TRACER_DEBUG=1 add the traceback.

The table runs in-process through `main` (fast); a few cases run through the installed console
script in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import call
from handler_output import write_handler_output

from tps_tracer.cli.main import main


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli-errors")
    good = write_handler_output(d / "good.jsonl")
    records = [json.loads(line) for line in good.read_text().splitlines()]
    # Every outcome 1: no Platt map can be fitted (the intercept has no finite maximum).
    ones = d / "ones.jsonl"
    ones.write_text(
        "".join(
            json.dumps({**r, "outcome": 1} if "resolves" in r or r.get("outcome") is not None else r) + "\n"
            for r in records
        )
    )
    # No complete trajectory (budget stops only): the censored TPS alone; no base rate.
    censored = d / "censored.jsonl"
    censored.write_text(
        "".join(
            json.dumps({"trajectory_id": f"c{i}", "stop_reason": "max_steps", "steps": [{"forecasts": {"v": 0.3}}]})
            + "\n"
            for i in range(5)
        )
    )
    binary = d / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text\n")
    # Only excluded (informative) stops: no working sample, nothing any TPS scores.
    excluded = d / "excluded.jsonl"
    excluded.write_text(censored.read_text().replace('"max_steps"', '"tool_error"'))
    a_file = d / "a-file.txt"
    a_file.write_text("I am a file, not a directory\n")
    a_dir = d / "a-dir"
    a_dir.mkdir()
    return {
        "good": good,
        "ones": ones,
        "censored": censored,
        "excluded": excluded,
        "binary": binary,
        "file": a_file,
        "dir": a_dir,
        "d": d,
    }


def test_the_unreadable_inputs_are_really_unreadable(files):
    """Tests run as root, so chmod 000 would not do: a directory path cannot be read as a file, and
    nothing can be created under a regular file."""
    with pytest.raises(IsADirectoryError):
        files["dir"].open().read()
    with pytest.raises(NotADirectoryError):
        (files["file"] / "out.json").open("w")
    with pytest.raises(NotADirectoryError):
        (files["file"] / "plots").mkdir(parents=True)


# (command, failure kind, argv template, text the one-line message must contain)
# {good} {ones} {censored} {excluded} {binary} {dir} {file} {missing} are substituted with real paths.
TABLE = [
    # report
    ("report", "missing file", ["report", "{missing}"], "{missing}: file not found"),
    # report and gate read directories of Parquet / JSON Lines shards: an empty one is the error
    ("report", "directory without shards", ["report", "{dir}"], "{dir}: the directory holds no .parquet or .jsonl"),
    ("report", "unreadable file (not UTF-8)", ["report", "{binary}"], "{binary}: not UTF-8 text"),
    ("report", "bad option value", ["report", "{good}", "--bootstrap", "-1"], "--bootstrap: must be an integer >= 0"),
    ("report", "bad option type", ["report", "{good}", "--ece-bins", "many"], "argument --ece-bins: invalid int"),
    ("report", "bad option value", ["report", "{good}", "--rules", "logg"], "--rules: unknown score rule 'logg'"),
    ("report", "unknown predictor", ["report", "{good}", "--predictors", "nope"], "unknown predictor(s): nope"),
    ("report", "missing file (--calibrator)", ["report", "{good}", "--calibrator", "{missing}"], "--calibrator"),
    ("report", "unreadable file (--calibrator dir)", ["report", "{good}", "--calibrator", "{dir}"], "Is a directory"),
    ("report", "unfittable sample", ["report", "{ones}", "--calibrate", "platt"], "no predictor to recalibrate"),
    ("report", "unfittable sample", ["report", "{excluded}"], "no complete trajectory"),
    # calibrate
    ("calibrate", "missing file", ["calibrate", "{missing}", "-o", "{d}/c.json"], "{missing}: file not found"),
    (
        "calibrate",
        "directory without shards",
        ["calibrate", "{dir}", "-o", "{d}/c.json"],
        "the directory holds no .parquet or .jsonl",
    ),
    ("calibrate", "bad option value", ["calibrate", "{good}", "-o", "{d}/c.json", "--bootstrap", "1"], "--bootstrap"),
    ("calibrate", "bad option value", ["calibrate", "{good}", "-o", "{d}/c.json", "--penalty", "0"], "--penalty"),
    ("calibrate", "unknown predictor", ["calibrate", "{good}", "-o", "{d}/c.json", "--predictors", "nope"], "nope"),
    (
        "calibrate",
        "unknown predictor",
        ["calibrate", "{good}", "-o", "{d}/c.json", "--fixed-rank", "nope"],
        "--fixed-rank",
    ),
    ("calibrate", "unwritable output dir", ["calibrate", "{good}", "-o", "{file}/c.json"], "cannot write -o"),
    ("calibrate", "unwritable output dir", ["calibrate", "{good}", "-o", "{d}/no-such-dir/c.json"], "cannot write -o"),
    ("calibrate", "unfittable sample", ["calibrate", "{ones}", "-o", "{d}/c.json"], "no predictor to calibrate"),
    (
        "calibrate",
        "unfittable sample",
        ["calibrate", "{ones}", "-o", "{d}/c.json", "--predictors", "verbal"],
        "no predictor to calibrate: verbal: cross-fitted Platt needs at least 2 complete trajectories of each outcome",
    ),
    # plot
    ("plot", "missing file", ["plot", "{missing}", "-o", "{d}/p"], "{missing}: file not found"),
    ("plot", "directory without shards", ["plot", "{dir}", "-o", "{d}/p"], "the directory holds no .parquet or .jsonl"),
    ("plot", "bad option value", ["plot", "{good}", "-o", "{d}/p", "--bins", "0"], "--bins"),
    ("plot", "bad option value", ["plot", "{good}", "-o", "{d}/p", "--rule", "brierr"], "--rule"),
    ("plot", "bad option type", ["plot", "{good}", "-o", "{d}/p", "--format", "gif"], "argument --format"),
    ("plot", "unknown predictor", ["plot", "{good}", "-o", "{d}/p", "--predictors", "nope"], "nope"),
    ("plot", "unwritable output dir", ["plot", "{good}", "-o", "{file}/plots"], "cannot write -o"),
    (
        "plot",
        "unfittable sample",
        ["plot", "{ones}", "-o", "{d}/p", "--calibrate", "platt"],
        "no predictor to recalibrate",
    ),
    (
        "plot",
        "unfittable sample",
        ["plot", "{censored}", "-o", "{d}/p", "--censoring", "complete-only"],
        "no predictor",
    ),
    # censoring
    ("censoring", "missing file", ["censoring", "{missing}"], "{missing}: file not found"),
    (
        "censoring",
        "missing file (--continuations)",
        ["censoring", "{good}", "--continuations", "{missing}"],
        "{missing}",
    ),
    (
        "censoring",
        "unreadable file (--continuations dir)",
        ["censoring", "{good}", "--continuations", "{dir}"],
        "Is a dir",
    ),
    ("censoring", "directory without shards", ["censoring", "{dir}"], "the directory holds no .parquet or .jsonl"),
    ("censoring", "bad option value", ["censoring", "{good}", "--artificial", "2"], "--artificial"),
    ("censoring", "bad option value", ["censoring", "{good}", "--informative", "sunspots"], "--informative"),
    ("censoring", "bad option value", ["censoring", "{good}", "--q-z-model", "colour"], "--q-z-model"),
    ("censoring", "unknown predictor", ["censoring", "{good}", "--predictors", "nope"], "nope"),
    (
        "censoring",
        "unwritable output dir",
        ["censoring", "{good}", "--write-records", "{file}/q.jsonl"],
        "--write-records",
    ),
    ("censoring", "unfittable sample", ["censoring", "{censored}"], "no predictor to check"),
    # gate
    ("gate", "missing file", ["gate", "{missing}", "--min", "-1"], "{missing}: file not found"),
    ("gate", "missing file (--baseline)", ["gate", "{good}", "--min", "-1", "--baseline", "{missing}"], "{missing}"),
    (
        "gate",
        "missing file (--config)",
        ["gate", "{good}", "--config", "{missing}"],
        "--config {missing}: No such file or directory",
    ),
    (
        "gate",
        "missing file (--snapshot)",
        ["gate", "--snapshot", "{missing}", "--min", "-1"],
        "--snapshot {missing}: No such file",
    ),
    ("gate", "directory without shards", ["gate", "{dir}", "--min", "-1"], "the directory holds no .parquet or .jsonl"),
    ("gate", "bad option value", ["gate", "{good}", "--min", "-1", "--censoring", "sideways"], "--censoring"),
    ("gate", "bad option type", ["gate", "{good}", "--min", "low"], "argument --min"),
    (
        "gate",
        "unknown predictor",
        ["gate", "{good}", "--min", "-1", "--predictor", "nope"],
        "--predictor: unknown predictor(s): nope",
    ),
    (
        "gate",
        "unwritable output dir",
        ["gate", "{good}", "--min", "-1", "--min-n", "5", "--markdown", "{file}/s.md"],
        "--markdown",
    ),
    ("gate", "unfittable sample", ["gate", "{excluded}", "--min", "-1"], "no complete trajectory"),
    ("gate", "unfittable sample", ["gate", "{censored}", "--vs-base-rate"], "no base rate to compare with"),
    # demo
    ("demo", "bad option type", ["demo", "--tasks", "few"], "argument --tasks"),
    ("demo", "bad option value", ["demo", "--tasks", "0"], "--tasks must be >= 1"),
    ("demo", "unwritable output dir", ["demo", "--out", "{file}/demo", "--tasks", "20"], "cannot write --out"),
]


def _fill(s: str, files: dict[str, Path]) -> str:
    subst = {k: str(v) for k, v in files.items()} | {"missing": str(files["d"] / "missing.jsonl")}
    return s.format(**subst)


@pytest.mark.parametrize(
    "command, kind, argv, expect", TABLE, ids=[f"{c}-{k}-{i}" for i, (c, k, _, _) in enumerate(TABLE)]
)
def test_every_expected_failure_exits_2_with_one_line(files, capsys, command, kind, argv, expect):
    code, out, err = call([_fill(a, files) for a in argv], capsys)
    assert code == 2, (code, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tps-tracer {command}") or lines[0].startswith("tps-tracer: error"), err
    assert _fill(expect, files) in lines[0], err
    assert out == ""


def test_a_failed_command_leaves_no_output_file(files, capsys):
    out = files["d"] / "never.json"
    assert call(["calibrate", str(files["ones"]), "-o", str(out), "--predictors", "verbal"], capsys)[0] == 2
    plots = files["d"] / "never-plots"
    assert call(["plot", str(files["ones"]), "-o", str(plots), "--calibrate", "platt"], capsys)[0] == 2
    assert not out.exists() and not plots.exists()
    assert not [p for p in files["d"].iterdir() if p.name.endswith(".tmp")]


def test_a_record_file_with_several_problems_lists_them_after_the_first_line(files, capsys):
    bad = files["d"] / "several.jsonl"
    bad.write_text('{"trajectory_id": "a", "stop_reason": "clean"}\nnot json\n')
    code, _, err = call(["report", str(bad)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err
    assert lines[0].startswith(f"tps-tracer report: bad input: {bad}: line 1")
    assert "and 1 more problem" in lines[0] and lines[1].strip().startswith("line 2: invalid JSON")


def test_an_internal_error_is_exit_3_not_1_and_not_a_traceback(files, capsys, monkeypatch):
    """A bug (an exception nobody expected) must never look like the gate's FAIL (exit 1)."""
    import tps_tracer.cli.report_cmd as report_cmd

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(report_cmd, "report_from_path", broken)
    code, _, err = call(["report", str(files["good"])], capsys)
    assert code == 3
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "internal error (KeyError: 'a bug')" in err and "--debug" in err
    code, _, err = call(["report", str(files["good"]), "--debug"], capsys)
    assert code == 3 and "Traceback" in err and "KeyError" in err


def _cli() -> str:
    exe = shutil.which("tps-tracer", path=str(Path(sys.executable).parent))
    assert exe
    return exe


@pytest.mark.parametrize("how", ["flag-before", "flag-after", "env"])
def test_debug_shows_the_traceback_with_the_same_exit_code(files, how):
    """Through the real console script: --debug (before or after the command) or TPS_TRACER_DEBUG=1."""
    missing = str(files["d"] / "missing-calibrator.json")
    args = ["report", str(files["good"]), "--calibrator", missing]
    env = {k: v for k, v in os.environ.items() if k != "TPS_TRACER_DEBUG"}
    plain = subprocess.run([_cli(), *args], capture_output=True, text=True, env=env, timeout=120)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip() == f"tps-tracer report: cannot read --calibrator {missing}: No such file or directory"
    if how == "flag-before":
        argv, env2 = [_cli(), "--debug", *args], env
    elif how == "flag-after":
        argv, env2 = [_cli(), *args, "--debug"], env
    else:
        argv, env2 = [_cli(), *args], {**env, "TPS_TRACER_DEBUG": "1"}
    debug = subprocess.run(argv, capture_output=True, text=True, env=env2, timeout=120)
    assert debug.returncode == 2
    assert "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == plain.stderr.strip()


def test_the_gate_fail_verdict_is_the_only_exit_1(files):
    """A FAIL verdict exits 1 (and an impossible threshold on a usable sample is a FAIL, not an error)."""
    proc = subprocess.run(
        [_cli(), "gate", str(files["good"]), "--min", "0", "--min-n", "5", "--bootstrap", "200"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "FAIL" in proc.stdout and proc.stderr == ""


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ("", "the file holds no trajectories"),
        ("\n\n  \n", "the file holds no trajectories"),
        (
            '{"trajectory_id": "r0", "stop_reason": "clean", "outcome": 1, "steps": [{"forecast": {"v": 0.6}}]}\n',
            "no forecasts in the 1 trajectories: nothing to convert",
        ),
    ],
)
def test_convert_of_a_file_without_forecasts_is_one_line_not_an_internal_error(tmp_path, capsys, content, expect):
    src = tmp_path / "in.jsonl"
    src.write_text(content, encoding="utf-8")
    assert main(["convert", str(src), str(tmp_path / "out.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expect in err
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("command", ["report", "gate"])
def test_a_plain_value_error_inside_a_command_is_internal_exit_3(files, capsys, monkeypatch, command):
    """A numpy broadcasting bug is ours, not the user's: exit 3 ("please report it"), not exit 2 ("bad input").

    Before the InputError base class, the boundary mapped every ValueError to exit 2, so a bug
    inside a command told the user their file was wrong.
    """
    import numpy as np

    import tps_tracer.cli.gate_cmd as gate_cmd
    import tps_tracer.cli.report_cmd as report_cmd

    def broadcasting_bug(*args, **kwargs):
        return np.zeros(3) + np.zeros(2)  # raises numpy's own ValueError

    if command == "report":
        monkeypatch.setattr(report_cmd, "report_from_path", broadcasting_bug)
        argv = ["report", str(files["good"])]
    else:
        monkeypatch.setattr(gate_cmd, "gate_paths", broadcasting_bug)
        argv = ["gate", str(files["good"]), "--vs-base-rate"]
    code, _, err = call(argv, capsys)
    assert code == 3, err
    assert "internal error (ValueError: operands could not be broadcast" in err and "please report it" in err


def test_a_bug_inside_option_parsing_is_internal_exit_3_and_a_bad_value_still_exit_2(files, capsys, monkeypatch):
    """`flag()` names the option of a user's bad value (exit 2); a plain ValueError raised while
    parsing it is a bug of ours and exits 3 ("internal error, please report it")."""
    import tps_tracer.cli.report_cmd as report_cmd

    code, _, err = call(["report", str(files["good"]), "--rules", "nope"], capsys)
    assert code == 2 and "--rules: unknown score rule 'nope'" in err, err

    def parser_bug(text):
        raise ValueError("a parser bug")

    monkeypatch.setattr(report_cmd, "parse_rules", parser_bug)
    code, _, err = call(["report", str(files["good"]), "--rules", "log"], capsys)
    assert code == 3, err
    assert "internal error (ValueError: a parser bug), please report it" in err
    assert "--rules:" not in err
