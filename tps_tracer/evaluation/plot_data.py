"""The numbers behind `tps-tracer plot` (no matplotlib here, so they can be tested and exported).

- `reliability_bins`: the T-ECE bins of the report (tie-aware quantile bins of the Phi_w
  summary on complete trajectories): mean forecast, observed success rate, count. The
  count-weighted mean |gap| of the bins is exactly the report's T-ECE.
- `step_contributions`: per step index t, the mean over scored trajectories of
  w_t S(F_t, eta) (zero where a trajectory has no step t). Summed over t they give the
  report's TPS for that censoring mode exactly; the unweighted mean S(F_t, eta) at t shows
  where in the trajectory the score is lost.
- `forecast_traces`: F_1..F_Z per trajectory with its outcome and stop reason.

Big inputs stay drawable: `StepContributions.binned` groups consecutive steps into at most
`MAX_STEP_BINS` bins (contributions add up, so the bars still sum to the TPS; the mean
score is averaged over the steps reached), and `forecast_traces` keeps at most
`MAX_TRACE_POINTS` evenly spaced steps of a long trace (first and last always kept). The
figures and plot-data.json say when they show such a sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import COMPLETE_ONLY, EXACT, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.diagnostics import DEFAULT_ECE_BINS, quantile_bins
from tps_tracer.evaluation.pairs import AGGREGATOR_NAMES, pair_table_from_arrays
from tps_tracer.evaluation.skipped_predictors import no_data_reason, role_masks
from tps_tracer.records.arrays import STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import ScoreRule, get_rule
from tps_tracer.scoring.schedules import WeightSchedule, get_schedule

FloatArray = NDArray[np.float64]

MAX_STEP_BINS = 200
MAX_TRACE_POINTS = 2000


@dataclass
class ReliabilityBins:
    predictor: str
    mean_forecast: FloatArray
    observed_rate: FloatArray
    count: NDArray[np.int64]

    @property
    def ece(self) -> float:
        n = self.count.sum()
        return float(np.sum(self.count * np.abs(self.observed_rate - self.mean_forecast)) / n) if n else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "predictor": self.predictor,
            "mean_forecast": self.mean_forecast.tolist(),
            "observed_rate": self.observed_rate.tolist(),
            "count": self.count.tolist(),
            "t_ece": self.ece,
        }


def reliability_bins(
    arrays: TrajectoryArrays, predictor: str, n_bins: int = DEFAULT_ECE_BINS, summary: str = "phi_w"
) -> ReliabilityBins:
    table = pair_table_from_arrays(arrays, [predictor], [get_rule("log")], [get_schedule("linear-front")])
    complete, _ = table.role_masks(CensoringPolicy())
    sel = complete & table.predictors[predictor].usable
    c = table.predictors[predictor].aggregates[sel, AGGREGATOR_NAMES.index(summary)]
    y = table.outcome[sel]
    b = quantile_bins(c, n_bins)
    counts = np.bincount(b, minlength=int(b.max()) + 1 if b.size else 0)
    used = counts > 0
    mean_c = np.bincount(b, weights=c)[used] / counts[used]
    mean_y = np.bincount(b, weights=y)[used] / counts[used]
    return ReliabilityBins(predictor, mean_c, mean_y, counts[used].astype(np.int64))


@dataclass
class StepContributions:
    predictor: str
    rule: str
    weights: str
    censoring: str
    t: NDArray[np.int64]  # 1..max Z
    contribution: FloatArray  # mean over scored trajectories of w_t S(F_t, eta) (0 if no step t)
    mean_score: FloatArray  # mean S(F_t, eta) over trajectories that reached step t
    reached: NDArray[np.int64]
    n: int
    bin_width: int = 1  # steps per entry of t (1: every step; see `binned`)

    @property
    def total(self) -> float:
        return float(self.contribution.sum())

    def binned(self, max_bins: int = MAX_STEP_BINS) -> StepContributions:
        """At most `max_bins` entries: consecutive steps grouped (t = the first step of each group)."""
        size = len(self.t)
        width = max(1, -(-size // max_bins))
        if width == 1 and self.bin_width == 1:
            return self
        group = np.arange(size) // width
        reached = np.bincount(group, weights=self.reached).astype(np.int64)
        score_sum = np.bincount(group, weights=self.mean_score * self.reached)
        return StepContributions(
            self.predictor,
            self.rule,
            self.weights,
            self.censoring,
            self.t[::width].copy(),
            np.bincount(group, weights=self.contribution).astype(np.float64),
            score_sum / np.maximum(reached, 1),
            reached,
            self.n,
            width * self.bin_width,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "predictor": self.predictor,
            "rule": self.rule,
            "weights": self.weights,
            "censoring": self.censoring,
            "t": self.t.tolist(),
            "contribution": self.contribution.tolist(),
            "mean_score": self.mean_score.tolist(),
            "reached": self.reached.tolist(),
            "n": self.n,
            "tps": self.total,
            "bin_width": self.bin_width,
        }


def step_contributions(
    arrays: TrajectoryArrays,
    predictor: str,
    rule: str | ScoreRule = "log",
    schedule: str | WeightSchedule = "linear-front",
    censoring: str = SIMPLE,
) -> StepContributions:
    """Per-step decomposition of TPS (see the module docstring); eta as in the report's modes."""
    rule_, sched = get_rule(rule), get_schedule(schedule)
    col = arrays.predictors[predictor]
    table = pair_table_from_arrays(arrays, [predictor], [rule_], [sched])
    complete, censored = table.role_masks(CensoringPolicy())
    has_q = ~np.isnan(arrays.q_z)
    member = {
        COMPLETE_ONLY: complete,
        SIMPLE: complete | censored,
        EXACT: complete | (censored & has_q),
    }[censoring] & col.usable
    eta = np.where(
        complete, np.nan_to_num(arrays.outcome), np.where(censoring == EXACT, np.nan_to_num(arrays.q_z), 0.0)
    )
    if not member.any():
        raise InputError(f"no trajectory of {predictor!r} in the {censoring} sample")
    values, layout = arrays.subset(member, predictor)
    b1, b0 = rule_.branches(values)
    e = np.repeat(eta[member], layout.lengths)
    s = e * b1 + (1 - e) * b0
    w = layout.weights(sched)
    t = layout.step_index().astype(np.int64)
    n = int(member.sum())
    size = int(t.max())
    contribution = np.bincount(t - 1, weights=w * s, minlength=size) / n
    reached = np.bincount(t - 1, minlength=size)
    mean_score = np.bincount(t - 1, weights=s, minlength=size) / np.maximum(reached, 1)
    return StepContributions(
        predictor, rule_.name, sched.name, censoring, np.arange(1, size + 1), contribution, mean_score, reached, n
    )


