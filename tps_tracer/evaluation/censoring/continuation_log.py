"""The continuation file as a resumable log: which branches are done, and appending new ones.

Resuming censored prefixes (paper, Appendix "q_Z Estimation", direct Monte Carlo
continuation) can take hours on a real agent, so the file `tps-tracer censoring
--continuations` reads is also the bookkeeping of the run that writes it: one line per
finished branch, written and flushed as soon as the branch ends, so an interrupted resume
loses at most the branches in flight and the next call skips every branch already in it.

A line carries what `continuations.parse_continuations` reads (source_trajectory_id,
branch, stop_reason, outcome) plus provenance the reader ignores (the branch's thread id,
the checkpoint it was forked from, its wall time).

Nothing here imports a framework: the LangGraph code that produces the branches is in
`tps_tracer.langchain.resume`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from tps_tracer.errors import InputError
from tps_tracer.evaluation.censoring.continuations import parse_continuations
from tps_tracer.health import HealthLedger
from tps_tracer.records.stop_reasons import StopReason

# Run metadata a continuation branch carries, so anything watching the run (a callback, the
# simulated world's scripted model) can tell a branch from an original run.
BRANCH_OF_KEY = "tps_branch_of"  # the source trajectory id
BRANCH_KEY = "tps_branch"  # the branch number, 0..M-1


class ContinuationLog:
    """Append-only continuation lines, with the set of (source id, branch) already written.

    Opening an existing file reads it: complete lines must be valid continuation lines
    (otherwise the `TrajectoryFileError` names them; a file that is not ours is never
    overwritten), and a last line cut short by an interruption (no trailing newline) is
    removed and counted as malformed / continuation_line_truncated.
    """

    def __init__(self, path: str | os.PathLike[str], health: HealthLedger | None = None):
        self.path = Path(path)
        self.health = health if health is not None else HealthLedger()
        self._lock = threading.Lock()
        self.done: set[tuple[str, str]] = set()
        self.truncated_tail = 0
        if self.path.exists():
            self._read_existing()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def _read_existing(self) -> None:
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):  # a line the interrupted writer never finished
            self.truncated_tail = 1
            self.health.count(
                "malformed",
                "continuation_line_truncated",
                f"{self.path}: dropped an unfinished last line ({len(data) - cut} bytes)",
            )
            with self.path.open("r+b") as fh:
                fh.truncate(cut)
        text = data[:cut].decode("utf-8")
        for b in parse_continuations(text.splitlines(), str(self.path)):
            self.done.add((b.source_trajectory_id, b.branch))

    def is_done(self, source_trajectory_id: str, branch: int | str) -> bool:
        return (source_trajectory_id, str(branch)) in self.done

    def append(
        self,
        source_trajectory_id: str,
        branch: int,
        stop_reason: StopReason,
        outcome: int | None,
        **provenance: Any,
    ) -> None:
        """Write one finished branch and flush it (an interruption after this keeps it)."""
        if stop_reason is StopReason.CLEAN and outcome not in (0, 1):
            raise InputError(f"a clean branch needs outcome 0 or 1, got {outcome!r}")
        line = {
            "source_trajectory_id": source_trajectory_id,
            "branch": branch,
            "stop_reason": stop_reason.value,
            "outcome": outcome if stop_reason is StopReason.CLEAN else None,
            **provenance,
        }
        text = json.dumps(line, separators=(",", ":"), allow_nan=False) + "\n"
        with self._lock:
            key = (source_trajectory_id, str(branch))
            if key in self.done:
                raise InputError(f"branch {branch} of {source_trajectory_id!r} is already in {self.path}")
            self._fh.write(text)
            self._fh.flush()
            self.done.add(key)

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    def __enter__(self) -> ContinuationLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
