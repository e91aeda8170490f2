"""`tps-tracer plot`: reliability diagram, forecast traces, TPS by step, raw vs recalibrated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tps_tracer import output, plots
from tps_tracer.cli.main import CliError, flag, names, progress_for, render_skipped, writing
from tps_tracer.evaluation.calibration import with_platt_streams
from tps_tracer.evaluation.chunked import read_arrays
from tps_tracer.evaluation.skipped_predictors import (
    PLATT_SUFFIX,
    Skipped,
    as_dicts,
    check_known_predictors,
    nothing_left,
    platt_fit_reason,
    split_usable,
)
from tps_tracer.output import atomic_write, write_text
from tps_tracer.plots import (
    MAX_STEP_BINS,
    MAX_TRACE_POINTS,
    forecast_traces,
    plot_reason,
    reliability_bins,
    step_contributions,
)
from tps_tracer.scoring import get_rule, get_schedule


def cmd_plot(args: argparse.Namespace) -> int:
    for option, value, least in (("--bins", args.bins, 1), ("--traces", args.traces, 0)):
        if value < least:
            raise CliError(f"{option} must be >= {least}, got {value}")
    with flag("--rule"):
        rule = get_rule(args.rule).name
    with flag("--weights"):
        sched = get_schedule(args.weights).name
    plots.pyplot()  # no matplotlib: exit 2 before any work
    arrays = read_arrays(args.file, progress=progress_for(args.file))  # the columnar reader
    requested = names(args.predictors)
    check_known_predictors(requested or [], arrays.predictors, "--predictors: ")
    predictors, skipped = split_usable(
        requested or list(arrays.predictors), lambda p: plot_reason(arrays, p, args.censoring)
    )
    if not predictors:
        raise nothing_left("plot", skipped)
    bins = [reliability_bins(arrays, p, args.bins) for p in predictors]
    steps = [step_contributions(arrays, p, rule, sched, args.censoring).binned() for p in predictors]
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
        fittable, not_fitted = split_usable(predictors, lambda p: platt_fit_reason(arrays, p))
        skipped += [Skipped(s.predictor, "not recalibrated: " + s.reason) for s in not_fitted]
        if not fittable:
            raise nothing_left("recalibrate", not_fitted)
        calibrated, _ = with_platt_streams(arrays, fittable, sched)
        data["calibration"] = []
        for p in fittable:
            cal_bins = reliability_bins(calibrated, p + PLATT_SUFFIX, args.bins)
            cal_steps = step_contributions(calibrated, p + PLATT_SUFFIX, rule, sched, args.censoring).binned()
            raw = predictors.index(p)
            figures[f"calibration-{p}"] = plots.calibration_figure(bins[raw], cal_bins, steps[raw], cal_steps)
            data["calibration"].append({"reliability": cal_bins.as_dict(), "step_scores": cal_steps.as_dict()})
    data["skipped_predictors"] = as_dicts(skipped)
    data["drawing"] = {
        "max_step_bins": MAX_STEP_BINS,
        "max_trace_points": MAX_TRACE_POINTS,
        "note": "step scores of longer trajectories are grouped in bins (bin_width), long traces are drawn "
        "at evenly spaced steps (t); every number here is what the figures show",
    }
    text = output.dumps(data, indent=1)  # before any file is touched: a failure writes nothing
    out = Path(args.out)
    written = []
    with writing("-o", out):
        out.mkdir(parents=True, exist_ok=True)
        for name, fig in figures.items():
            path = out / f"{name}.{args.format}"
            with atomic_write(path, binary=True) as fh:
                fig.savefig(fh, dpi=130, format=args.format)
            written.append(str(path))
        write_text(out / "plot-data.json", text)
    plots.pyplot().close("all")  # a long-lived process drawing many plots would keep them
    note = render_skipped(data["skipped_predictors"])
    sys.stdout.write((note + "\n\n" if note else "") + "\n".join([*written, str(out / "plot-data.json")]) + "\n")
    return 0
