"""The Makefile's install steps, run by the real `make` against a recording stand-in for the venv's python.

Issue 27: the real-model install stamp exported PIP_ONLY_BINARY as a target-specific variable, GNU make
handed it down to the stamp's prerequisite (the llama-cpp-python wheel build), and pip refused the only
distribution the index has, an sdist: `make test` failed on every machine without a warm wheel cache.
Here the venv's `python` is a script that logs its pip settings and arguments, so the test sees exactly
what each recipe hands to pip, without installing or compiling anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RECORDING_PYTHON = """#!/usr/bin/env bash
printf '%s\\t%s\\t%s\\n' "${PIP_ONLY_BINARY-<unset>}" "${PIP_FIND_LINKS-<unset>}" "$*" >> "$PIP_CALL_LOG"
"""


@pytest.fixture
def calls(tmp_path: Path) -> list[tuple[str, str, str]]:
    if shutil.which("make") is None:
        pytest.fail("GNU make is needed: the README's commands are make targets")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(RECORDING_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "pip-calls.tsv"
    env = {
        **os.environ,
        "PIP_CALL_LOG": str(log),
        # What a user may have exported: the build must not inherit it, the install must not need it.
        "PIP_ONLY_BINARY": ":all:",
        "PIP_FIND_LINKS": "/somewhere/else",
    }
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), f"VENV={venv}", f"WHEEL_CACHE={tmp_path / 'wheels'}",
         "real-model"],
        env=env, check=True, capture_output=True, text=True, timeout=60,
    )
    return [tuple(line.split("\t")) for line in log.read_text().splitlines()]  # type: ignore[misc]


def test_the_wheel_build_gets_no_only_binary_setting_from_the_install_step_or_the_caller(calls):
    builds = [c for c in calls if "pip wheel" in c[2]]
    assert len(builds) == 1, calls
    only_binary, _, args = builds[0]
    assert only_binary == "<unset>"  # neither the stamp's setting nor the caller's reaches the build
    assert "--no-binary llama-cpp-python" in args
    assert "llama-cpp-python==" in args


def test_the_real_model_install_takes_the_built_wheel_and_only_that_one(calls, tmp_path):
    wheels = str(tmp_path / "wheels")
    installs = [c[2] for c in calls if "pip install" in c[2] and wheels in c[2]]
    assert len(installs) == 2, calls
    extra, replace = installs
    assert "--only-binary llama-cpp-python" in extra and "[real-model]" in extra
    # A same-version llama-cpp-python built with other flags is replaced by the cache's build.
    assert "--no-index" in replace and "--force-reinstall" in replace and "llama-cpp-python==" in replace
    # The build runs before the installs that need its wheel, and the other extra sets install first.
    order = [c[2] for c in calls]
    build_at = next(i for i, a in enumerate(order) if "pip wheel" in a)
    install_at = order.index(extra)
    test_set_at = next(i for i, a in enumerate(order) if "test,dev" in a)
    assert test_set_at < install_at and build_at < install_at < order.index(replace)


def test_no_other_install_step_carries_the_real_model_settings(calls, tmp_path):
    wheels = str(tmp_path / "wheels")
    for only_binary, find_links, args in calls:
        if wheels in args:  # the build (-w) and the two real-model installs
            continue
        # The caller's own environment passes through untouched; nothing of the real-model step is added.
        assert only_binary == ":all:", args
        assert find_links == "/somewhere/else", args
        assert "llama-cpp-python" not in args, args
