"""`tps-tracer calibrate`: Platt maps fitted on every complete trajectory (what a live agent applies),
saved with the paper's cross-fitted estimate of how much they help (raw vs Platt TPS_log and AUROC, paired).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tps_tracer import output
from tps_tracer.cli.main import (
    CliError,
    check_replicates,
    delta_cells,
    flag,
    fmt,
    names,
    progress_for,
    render_skipped,
    render_table,
    writing,
)
from tps_tracer.constants import COMPLETE_ONLY, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.calibration import (
    Calibrator,
    auroc_deltas,
    fit_calibrator,
    fixed_rank_sensitivity,
    paired_mean_delta,
    refit_tps_deltas,
    with_platt_streams,
)
from tps_tracer.evaluation.chunked import read_arrays
from tps_tracer.evaluation.pairs import pair_table_from_arrays, score_columns
from tps_tracer.evaluation.skipped_predictors import PLATT_SUFFIX, check_known_predictors, platt_fit_reason
from tps_tracer.records import CensoringPolicy
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.scoring import get_rule, get_schedule


def cross_fit_evaluation(
    arrays: TrajectoryArrays,
    predictors: list[str],
    schedule: str,
    penalty: float,
    bootstrap: int,
    seed: int,
    refit: bool = False,
) -> dict[str, Any]:
    """Per predictor: the two split maps and the paired raw-vs-Platt deltas (TPS log, AUROC);
    with `refit`, also the TPS deltas with the maps refitted in every replicate."""
    with_platt, fits = with_platt_streams(arrays, predictors, schedule, penalty)
    names = [n for p in predictors for n in (p, p + PLATT_SUFFIX)]
    table = pair_table_from_arrays(with_platt, names, [get_rule("log")], [get_schedule(schedule)])
    sm = score_columns(table, names, modes=(COMPLETE_ONLY, SIMPLE))
    cols = {(k.predictor, k.censoring): c for k, c in zip(sm.keys, sm.columns, strict=True)}
    aurocs = auroc_deltas(table, [(p, p + PLATT_SUFFIX) for p in predictors], CensoringPolicy(), bootstrap, seed)
    out = {}
    for p in predictors:
        tps = {
            mode: paired_mean_delta(
                cols[(p, mode)], cols[(p + PLATT_SUFFIX, mode)], arrays.ids, bootstrap, seed, f"tps_log {mode}"
            ).as_dict()
            for mode in (COMPLETE_ONLY, SIMPLE)
        }
        out[p] = {"splits": fits[p].diagnostics(), "tps_log": tps, "auroc": aurocs[(p, p + PLATT_SUFFIX)].as_dict()}
        if refit:
            deltas = refit_tps_deltas(arrays, p, schedule, penalty, bootstrap, seed, (COMPLETE_ONLY, SIMPLE))
            out[p]["tps_log_refit"] = {mode: d.as_dict() for mode, d in deltas.items()}
    return out


def cmd_calibrate(args: argparse.Namespace) -> int:
    check_replicates(args.bootstrap, 2, "the paired deltas need a standard error")
    if not args.penalty > 0:
        raise CliError(f"--penalty must be > 0, got {args.penalty}")
    with flag("--weights"):
        schedule = get_schedule(args.weights).name
    arrays = read_arrays(args.file, progress=progress_for(args.file))  # the columnar reader
    predictors = names(args.predictors) or None
    check_known_predictors(predictors or [], arrays.predictors, "--predictors: ")
    calibrator = fit_calibrator(arrays, predictors, schedule, args.penalty, source=str(args.file))
    fixed = None
    if args.fixed_rank:
        with flag("--fixed-rank"):
            check_known_predictors([args.fixed_rank], arrays.predictors)
            reason = platt_fit_reason(arrays, args.fixed_rank)
            if reason:
                raise InputError(f"{args.fixed_rank}: {reason}")
            fixed = fixed_rank_sensitivity(arrays, args.fixed_rank, "log", schedule)
    calibrator.cross_fit = cross_fit_evaluation(
        arrays, list(calibrator.maps), schedule, args.penalty, args.bootstrap, args.seed, refit=args.refit_maps
    )
    with writing("-o", args.output):
        calibrator.save(args.output)  # only after everything was computed; atomic
    if args.json:
        out = calibrator.as_dict()
        if fixed is not None:
            out["fixed_rank"] = {"predictor": args.fixed_rank, "rows": fixed}
        sys.stdout.write(output.dumps(out))
    else:
        sys.stdout.write(render_calibration(calibrator, args.output, args.fixed_rank, fixed))
    return 0


def render_calibration(
    cal: Calibrator, path: str, fixed_predictor: str | None, fixed: list[dict[str, Any]] | None
) -> str:
    maps = [
        [name, fmt(m.a, 4), fmt(m.b, 4), fmt(m.mu, 4), fmt(m.sigma, 4), "yes" if m.fallback else "no", str(m.n_steps)]
        for name, m in cal.maps.items()
    ]
    splits, deltas = [], []
    for name, ev in cal.cross_fit.items():
        for d in ev["splits"]:
            lo, hi = d["value_range"]
            mapping = ", ".join(f"{raw:.3g}->{cal:.3g}" for raw, cal in d["value_map"])
            fallback = "yes" if d["fallback"] else "no"
            splits.append([name, str(d["fit_on_half"]), fmt(d["b"], 4), fallback, mapping, f"[{lo:.4g}, {hi:.4g}]"])
        refit = ((f"TPS_log {m} (refit)", v) for m, v in ev.get("tps_log_refit", {}).items())
        for label, d in [*((f"TPS_log {m}", v) for m, v in ev["tps_log"].items()), *refit, ("AUROC", ev["auroc"])]:
            deltas.append([name, label, fmt(d["a"], 4), fmt(d["b"], 4), *delta_cells(d)])
    parts = [
        *filter(None, [render_skipped(cal.skipped)]),
        f"Calibrator written to {path}: Platt maps fitted on {cal.fitted_on['n_complete']} complete trajectories "
        f"with {cal.schedule} step weights (penalty {cal.penalty:g} on the slope)",
        render_table(["predictor", "a", "b", "mu", "sigma", "fallback", "steps"], maps),
        "Cross-fitted evaluation (each half mapped by the other half's fit)",
        render_table(
            ["predictor", "fit on half", "slope b", "fallback", "frequent raw values map to", "calibrated range"],
            splits,
        ),
        "Platt minus raw (paired bootstrap; the CI is conditional on the cross-fitted maps, which are not\n"
        "refitted in each replicate: it covers these maps' effect, not the population effect of Platt scaling;\n"
        "the '(refit)' rows of --refit-maps refit them per replicate and cover the latter)",
        render_table(["predictor", "statistic", "raw", "platt", "delta [95% CI]", "delta/SE"], deltas),
    ]
    if fixed is not None:
        rows = [
            [r["transform"], fmt(r["tps"], 4), fmt(r["auroc"], 4), fmt(r["auprc"], 4), fmt(r["aurc"], 4)] for r in fixed
        ]
        parts += [
            f"Fixed-rank sensitivity for {fixed_predictor}: rank metrics from the raw Phi_w scalar in every row; "
            "TPS_log (complete-only) on the transformed stream",
            render_table(["transform", "TPS_log", "AUROC", "AUPRC", "AURC"], rows),
        ]
    return "\n\n".join(parts) + "\n"
