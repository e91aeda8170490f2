"""Render a report dict (see tps_tracer.evaluation.report) as readable text."""

from __future__ import annotations

from typing import Any

from tps_tracer.cli.tables import fmt, fmt_ci, render_skipped, render_table

_MODE_TITLES = {
    "complete-only": "complete-only",
    "simple": "cen-simple (q_Z~0)",
    "exact": "cen-exact (q_z)",
}


def _audit_text(audit: dict[str, Any]) -> str:
    rows = [[reason, str(count), audit["role_of"][reason]] for reason, count in audit["stop_reasons"].items() if count]
    roles = audit["roles"]
    rate = audit["censoring_rate"]
    lines = [
        "Termination audit",
        render_table(["stop reason", "count", "role"], rows),
        f"  working sample {audit['working_sample']} = {roles['complete']} complete + "
        f"{roles['censored']} censored" + (f" (censoring rate {100 * rate:.1f}%)" if rate is not None else ""),
        f"  excluded (informative stops, not scored): {roles['excluded']}"
        + (f" ({100 * audit['excluded_share']:.1f}% of all)" if audit["excluded_share"] is not None else ""),
        f"  censored trajectories carrying q_z: {audit['censored_with_q_z']} of {roles['censored']}",
    ]
    lost = roles.get("lost", 0)
    if lost:
        share = f" ({100 * lost / audit['n_trajectories']:.1f}% of all)" if audit["n_trajectories"] else ""
        lines.append(
            f"  CAPTURE LOSS: {lost} runs{share} whose end tps-tracer did not see (idle, evicted, "
            "closed in flight, or an event lost; metadata.tps_abandoned says which): not scored, and not "
            "the agent's stops; every score above is over the other runs only"
        )
    if audit["pending_outcome"]:
        lines.append(f"  clean stops still waiting for their outcome (not scored): {audit['pending_outcome']}")
    if audit["outcome_ignored_on_unscored"]:
        lines.append(f"  outcomes given on non-clean stops (ignored): {audit['outcome_ignored_on_unscored']}")
    if not audit["default_policy"]:
        lines.append("  NOTE: non-default censoring policy (sensitivity analysis), see roles above")
    return "\n".join(lines)


def _coverage_text(coverage: list[dict[str, Any]]) -> str | None:
    skipped = [c for c in coverage if c["skipped"]]
    if not skipped:
        return None
    lines = ["Skipped trajectories (a missing or non-numeric forecast skips the trajectory for that predictor)"]
    for c in skipped:
        reasons = ", ".join(f"{k} {v}" for k, v in c["skipped"].items())
        lines.append(f"  {c['predictor']}: {sum(c['skipped'].values())} skipped ({reasons}); {c['usable']} usable")
    return "\n".join(lines)


def _scores_text(report: dict[str, Any]) -> str:
    modes = list(dict.fromkeys(r["censoring"] for r in report["scores"]))
    by_key: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in report["scores"]:
        by_key.setdefault((r["predictor"], r["rule"], r["weights"]), {})[r["censoring"]] = r
    rows = []
    for (pred, rule, weights), cells in by_key.items():
        row = [pred, rule, weights]
        for m in modes:
            c = cells[m]
            row.append(f"{fmt_ci(c['mean'], c['ci_low'], c['ci_high'])}  n={c['n']}")
        rows.append(row)
    headers = ["predictor", "rule", "weights", *(_MODE_TITLES[m] for m in modes)]
    out = [
        "TPS, mean [95% bootstrap CI] (reward-oriented: higher is better)",
        render_table(headers, rows),
    ]
    missing = {r["predictor"]: r["n_missing_q_z"] for r in report["scores"] if r.get("n_missing_q_z")}
    for pred, k in missing.items():
        out.append(f"  cen-exact for {pred} leaves out {k} censored trajectories without q_z")
    return "\n".join(out)


def _deltas_text(report: dict[str, Any]) -> str:
    rows = [
        [
            d["predictor"],
            d["rule"],
            d["weights"],
            d["comparison"],
            fmt_ci(d["delta"], d["ci_low"], d["ci_high"]),
            fmt(d["z"], 3),
        ]
        for d in report["deltas"]
    ]
    return "\n".join(
        [
            "Delta_practice: censored extension minus complete-only (paired bootstrap)",
            render_table(["predictor", "rule", "weights", "comparison", "delta [95% CI]", "delta/SE"], rows),
        ]
    )


