"""Resolution lines in the chunked reader: late outcomes / q_z applied chunk by chunk.

The online sinks write a clean stop whose grade comes later as `outcome_pending` and, when the
grade arrives, a line `{"resolves": id, "outcome": ..., "q_z": ...}` anywhere after it. So
most files a service writes hold resolution lines, and reading them the whole-file way would
give up the fast, bounded path for the common case.

`scan_resolutions` finds them first (a byte search for `"resolves"`, then each hit parsed and
validated exactly as `read_trajectories` does), remembering where each line lies; the chunk
reader then drops those lines from its chunks and `apply_resolutions` fills the outcomes and
q_z into each chunk's arrays before it is reduced. Only the plain case is handled here: a
resolution of a pending clean stop, or a q_z where the record has none (or the same). Anything
else (an invalid resolution, an outcome for a non-clean stop, a conflicting value, an id not in
the file) raises `reading.NotFast(whole_file=True)`, and the exact whole-file reader gives its
result or its error message with line numbers, as before.

The shards of one input (a directory) share their resolution lines (`scan_shards`): a grading
job's file of resolutions applies to the records of the other shards, as in one file; the exact
way for them is `shards.read_shards`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tps_tracer.records.arrays import STOP_REASONS, TrajectoryArrays
from tps_tracer.records.limits import load_json
from tps_tracer.records.reading import whole_file
from tps_tracer.records.stop_reasons import StopReason

_KEY = b'"resolves"'
_CLEAN = STOP_REASONS.index(StopReason.CLEAN)


@dataclass
class Resolutions:
    """The resolution lines of one file: where they lie, and what they say per trajectory id."""

    spans: list[tuple[int, int]]  # (start, end) byte offsets of each resolution line, end after its "\n"
    by_id: dict[str, list[tuple[float | None, float | None]]]  # id -> (outcome, q_z) in file order

    def drop_lines(self, chunk: bytes, offset: int) -> bytes:
        """The chunk (starting at byte `offset` of the file) without its resolution lines."""
        # Spans are in file order: find this chunk's by bisection (a file of a million
        # resolutions must not cost spans x chunks comparisons).
        lo = bisect.bisect_left(self.spans, (offset, -1))
        hi = bisect.bisect_left(self.spans, (offset + len(chunk), -1))
        inside = self.spans[lo:hi]
        if not inside:
            return chunk
        parts, at = [], 0
        for s, e in inside:
            parts.append(chunk[at : s - offset])
            at = e - offset
        parts.append(chunk[at:])
        return b"".join(parts)


def scan_resolutions(pieces: Iterable[tuple[int, bytes]]) -> Resolutions | None:
    """The resolution lines of a file given as (byte offset, bytes ending at a line end) pieces,
    or None when no line mentions "resolves" (raises a whole-file `NotFast`, see the module).

    Read piece by piece (not memory-mapped: mapped pages of a large file count as the
    process's resident memory while the scan runs)."""
    found: Resolutions | None = None
    for offset, piece in pieces:
        hit = piece.find(_KEY)
        while hit >= 0:
            start = piece.rfind(b"\n", 0, hit) + 1
            newline = piece.find(b"\n", hit)
            end = len(piece) if newline < 0 else newline + 1
            found = found or Resolutions([], {})
            _add_line(found, piece[start:end], offset + start, offset + end)
            hit = piece.find(_KEY, end)
    return found  # (possibly without spans: the hits were trajectories mentioning the word)


def _add_line(found: Resolutions, line: bytes, start: int, end: int) -> None:
    try:
        obj = load_json(line)  # the readers' one JSON rule (records/limits.py): a duplicate key is refused
    except (ValueError, UnicodeDecodeError):
        raise whole_file("a line mentioning 'resolves' is not JSON") from None
    if not isinstance(obj, dict) or "resolves" not in obj:
        return  # a trajectory that mentions the word (e.g. in its metadata)
    from pydantic import ValidationError  # here: pydantic is ~0.3 s of import, only resolution lines need it

    from tps_tracer.records.schema import ResolutionRecord

    try:
        res = ResolutionRecord.model_validate(obj)
    except ValidationError:
        raise whole_file("an invalid resolution line") from None
    outcome = None if res.outcome is None else float(res.outcome)
    found.spans.append((start, end))
    found.by_id.setdefault(res.resolves, []).append((outcome, res.q_z))


@dataclass
class SharedResolutions:
    """The resolution lines of every JSON Lines shard of one input (records/shards.py): each shard's
    lines (to drop from its chunks) and what they all say per id (applied to any shard's chunks)."""

    lines: dict[int, Resolutions]  # file index -> its resolution lines
    pending: Resolutions  # id -> (outcome, q_z) over every shard, in input order; emptied as applied


def scan_shards(files: list[tuple[int, Iterable[tuple[int, bytes]]]]) -> SharedResolutions | None:
    """The resolution lines of the shards given as (file index, pieces as for `scan_resolutions`),
    or None when no shard has one (then each shard is read as alone, as before)."""
    lines: dict[int, Resolutions] = {}
    pending = Resolutions([], {})
    for k, pieces in files:
        found = scan_resolutions(pieces)
        if found is None:
            continue
        lines[k] = found  # (kept without spans too: its chunks' mentions of the word are not resolutions)
        for tid, said in found.by_id.items():
            pending.by_id.setdefault(tid, []).extend(said)
    return SharedResolutions(lines, pending) if any(r.spans for r in lines.values()) else None


def apply_resolutions(arrays: TrajectoryArrays, resolutions: Resolutions) -> TrajectoryArrays:
    """The chunk's arrays with its trajectories' resolutions applied (and removed from `resolutions`)."""
    if not resolutions.by_id:
        return arrays
    hits = [(i, tid) for i, tid in enumerate(arrays.ids) if tid in resolutions.by_id]
    if not hits:
        return arrays
    outcome, q_z = arrays.outcome.copy(), arrays.q_z.copy()
    for i, tid in hits:
        lines = resolutions.by_id.pop(tid, None)
        if lines is None:  # the id's second record here: which one a line resolves is the exact reader's call
            raise whole_file("a repeated id with resolution lines")
        for y, q in lines:
            if y is not None:
                if arrays.stop_code[i] != _CLEAN or not (np.isnan(outcome[i]) or outcome[i] == y):
                    raise whole_file("an outcome for a non-clean stop, or a conflicting one")
                outcome[i] = y
            if q is not None:
                if not (np.isnan(q_z[i]) or q_z[i] == q):
                    raise whole_file("a conflicting q_z")
                q_z[i] = q
    arrays.outcome, arrays.q_z = outcome, q_z
    return arrays
