"""How every exporter names and describes a trajectory's scores, and sends each name once per run.

A backend averages and filters by name, so a name means one quantity on every run:

    tps.log                 the headline predictor's TPS, log rule (headline fixed per exporter, "verbal")
    tps.log.token_prob      another predictor's, named after it
    tps.log.exact           exact censoring (q_Z known), when the exporter is set to it
    tps.log.uniform         another weight schedule than linear-front, likewise
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from tps_tracer.constants import SIMPLE
from tps_tracer.online.trajectory_score import ScoreValue, TrajectoryScore

STOP_NAME = "tps.stop_reason"  # every annotation exporter's record of why the run stopped
DEFAULT_WEIGHTS = "linear-front"  # the accumulator's and every command's default schedule
DEFAULT_MAX_REMEMBERED = 100_000  # trajectories whose sent values are kept (oldest first out)

Row = tuple[str, "float | str", str, dict[str, Any]]  # name, value, comment, metadata


def score_name(
    rule: str, predictor: str, headline: str, weights: str = DEFAULT_WEIGHTS, censoring: str = SIMPLE
) -> str:
    """An exporter configured otherwise (`export --censoring exact`) never writes another quantity
    under a name already in use."""
    parts = [f"tps.{rule}"]
    if predictor != headline:
        parts.append(predictor)
    if censoring != SIMPLE:
        parts.append(censoring)
    if weights != DEFAULT_WEIGHTS:
        parts.append(weights)
    return ".".join(parts)


def named_values(
    score: TrajectoryScore, headline: str, weights: str | None, censoring: str | Sequence[str]
) -> list[tuple[str, ScoreValue]]:
    """Every usable predictor x rule at one schedule (default the accumulator's first, the same on
    every run), in each censoring mode asked for."""
    if weights is None:
        weights = next((w for (_, _, w) in score.pairs), None)
    modes = (censoring,) if isinstance(censoring, str) else tuple(censoring)
    return [
        (score_name(v.rule, v.predictor, headline, v.weights, v.censoring), v)
        for v in score.values()
        if v.weights == weights and v.censoring in modes
    ]


def score_facts(score: TrajectoryScore) -> dict[str, Any]:
    """The trajectory's facts for a backend record's metadata."""
    return {
        "trajectory_id": score.trajectory_id,
        "stop_reason": score.stop_reason.value,
        "role": score.role.value,
        "horizon": score.horizon,
        "n_steps": score.n_steps,
        "outcome": score.outcome,
        "q_z": score.q_z,
    }


def value_facts(v: ScoreValue) -> dict[str, Any]:
    return {"predictor": v.predictor, "weights": v.weights, "censoring": v.censoring, "s1": v.s1, "s0": v.s0}


def explanation(score: TrajectoryScore, v: ScoreValue | None, headline: str | None = None) -> str:
    if v is None:
        if headline is not None and next(score.values(), None) is not None:
            return f"no score for predictor {headline} on this run; stop reason {score.stop_reason.value}"
        return f"not scored: stop reason {score.stop_reason.value} ({score.role.value})"
    return (
        f"TPS, {v.rule} rule, {v.weights} weights, {v.censoring} censoring, predictor {v.predictor}, "
        f"over {score.n_steps} of T={score.horizon} steps; stop reason {score.stop_reason.value}"
    )


def backend_rows(
    score: TrajectoryScore, headline: str, weights: str | None, censoring: str | Sequence[str]
) -> list[Row]:
    """What every backend gets per run: `tps.stop_reason` (so runs can be filtered by why they
    stopped), then one row per named value."""
    facts = score_facts(score)
    stop = score.stop_reason.value
    out: list[Row] = [(STOP_NAME, stop, f"stop reason {stop} ({score.role.value})", facts)]
    for name, v in named_values(score, headline, weights, censoring):
        out.append((name, v.value, explanation(score, v), {**facts, "label": score.label, **value_facts(v)}))
    return out


class SentScores:
    """What an exporter already sent, per trajectory and name, so that the accumulator's later
    notifications (a late outcome, a q_Z) re-send only what changed; thread-safe, bounded."""

    def __init__(self, max_remembered: int = DEFAULT_MAX_REMEMBERED):
        self.max_remembered = max_remembered
        self._sent: OrderedDict[str, dict[Hashable, Hashable]] = OrderedDict()
        self._lock = threading.Lock()

    def is_new(self, trajectory_id: str, name: Hashable, signature: Hashable) -> bool:
        """True (and remembered) when `name` was never sent for this trajectory, or with another signature."""
        with self._lock:
            sent = self._sent.setdefault(trajectory_id, {})
            self._sent.move_to_end(trajectory_id)
            while len(self._sent) > self.max_remembered:
                self._sent.popitem(last=False)
            if sent.get(name, _NEVER) == signature:
                return False
            sent[name] = signature
            return True


_NEVER = object()