def _diagnostics_text(report: dict[str, Any]) -> str:
    cols = ["auroc", "auprc", "aurc", "t_ece", "t_brier"]
    rows = [[d["predictor"], str(d["n"]), *(fmt(d[c], 3) for c in cols)] for d in report["diagnostics"]]
    scalar = [
        [s["predictor"], s["aggregator"], str(s["n"]), *(fmt(s[c], 3) for c in cols)]
        for s in report["scalar_predictors"]
        if s["aggregator"] != "phi_w"
    ]
    head = ["AUROC^", "AUPRC^", "AURC_v", "T-ECE_v", "T-Brier_v"]
    return "\n".join(
        [
            f"Diagnostics on complete trajectories (scalar summary: {report['settings']['diagnostic_summary']};",
            "  AUROC/AUPRC with failure as the positive class; ^ higher is better, _v lower is better)",
            render_table(["predictor", "n", *head], rows),
            "",
            "Scalar AUQ aggregators (not TPS inputs: they collapse the trace)",
            render_table(["predictor", "aggregator", "n", *head], scalar),
        ]
    )


def _recalibration_text(report: dict[str, Any]) -> str | None:
    if not report.get("recalibration"):
        return None
    cal = report["settings"]["calibration"]
    rows = [
        [
            r["predictor"],
            r["recalibrated"],
            c["statistic"],
            fmt_ci(c["delta"], c["ci_low"], c["ci_high"]),
            fmt(c["z"], 3),
        ]
        for r in report["recalibration"]
        for c in r["comparisons"]
    ]
    fallbacks = [
        f"{p} (half {d['fit_on_half']})" for p, split in cal.get("splits", {}).items() for d in split if d["fallback"]
    ]
    lines = [
        f"Recalibration: {cal['method']}, fitted with {cal['schedule']} step weights; "
        "recalibrated minus raw (paired bootstrap)",
        "  CI conditional on the fitted maps: they are not refitted in each replicate, so it covers the",
        "  effect of these maps, not the population effect of fitting Platt scaling (narrower than that;",
        "  `tps-tracer calibrate --refit-maps` refits them per replicate)",
        render_table(["predictor", "recalibrated", "statistic", "delta [95% CI]", "delta/SE"], rows),
    ]
    if cal.get("schedule_mismatch"):
        lines.append(
            f"  WARNING: the calibrator was fitted with {cal['schedule']} step weights, not the evaluated "
            f"{report['settings']['weights'][0]}; refit it with matching weights (paper, Appendix Calibration)"
        )
    if fallbacks:
        lines.append("  monotone fallback (slope < 0 -> constant base rate): " + ", ".join(fallbacks))
    return "\n".join(lines)


def _disclosure(report: dict[str, Any]) -> str:
    s = report["settings"]
    cal = s["calibration"]
    pre = [c["predictor"] for c in report["coverage"] if c["predictor"].endswith(("+platt", "+cal"))]
    if cal["method"] == "raw" and pre:
        how = f"no recalibration here, but {', '.join(pre)} arrived recalibrated in the file; the others are raw; "
    elif cal["method"] == "raw":
        how = "forecasts evaluated raw (no recalibration); "
    else:
        how = f"predictors named '+platt' are recalibrated ({cal['method']}), the others are raw; "
    base = s["base_rate"]
    return (
        "Disclosure: "
        + how
        + (f"base_rate is the constant reference F_t = {base:.4f}; " if base is not None else "")
        + "max_steps stops are treated as administrative (non-informative) censoring, informative stops "
        "are excluded; cen-simple is the pessimistic q_Z~0 approximation, cen-exact uses the q_z given in the file."
    )


def render_report(report: dict[str, Any], source: str) -> str:
    s = report["settings"]
    header = (
        f"TPS report: {source}\n"
        f"  {report['audit']['n_trajectories']} trajectories; rules {', '.join(s['rules'])}; "
        f"weights {', '.join(s['weights'])}; {s['bootstrap']} bootstrap replicates (seed {s['seed']})"
    )
    parts = [header, _audit_text(report["audit"])]
    set_aside = report.get("input", {}).get("set_aside")
    if set_aside:  # lines read but not scored (records/set_aside.py)
        parts.append(
            "Lines set aside (not scored)\n"
            + "\n".join(f"  {kind}: {v['count']} (first: {v['first']})" for kind, v in set_aside.items())
        )
    cov = _coverage_text(report["coverage"])
    if cov:
        parts.append(cov)
    skipped = render_skipped(report.get("skipped_predictors", []))
    if skipped:
        parts.append(skipped)
    parts += [_scores_text(report), _deltas_text(report)]
    recal = _recalibration_text(report)
    if recal:
        parts.append(recal)
    parts += [_diagnostics_text(report), _disclosure(report)]
    return "\n\n".join(parts) + "\n"
