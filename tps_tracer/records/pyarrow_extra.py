"""pyarrow is the `parquet` extra: Parquet files, `tps-tracer convert`, Ray blocks. Not the core install.

JSON Lines never need it (`jsonl_fast.py` reads them with orjson). Code that needs pyarrow calls
`require_pyarrow(what)` first, so a missing extra is one clear message, not a traceback.
"""

from __future__ import annotations

from tps_tracer.errors import InputError

INSTALL_HINT = "pip install 'tps-tracer[parquet]'"


class MissingExtra(ImportError, InputError):
    """An optional dependency is not installed; the message says what needs it and the pip command.

    An ImportError for Python callers; a ValueError too, so the command line reports it as one line
    with exit 2, like any other expected failure (`cli/errors.py`).
    """


def require_pyarrow(what: str) -> None:
    """MissingExtra naming `what` (e.g. "reading Parquet (runs.parquet)") unless pyarrow imports."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise MissingExtra(f"{what} needs pyarrow, which is not installed: {INSTALL_HINT}") from exc
