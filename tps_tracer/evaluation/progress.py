"""A progress line on stderr for long reads, only when stderr is a terminal."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tps_tracer.records.chunks import Chunk

SHOW_AFTER_SECONDS = 2.0


def progress_for(path: str | os.PathLike[str], stream: TextIO | None = None) -> Callable[[Chunk], None] | None:
    """A chunk callback that draws `reading FILE  NN%` after a couple of seconds, or None off a TTY."""
    out = stream if stream is not None else sys.stderr
    if not out.isatty():
        return None
    start = time.monotonic()

    def update(chunk: Chunk) -> None:
        if time.monotonic() - start < SHOW_AFTER_SECONDS:
            return
        share = chunk.done / chunk.size if chunk.size else 1.0
        out.write(f"\r reading {chunk.source}  {100 * share:5.1f}%")
        if share >= 1.0:
            out.write("\n")
        out.flush()

    return update
