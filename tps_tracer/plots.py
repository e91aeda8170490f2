"""`tps-tracer plot`: the numbers the figures draw (exported as plot-data.json: reliability bins whose
mean |gap| is the report's T-ECE, per-step contributions that sum to its TPS, forecast traces) and
the figures (matplotlib, the optional `plot` extra, imported only to draw)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_ECE_BINS, SIMPLE
from tps_tracer.errors import InputError, install_hint
from tps_tracer.evaluation.diagnostics import quantile_bins
from tps_tracer.evaluation.pairs import eta_by_mode, pair_table_from_arrays
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES
from tps_tracer.evaluation.skipped_predictors import no_data_reason, role_masks
from tps_tracer.records.arrays import STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy, StopReason
from tps_tracer.scoring import FloatArray, ScoreRule, WeightSchedule, get_rule, get_schedule

MAX_STEP_BINS = 200
MAX_TRACE_POINTS = 2000


def _plain(obj: Any) -> dict[str, Any]:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in vars(obj).items()}


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
        return {**_plain(self), "t_ece": self.ece}


def reliability_bins(arrays: TrajectoryArrays, predictor: str, n_bins: int = DEFAULT_ECE_BINS) -> ReliabilityBins:
    table = pair_table_from_arrays(arrays, [predictor], [get_rule("log")], [get_schedule("linear-front")])
    complete, _ = table.role_masks(CensoringPolicy())
    sel = complete & table.predictors[predictor].usable
    c = table.predictors[predictor].aggregates[sel, AGGREGATOR_NAMES.index("phi_w")]
    b = quantile_bins(c, n_bins)
    counts = np.bincount(b, minlength=int(b.max()) + 1 if b.size else 0)
    used = counts > 0
    mean_c = np.bincount(b, weights=c)[used] / counts[used]
    mean_y = np.bincount(b, weights=table.outcome[sel])[used] / counts[used]
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
        return replace(
            self,
            t=self.t[::width].copy(),
            contribution=np.bincount(group, weights=self.contribution).astype(np.float64),
            mean_score=score_sum / np.maximum(reached, 1),
            reached=reached,
            bin_width=width * self.bin_width,
        )

    def as_dict(self) -> dict[str, Any]:
        out = _plain(self)
        bin_width = out.pop("bin_width")
        return {**out, "tps": self.total, "bin_width": bin_width}


def step_contributions(
    arrays: TrajectoryArrays,
    predictor: str,
    rule: str | ScoreRule = "log",
    schedule: str | WeightSchedule = "linear-front",
    censoring: str = SIMPLE,
) -> StepContributions:
    """Per-step decomposition of TPS; eta as in the report's modes."""
    rule_, sched = get_rule(rule), get_schedule(schedule)
    table = pair_table_from_arrays(arrays, [predictor], [rule_], [sched])
    member, eta = eta_by_mode(*table.role_masks(CensoringPolicy()), table.outcome, table.q_z)[censoring]
    member = member & arrays.predictors[predictor].usable
    if not member.any():
        raise InputError(f"no trajectory of {predictor!r} in the {censoring} sample")
    values, layout = arrays.subset(member, predictor)
    b1, b0 = rule_.branches(values)
    e = np.repeat(eta[member], layout.lengths)
    s = e * b1 + (1 - e) * b0
    t = layout.step_index().astype(np.int64)
    n = int(member.sum())
    size = int(t.max())
    contribution = np.bincount(t - 1, weights=layout.weights(sched) * s, minlength=size) / n
    reached = np.bincount(t - 1, minlength=size)
    mean_score = np.bincount(t - 1, weights=s, minlength=size) / np.maximum(reached, 1)
    return StepContributions(
        predictor, rule_.name, sched.name, censoring, np.arange(1, size + 1), contribution, mean_score, reached, n
    )


def forecast_traces(arrays: TrajectoryArrays, predictor: str, limit: int = 200) -> list[dict[str, Any]]:
    """Up to `limit` usable trajectories (in file order): forecasts at steps t (all steps, or
    `MAX_TRACE_POINTS` evenly spaced ones of a longer trace), n_steps, outcome (None if unobserved), stop reason."""
    col = arrays.predictors[predictor]
    out = []
    for i in np.flatnonzero(col.usable)[:limit].tolist():
        y = arrays.outcome[i]
        values = col.values[arrays.offsets[i] : arrays.offsets[i + 1]]
        z = len(values)
        t = np.arange(z)
        if z > MAX_TRACE_POINTS:
            t = np.unique(np.linspace(0, z - 1, MAX_TRACE_POINTS).round().astype(np.int64))
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
    sample = eta_by_mode(complete, censored, arrays.outcome, arrays.q_z)[censoring][0]
    return no_data_reason(arrays.predictors[predictor], sample, f"{censoring} sample")


# -- figures ------------------------------------------------------------------------------------

SUCCESS, FAILURE, UNOBSERVED = "#1b7837", "#c2185b", "#7f7f7f"
# One marker per StopReason value, in its order (clean "o", max_steps ">", parse_error "x", ...); the
# legend lists those drawn, an unknown value falls back to "*".
_STOP_MARKERS = dict(zip((r.value for r in StopReason), "o>xsDvPX", strict=True))


