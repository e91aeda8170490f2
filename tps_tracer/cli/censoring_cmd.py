"""`tps-tracer censoring`: the q_Z source (the file, Monte Carlo continuations, a plug-in model, or the hybrid
audit), exact vs simple on the censored prefixes, artificial and informative censoring checks."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from tps_tracer import output
from tps_tracer.cli.main import (
    CliError,
    censored_reasons,
    check_replicates,
    flag,
    fmt,
    fmt_ci,
    names,
    render_skipped,
    render_table,
    wrap,
    writing,
)
from tps_tracer.errors import InputError
from tps_tracer.evaluation.censoring.checks import (
    artificial_censoring,
    conditional_projection_check,
    exact_vs_simple,
    informative_censoring_shift,
)
from tps_tracer.evaluation.censoring.continuations import McEstimates, attach_q_z, mc_q_z, read_continuations
from tps_tracer.evaluation.censoring.q_z_model import PlugInResult, fit_q_z_model
from tps_tracer.evaluation.skipped_predictors import (
    as_dicts,
    check_known_predictors,
    no_data_reason,
    nothing_left,
    role_masks,
    split_usable,
)
from tps_tracer.records import CensoringPolicy, to_arrays, write_trajectories
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.reading import read_records
from tps_tracer.scoring import parse_rules, parse_schedules


def _q_z_source(
    args: argparse.Namespace, arrays: TrajectoryArrays
) -> tuple[TrajectoryArrays, dict[str, Any], McEstimates | None, PlugInResult | None]:
    mc = None
    if args.continuations:
        branches = read_continuations(args.continuations)
        with flag("--min-valid"):
            mc = mc_q_z(branches, args.min_valid, args.unresolved)
    features = names(args.q_z_model)
    if args.hybrid and not (mc and features):
        raise CliError("--hybrid needs both --continuations and --q-z-model")
    model = None
    if features:
        with flag("--q-z-model"):
            model = fit_q_z_model(arrays, features, mc if args.hybrid else None)
        estimates, info = model.q_hat, model.summary()
    elif mc is not None:
        estimates, info = mc.as_mapping(), mc.summary()
    else:
        with_q_z = int(np.sum(~np.isnan(arrays.q_z)))
        return arrays, {"source": "the q_z field of the file", "with_q_z": with_q_z}, None, None
    att = attach_q_z(arrays, estimates)
    info = {
        **info,
        "attached": att.attached,
        "censored_without_estimate": att.censored_without,
        "estimates_not_in_file": len(att.unmatched),
        "estimates_for_uncensored": len(att.not_censored),
    }
    return att.arrays, info, mc, model


def cmd_censoring(args: argparse.Namespace) -> int:
    with flag("--rules"):
        rules = [r.name for r in parse_rules(args.rules)]
    with flag("--weights"):
        weights = [s.name for s in parse_schedules(args.weights)]
    with flag("--artificial"):
        try:
            rates = [] if args.artificial.strip().lower() == "none" else [float(r) for r in names(args.artificial)]
        except ValueError as exc:  # float() of the user's text: bad input, not a bug
            raise InputError(str(exc)) from exc
        bad_rates = [r for r in rates if not 0.0 <= r <= 1.0]
        if bad_rates:
            raise InputError(f"rates must lie in [0, 1], got {bad_rates[0]}")
    reasons = censored_reasons(args.informative, "--informative")
    check_replicates(args.bootstrap, 0, "0: no confidence intervals")
    records = read_records(args.file)
    arrays = to_arrays(records)
    requested = names(args.predictors)
    check_known_predictors(requested or [], arrays.predictors, "--predictors: ")
    complete, _ = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())
    predictors, skipped = split_usable(
        requested or list(arrays.predictors),
        lambda p: no_data_reason(arrays.predictors[p], complete, "complete trajectories"),
    )
    if not predictors:
        raise nothing_left("check", skipped)
    estimated, source, mc, model = _q_z_source(args, arrays)
    if args.write_records:
        # The records with the estimated q_z where there is one (NaN, or the file's own q_z: as they are).
        q_z = [np.nan] * len(records) if estimated is arrays else estimated.q_z.tolist()
        changes = {"records": len(records), "q_z_added": 0, "q_z_replaced": 0, "q_z_unchanged": 0, "q_z_kept": 0}
        out = []
        for rec, q in zip(records, q_z, strict=True):
            if np.isnan(q):
                changes["q_z_kept"] += rec.q_z is not None  # not covered by the estimates: keep what it had
            else:
                new = round(float(q), 9)
                key = "q_z_added" if rec.q_z is None else ("q_z_unchanged" if rec.q_z == new else "q_z_replaced")
                changes[key] += 1
                rec = rec.model_copy(update={"q_z": new})
            out.append(rec)
        with writing("--write-records", args.write_records):
            write_trajectories(out, args.write_records)  # atomic: a failure leaves the old file
        source.update(written_to=args.write_records, records_written=changes)
    arrays = estimated
    exact = exact_vs_simple(arrays, predictors, rules, weights, n_replicates=args.bootstrap, seed=args.seed)
    for row in exact:
        row["separated_from_q_z_model"] = model.separated_from(row["predictor"]) if model else True
    report: dict[str, Any] = {"q_z": source, "skipped_predictors": as_dicts(skipped), "exact_vs_simple": exact}
    if mc is not None:
        report["projection_identity"] = conditional_projection_check(arrays, mc, predictors, rules, weights)
    if rates:
        report["artificial"] = [
            row for p in predictors for row in artificial_censoring(arrays, p, rules, weights, rates, args.seed)
        ]
    if reasons:
        report["informative"] = informative_censoring_shift(
            arrays, predictors, reasons, rules[0], weights[0], args.bootstrap, args.seed
        )
    sys.stdout.write(output.dumps(report) if args.json else render_censoring(report, args.file))
    return 0


def render_censoring(report: dict[str, Any], source: str) -> str:
    q = report["q_z"]
    shown = {k: fmt(v, 4) if isinstance(v, float) else v for k, v in q.items() if k not in ("audit", "records_written")}
    lines = [f"  {k}: {v}" for k, v in shown.items()]
    if "records_written" in q:
        w = q["records_written"]
        lines.append(
            f"  records written: {w['records']}; q_z added {w['q_z_added']}, replaced {w['q_z_replaced']}, "
            f"unchanged {w['q_z_unchanged']}; kept as given (not covered by the estimates) {w['q_z_kept']}"
        )
    if q.get("audit"):
        lines.append("  audit (out-of-fold plug-in vs MC on the audited prefixes): ")
        lines[-1] += ", ".join(f"{k} {fmt(v, 4) if isinstance(v, float) else v}" for k, v in q["audit"].items())
    dropped = q.get("dropped_fewer_than_min_valid") or 0
    if dropped:  # the usual cause of a censoring run that attaches nothing: too few branches per prefix
        lines += wrap(
            f"NOTE: {dropped} censored prefixes have fewer than {q.get('min_valid')} valid (clean) branches and get "
            "no q_z: resume them with more branches (resume_continuations(..., branches=10)), or pass a lower "
            "--min-valid knowingly",
            "  ",
        )
    parts = [f"Censoring toolkit: {source}", "q_Z source\n" + "\n".join(lines)]
    parts += filter(None, [render_skipped(report.get("skipped_predictors", []))])
    rows = [
        [r["predictor"] + ("" if r["separated_from_q_z_model"] else " (*)"), r["rule"], r["weights"], str(r["n"])]
        + [fmt_ci(r[k], *r[f"{k}_ci"]) for k in ("simple", "exact", "delta")]
        for r in report["exact_vs_simple"]
    ]
    text = [
        "Censored prefixes with q_z: simple (q_Z~0) vs exact; delta = q_z (s1 - s0) (log: q-weighted prefix log-odds)",
        render_table(["predictor", "rule", "weights", "n", "simple", "exact", "exact - simple [95% CI]"], rows),
    ]
    if any(not r["separated_from_q_z_model"] for r in report["exact_vs_simple"]):
        text.append("  (*) this predictor's stream is a q_Z model feature: evaluator and predictor are not separated")
    parts.append("\n".join(text))
    if "projection_identity" in report:
        worst = max((r["max_abs_error"] for r in report["projection_identity"]), default=0.0)
        parts.append(
            "Conditional-projection identity (exact-MC score = branch-average complete-prefix score): "
            f"max |error| = {worst:.1e} over {len(report['projection_identity'])} predictor x rule x schedule rows"
        )
    if "artificial" in report:
        rows = [
            [r["predictor"], r["rule"], r["weights"], f"{r['rate']:g}", str(r["n_censored"])]
            + [fmt(r[k], 4) for k in ("tps_complete", "delta_mean", "prefix_swap_mean", "tail_omission_mean")]
            + [f"({fmt(r['delta_y0'], 3)}, {fmt(r['delta_y1'], 3)})"]
            for r in report["artificial"]
        ]
        worst = max(r["max_abs_error"] for r in report["artificial"])
        head = "predictor|rule|weights|r|cut|TPS complete|delta mean|prefix-swap|tail-omission|(delta Y=0, Y=1)"
        parts.append(
            "Artificial censoring of complete trajectories (length-stratified): cen-simple minus complete\n"
            f"{render_table(head.split('|'), rows)}\n"
            f"  decomposition vs direct difference: max |error| = {worst:.1e} per trajectory"
        )
    if "informative" in report:
        rows = [
            [r["predictor"], ",".join(r["treated_as_censored"])]
            + [f"{fmt(r[k], 4)} (n={r['n_' + k]})" for k in ("default", "sensitivity")]
            + [fmt_ci(r["shift"], r["ci_low"], r["ci_high"])]
            for r in report["informative"]
        ]
        cols = ["predictor", "treated as censored", "default", "sensitivity", "shift [95% CI]"]
        parts.append(
            "Informative-censoring sensitivity: cen-simple TPS with these stops treated as censored "
            f"(contra-assumption check)\n{render_table(cols, rows)}"
        )
    return "\n\n".join(parts) + "\n"
