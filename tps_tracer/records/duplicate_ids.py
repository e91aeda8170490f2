"""Whether a trajectory id is repeated: decided here, for every reader, report, gate and engine.

A trajectory counted twice would double its weight in every mean and CI, so a repeat is never
scored. What happens to it depends on the caller and is its only choice: the whole-file reader
keeps the first line and sets the rest aside (records/set_aside.py, or errors with strict), the
report and the gate on records raise `DuplicateIdError`, the chunked reader and the Ray engines
find repeats across chunks or blocks by the ids' 64-bit keys (`repeated_keys`) and then read the
exact way, which names the lines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tps_tracer.errors import InputError

if TYPE_CHECKING:  # the JSON Lines reader imports this module and does not need numpy
    import numpy as np
    from numpy.typing import NDArray


class DuplicateIdError(InputError):
    """The same trajectory id twice in what is scored."""


def duplicate_message(tid: str, where: str) -> str:
    """The one wording of a repeated id; `where` says where its first copy is."""
    return f"duplicate id {tid!r} ({where})"


def repeated_ids(ids: Sequence[str]) -> list[str]:
    """Ids that occur more than once, in first-seen order."""
    if len(set(ids)) == len(ids):
        return []
    return [i for i, k in Counter(ids).items() if k > 1]


def check_unique_ids(ids: Sequence[str]) -> None:
    """Raise `DuplicateIdError` naming (up to three of) the repeated ids."""
    dups = repeated_ids(ids)
    if not dups:
        return
    more = f" (and {len(dups) - 3} more)" if len(dups) > 3 else ""
    raise DuplicateIdError(
        f"duplicate trajectory id(s) {', '.join(map(repr, dups[:3]))}{more}: each trajectory must appear once"
    )


def repeated_keys(keys: Sequence[NDArray[np.uint64]]) -> NDArray[np.uint64]:
    """64-bit id keys (`bootstrap.trajectory_keys`) met more than once across the arrays. Distinct ids
    may share a key (about n^2 / 2^65), so a caller confirms on the ids before it calls them repeats."""
    import numpy as np

    if not keys:
        return np.zeros(0, dtype=np.uint64)
    k = np.sort(np.concatenate(keys))
    r = k[1:][k[1:] == k[:-1]]  # sorted; each repeat once (not np.unique: it imports numpy.ma, ~30 ms)
    return r[np.concatenate(([True], r[1:] != r[:-1]))] if r.size else r
