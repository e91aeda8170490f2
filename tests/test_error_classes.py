"""Every error the package raises for bad input is an InputError, so the CLI can tell bad input (exit 2)
from a bug (exit 3) by class alone (tps_tracer/errors.py, tps_tracer/cli/main.py)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import tps_tracer
from tps_tracer.cli.main import expected_message
from tps_tracer.errors import InputError

PACKAGE = Path(tps_tracer.__file__).parent
# Modules whose import needs an optional extra or a server; their classes are checked when importable.
OPTIONAL = ("tps_tracer.distributed", "tps_tracer.plots")


def _package_modules():
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="tps_tracer."):
        try:
            yield importlib.import_module(info.name)
        except ImportError:
            if not info.name.startswith(OPTIONAL):
                raise


def test_every_value_error_class_of_the_package_is_an_input_error():
    value_errors = {
        f"{cls.__module__}.{cls.__name__}"
        for module in _package_modules()
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__.startswith("tps_tracer.") and issubclass(cls, ValueError)
    }
    assert "tps_tracer.records.errors.TrajectoryFileError" in value_errors  # the walk found the classes
    assert "tps_tracer.cli.main.CliError" in value_errors
    not_input = sorted(
        name
        for name in value_errors
        if not issubclass(getattr(importlib.import_module(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]), InputError)
    )
    assert not_input == []


def test_the_package_never_raises_a_bare_value_error():
    """A deliberate check raises InputError; a bare ValueError would read as a bug (exit 3) at the CLI."""
    bare = re.compile(r"\bValueError\(")  # raised, or built and returned to be raised
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (InputError("records.jsonl: line 3: horizon must be >= 1"), "records.jsonl: line 3: horizon must be >= 1"),
        (ValueError("operands could not be broadcast together"), None),
        (KeyError("a bug"), None),
        (FileNotFoundError(2, "No such file or directory", "x.jsonl"), "x.jsonl: No such file or directory"),
    ],
)
def test_the_boundary_maps_exit_codes_by_class(exc, expected):
    assert expected_message(exc) == expected


class _Dist:
    def __init__(self, direct_url: str | None):
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return self.direct_url


@pytest.mark.parametrize(
    ("direct_url", "hint"),
    [
        # pip install 'tps-tracer @ git+https://example.org/team/tps-tracer@<sha>' (PEP 610 vcs_info)
        (
            '{"url": "https://example.org/team/tps-tracer", "vcs_info": {"vcs": "git", "commit_id": "ab12"}}',
            "pip install 'tps-tracer[otel] @ git+https://example.org/team/tps-tracer@ab12'",
        ),
        # pip install -e /src/tps-tracer
        (
            '{"url": "file:///src/tps%20tracer", "dir_info": {"editable": true}}',
            "pip install -e '/src/tps tracer[otel]'",
        ),
        # pip install /src/tps-tracer, or a wheel file
        ('{"url": "file:///src/tps-tracer", "dir_info": {}}', "pip install '/src/tps-tracer[otel]'"),
        (
            '{"url": "file:///w/tps_tracer-0.1.0-py3-none-any.whl", "archive_info": {}}',
            "pip install '/w/tps_tracer-0.1.0-py3-none-any.whl[otel]'",
        ),
    ],
)
def test_a_missing_extra_names_the_install_that_works_from_where_it_came(monkeypatch, direct_url, hint):
    """tps-tracer is on no package index: `pip install 'tps-tracer[otel]'` fails, so the hint reinstalls
    from the git commit, checkout or wheel pip recorded (issue 47: the hints named the index form)."""
    from importlib import metadata

    from tps_tracer import errors
    from tps_tracer.errors import MissingExtra, install_hint, missing_extra

    monkeypatch.setattr(metadata, "distribution", lambda name: _Dist(direct_url))
    # Every extra is installed here: a stand-in optional dependency that is not.
    monkeypatch.setitem(errors.EXTRA_OF_MODULE, "tps_absent_dep", "otel")
    assert install_hint("otel") == hint
    missing = missing_extra(ModuleNotFoundError("No module named 'tps_absent_dep'", name="tps_absent_dep.sdk"), "X")
    assert isinstance(missing, MissingExtra) and isinstance(missing, InputError)
    assert str(missing) == f"X needs the 'otel' extra (tps_absent_dep is not installed): {hint}"
    # The CLI boundary: exit 2 with that line, for a missing optional dependency raised anywhere in a command.
    assert expected_message(ModuleNotFoundError("x", name="tps_absent_dep")) == (
        f"this command needs the 'otel' extra (tps_absent_dep is not installed): {hint}"
    )
    # An installed dependency lacking one of its modules (moved in another version) is a bug, exit 3.
    assert missing_extra(ModuleNotFoundError("x", name="opentelemetry.sdk.moved_away")) is None
    assert expected_message(ModuleNotFoundError("x", name="opentelemetry.sdk.moved_away")) is None
    assert missing_extra(ModuleNotFoundError("x", name="numpyy")) is None  # not an extra: a bug, exit 3
    assert expected_message(ModuleNotFoundError("x", name="numpyy")) is None
