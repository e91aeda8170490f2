"""One exported name, one meaning: how exporters name a trajectory's scores, and send each once.

A backend averages and filters by name, so a name must mean the same quantity on every run.
The headline predictor is therefore fixed per exporter (`HEADLINE_PREDICTOR`, "verbal", unless
configured), never the first predictor a run happens to have:

    tps.log                 the headline predictor's TPS, log rule
    tps.log.token_prob      another predictor's, named after it
    tps.brier, ...          one name per rule
    tps.log.exact           exact censoring (q_Z known), when the exporter is set to it
    tps.log.uniform         another weight schedule than linear-front, likewise

all at the exporter's one schedule and its censoring mode(s) (which the metadata states too).
A run on which the headline predictor is unusable simply has no `tps.log`. An annotation
exporter given censoring=("simple", "exact") sends both: `tps.log` at the stop, and
`tps.log.exact` once q_Z is known (a budget stop resolved later; at once for a complete run,
whose exact score is its simple one).

The accumulator calls its listeners again when a late outcome or q_Z arrives; `SentScores`
remembers what each exporter already sent per trajectory, so a value that did not change is
not sent twice (one annotation / evaluation span per run and name).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence

from tps_tracer.constants import SIMPLE
from tps_tracer.online.trajectory_score import ScoreValue, TrajectoryScore

STOP_NAME = "tps.stop_reason"  # every annotation exporter's record of why the run stopped (a label, no score)
DEFAULT_WEIGHTS = "linear-front"  # the accumulator's and every command's default schedule
DEFAULT_MAX_REMEMBERED = 100_000  # trajectories whose sent values are kept (oldest first out)


def score_name(
    rule: str, predictor: str, headline: str, weights: str = DEFAULT_WEIGHTS, censoring: str = SIMPLE
) -> str:
    """tps.<rule>, then .<predictor> unless it is the headline, .<censoring> unless simple, .<weights>
    unless linear-front: an exporter configured otherwise (`export --censoring exact`) never writes
    another quantity under a name already in use."""
    parts = [f"tps.{rule}"]
    if predictor != headline:
        parts.append(predictor)
    if censoring != SIMPLE:
        parts.append(censoring)
    if weights != DEFAULT_WEIGHTS:
        parts.append(weights)
    return ".".join(parts)


def first_weights(score: TrajectoryScore) -> str | None:
    """The accumulator's first schedule: every usable predictor has every schedule, so it is the same on every run."""
    return next((w for (_, _, w) in score.pairs), None)


def named_values(
    score: TrajectoryScore, headline: str, weights: str | None, censoring: str | Sequence[str]
) -> list[tuple[str, ScoreValue]]:
    """(name, value) for every usable predictor x rule at one schedule, in each of the censoring
    modes (one, or several: ("simple", "exact") names both; none when excluded)."""
    weights = weights if weights is not None else first_weights(score)
    modes = (censoring,) if isinstance(censoring, str) else tuple(censoring)
    return [
        (score_name(v.rule, v.predictor, headline, v.weights, v.censoring), v)
        for v in score.values()
        if v.weights == weights and v.censoring in modes
    ]


class SentScores:
    """What an exporter already sent, per trajectory and name; thread-safe, bounded."""

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
