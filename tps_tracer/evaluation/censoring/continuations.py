"""Monte Carlo continuation estimates of q_Z (paper, Appendix "q_Z Estimation", direct MC): q_hat_MC
is the mean clean outcome of a censored prefix's branches, one JSON line each:
`{"source_trajectory_id": "run-42", "branch": 3, "stop_reason": "clean", "outcome": 1}`."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_MIN_VALID, UNRESOLVED_POLICIES
from tps_tracer.errors import InputError
from tps_tracer.evaluation.skipped_predictors import role_masks
from tps_tracer.health import HealthLedger
from tps_tracer.records.arrays import FloatArray, TrajectoryArrays
from tps_tracer.records.jsonl import MAX_REPORTED_ERRORS, RecordError, TrajectoryFileError, invalid_json, runs_into_end
from tps_tracer.records.record_shape import InvalidOutcome, as_outcome
from tps_tracer.records.stop_reasons import CensoringPolicy, StopReason


@dataclass(frozen=True)
class ContinuationBranch:
    source_trajectory_id: str
    branch: str
    stop_reason: StopReason
    outcome: int | None  # required for clean branches, ignored otherwise


def parse_continuations(lines: Iterable[str], source: str = "<input>") -> list[ContinuationBranch]:
    out: list[ContinuationBranch] = []
    errors: list[RecordError] = []
    seen: set[tuple[str, str]] = set()
    for no, line in enumerate(lines, start=1):
        text = (line.removeprefix("\ufeff") if no == 1 else line).strip()
        if not text:
            continue
        try:
            branch = _branch(json.loads(text), no)
        except json.JSONDecodeError as exc:
            cut = not line.endswith("\n") and runs_into_end(exc, text)
            hint = "; the file looks truncated (last line is incomplete)" if cut else ""
            branch = RecordError(no, "", invalid_json(exc) + hint)
        if isinstance(branch, ContinuationBranch):
            key = (branch.source_trajectory_id, branch.branch)
            if key not in seen:
                seen.add(key)
                out.append(branch)
                continue
            branch = RecordError(no, "branch", f"duplicate branch {branch.branch!r} of {key[0]!r}")
        errors.append(branch)
    if errors:
        raise TrajectoryFileError(source, errors[:MAX_REPORTED_ERRORS], truncated=len(errors) > MAX_REPORTED_ERRORS)
    return out


def _branch(obj: Any, no: int) -> ContinuationBranch | RecordError:
    if not isinstance(obj, dict):
        return RecordError(no, "", "expected a JSON object")
    sid = obj.get("source_trajectory_id")
    if not isinstance(sid, str) or not sid:
        return RecordError(no, "source_trajectory_id", "required, a non-empty string")
    reason = obj.get("stop_reason")
    if reason not in {r.value for r in StopReason}:
        return RecordError(no, "stop_reason", f"must be one of {', '.join(r.value for r in StopReason)}")
    outcome = None
    if reason == StopReason.CLEAN.value:  # the one outcome rule (records/record_shape.py): 0, 1, true, false
        with contextlib.suppress(InvalidOutcome):
            outcome = as_outcome(obj.get("outcome"), allow_strings=False)
        if outcome is None:
            return RecordError(no, "outcome", "a clean branch needs outcome 0 or 1 (or true/false)")
    return ContinuationBranch(sid, str(obj.get("branch", no)), StopReason(reason), outcome)


def read_continuations(path: str | os.PathLike[str]) -> list[ContinuationBranch]:
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return parse_continuations(fh, str(path))
    except FileNotFoundError:
        raise TrajectoryFileError(str(path), [RecordError(0, "", "file not found")]) from None
    except OSError as exc:
        raise TrajectoryFileError(str(path), [RecordError(0, "", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise TrajectoryFileError(str(path), [RecordError(0, "", f"not UTF-8 text ({exc.reason})")]) from None


@dataclass
class McEstimates:
    """q_hat_MC per retained prefix, with the audit counts of the paper's HotpotQA appendix."""

    ids: list[str]  # retained source ids
    q_hat: FloatArray
    n_valid: NDArray[np.int64]
    outcomes: dict[str, FloatArray]  # valid branch outcomes per retained id (for the projection check)
    min_valid: int
    unresolved: str
    dropped_too_few: list[str] = field(default_factory=list)
    parse_errors_excluded: dict[str, int] = field(default_factory=dict)  # per source id, all prefixes
    unresolved_branches: dict[str, int] = field(default_factory=dict)

    def as_mapping(self) -> dict[str, float]:
        return dict(zip(self.ids, self.q_hat.tolist(), strict=True))

    def summary(self) -> dict[str, Any]:
        q = self.q_hat
        n_src = len(self.ids) + len(self.dropped_too_few)
        return {
            "source": "monte-carlo continuation",
            "prefixes_with_branches": n_src,
            "retained": len(self.ids),
            "dropped_fewer_than_min_valid": len(self.dropped_too_few),
            "min_valid": self.min_valid,
            "unresolved_branches_as": self.unresolved,
            "mean_valid_branches": float(self.n_valid.mean()) if q.size else None,
            "mean_parse_error_branches_excluded": (sum(self.parse_errors_excluded.values()) / n_src) if n_src else None,
            "unresolved_branches": sum(self.unresolved_branches.values()),
            "mean_q_hat": float(q.mean()) if q.size else None,
            "median_q_hat": float(np.median(q)) if q.size else None,
            "share_q_hat_zero": float(np.mean(q == 0)) if q.size else None,
            "share_q_hat_above_half": float(np.mean(q > 0.5)) if q.size else None,
        }


