"""How a trajectory file is read: fast, exact, or whole-file. The one place that decides.

A file (JSON Lines, Parquet, a directory of shards) is read in chunks of whole trajectories
(`chunks.py`). Each chunk goes the first way that takes it:

1. fast: columnar, no Python object per record. A JSON Lines chunk through orjson + numpy, or
   pyarrow's JSON reader for a chunk of a megabyte or more (`jsonl_fast.py`); a Parquet batch
   through its Arrow columns (`parquet.py`). All end in the one value check,
   `columnar.validated_arrays`. The fast path takes only what the exact path reads to the same
   arrays; anything else (a non-numeric forecast, NaN literals, a float horizon, a value out of
   range, ...) it refuses with `NotFast(reason)`, and the next way is tried.
2. exact: that chunk alone, record by record (pydantic, `jsonl.parse_lines`): the same arrays, or
   an error. A Parquet batch's errors name the row (from 1 in the file) and field.
3. whole-file: the file is read the exact, whole-file way (`shards.exact_records`), so every
   error message is the one it gives, with its line numbers, and what it sets aside (a repeated id,
   an orphan resolution) is counted there (`set_aside.py`). A JSON Lines chunk goes there when its
   exact read finds an error; a file goes there for resolution lines the chunked path does not
   handle (`resolutions.py`), duplicate ids across chunks, no trajectories, a record beyond the
   size bound (convert), or a file that cannot be read. The raise is
   `NotFast(reason, whole_file=True)`, and the caller's `fast_else_whole_file` runs its exact read.

`NotFast` is the one "not on the fast path" exception of the readers: `reason` says why (for
debugging; never shown as an error), `whole_file` how far back to fall. The cascade is written
once, `first_that_reads`; readers raise, only these functions (and `fast_else_whole_file`'s
callers) decide what happens next. This module imports nothing of the package, so every reader
can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class NotFast(Exception):
    """Not on the fast path. `whole_file` False: this chunk goes the next way of the cascade (the
    exact per-record read of the chunk); True: the whole file goes the exact whole-file way."""

    def __init__(self, reason: str, *, whole_file: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.whole_file = whole_file


def whole_file(reason: str) -> NotFast:
    """`NotFast` for the whole file (see the module docstring)."""
    return NotFast(reason, whole_file=True)


def first_that_reads(*ways: Callable[[], T]) -> T:
    """The result of the first way that takes the chunk: each way but the last may refuse it with
    `NotFast` (then the next is tried); a whole-file `NotFast` is passed on to the caller."""
    for way in ways[:-1]:
        try:
            return way()
        except NotFast as exc:
            if exc.whole_file:
                raise
    return ways[-1]()


def fast_else_whole_file(fast: Callable[[], T], whole: Callable[[], T]) -> T:
    """`fast()`, or `whole()` (the exact whole-file read) when it raises `NotFast`."""
    try:
        return fast()
    except NotFast:
        pass  # `whole` runs outside the handler: the fast path's frames (and chunks) are freed first
    return whole()