def pyplot() -> Any:
    """matplotlib.pyplot drawing to files; an InputError (exit 2 in the CLI) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InputError(f"plots need matplotlib, which is not installed: {install_hint('plot')}") from exc
    return plt


def _finish(ax: Any, title: str, **legend: Any) -> None:
    """What every panel shares: a small title, a frameless legend, a light grid."""
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, frameon=False, **legend)
    ax.grid(alpha=0.3)


def reliability_figure(bins: Sequence[ReliabilityBins]) -> Any:
    fig, ax = pyplot().subplots(figsize=(5.5, 5.2), layout="constrained")
    ax.plot([0, 1], [0, 1], color="#999999", lw=1, ls="--", label="perfect calibration")
    for b in bins:
        (line,) = ax.plot(b.mean_forecast, b.observed_rate, marker="o", label=f"{b.predictor} (T-ECE {b.ece:.3f})")
        sizes = 20 + 180 * b.count / max(int(b.count.max()), 1)
        ax.scatter(b.mean_forecast, b.observed_rate, s=sizes, color=line.get_color(), alpha=0.35, lw=0)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean forecast in bin (Phi_w summary)", ylabel="observed success rate")
    _finish(
        ax, "Reliability (complete trajectories)\nquantile bins; marker area ~ trajectories in bin", loc="upper left"
    )
    return fig


def traces_figure(traces: Sequence[dict[str, Any]], predictor: str) -> Any:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
    for tr in traces:
        f = tr["forecasts"]
        t = tr.get("t") or list(range(1, len(f) + 1))
        y = tr["outcome"]
        color = UNOBSERVED if y is None else (SUCCESS if y == 1 else FAILURE)
        ax.plot(t, f, color=color, lw=0.9, alpha=0.45, ls="-" if y is not None else ":")
        ax.plot(t[-1], f[-1], marker=_STOP_MARKERS.get(tr["stop_reason"], "*"), color=color, ms=5, alpha=0.8)
    handles = [
        plt.Line2D([], [], color=SUCCESS, label="succeeded (Y=1)"),
        plt.Line2D([], [], color=FAILURE, label="failed (Y=0)"),
        plt.Line2D([], [], color=UNOBSERVED, ls=":", label="no outcome (censored / excluded)"),
        *(
            plt.Line2D([], [], color="black", marker=m, ls="", label=f"stop: {r}")
            for r, m in _STOP_MARKERS.items()
            if any(tr["stop_reason"] == r for tr in traces)
        ),
    ]
    ax.set(ylim=(-0.02, 1.02), xlabel="step t", ylabel=f"forecast F_t ({predictor})")
    title = f"Forecast traces of {len(traces)} trajectories, coloured by outcome"
    sampled = [tr for tr in traces if len(tr["forecasts"]) < tr.get("n_steps", len(tr["forecasts"]))]
    if sampled:
        title += (
            f"\n{len(sampled)} long trace(s) drawn at {len(sampled[0]['forecasts'])} evenly spaced steps "
            f"(longest: {max(tr['n_steps'] for tr in sampled)} steps)"
        )
    _finish(ax, title, handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def _step_bars(ax: Any, contribs: Sequence[StepContributions]) -> None:
    """Each predictor's per-step contributions as bars side by side within a step (bin)."""
    bw = contribs[0].bin_width
    width = 0.8 * bw / len(contribs)
    for k, c in enumerate(contribs):
        offset = (k - (len(contribs) - 1) / 2) * width + (bw - 1) / 2
        ax.bar(c.t + offset, c.contribution, width=width, label=f"{c.predictor} (TPS {c.total:.3f})")
    ax.set_ylabel("mean w_t S(F_t) (sums to TPS)")


def step_scores_figure(contribs: Sequence[StepContributions]) -> Any:
    fig, (top, bottom) = pyplot().subplots(2, 1, figsize=(8, 6.4), sharex=True, layout="constrained")
    first = contribs[0]
    bw = first.bin_width
    _step_bars(top, contribs)
    for c in contribs:
        bottom.plot(c.t + (bw - 1) / 2, c.mean_score, marker="o" if len(c.t) < 60 else "", ms=3, label=c.predictor)
    title = (
        f"Where the score is earned or lost: {first.rule} rule, {first.weights} weights, {first.censoring} censoring"
    )
    if bw > 1:
        title += f"\nsteps grouped in bins of {bw} (bars: summed contribution; line: mean score over the bin)"
    _finish(top, title)
    bottom.set(xlabel="step t", ylabel="mean per-step score S(F_t)")
    bottom.grid(alpha=0.3)
    for ax in (top, bottom):
        ax.axhline(0, color="#999999", lw=0.8)
    return fig


def calibration_figure(
    raw: ReliabilityBins, cal: ReliabilityBins, raw_s: StepContributions, cal_s: StepContributions
) -> Any:
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4.8), layout="constrained")
    left.plot([0, 1], [0, 1], color="#999999", lw=1, ls="--")
    for b in (raw, cal):
        left.plot(b.mean_forecast, b.observed_rate, marker="o", label=f"{b.predictor} (T-ECE {b.ece:.3f})")
    left.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean forecast in bin", ylabel="observed success rate")
    _finish(left, "Reliability: raw vs recalibrated", loc="upper left")
    _step_bars(right, (raw_s, cal_s))
    right.set_xlabel("step t")
    grouped = f"; steps in bins of {raw_s.bin_width}" if raw_s.bin_width > 1 else ""
    _finish(right, f"TPS by step ({raw_s.rule}, {raw_s.weights}, {raw_s.censoring}{grouped})")
    return fig
