"""Write a file so that readers see the old content or the new, never a torn one.

Every artifact the CLI writes (calibrator JSON, plots, record files, Markdown summaries,
JSON data) goes through `atomic_write`: the content is written to a temporary file in the
target's directory and renamed over the target with `os.replace` only after it was
written, flushed and fsynced completely. An exception (a serialisation error, a full disk)
or a kill before the rename leaves the old file, or none, in place; the temporary file is
removed on exceptions (the CLI turns SIGTERM into one, `cli/errors.py`). A SIGKILL can leave
the temporary file behind, never a torn target; its name, `.NAME.tps<host>p<pid>.<random>.tmp`,
says which process on which machine wrote it, and the next atomic write of the same target
removes it once that process is gone (only files this naming proves are a dead writer's own).
The new file gets the old file's permission bits, or the usual ones a plain
`open(path, "w")` would give (0666 minus the umask).

Targets that are not regular files (`/dev/stdout`, a FIFO) cannot be renamed over; they
are written directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import socket
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _is_special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        return False


# Which machine wrote a temp file: a pid is only meaningful on its own host (a shared NFS directory).
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TEMP = re.compile(r"\.tps(?P<host>[0-9a-f]{8})p(?P<pid>[0-9]+)\.[0-9a-f]{12}\.tmp")


def temp_path(target: Path) -> Path:
    """A new temp file name beside `target`, naming this host and process (see the module docstring)."""
    return target.parent / f".{target.name}.tps{_HOST}p{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process of another user has this pid
        return True
    return True


def remove_stale(target: Path) -> list[Path]:
    """Remove the temp files an atomic write of `target` left behind when its process died (this
    host, pid no longer running); returns them. A live writer's file, or another host's, is kept."""
    prefix = f".{target.name}."
    removed: list[Path] = []
    try:
        entries = [e.name for e in os.scandir(target.parent) if e.name.startswith(prefix)]
    except OSError:
        return removed
    for name in entries:
        m = _TEMP.fullmatch(name[len(prefix) - 1 :])
        if m and m["host"] == _HOST and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
            with contextlib.suppress(OSError):
                os.unlink(target.parent / name)
                removed.append(target.parent / name)
    return removed


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], binary: bool = False, append: bool = False) -> Iterator[IO[Any]]:
    """Yield a file handle; its content replaces `path` when the block exits without an exception.

    append=True starts the new file with the old file's bytes (an atomic append).
    """
    target = Path(path)
    if _is_special(target):
        with open(target, "ab" if append else "wb") as raw:
            yield from _handle(raw, binary)
        return
    remove_stale(target)
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies, as for open()
    try:
        with os.fdopen(fd, "wb") as raw:
            if append and target.exists():
                raw.write(target.read_bytes())
            yield from _handle(raw, binary)
            raw.flush()
            os.fsync(raw.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _handle(raw: IO[bytes], binary: bool) -> Iterator[IO[Any]]:
    """`raw`, or a UTF-8 text handle over it, flushed and detached after use (the raw file is closed
    by its own `with`)."""
    if binary:
        yield raw
        return
    text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
    yield text
    text.flush()
    text.detach()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically replace `path` with `text` (UTF-8)."""
    with atomic_write(path) as fh:
        fh.write(text)


def append_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically replace `path` with its old content followed by `text` (created if missing)."""
    with atomic_write(path, append=True) as fh:
        fh.write(text)
