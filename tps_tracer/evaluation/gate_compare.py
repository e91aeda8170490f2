"""Candidate vs baseline on what both sides can score: pairing by task, and the asymmetries named.

Pairing is on the intersection of the task ids both sides scored (a task missing on one side,
a parse error or a censored run the side cannot score under cen-exact, drops out of the
comparison and is counted, never silently). Tasks may repeat (several runs per task): the
bootstrap resamples tasks (a cluster bootstrap), both sides' runs of a task sharing its
replicate weight, so the difference's replicates are paired (one row per task: the cost of a
single run's bootstrap). When the sides share fewer than `min_common` tasks, the runs are
compared unpaired (each side resampled independently).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.evaluation.bootstrap import bootstrap_means, replicate_sums, trajectory_keys

FloatArray = NDArray[np.float64]


@dataclass
class Side:
    """One run's gated score per trajectory (NaN: not scored) with task and trajectory ids."""

    score: FloatArray
    task_ids: Sequence[str]
    ids: Sequence[str]


@dataclass
class Comparison:
    point: float
    replicates: FloatArray
    paired: bool
    how: str
    counts: dict[str, int] = field(default_factory=dict)


def _salted_keys(ids: Sequence[str], salt: str) -> NDArray[np.uint64]:
    """Keys independent of the unsalted ones: for resampling two runs independently."""
    return trajectory_keys([f"{salt}\x00{i}" for i in ids])


def _scored_tasks(side: Side) -> tuple[list[str], FloatArray]:
    ok = ~np.isnan(side.score)
    return [t for t, k in zip(side.task_ids, ok, strict=True) if k], side.score[ok]


def compare(cand: Side, base: Side, bootstrap: int, seed: int, min_common: int) -> Comparison:
    """Mean(candidate) - mean(baseline) with bootstrap replicates, paired on common scored tasks."""
    c_tasks, c_scores = _scored_tasks(cand)
    b_tasks, b_scores = _scored_tasks(base)
    common = set(c_tasks) & set(b_tasks)
    c_in = np.array([t in common for t in c_tasks], dtype=bool)
    b_in = np.array([t in common for t in b_tasks], dtype=bool)
    counts = {
        "common_tasks": len(common),
        "candidate_paired_runs": int(c_in.sum()),
        "baseline_paired_runs": int(b_in.sum()),
        "candidate_unpaired_runs": int((~c_in).sum()),
        "baseline_unpaired_runs": int((~b_in).sum()),
        "candidate_unscored_runs": len(cand.score) - len(c_tasks),
        "baseline_unscored_runs": len(base.score) - len(b_tasks),
    }
    if len(common) >= min_common:
        point, reps, repeats = _paired(c_tasks, c_scores, c_in, b_tasks, b_scores, b_in, bootstrap, seed)
        # The caller says what the task ids are; here only what the resampling did with repeats.
        how = "; tasks repeat: resampled by task" if repeats else ""
        return Comparison(point, reps, True, how, counts)
    bc = bootstrap_means(c_scores[:, None], _salted_keys(c_tasks, "candidate"), bootstrap, seed)
    bb = bootstrap_means(b_scores[:, None], _salted_keys(b_tasks, "baseline"), bootstrap, seed)
    reps = bc.replicates[:, 0] - bb.replicates[:, 0]
    point = float(bc.point[0] - bb.point[0])
    why = "no common task ids" if not common else f"only {len(common)} common tasks (< {min_common})"
    how = f"unpaired ({len(c_tasks)} vs {len(b_tasks)} scored runs; {why})"
    return Comparison(point, reps, False, how, counts)


def _paired(
    c_tasks: list[str],
    c_scores: FloatArray,
    c_in: NDArray[np.bool_],
    b_tasks: list[str],
    b_scores: FloatArray,
    b_in: NDArray[np.bool_],
    bootstrap: int,
    seed: int,
) -> tuple[float, FloatArray, bool]:
    """(point, replicates, whether tasks repeat) of the task-clustered paired difference.

    One row per common task, [sum and count of the candidate's runs, same for the baseline],
    weighted by the task's replicate weight: each side's replicate mean is a ratio of weighted
    sums, so both sides see the same resampled tasks at the cost of one row per task.
    """
    order = {t: i for i, t in enumerate(dict.fromkeys(t for t, k in zip(c_tasks, c_in, strict=True) if k))}
    rows = np.zeros((len(order), 4))
    c_idx = np.array([order[t] for t, k in zip(c_tasks, c_in, strict=True) if k], dtype=np.int64)
    b_idx = np.array([order[t] for t, k in zip(b_tasks, b_in, strict=True) if k], dtype=np.int64)
    np.add.at(rows[:, 0], c_idx, c_scores[c_in])
    np.add.at(rows[:, 1], c_idx, 1.0)
    np.add.at(rows[:, 2], b_idx, b_scores[b_in])
    np.add.at(rows[:, 3], b_idx, 1.0)
    sums = replicate_sums(rows, trajectory_keys(list(order)), bootstrap, seed)
    with np.errstate(invalid="ignore", divide="ignore"):  # a replicate that drew no task: NaN, as in bootstrap_means
        reps = sums[:, 0] / sums[:, 1] - sums[:, 2] / sums[:, 3]
    total = rows.sum(axis=0)
    point = float(total[0] / total[1] - total[2] / total[3])
    return point, reps, bool(len(c_idx) > len(order) or len(b_idx) > len(order))


def unpaired_text(counts: dict[str, int]) -> str:
    """The runs left out of a paired comparison, by side and cause."""
    parts = []
    for side in ("candidate", "baseline"):
        out, unscored = counts[f"{side}_unpaired_runs"], counts[f"{side}_unscored_runs"]
        parts.append(f"{side} {out} scored run(s) on tasks the other side did not score, {unscored} unscored")
    return "left out of the paired difference: " + "; ".join(parts)


def censoring_rates_differ(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two-proportion z test (|z| > 1.96) of the censoring rates of two termination audits."""
    ra, rb = a.get("censoring_rate"), b.get("censoring_rate")
    na, nb = a.get("working_sample") or 0, b.get("working_sample") or 0
    if ra is None or rb is None or not na or not nb:
        return False
    pooled = (ra * na + rb * nb) / (na + nb)
    se = math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))
    return bool(se > 0 and abs(ra - rb) / se > 1.96)
