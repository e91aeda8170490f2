"""Figures for `tps-tracer plot` (matplotlib, optional: the `plot` extra).

Every figure draws numbers computed in `tps_tracer.evaluation.plot_data`, the same ones the
report prints, so a plot never disagrees with the table next to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tps_tracer.errors import InputError, install_hint
from tps_tracer.evaluation.plot_data import ReliabilityBins, StepContributions

SUCCESS, FAILURE, UNOBSERVED = "#1b7837", "#c2185b", "#7f7f7f"
# One marker per StopReason value (the legend lists those drawn); an unknown value falls back to "*".
_STOP_MARKERS = {
    "clean": "o",
    "max_steps": ">",
    "parse_error": "x",
    "tool_error": "s",
    "env_terminated": "D",
    "timeout": "v",
    "other": "P",
    "capture_lost": "X",
}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InputError(f"plots need matplotlib, which is not installed: {install_hint('plot')}") from exc
    return plt


def check_available() -> None:
    """Raise ValueError (a clear message, exit 2 in the CLI) when matplotlib is not installed."""
    _pyplot()


def close_all() -> None:
    """Free every figure (a long-lived process drawing many plots would otherwise keep them)."""
    _pyplot().close("all")


def reliability_figure(bins: Sequence[ReliabilityBins], title: str = "Reliability (complete trajectories)") -> Any:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5.2), layout="constrained")
    ax.plot([0, 1], [0, 1], color="#999999", lw=1, ls="--", label="perfect calibration")
    for b in bins:
        (line,) = ax.plot(
            b.mean_forecast, b.observed_rate, marker="o", lw=1.5, label=f"{b.predictor} (T-ECE {b.ece:.3f})"
        )
        sizes = 20 + 180 * b.count / max(int(b.count.max()), 1)
        ax.scatter(b.mean_forecast, b.observed_rate, s=sizes, color=line.get_color(), alpha=0.35, lw=0)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean forecast in bin (Phi_w summary)", ylabel="observed success rate")
    ax.set_title(title + "\nquantile bins; marker area ~ trajectories in bin", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return fig


def traces_figure(traces: Sequence[dict[str, Any]], predictor: str) -> Any:
    plt = _pyplot()
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
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set(ylim=(-0.02, 1.02), xlabel="step t", ylabel=f"forecast F_t ({predictor})")
    title = f"Forecast traces of {len(traces)} trajectories, coloured by outcome"
    sampled = [tr for tr in traces if len(tr["forecasts"]) < tr.get("n_steps", len(tr["forecasts"]))]
    if sampled:
        longest = max(tr["n_steps"] for tr in sampled)
        title += (
            f"\n{len(sampled)} long trace(s) drawn at {len(sampled[0]['forecasts'])} evenly spaced steps "
            f"(longest: {longest} steps)"
        )
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return fig


def step_scores_figure(contribs: Sequence[StepContributions]) -> Any:
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.4), sharex=True, layout="constrained")
    first = contribs[0]
    bw = first.bin_width
    width = 0.8 * bw / max(len(contribs), 1)
    for k, c in enumerate(contribs):
        offset = (k - (len(contribs) - 1) / 2) * width + (bw - 1) / 2
        top.bar(c.t + offset, c.contribution, width=width, label=f"{c.predictor} (TPS {c.total:.3f})")
        bottom.plot(c.t + (bw - 1) / 2, c.mean_score, marker="o" if len(c.t) < 60 else "", ms=3, label=c.predictor)
    top.set_ylabel("mean w_t S(F_t) (sums to TPS)")
    title = (
        f"Where the score is earned or lost: {first.rule} rule, {first.weights} weights, {first.censoring} censoring"
    )
    if bw > 1:
        title += f"\nsteps grouped in bins of {bw} (bars: summed contribution; line: mean score over the bin)"
    top.set_title(title, fontsize=10)
    top.legend(fontsize=8, frameon=False)
    bottom.set(xlabel="step t", ylabel="mean per-step score S(F_t)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.axhline(0, color="#999999", lw=0.8)
    return fig


def calibration_figure(
    raw: ReliabilityBins, cal: ReliabilityBins, raw_s: StepContributions, cal_s: StepContributions
) -> Any:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained")
    left.plot([0, 1], [0, 1], color="#999999", lw=1, ls="--")
    for b in (raw, cal):
        left.plot(b.mean_forecast, b.observed_rate, marker="o", label=f"{b.predictor} (T-ECE {b.ece:.3f})")
    left.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean forecast in bin", ylabel="observed success rate")
    left.set_title("Reliability: raw vs recalibrated", fontsize=10)
    left.legend(fontsize=8, frameon=False, loc="upper left")
    bw = raw_s.bin_width
    for k, s in enumerate((raw_s, cal_s)):
        right.bar(
            s.t + (k - 0.5) * 0.4 * bw + (bw - 1) / 2,
            s.contribution,
            width=0.4 * bw,
            label=f"{s.predictor} (TPS {s.total:.3f})",
        )
    right.set(xlabel="step t", ylabel="mean w_t S(F_t) (sums to TPS)")
    grouped = f"; steps in bins of {bw}" if bw > 1 else ""
    right.set_title(f"TPS by step ({raw_s.rule}, {raw_s.weights}, {raw_s.censoring}{grouped})", fontsize=10)
    right.legend(fontsize=8, frameon=False)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return fig
