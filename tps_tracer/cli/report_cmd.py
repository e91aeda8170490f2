"""`tps-tracer report`: score a trajectory file; the text has one row per evaluator so a line fits 100
columns (`--wide`: side-by-side tables) and a legend of only the terms it prints."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from typing import Any

from tps_tracer import output
from tps_tracer.cli.main import (
    CliError,
    censored_reasons,
    delta_cells,
    fit_table,
    flag,
    fmt,
    fmt_ci,
    names,
    progress_for,
    reading,
    render_skipped,
    render_table,
    wrap,
)
from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.report import TooManyGroups, reports_by
from tps_tracer.evaluation.report_options import OptionError, ReportOptions
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring import parse_rules, parse_schedules


def _options(args: argparse.Namespace) -> ReportOptions:
    reasons = censored_reasons(args.treat_as_censored)
    if args.calibrate and args.calibrator:
        raise CliError("use either --calibrate (cross-fitted refit) or --calibrator FILE (saved maps), not both")
    calibrator = None
    if args.calibrator:
        from tps_tracer.evaluation.calibration import Calibrator  # a plain report never loads it

        with reading("--calibrator", args.calibrator):
            calibrator = Calibrator.load(args.calibrator)
    with flag("--rules"):
        rules = parse_rules(args.rules)
    with flag("--weights"):
        schedules = parse_schedules(args.weights)
    try:
        return ReportOptions(
            predictors=names(args.predictors) or None,
            rules=rules,
            schedules=schedules,
            bootstrap=args.bootstrap,
            seed=args.seed,
            policy=CensoringPolicy.treating_as_censored(reasons) if reasons else CensoringPolicy(),
            base_rate=not args.no_base_rate,
            ece_bins=args.ece_bins,
            calibrate=args.calibrate,
            calibrator=calibrator,
            missing=args.missing,
        )
    except OptionError as exc:
        option = "--weights" if exc.field == "schedules" else "--" + exc.field.replace("_", "-")  # the flag that set it
        raise CliError(f"{option}: {exc.detail}") from None


def cmd_report(args: argparse.Namespace) -> int:
    path = args.file
    options = _options(args)
    if args.by is not None:
        return _report_by(path, args.by, options, args)
    if args.engine == "ray":
        if options.calibrate is not None or options.calibrator is not None:
            raise CliError("--calibrate / --calibrator refit on the whole sample: not available with --engine ray")
        try:
            from tps_tracer.distributed import report_from_path_ray  # imports ray itself, lazily

            report = report_from_path_ray(path, options, args.address)
        except ImportError as exc:
            raise CliError(f"--engine ray needs the 'ray' extra (Ray Data): {exc}") from None
    elif args.address:
        raise CliError("--address needs --engine ray")
    else:
        report = report_from_path(path, options, progress=progress_for(path))
    sys.stdout.write(output.dumps(report) if args.json else render_report(report, path, wide=args.wide))
    return 0


def _report_by(path: str, key: str, options: ReportOptions, args: argparse.Namespace) -> int:
    """`--by KEY`: one report per value of a metadata key (evaluation/report.py, `reports_by`)."""
    if args.engine == "ray":
        raise CliError("--by reads the records whole: not available with --engine ray")
    if not key.strip():
        raise CliError("--by: give a metadata key, e.g. --by agent")
    try:
        split = reports_by(path, key, options)
    except TooManyGroups as exc:
        raise CliError(f"--by: {exc}") from None
    if args.json:
        sys.stdout.write(output.dumps(split))
        return 0
    parts = []
    for group in split["groups"]:
        title = f"{path} [{key} = {group['value']}, {group['n']} trajectories]"
        if "error" in group:
            parts.append(
                "\n".join([*wrap(f"TPS report: {title}"), *wrap(f"not scored: {group['error']}", "  ")]) + "\n"
            )
        else:
            parts.append(render_report(group["report"], title, wide=args.wide, legend=False))
    for kind, v in split.get("input", {}).get("set_aside", {}).items():
        parts.append(
            "\n".join(wrap(f"Lines set aside (not scored), {kind}: {v['count']} (first: {v['first']})")) + "\n"
        )
    scored = [g["report"] for g in split["groups"] if "error" not in g]
    if scored:  # one legend for every group: the terms are the same
        parts.append("\n".join(legend_lines(scored)) + "\n")
    sys.stdout.write("\n".join(parts))
    return 0


_RULES = {
    "log": "log F_t if the run succeeds, log(1 - F_t) if it fails (0 is perfect)",
    "brier": "negated Brier score: -(1 - F_t)^2 on success, -F_t^2 on failure (0 is perfect)",
}
_BETA = (
    "Beta-family proper rule: forecasts are weighed by the Beta(a,b) density, so errors near its mode "
    "(a-1)/(a+b-2) count most (beta(2,4): near 0.25); beta(1,1) is half the Brier score"
)
_SCHEDULES = {
    "linear-front": "step t of a run with horizon T weighs T - t + 1 (early steps count most)",
    "uniform": "every step of the horizon weighs the same",
    "exponential-front": "step t weighs 2^-(t-1) (the first steps dominate)",
    "linear-back": "step t weighs t (late steps count most)",
}
_AGGREGATORS = {
    "phi_last": "the forecast at the run's last step",
    "phi_avg": "the plain mean of the run's forecasts",
    "phi_min": "the run's lowest forecast",
}


_SAMPLE_TERMS = {
    "working sample": "the runs scored: complete (clean stop, outcome known) plus censored (stopped by the budget)",
    "censoring rate": "censored runs as a share of the working sample",
    "excluded": "runs that stopped for an informative reason (parse error, tool error, ...): not scored",
    "complete-only": "TPS over complete runs only; drops the budget-stopped runs (survivor bias)",
    "cen-simple (q_Z~0)": "censored TPS that scores a budget-stopped run as if it would have failed (q_Z ~ 0); "
    "pessimistic when such runs could still succeed",
}
_DELTA_TERMS = {
    "Delta_practice": "censored extension minus complete-only for the same stream and rule, paired (same "
    "resamples): how much dropping the budget-stopped runs moves the score; not a better/worse direction",
    "delta/SE": "the difference over its bootstrap standard error; beyond about +-2 it is unlikely to be noise",
}
_DIAGNOSTIC_TERMS = {
    "AUROC^ / AUPRC^": "how well a run's scalar confidence ranks failures above successes (failure is the "
    "positive class); 0.5 / the failure rate is chance; higher is better (^)",
    "AURC_v": "area under the risk-coverage curve: error rate when keeping the most confident runs; lower is "
    "better (_v)",
    "T-ECE_v": "trajectory expected calibration error over quantile bins of the scalar confidence; lower is "
    "better (_v)",
    "T-Brier_v": "mean (confidence - outcome)^2 per run; lower is better (_v)",
}


def _terms(report: dict[str, Any]) -> dict[str, str]:
    s = report["settings"]
    modes = {r["censoring"] for r in report["scores"]}
    preds = {r["predictor"] for r in report["scores"]}
    t: dict[str, str] = {
        "TPS": "Trajectory Proper Score: a proper scoring rule applied to the forecast F_t (the "
        "predicted probability of success) at every step, weighted over the run; reward-oriented, "
        "higher is better",
        "rule": "the scoring rule of a row; its TPS is comparable only with rows of the same rule",
    }
    for rule in s["rules"]:
        t[rule] = _BETA if rule.startswith("beta") else _RULES.get(rule, "a user-supplied proper rule")
    for w in s["weights"]:
        t[w] = _SCHEDULES.get(w, "a user-supplied weight schedule")
    t |= _SAMPLE_TERMS
    if "exact" in modes:
        t["cen-exact (q_z)"] = (
            "censored TPS that scores a budget-stopped run with its recorded q_z, the probability it would "
            "have succeeded; runs without q_z are left out; only as good as the q_z"
        )
    t["mean / 95% CI / scored"] = (
        "mean TPS over the scored runs (the working-sample runs the missing-forecast policy scores: all of them "
        "under carry-forward, only those with a forecast at every step under drop-run; as in the gate's "
        "coverage line; complete-only: the complete ones; cen-exact: less censored runs without q_z), and its "
        f"bootstrap percentile interval (runs resampled with replacement; {s['bootstrap']} replicates; '-' when "
        "there are none)"
    )
    t |= _DELTA_TERMS
    if "base_rate" in preds:
        t["base_rate"] = (
            "the constant forecast F_t = share of successes among complete runs: a stream below it "
            "forecasts worse than knowing nothing about the run"
        )
    if any(p.endswith("+platt") for p in preds):
        t["+platt"] = "a stream recalibrated by Platt scaling (the disclosure says where it was fitted)"
    if report.get("recalibration"):
        t["recalibrated minus raw"] = "paired difference of a statistic after and before recalibration"
    t |= _DIAGNOSTIC_TERMS
    t["phi_w"] = (
        "the scalar confidence of a run used by the diagnostics: its forecasts averaged with step weights, "
        f"here {s['diagnostic_summary']}"
    )
    aggs = {a["aggregator"] for a in report.get("scalar_predictors", [])}
    t |= {name: text for name, text in _AGGREGATORS.items() if name in aggs}
    return t


def legend_lines(reports: Iterable[dict[str, Any]]) -> list[str]:
    """The 'How to read this report' section: the terms of one or more reports, first seen first."""
    terms: dict[str, str] = {}
    for rep in reports:
        for k, v in _terms(rep).items():
            terms.setdefault(k, v)
    lines = ["How to read this report (terms; docs/report-terms.md has the long form)"]
    for term, text in terms.items():
        lines += wrap(f"{term}: {text}", "  ")
    return lines


_MODE_TITLES = {"complete-only": "complete-only", "simple": "cen-simple (q_Z~0)", "exact": "cen-exact (q_z)"}
_MODE_SHORT = {mode: title.split(" ")[0] for mode, title in _MODE_TITLES.items()}


def _prose(lines: list[str]) -> list[str]:
    """Prose lines wrapped to WIDTH, keeping each line's indent (also under --wide: it widens tables only)."""
    out: list[str] = []
    for line in lines:
        body = line.lstrip(" ")
        out += wrap(body, line[: len(line) - len(body)])
    return out


