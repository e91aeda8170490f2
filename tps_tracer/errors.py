"""Bad input versus a bug: every check of what a caller gave raises an `InputError` (a ValueError), on
which the CLI exits 2 (3 on any other exception); a missing optional dependency is a `MissingExtra`."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any


class InputError(ValueError):
    """Invalid input to tps-tracer: records, options, forecasts or settings (the CLI exits 2)."""


def install_hint(extra: str) -> str:
    """The pip command that adds `extra` to this installation: tps-tracer is on no package index, so it
    names the checkout, wheel or pinned git URL pip recorded (PEP 610's direct_url.json), or this tree."""
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


EXTRA_OF_MODULE = {  # import name -> the extra that installs it
    **{"langchain_core": "langchain", "langgraph": "demo", "tqdm": "demo", "matplotlib": "plot", "pyarrow": "parquet"},
    **{"opentelemetry": "otel", "prometheus_client": "otel"},
    **{name: name for name in ("phoenix", "mlflow", "langsmith", "langfuse", "ray")},
}


class MissingExtra(ModuleNotFoundError, InputError):
    """An optional dependency is not installed (an InputError too: a missing part is no bug, exit 2)."""


def missing_extra(exc: ImportError, what: str = "this", extra: str | None = None) -> MissingExtra | None:
    """The error to raise instead of `exc` when it is a missing optional dependency, else None; `extra`
    overrides the module's own extra when `what` needs more."""
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
    """The PEP 562 `__getattr__` and `__dir__` of a package whose names (`home`: name -> module) are
    imported on first use; `extra`: their absence is a `MissingExtra`."""

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