def mc_q_z(
    branches: Sequence[ContinuationBranch], min_valid: int = DEFAULT_MIN_VALID, unresolved: str = "exclude"
) -> McEstimates:
    """q_hat_MC = (1/M_valid) sum_m Y^(m) per source prefix; parse-error branches are excluded and
    counted, other unresolved ones are excluded or count as failures / successes (`unresolved`)."""
    if unresolved not in UNRESOLVED_POLICIES:
        raise InputError(f"unresolved must be one of {UNRESOLVED_POLICIES}, got {unresolved!r}")
    if min_valid < 1:
        raise InputError("min_valid must be >= 1")
    by_id: dict[str, list[float]] = {}
    parse: dict[str, int] = {}
    open_: dict[str, int] = {}
    for b in branches:
        ys = by_id.setdefault(b.source_trajectory_id, [])
        if b.stop_reason is StopReason.CLEAN:
            ys.append(float(b.outcome))  # type: ignore[arg-type]  # validated: clean has an outcome
        elif b.stop_reason is StopReason.PARSE_ERROR:
            parse[b.source_trajectory_id] = parse.get(b.source_trajectory_id, 0) + 1
        else:
            open_[b.source_trajectory_id] = open_.get(b.source_trajectory_id, 0) + 1
            if unresolved != "exclude":
                ys.append(1.0 if unresolved == "success" else 0.0)
    kept = {sid: np.array(ys) for sid, ys in by_id.items() if len(ys) >= min_valid}
    q = np.array([float(np.mean(ys)) for ys in kept.values()])
    n = np.array([ys.size for ys in kept.values()], dtype=np.int64)
    dropped = [sid for sid in by_id if sid not in kept]
    return McEstimates(list(kept), q, n, kept, min_valid, unresolved, dropped, parse, open_)


@dataclass
class AttachedQz:
    arrays: TrajectoryArrays
    attached: int  # censored trajectories that received an estimate
    censored_without: int  # censored trajectories left without q_z (not in the estimates)
    unmatched: list[str]  # estimate ids that are not in the file
    not_censored: list[str]  # estimate ids whose trajectory is not censored under the policy


def attach_q_z(arrays: TrajectoryArrays, estimates: dict[str, float]) -> AttachedQz:
    """Arrays whose censored trajectories carry the estimated q_z (others NaN); unusable estimates are listed."""
    _, censored = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())
    index = {tid: i for i, tid in enumerate(arrays.ids)}
    q_z = np.full(arrays.n, np.nan)
    unmatched, not_censored = [], []
    for tid, q in estimates.items():
        i = index.get(tid)
        if i is None:
            unmatched.append(tid)
        elif not censored[i]:
            not_censored.append(tid)
        else:
            if not 0.0 <= q <= 1.0:
                raise InputError(f"q_z estimate for {tid!r} is not a probability: {q}")
            q_z[i] = q
    attached = int(np.sum(censored & ~np.isnan(q_z)))
    return AttachedQz(replace(arrays, q_z=q_z), attached, int(censored.sum()) - attached, unmatched, not_censored)


# Run metadata that tells a continuation branch from an original run.
BRANCH_OF_KEY = "tps_branch_of"  # the source trajectory id
BRANCH_KEY = "tps_branch"  # the branch number, 0..M-1


class ContinuationLog:
    """The continuation file as a resumable log: one flushed line per finished branch, so an interrupted
    resume loses only the branches in flight. An existing file is checked (one not ours is never
    overwritten); a last line cut short is removed and counted (malformed / continuation_line_truncated)."""

    def __init__(self, path: str | os.PathLike[str], health: HealthLedger | None = None):
        self.path = Path(path)
        self.health = health if health is not None else HealthLedger()
        self._lock = threading.Lock()
        self.done: set[tuple[str, str]] = set()
        if self.path.exists():
            data = self.path.read_bytes()
            cut = data.rfind(b"\n") + 1
            if cut < len(data):  # a line the interrupted writer never finished
                self.health.count(
                    "malformed",
                    "continuation_line_truncated",
                    f"{self.path}: dropped an unfinished last line ({len(data) - cut} bytes)",
                )
                with self.path.open("r+b") as fh:
                    fh.truncate(cut)
            for b in parse_continuations(data[:cut].decode("utf-8").splitlines(), str(self.path)):
                self.done.add((b.source_trajectory_id, b.branch))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def is_done(self, source_trajectory_id: str, branch: int | str) -> bool:
        return (source_trajectory_id, str(branch)) in self.done

    def append(
        self, source_trajectory_id: str, branch: int, stop_reason: StopReason, outcome: int | None, **provenance: Any
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