def _audit_text(audit: dict[str, Any], wide: bool) -> str:
    rows = []  # clean stops still waiting for their outcome get a row of their own, out of the clean row
    pending = audit["pending_outcome"]
    for reason, count in audit["stop_reasons"].items():
        if reason == "clean" and pending:
            if count - pending:
                rows.append(["clean, outcome known", str(count - pending), audit["role_of"][reason]])
            rows.append(["clean, outcome pending", str(pending), "pending: not scored yet"])
        elif count:
            rows.append([reason, str(count), audit["role_of"][reason]])
    roles = audit["roles"]
    rate = audit["censoring_rate"]
    lines = [
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
    if pending:
        lines.append(f"  clean stops still waiting for their outcome (not scored): {pending}")
    if audit["outcome_ignored_on_unscored"]:
        lines.append(f"  outcomes given on non-clean stops (ignored): {audit['outcome_ignored_on_unscored']}")
    if not audit["default_policy"]:
        lines.append("  NOTE: non-default censoring policy (sensitivity analysis), see roles above")
    table = fit_table(["stop reason", "count", "role"], rows, wide=wide)
    return "\n".join(["Termination audit", table, *_prose(lines)])


def _coverage_text(report: dict[str, Any]) -> str | None:
    """Per predictor, the working-sample runs it scores (the score table's cen-simple `scored`); the
    skip reasons are counted over the whole file, and say so."""
    skipped = [c for c in report["coverage"] if c["skipped"]]
    if not skipped:
        return None
    working, total = report["audit"]["working_sample"], report["audit"]["n_trajectories"]
    scored = {r["predictor"]: r["n"] for r in report["scores"] if r["censoring"] == "simple"}
    lines = ["Skipped trajectories (the missing-forecast policy scores no step of them for that predictor)"]
    for c in skipped:
        n = scored.get(c["predictor"], 0)
        reasons = ", ".join(f"{k} {v}" for k, v in c["skipped"].items())
        lines.append(
            f"  {c['predictor']}: scored {n} of {working} working-sample runs, {working - n} not "
            f"(reasons over all {total} runs in the file: {reasons})"
        )
    return "\n".join(_prose(lines))


def _key_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The key columns of `rows`: predictor, and rule / weights only where they vary (else the title names them)."""
    return ["predictor", *(k for k in ("rule", "weights") if len({r[k] for r in rows}) > 1)]


def _ci(row: dict[str, Any]) -> str:
    return f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]" if row["ci_low"] is not None else "-"


def _scores_text(report: dict[str, Any], wide: bool) -> str:
    modes = list(dict.fromkeys(r["censoring"] for r in report["scores"]))
    by_key: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in report["scores"]:
        by_key.setdefault((r["predictor"], r["rule"], r["weights"]), {})[r["censoring"]] = r
    title = "TPS, mean [95% bootstrap CI] (reward-oriented: higher is better)"
    if wide:
        rows = [
            [*key, *(f"{fmt_ci(c[m]['mean'], c[m]['ci_low'], c[m]['ci_high'])}  scored={c[m]['n']}" for m in modes)]
            for key, c in by_key.items()
        ]
        table = render_table(["predictor", "rule", "weights", *(_MODE_TITLES[m] for m in modes)], rows)
    else:  # one row per evaluator keeps the table narrow; a stream's evaluators stay adjacent
        keys = _key_columns(report["scores"])
        rows = []
        for cells in by_key.values():
            for m in modes:
                c = cells[m]
                rows.append([*(c[k] for k in keys), _MODE_SHORT[m], fmt(c["mean"]), _ci(c), str(c["n"])])
        table = fit_table([*keys, "evaluator", "mean", "95% CI", "scored"], rows)
        fixed = [f"{k} {report['scores'][0][k]}" for k in ("rule", "weights") if k not in keys]
        if fixed:
            title = f"TPS, mean and 95% bootstrap CI (higher is better; {', '.join(fixed)})"
    missing = {r["predictor"]: r["n_missing_q_z"] for r in report["scores"] if r.get("n_missing_q_z")}
    notes = [f"  cen-exact for {pred} leaves out {k} censored trajectories without q_z" for pred, k in missing.items()]
    return "\n".join([title, table, *_prose(notes)])


def _deltas_text(report: dict[str, Any], wide: bool) -> str:
    title = "Delta_practice: censored extension minus complete-only (paired bootstrap)"
    deltas = report["deltas"]
    if wide:
        rows = [[d["predictor"], d["rule"], d["weights"], d["comparison"], *delta_cells(d)] for d in deltas]
        headers = ["predictor", "rule", "weights", "comparison", "delta [95% CI]", "delta/SE"]
        return "\n".join([title, render_table(headers, rows)])
    keys = _key_columns(deltas)
    rows = [
        [*(d[k] for k in keys), "cen-" + d["comparison"].split(" - ")[0], fmt(d["delta"]), _ci(d), fmt(d["z"], 3)]
        for d in deltas
    ]
    return "\n".join([title, fit_table([*keys, "evaluator", "delta", "95% CI", "delta/SE"], rows)])


def _diagnostics_text(report: dict[str, Any], wide: bool) -> str:
    cols = ["auroc", "auprc", "aurc", "t_ece", "t_brier"]
    rows = [[d["predictor"], str(d["n"]), *(fmt(d[c], 3) for c in cols)] for d in report["diagnostics"]]
    scalar = [
        [s["predictor"], s["aggregator"], str(s["n"]), *(fmt(s[c], 3) for c in cols)]
        for s in report["scalar_predictors"]
        if s["aggregator"] != "phi_w"
    ]
    head = ["AUROC^", "AUPRC^", "AURC_v", "T-ECE_v", "T-Brier_v"]
    intro = [
        "Diagnostics on complete trajectories (^ higher is better, _v lower is better)",
        f"  scalar summary of a run: {report['settings']['diagnostic_summary']}; AUROC/AUPRC with failure "
        "as the positive class",
    ]
    return "\n".join(
        [
            *_prose(intro),
            fit_table(["predictor", "n", *head], rows, wide=wide),
            "",
            "Scalar AUQ aggregators (not TPS inputs: they collapse the trace)",
            fit_table(["predictor", "aggregator", "n", *head], scalar, wide=wide),
        ]
    )


def _recalibration_text(report: dict[str, Any], wide: bool) -> str | None:
    if not report.get("recalibration"):
        return None
    cal = report["settings"]["calibration"]
    rows = [
        [r["predictor"], r["recalibrated"], c["statistic"], *delta_cells(c)]
        for r in report["recalibration"]
        for c in r["comparisons"]
    ]
    intro = [
        f"Recalibration: {cal['method']}, fitted with {cal['schedule']} step weights; "
        "recalibrated minus raw (paired bootstrap)",
        "  CI conditional on the fitted maps: they are not refitted in each replicate, so it covers the",
        "  effect of these maps, not the population effect of fitting Platt scaling (narrower than that;",
        "  `tps-tracer calibrate --refit-maps` refits them per replicate)",
    ]
    headers = ["predictor", "recalibrated", "statistic", "delta [95% CI]", "delta/SE"]
    notes = []
    if cal.get("schedule_mismatch"):
        notes.append(
            f"  WARNING: the calibrator was fitted with {cal['schedule']} step weights, not the evaluated "
            f"{report['settings']['weights'][0]}; refit it with matching weights (paper, Appendix Calibration)"
        )
    fallbacks = [
        f"{p} (half {d['fit_on_half']})" for p, split in cal.get("splits", {}).items() for d in split if d["fallback"]
    ]
    if fallbacks:
        notes.append("  monotone fallback (slope < 0 -> constant base rate): " + ", ".join(fallbacks))
    return "\n".join([*_prose(intro), fit_table(headers, rows, wide=wide), *_prose(notes)])


def _q_z_clause(audit: dict[str, Any]) -> str:
    """What cen-exact rests on, from the audit's counts (never a claim the file does not support)."""
    censored, with_q = audit["roles"]["censored"], audit["censored_with_q_z"]
    if censored == 0:
        return "no run in the working sample was censored, so the censored extensions equal complete-only."
    if with_q == 0:
        return (
            "no censored run carries q_z, so there are no cen-exact rows (estimate q_z with `tps-tracer "
            "censoring`, docs/resume-and-budgets.md)."
        )
    if with_q < censored:
        return (
            f"cen-exact uses the q_z recorded in the file for {with_q} of {censored} censored runs and leaves "
            "the others out."
        )
    return f"cen-exact uses the q_z recorded in the file for all {censored} censored runs."


def _disclosure(report: dict[str, Any]) -> str:
    s, audit = report["settings"], report["audit"]
    cal = s["calibration"]
    pre = [c["predictor"] for c in report["coverage"] if c["predictor"].endswith(("+platt", "+cal"))]
    if cal["method"] == "raw" and pre:
        how = f"no recalibration here, but {', '.join(pre)} arrived recalibrated in the file; the others are raw; "
    elif cal["method"] == "raw":
        how = "forecasts evaluated raw (no recalibration); "
    else:
        how = f"predictors named '+platt' are recalibrated ({cal['method']}), the others are raw; "
    base = s["base_rate"]
    as_censored = [r for r, role in audit["role_of"].items() if role == "censored"]
    excluded = [r for r, role in audit["role_of"].items() if role == "excluded" and audit["stop_reasons"].get(r)]
    return (
        "Disclosure: "
        + how
        + (f"base_rate is the constant reference F_t = {base:.4f}; " if base is not None else "")
        + f"{' and '.join(as_censored) or 'no'} stops are treated as administrative (non-informative) censoring"
        + (f", informative stops ({', '.join(excluded)}) are excluded" if excluded else "")
        + "; cen-simple is the pessimistic q_Z~0 approximation; "
        + _q_z_clause(audit)
    )


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _missing_text(block: dict[str, Any] | None, wide: bool) -> str | None:
    """Per predictor: steps without a forecast, runs affected, cost, success with / without a gap."""
    if not block or not any(g["missing_steps"] for g in block["predictors"].values()):
        return None
    rows = [
        [name, f"{g['missing_steps']} / {g['steps']}", _share(g["missing_step_share"])]
        + [f"{g['runs_affected']} / {g['runs']}", _share(g["runs_affected_share"]), str(g.get("runs_silent", 0))]
        + [fmt(g["cost"]) if g["cost"] is not None else "n/a"]
        + [_share(g[k]) for k in ("success_rate_affected", "success_rate_unaffected")]
        for name, g in block["predictors"].items()
    ]
    head = ["predictor", "steps missing", "% steps", "runs hit", "% runs", "silent", "cost", "success hit", "rest"]
    notes = [
        f"  cost: {block['cost']}",
        "  silent: runs hit that state the predictor at no step (under carry-forward scored at 0.5 throughout)",
        "  success hit / rest: success rate of complete runs with a gap / without one",
    ]
    return "\n".join(
        [
            f"Steps without a forecast: scored as {block['policy']} ({block['policy_note']})",
            fit_table(head, rows, wide=wide),
            *_prose(notes),
        ]
    )


def _log_clipped_text(clipped: dict[str, Any] | None) -> str | None:
    if not clipped or not clipped["total"]:
        return None
    eps = clipped["eps"]
    counts = ", ".join(f"{name} {n}" for name, n in clipped["forecasts"].items() if n)
    line = (
        f"  log rule: forecasts of 0 or 1 clipped to [{eps:g}, 1-{eps:g}]: {counts} "
        f"(one on a run that went the other way scores log({eps:g}) = {math.log(eps):.1f} times its step weight)"
    )
    return "\n".join(_prose([line]))


def render_report(report: dict[str, Any], source: str, wide: bool = False, legend: bool = True) -> str:
    """The text report; legend=False leaves the legend to the caller (`report --by`: one for all groups)."""
    s = report["settings"]
    header = [
        f"TPS report: {source}",
        f"  {report['audit']['n_trajectories']} trajectories; rules {', '.join(s['rules'])}; "
        f"weights {', '.join(s['weights'])}; {s['bootstrap']} bootstrap replicates (seed {s['seed']})",
    ]
    set_aside = report.get("input", {}).get("set_aside")  # lines read but not scored (records/limits.py)
    aside = ["Lines set aside (not scored)"]
    aside += [f"  {kind}: {v['count']} (first: {v['first']})" for kind, v in (set_aside or {}).items()]
    parts = [
        "\n".join(_prose(header)),
        _audit_text(report["audit"], wide),
        "\n".join(_prose(aside)) if set_aside else None,
        _coverage_text(report),
        render_skipped(report.get("skipped_predictors", [])),
        _missing_text(report.get("missing_forecasts"), wide),
        _scores_text(report, wide),
        _log_clipped_text(report.get("log_clipped")),
        _deltas_text(report, wide),
        _recalibration_text(report, wide),
        _diagnostics_text(report, wide),
        "\n".join(_prose([_disclosure(report)])),
        "\n".join(legend_lines([report])) if legend else None,
    ]
    return "\n\n".join(p for p in parts if p) + "\n"
