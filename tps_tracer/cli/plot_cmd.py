"""`tps-tracer plot`: reliability diagram, forecast traces, TPS by step, raw vs recalibrated."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tps_tracer.evaluation.diagnostics import DEFAULT_ECE_BINS
from tps_tracer.evaluation.plot_data import forecast_traces, reliability_bins, step_contributions
from tps_tracer.evaluation.recalibration import PLATT_SUFFIX, with_platt_streams
from tps_tracer.evaluation.tps import CENSORING_MODES, SIMPLE
from tps_tracer.records import read_trajectories, to_arrays
from tps_tracer.scoring.rules import get_rule
from tps_tracer.scoring.schedules import get_schedule


def add_plot_parser(sub: Any) -> None:
    p = sub.add_parser("plot", help="draw reliability, forecast traces and per-step scores (PNG/SVG)")
    p.add_argument("file", help="trajectory records (JSON Lines)")
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("--predictors", help="comma-separated predictors (default: all); traces use the first")
    p.add_argument("--calibrate", choices=["platt"], help="also draw raw vs cross-fitted Platt per predictor")
    p.add_argument("--format", choices=["png", "svg"], default="png")
    p.add_argument("--bins", type=int, default=DEFAULT_ECE_BINS, help="quantile bins of the reliability diagram")
    p.add_argument("--rule", default="log")
    p.add_argument("--weights", default="linear-front")
    p.add_argument("--censoring", choices=CENSORING_MODES, default=SIMPLE)
    p.add_argument("--traces", type=int, default=80, help="how many trajectories to draw in the traces plot")
    p.set_defaults(func=cmd_plot)


def cmd_plot(args: argparse.Namespace) -> int:
    from tps_tracer import plots

    arrays = to_arrays(read_trajectories(args.file))
    predictors = [p.strip() for p in args.predictors.split(",")] if args.predictors else list(arrays.predictors)
    unknown = [p for p in predictors if p not in arrays.predictors]
    if unknown:
        raise ValueError(f"predictor(s) not in the file: {', '.join(unknown)}")
    rule, sched = get_rule(args.rule).name, get_schedule(args.weights).name
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bins = [reliability_bins(arrays, p, args.bins) for p in predictors]
    steps = [step_contributions(arrays, p, rule, sched, args.censoring) for p in predictors]
    traces = forecast_traces(arrays, predictors[0], args.traces)
    figures = {
        "reliability": plots.reliability_figure(bins),
        f"traces-{predictors[0]}": plots.traces_figure(traces, predictors[0]),
        "step-scores": plots.step_scores_figure(steps),
    }
    data: dict[str, Any] = {
        "reliability": [b.as_dict() for b in bins],
        "step_scores": [s.as_dict() for s in steps],
        "traces": {"predictor": predictors[0], "trajectories": traces},
    }
    if args.calibrate:
        calibrated, _ = with_platt_streams(arrays, predictors, sched)
        data["calibration"] = []
        for p in predictors:
            cal_bins = reliability_bins(calibrated, p + PLATT_SUFFIX, args.bins)
            cal_steps = step_contributions(calibrated, p + PLATT_SUFFIX, rule, sched, args.censoring)
            raw_bins, raw_steps = bins[predictors.index(p)], steps[predictors.index(p)]
            figures[f"calibration-{p}"] = plots.calibration_figure(raw_bins, cal_bins, raw_steps, cal_steps)
            data["calibration"].append({"reliability": cal_bins.as_dict(), "step_scores": cal_steps.as_dict()})
    written = []
    for name, fig in figures.items():
        path = out / f"{name}.{args.format}"
        fig.savefig(path, dpi=130)
        written.append(str(path))
    (out / "plot-data.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    plots.close_all()
    sys.stdout.write("\n".join([*written, str(out / "plot-data.json")]) + "\n")
    return 0
