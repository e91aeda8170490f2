"""TPS as OpenTelemetry metrics (instruments and Prometheus names: docs/otel.md).

TPS is a reward (<= 0 for the log rule) and histograms reject negative values, so the means are
gauges over exact running sums: the snapshot's means, without its bootstrap CI.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from tps_tracer.constants import EXACT
from tps_tracer.online.trajectory_score import TrajectoryScore
from tps_tracer.otel.span_processor import SCOPE_NAME
from tps_tracer.records.stop_reasons import Role

_MAX_TRACKED = 100_000

Key = tuple[str, str, str, str]  # predictor, rule, weights, censoring


class TPSMetrics:
    def __init__(self, meter_provider: MeterProvider, max_tracked: int = _MAX_TRACKED):
        from tps_tracer import __version__

        meter = meter_provider.get_meter(SCOPE_NAME, __version__)
        self._lock = threading.Lock()
        self._sums: dict[Key, list[float]] = {}  # key -> [sum, n]
        # "exact" keys holding a censored run with its q_Z: before one, the mean would be the complete-only one.
        self._exact_with_q_z: set[Key] = set()
        # Modes counted per trajectory (bounded): a late q_Z re-sends the run with "exact" added.
        self._seen: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._max_tracked = max_tracked
        meter.create_observable_gauge(
            "tps.score.mean",
            callbacks=[self._observe_means],
            description="Running mean of per-trajectory TPS (reward orientation: higher is better)",
        )
        meter.create_observable_counter(
            "tps.scored", callbacks=[self._observe_counts], description="Trajectories in tps.score.mean"
        )
        self._trajectories = meter.create_counter(
            "tps.trajectories", description="Finished trajectories by stop reason and scoring role"
        )

    def __call__(self, score: TrajectoryScore) -> None:
        with self._lock:
            before = self._seen.get(score.trajectory_id)
            values = [v for v in score.values() if before is None or v.censoring not in before]
            for v in values:
                key = (v.predictor, v.rule, v.weights, v.censoring)
                acc = self._sums.setdefault(key, [0.0, 0.0])
                acc[0] += v.value
                acc[1] += 1
                if v.censoring == EXACT and score.role is Role.CENSORED:
                    self._exact_with_q_z.add(key)
            self._seen[score.trajectory_id] = (before or frozenset()) | {v.censoring for v in values}
            self._seen.move_to_end(score.trajectory_id)
            while len(self._seen) > self._max_tracked:
                self._seen.popitem(last=False)
        if before is None:
            self._trajectories.add(1, {"stop_reason": score.stop_reason.value, "role": score.role.value})

    def means(self) -> dict[Key, tuple[float, int]]:
        with self._lock:
            return {
                k: (s / n, int(n))
                for k, (s, n) in self._sums.items()
                if n and (k[3] != EXACT or k in self._exact_with_q_z)
            }

    def _attributes(self, key: Key) -> dict[str, str]:
        return dict(zip(("predictor", "rule", "weights", "censoring"), key, strict=True))

    def _observe_means(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(mean, self._attributes(k)) for k, (mean, _) in self.means().items()]

    def _observe_counts(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, self._attributes(k)) for k, (_, n) in self.means().items()]
