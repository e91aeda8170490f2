"""The command line's one error boundary: expected failures become one line and exit 2.

Exit codes of every `tps-tracer` command:

- 0: done (the gate: PASS);
- 1: the gate's FAIL verdict, and nothing else;
- 2: an expected failure (an `InputError`, see tps_tracer/errors.py, or an OSError): a
  missing or unreadable file, invalid records, a bad option, an unknown predictor, an
  output that cannot be written, a sample that cannot be scored or fitted (the gate: an
  unusable sample), a missing extra (`tps_tracer.errors.MissingExtra`, or a ModuleNotFoundError
  of an optional dependency: one line naming the extra and the pip command that installs it).
  One line on stderr says what failed and where; a record file with several problems
  lists the further ones on the lines below;
- 3: an internal error (a bug): any other exception, a plain ValueError from numpy or the
  standard library included; one line naming the exception, never exit 1 by accident;
- 130: interrupted (Ctrl-C);
- 143: terminated (SIGTERM): raised as an exception in the main thread, so the output being
  written is abandoned the way an error abandons it (no `.tmp` file left, `atomic_write.py`).

`--debug` (on any command) or the environment variable TPS_TRACER_DEBUG=1 adds the
traceback on stderr; the exit code stays the same.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from tps_tracer.constants import MAX_REPLICATES
from tps_tracer.errors import InputError, missing_extra
from tps_tracer.records.errors import TrajectoryFileError

EXIT_OK = 0
EXIT_GATE_FAIL = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM
DEBUG_ENV = "TPS_TRACER_DEBUG"


class CliError(InputError):
    """An expected failure whose message already names what failed and where."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (exit 2) instead of the usage block plus a line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _os_message(exc: OSError) -> str:
    where = f"{exc.filename}" if exc.filename is not None else "file"
    return f"{where}: {exc.strerror or exc}"


def reading(what: str, path: Any) -> contextlib.AbstractContextManager[None]:
    """OSError / undecodable bytes while reading `path` become a CliError naming `what` (e.g. '--calibrator')."""
    return _file_errors("read", what, path)


def writing(what: str, path: Any) -> contextlib.AbstractContextManager[None]:
    """OSError while writing `path` becomes a CliError naming `what` (e.g. '-o')."""
    return _file_errors("write", what, path)


@contextlib.contextmanager
def _file_errors(verb: str, what: str, path: Any) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise CliError(f"cannot {verb} {what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        if verb != "read":
            raise
        raise CliError(f"cannot read {what} {path}: not UTF-8 text ({exc.reason})") from exc


@contextlib.contextmanager
def flag(name: str) -> Iterator[None]:
    """An InputError while interpreting the value of option `name` becomes a CliError naming it.

    Only an InputError: a plain ValueError raised there is a bug of ours and must exit 3, not 2."""
    try:
        yield
    except CliError:
        raise
    except InputError as exc:
        raise CliError(f"{name}: {exc}") from exc


def check_replicates(value: int, minimum: int, why: str, name: str = "--bootstrap") -> None:
    """A replicate count in [minimum, MAX_REPLICATES] (memory grows as replicates x columns), else CliError."""
    if not minimum <= value <= MAX_REPLICATES:
        raise CliError(
            f"{name}: must be an integer in [{minimum}, {MAX_REPLICATES}] ({why}; memory grows as "
            f"replicates x score columns), got {value}"
        )


def expected_message(exc: BaseException) -> str | None:
    """The message of an expected failure, or None for an unexpected one (a bug)."""
    if isinstance(exc, TrajectoryFileError):
        return "bad input: " + exc.summary()
    if isinstance(exc, OSError):
        return _os_message(exc)
    if isinstance(exc, InputError):  # CliError, GateInputError, invalid options and samples
        return str(exc)
    if isinstance(exc, ModuleNotFoundError) and (missing := missing_extra(exc, "this command")) is not None:
        return str(missing)
    if isinstance(exc, UnicodeDecodeError):  # bytes of a user's file that are not UTF-8 text
        return f"cannot read input: not UTF-8 text ({exc.reason})"
    # Anything else, a plain ValueError from numpy or the standard library included, is a bug of
    # ours (exit 3): bad input is always reported through an InputError naming what and where.
    return None


def debug_requested(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(EXIT_TERMINATED)  # a BaseException: cleanup handlers run, no boundary turns it into exit 2


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) while the command runs (the default action would end the process
    before `atomic_write` removes its temp file); the previous handler is restored afterwards."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace, prog: str) -> int:
    """Run one command inside the boundary; returns its exit code (see the module docstring)."""
    debug = debug_requested(args)
    try:
        with _sigterm_as_exit():
            return int(func(args))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tps-tracer report ... | head`: the reader left; not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if debug:
            traceback.print_exc()
        message = expected_message(exc)
        if message is None:
            hint = "" if debug else "; rerun with --debug for the traceback"
            print(f"{prog}: internal error ({type(exc).__name__}: {exc}), please report it{hint}", file=sys.stderr)
            return EXIT_INTERNAL
        print(f"{prog}: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
