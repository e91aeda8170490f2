"""What tps-tracer writes: files replaced atomically (readers see the old content or the new, never a torn
one; docs/records-limits.md), and strict JSON (no NaN or Infinity tokens)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import socket
import stat
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def json_safe(obj: Any) -> Any:
    """A copy of `obj` with NaN / +-inf as None (a number that cannot be computed is `null`) and numpy
    values as Python values."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    np = sys.modules.get("numpy")  # no numpy value exists unless numpy was imported: the capture path skips it
    if np is not None and isinstance(obj, (np.ndarray, np.bool_, np.integer, np.floating)):
        return json_safe(obj.tolist())
    return obj


def dumps(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON text of `obj` ending with a newline; anything non-finite that slipped through fails loudly."""
    return json.dumps(json_safe(obj), indent=indent, allow_nan=False) + "\n"


# Which machine wrote a temp file: a pid is only meaningful on its own host (a shared NFS directory).
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TEMP = re.compile(r"\.tps(?P<host>[0-9a-f]{8})p(?P<pid>[0-9]+)\.[0-9a-f]{12}\.tmp")


def temp_path(target: Path) -> Path:
    return target.parent / f".{target.name}.tps{_HOST}p{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process of another user has this pid
        return True
    return True


def remove_stale(target: Path) -> None:
    """Remove the temp files of `target` whose writer, on this host, is gone."""
    prefix = f".{target.name}."
    try:
        entries = [e.name for e in os.scandir(target.parent) if e.name.startswith(prefix)]
    except OSError:
        return
    for name in entries:
        m = _TEMP.fullmatch(name[len(prefix) - 1 :])
        if m and m["host"] == _HOST and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
            with contextlib.suppress(OSError):
                os.unlink(target.parent / name)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], binary: bool = False, append: bool = False) -> Iterator[IO[Any]]:
    """A handle whose content replaces `path` (keeping its permission bits) when the block exits without an
    exception: written to a temporary beside it, fsynced, renamed; append=True starts with the old bytes.
    Not regular files (`/dev/stdout`, a FIFO) are written directly."""
    target = Path(path)
    try:
        special = not stat.S_ISREG(target.stat().st_mode)
    except FileNotFoundError:
        special = False
    if special:
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
    """`raw`, or a UTF-8 text handle over it, detached after use (`raw` is closed by its own `with`)."""
    if binary:
        yield raw
        return
    text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
    yield text
    text.flush()
    text.detach()


def write_text(path: str | os.PathLike[str], text: str, append: bool = False) -> None:
    """Atomically replace `path` with `text` (append: its old content followed by `text`)."""
    with atomic_write(path, append=append) as fh:
        fh.write(text)