def forecast_traces(
    arrays: TrajectoryArrays, predictor: str, limit: int = 200, max_points: int = MAX_TRACE_POINTS
) -> list[dict[str, Any]]:
    """Up to `limit` usable trajectories (in file order): forecasts at steps t (all steps, or
    `max_points` evenly spaced ones of a longer trace), n_steps, outcome (None if unobserved), stop reason."""
    col = arrays.predictors[predictor]
    out = []
    for i in np.flatnonzero(col.usable)[:limit].tolist():
        y = arrays.outcome[i]
        values = col.values[arrays.offsets[i] : arrays.offsets[i + 1]]
        z = len(values)
        t = np.arange(z) if z <= max_points else np.unique(np.linspace(0, z - 1, max_points).round().astype(np.int64))
        out.append(
            {
                "trajectory_id": arrays.ids[i],
                "t": (t + 1).tolist(),
                "forecasts": values[t].tolist(),
                "n_steps": z,
                "outcome": None if np.isnan(y) else int(y),
                "stop_reason": STOP_REASONS[arrays.stop_code[i]].value,
            }
        )
    return out


def plot_reason(arrays: TrajectoryArrays, predictor: str, censoring: str = SIMPLE) -> str | None:
    """Why `predictor` cannot be plotted for this censoring mode (None if it can)."""
    complete, censored = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())
    sample = {
        COMPLETE_ONLY: complete,
        SIMPLE: complete | censored,
        EXACT: complete | (censored & ~np.isnan(arrays.q_z)),
    }[censoring]
    return no_data_reason(arrays.predictors[predictor], sample, f"{censoring} sample")
