"""The one error base class of the package: bad input versus a bug.

`InputError` is raised wherever tps-tracer checks what a caller gave it (records, options, forecasts,
settings) and finds it invalid. Every error class of the package that reports bad input subclasses it,
so the command line maps exit codes by class: an `InputError` is exit 2 ("bad input", one line naming
what and where); any other exception, including a plain `ValueError` from numpy or the standard library
inside a command, is exit 3 ("internal error, please report it"), never mistaken for the user's fault.

It subclasses `ValueError` so code that caught `ValueError` from the library keeps working.
A missing optional dependency is a `MissingExtra` naming the install that adds it, also where a
package imports its names on first use (`lazy_names`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


class InputError(ValueError):
    """Invalid input to tps-tracer: records, options, forecasts or settings (the CLI exits 2)."""


def install_hint(extra: str) -> str:
    """The pip command that adds `extra` to this installation of tps-tracer, from where it came.

    tps-tracer is not on a package index, so `pip install 'tps-tracer[extra]'` fails: the hint names
    the checkout, wheel or git URL pinned to a commit that pip recorded at install time (PEP 610's
    direct_url.json), or this source tree when the package runs uninstalled."""
    import json
    from importlib import metadata
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    try:
        info = json.loads(metadata.distribution("tps-tracer").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        info = None
    if isinstance(info, dict) and isinstance(info.get("url"), str):
        url: str = info["url"]
        vcs = info.get("vcs_info")
        if isinstance(vcs, dict):
            return f"pip install 'tps-tracer[{extra}] @ {vcs.get('vcs', 'git')}+{url}@{vcs.get('commit_id', '')}'"
        if url.startswith("file:"):
            editable = (info.get("dir_info") or {}).get("editable")
            return f"pip install {'-e ' if editable else ''}'{unquote(urlparse(url).path)}[{extra}]'"
        return f"pip install 'tps-tracer[{extra}] @ {url}'"
    source = Path(__file__).resolve().parents[1]
    if (source / "pyproject.toml").is_file():
        return f"pip install '{source}[{extra}]'"
    return f"pip install 'tps-tracer[{extra}] @ git+URL@COMMIT' (the URL and commit you installed tps-tracer from)"


# The optional dependencies by top-level module, and the extra that installs each.
EXTRA_OF_MODULE = {
    "langchain_core": "langchain",
    "langgraph": "demo",
    "tqdm": "demo",
    "opentelemetry": "otel",
    "prometheus_client": "otel",
    "phoenix": "phoenix",
    "mlflow": "mlflow",
    "langsmith": "langsmith",
    "langfuse": "langfuse",
    "matplotlib": "plot",
    "pyarrow": "parquet",
    "ray": "ray",
}


class MissingExtra(ModuleNotFoundError, InputError):
    """An optional dependency is not installed; the message says what needs it and the pip command.

    A ModuleNotFoundError for Python callers; an InputError too, so the command line reports it as one
    line with exit 2 (the installation lacks a part, which is not a bug of tps-tracer)."""


def missing_extra(exc: ImportError, what: str = "this", extra: str | None = None) -> MissingExtra | None:
    """The error to raise instead of `exc` when it is a missing optional dependency, else None; `extra`
    names the extra that has all of `what`'s needs when the module's own extra would not be enough."""
    import importlib.util

    top = (exc.name or "").split(".")[0]
    # An installed dependency missing one of its own modules (a version that moved it) is no missing extra.
    if top not in EXTRA_OF_MODULE or importlib.util.find_spec(top) is not None:
        return None
    extra = extra or EXTRA_OF_MODULE[top]
    return MissingExtra(
        f"{what} needs the '{extra}' extra ({top} is not installed): {install_hint(extra)}", name=exc.name
    )


def lazy_names(
    package: str, home: dict[str, str], extra: bool = False
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The PEP 562 `__getattr__` and `__dir__` of a package whose names are imported on first use
    (this one and its subpackages): `home` maps each name to its module, relative to `package`.
    `extra`: the modules need an optional dependency, whose absence is `errors.MissingExtra`
    naming the install."""

    def getattr_(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        except ModuleNotFoundError as exc:
            missing = missing_extra(exc, f"{package}.{name}") if extra else None
            if missing is None:
                raise
            raise missing from exc
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home})

    return getattr_, dir_
