"""The errors of the record readers, and `NotFast`, their one fallback signal: a leaf module (the CLI's
error boundary and every reader import it before anything heavy)."""

from __future__ import annotations

from dataclasses import dataclass

from tps_tracer.errors import InputError, MissingExtra, install_hint


@dataclass(frozen=True)
class RecordError:
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        if self.line == 0:  # the file as a whole (not found, empty, not text)
            return self.message
        where = f"line {self.line}" + (f", field '{self.field}'" if self.field else "")
        return f"{where}: {self.message}"


class TrajectoryFileError(InputError):
    """A trajectory file could not be read; `errors` lists every problem found (up to a cap)."""

    def __init__(self, source: str, errors: list[RecordError], truncated: bool = False):
        self.source = source
        self.errors = errors
        self.truncated = truncated
        more = " (further errors not shown)" if truncated else ""
        lines = "\n".join(f"  {e}" for e in errors)
        super().__init__(f"{source}: {len(errors)} problem(s){more}\n{lines}")

    def summary(self) -> str:
        """The first problem on one line naming the file; further problems on the lines below."""
        first = f"{self.source}: {self.errors[0]}" if self.errors else f"{self.source}: unreadable"
        rest = self.errors[1:]
        if not rest:
            return first
        more = " (further errors not shown)" if self.truncated else ""
        return f"{first} (and {len(rest)} more problem(s){more}:)\n" + "\n".join(f"  {e}" for e in rest)


class NotFast(Exception):
    """Not on the fast path: `reason` is for debugging (never shown); `whole_file` False sends this chunk
    to the exact per-record read, True sends the whole file to the exact whole-file read."""

    def __init__(self, reason: str, *, whole_file: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.whole_file = whole_file


class Rescan(NotFast):
    """A resolution line met after chunks were given (it may resolve one of them): read again with the
    file's resolution lines found first; a reader that does not restart takes the whole-file read."""

    def __init__(self) -> None:
        super().__init__("a resolution line after the first chunk", whole_file=True)


def whole_file(reason: str) -> NotFast:
    return NotFast(reason, whole_file=True)


def require_pyarrow(what: str) -> None:
    """A missing `parquet` extra is one message naming `what`, not a traceback."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise MissingExtra(f"{what} needs pyarrow, which is not installed: {install_hint('parquet')}") from exc
