"""Synthetic trajectories with a known truthful q_t (demo, tests, benchmarks): theta ~ Beta(a, b), each step
a Bernoulli(theta) signal, Y ~ Bernoulli(theta), so q_t = (a + signals up to t) / (a + b + t). Runs stop
clean, at the budget (censored, exact q_Z recorded) or at a parse error whose hazard rises as q_t falls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from tps_tracer.records.schema import StepRecord, TrajectoryRecord
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring import FloatArray

if TYPE_CHECKING:
    from tps_tracer.evaluation.censoring.continuations import ContinuationBranch


Values = FloatArray | float  # a stream's values, or one step's (a continuation branch, a rendered step)


def logit(q: Values) -> Values:
    q = np.clip(q, 1e-9, 1 - 1e-9)
    return np.log(q) - np.log1p(-q)


def sigmoid(x: Values) -> Values:
    return 1.0 / (1.0 + np.exp(-x))


# Both simulators' forecasters: the true q_t (and a standard normal draw z per step) -> a stated confidence.
Forecaster = Callable[[Values, Values], Values]
FORECASTERS: dict[str, Forecaster] = {
    "truthful": lambda q, z: q,
    # Saturated, like the paper's Tau2 verbal stream: same ranking, wrong scale.
    "overconfident": lambda q, z: sigmoid(3.0 * logit(q) + 1.5),
    "underconfident": lambda q, z: sigmoid(0.4 * logit(q)),
    "noisy": lambda q, z: sigmoid(logit(q) + z),
}


@dataclass(frozen=True)
class TaskPrior:
    """The task model both simulators share (here and tps_tracer/sim/): each task's success rate
    theta ~ Beta(prior_a, prior_b), its natural length ~ Uniform{min_length..max_length}."""

    prior_a: float = 2.0
    prior_b: float = 2.0
    min_length: int = 2
    max_length: int = 14


@dataclass(frozen=True)
class World(TaskPrior):
    budget: int = 10
    parse_error_rate: float = 0.02  # per-step hazard at q_t = 0.5; scales with 2 (1 - q_t)


@dataclass
class SimulatedRuns:
    """Flat arrays of simulated runs (steps of trajectory i at offsets[i]:offsets[i+1])."""

    offsets: NDArray[np.int64]
    q: FloatArray  # truthful q_t per observed step
    outcome: FloatArray  # Y for every run (also the unobserved ones: ground truth)
    stop_reason: list[StopReason]
    horizon: NDArray[np.int64]
    theta: FloatArray  # each task's latent success rate: a continuation from any prefix succeeds w.p. theta

    @property
    def n(self) -> int:
        return len(self.stop_reason)

    def q_z(self) -> FloatArray:
        """q at the last observed step of every run."""
        return self.q[self.offsets[1:] - 1]


def simulate_runs(n: int, seed: int = 0, world: World = World(), theta: FloatArray | None = None) -> SimulatedRuns:
    """n runs; `theta` (the tasks' success rates) runs the same tasks again, as a baseline and a
    candidate do, with fresh signals and outcomes."""
    rng = np.random.default_rng(seed)
    theta = rng.beta(world.prior_a, world.prior_b, n) if theta is None else np.asarray(theta, dtype=np.float64)
    length = rng.integers(world.min_length, world.max_length + 1, n)
    width = world.max_length
    signals = rng.random((n, width)) < theta[:, None]
    t = np.arange(1, width + 1)
    q = (world.prior_a + np.cumsum(signals, axis=1)) / (world.prior_a + world.prior_b + t)
    hazard = np.clip(world.parse_error_rate * 2.0 * (1.0 - q), 0.0, 1.0)
    parse_hit = rng.random((n, width)) < hazard
    first_err = np.where(parse_hit.any(axis=1), parse_hit.argmax(axis=1) + 1, width + 1)
    y = (rng.random(n) < theta).astype(np.float64)

    natural_end = np.minimum(length, world.budget)
    z = np.minimum(natural_end, first_err)
    kinds = (StopReason.CLEAN, StopReason.PARSE_ERROR, StopReason.MAX_STEPS)  # reasons 0, 1, 2
    reasons = np.where(first_err <= natural_end, 1, np.where(length <= world.budget, 0, 2))
    stop = [kinds[k] for k in reasons]
    horizon = np.where(reasons == 2, world.budget, z)
    observed = t[None, :] <= z[:, None]
    offsets = np.concatenate(([0], np.cumsum(z))).astype(np.int64)
    return SimulatedRuns(offsets, q[observed], y, stop, horizon.astype(np.int64), theta)


def to_records(
    runs: SimulatedRuns,
    forecasters: Sequence[str] = tuple(FORECASTERS),
    seed: int = 0,
    missing_rate: float = 0.0,
    record_q_z: bool = True,
    names: dict[str, str] | None = None,
) -> list[TrajectoryRecord]:
    """Interchange records; `missing_rate` blanks that share of the 'noisy' stream's steps; `names`
    renames forecasters' streams (e.g. {"overconfident": "verbal"}: a worse agent under the gated name)."""
    rng = np.random.default_rng(seed)
    streams = {}
    for name in forecasters:  # only the noisy stream draws (in its turn), so each stream's draws stay put
        z = rng.normal(0.0, 1.0, runs.q.shape) if name == "noisy" else np.zeros_like(runs.q)
        streams[name] = np.round(FORECASTERS[name](runs.q, z), 6)
    blank = rng.random(runs.q.size) < missing_rate
    q_z = runs.q_z()
    records = []
    for i in range(runs.n):
        a, b = int(runs.offsets[i]), int(runs.offsets[i + 1])
        steps = []
        for j in range(a, b):
            fc: dict[str, float | None] = {name: float(streams[name][j]) for name in forecasters}
            if blank[j] and "noisy" in fc:
                fc["noisy"] = None
            if names:
                fc = {names.get(k, k): v for k, v in fc.items()}
            steps.append(StepRecord(t=j - a + 1, forecasts=fc))
        reason = runs.stop_reason[i]
        records.append(
            TrajectoryRecord(
                trajectory_id=f"sim-{i:05d}",
                stop_reason=reason,
                outcome=int(runs.outcome[i]) if reason is StopReason.CLEAN else None,
                horizon=int(runs.horizon[i]),
                q_z=round(float(q_z[i]), 6) if record_q_z and reason is StopReason.MAX_STEPS else None,
                steps=steps,
                metadata={"source": "tps_tracer.synthetic"},
            )
        )
    return records


def example_records() -> list[TrajectoryRecord]:
    """The bundled example set (examples/trajectories.jsonl is this, written out)."""
    return to_records(simulate_runs(400, seed=7), seed=7, missing_rate=0.01)


def simulate_continuations(
    runs: SimulatedRuns,
    branches: int,
    seed: int = 0,
    parse_error_rate: float = 0.0,
    unresolved_rate: float = 0.0,
    only: Sequence[int] | None = None,
) -> list[ContinuationBranch]:
    """Monte Carlo continuation branches of the max_steps prefixes (or of the runs in `only`): a resolved
    branch succeeds with the task's theta (q_hat_MC -> theta, whose mean given H_Z is q_Z); a share ends
    in a parse error or unresolved (max_steps), as real reruns do."""
    from tps_tracer.evaluation.censoring.continuations import ContinuationBranch

    rng = np.random.default_rng(seed)
    members = only if only is not None else [i for i, r in enumerate(runs.stop_reason) if r is StopReason.MAX_STEPS]
    out = []
    ends = (StopReason.PARSE_ERROR, StopReason.MAX_STEPS, StopReason.CLEAN)
    for i in members:
        kind = np.searchsorted([parse_error_rate, parse_error_rate + unresolved_rate], rng.random(branches), "right")
        y = rng.random(branches) < runs.theta[i]
        for m, k in enumerate(kind.tolist()):
            out.append(ContinuationBranch(f"sim-{i:05d}", str(m), ends[k], int(y[m]) if k == 2 else None))
    return out
