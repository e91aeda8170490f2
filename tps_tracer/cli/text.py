"""What the command line prints for a person: tables, wrapped prose, the report's text and its legend,
and a progress line for long reads.

A report (see tps_tracer.evaluation.report) renders so that by default every line fits in WIDTH
(100) columns: the score tables have one row per evaluator (complete-only, cen-simple, cen-exact)
instead of one column each, a column whose value is the same on every row (one rule, one weight
schedule) is named in the header line instead, prose is wrapped, and a table that still does not
fit becomes one block per row. `wide=True` (`report --wide`) prints the side-by-side tables of
earlier versions. A legend of every printed term closes the report: only terms that appear in the
report are listed (a report without cen-exact rows does not explain cen-exact), so the legend stays
short and true; docs/report-terms.md is the long form of the same list.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tps_tracer.records.reading import Chunk

# Terminal reports stay within this many columns unless the user asks for wide tables (--wide).
WIDTH = 100


def fmt(x: float | None, digits: int = 4) -> str:
    """A number with `digits` significant digits; '-' for missing."""
    if x is None:
        return "-"
    return f"{x:.{digits}g}"


def fmt_ci(mean: float | None, lo: float | None, hi: float | None) -> str:
    return f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def _numeric(cell: str) -> bool:
    return bool(cell) and (cell[0].isdigit() or cell[0] in "-+.")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Right-align columns whose cells are all numbers (or intervals), left-align text columns."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = [i > 0 and all(_numeric(r[i]) for r in cells[1:]) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cells):
        parts = [c.rjust(w) if ra else c.ljust(w) for c, w, ra in zip(r, widths, right, strict=True)]
        lines.append(indent + "  ".join(parts).rstrip())
        if k == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def wrap(text: str, prefix: str = "", width: int = WIDTH) -> list[str]:
    """One line of prose wrapped to `width`; continuation lines indent two more than `prefix`.

    Words are never split at hyphens (paths, predictor names and 'complete-only' stay whole);
    a single word longer than the width (a long path) is broken only if it must be."""
    return textwrap.wrap(
        text, width, initial_indent=prefix, subsequent_indent=" " * (len(prefix) + 2), break_on_hyphens=False
    ) or [prefix.rstrip()]


def fit_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ", width: int | None = WIDTH
) -> str:
    """`render_table`, or, when a line would pass `width` (long predictor names, many columns),
    the same cells as one block per row (first cell, then 'header: value' lines), so no line
    of a report is cut or wrapped mid-table. width=None: always the table (`--wide`)."""
    table = render_table(headers, rows, indent)
    if width is None or max((len(line) for line in table.splitlines()), default=0) <= width:
        return table
    lines: list[str] = []
    for r in rows:
        lines += wrap(f"{headers[0]}: {r[0]}", indent, width)
        for h, c in zip(headers[1:], r[1:], strict=True):
            lines += wrap(f"{h}: {c}", indent + "    ", width)
    return "\n".join(lines)


def render_skipped(skipped: Sequence[dict[str, str]]) -> str | None:
    """The 'Skipped predictors' note of every command (None when nothing was skipped)."""
    if not skipped:
        return None
    lines = ["Skipped predictors (no usable data for this command; the rest is unaffected)"]
    for s in skipped:
        lines += wrap(f"{s['predictor']}: {s['reason']}", "  ")
    return "\n".join(lines)


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


def _terms(report: dict[str, Any]) -> dict[str, str]:
    """Term -> explanation for one report, in reading order."""
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
    t["working sample"] = "the runs scored: complete (clean stop, outcome known) plus censored (stopped by the budget)"
    t["censoring rate"] = "censored runs as a share of the working sample"
    t["excluded"] = "runs that stopped for an informative reason (parse error, tool error, ...): not scored"
    t["complete-only"] = "TPS over complete runs only; drops the budget-stopped runs (survivor bias)"
    t["cen-simple (q_Z~0)"] = (
        "censored TPS that scores a budget-stopped run as if it would have failed (q_Z ~ 0); pessimistic "
        "when such runs could still succeed"
    )
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
    t["Delta_practice"] = (
        "censored extension minus complete-only for the same stream and rule, paired (same resamples): how "
        "much dropping the budget-stopped runs moves the score; not a better/worse direction"
    )
    t["delta/SE"] = "the difference over its bootstrap standard error; beyond about +-2 it is unlikely to be noise"
    if "base_rate" in preds:
        t["base_rate"] = (
            "the constant forecast F_t = share of successes among complete runs: a stream below it "
            "forecasts worse than knowing nothing about the run"
        )
    if any(p.endswith("+platt") for p in preds):
        t["+platt"] = "a stream recalibrated by Platt scaling (the disclosure says where it was fitted)"
    if report.get("recalibration"):
        t["recalibrated minus raw"] = "paired difference of a statistic after and before recalibration"
    t["AUROC^ / AUPRC^"] = (
        "how well a run's scalar confidence ranks failures above successes (failure is the positive class); "
        "0.5 / the failure rate is chance; higher is better (^)"
    )
    t["AURC_v"] = (
        "area under the risk-coverage curve: error rate when keeping the most confident runs; lower is better (_v)"
    )
    t["T-ECE_v"] = (
        "trajectory expected calibration error over quantile bins of the scalar confidence; lower is better (_v)"
    )
    t["T-Brier_v"] = "mean (confidence - outcome)^2 per run; lower is better (_v)"
    t["phi_w"] = (
        "the scalar confidence of a run used by the diagnostics: its forecasts averaged with step weights, "
        f"here {s['diagnostic_summary']}"
    )
    aggs = {a["aggregator"] for a in report.get("scalar_predictors", [])}
    for name, text in _AGGREGATORS.items():
        if name in aggs:
            t[name] = text
    return t


def legend_lines(reports: Iterable[dict[str, Any]], width: int = WIDTH) -> list[str]:
    """The 'How to read this report' section for one or more reports (terms merged, first seen first)."""
    terms: dict[str, str] = {}
    for rep in reports:
        for k, v in _terms(rep).items():
            terms.setdefault(k, v)
    lines = ["How to read this report (terms; docs/report-terms.md has the long form)"]
    for term, text in terms.items():
        lines += wrap(f"{term}: {text}", "  ", width)
    return lines


_MODE_TITLES = {
    "complete-only": "complete-only",
    "simple": "cen-simple (q_Z~0)",
    "exact": "cen-exact (q_z)",
}
_MODE_SHORT = {"complete-only": "complete-only", "simple": "cen-simple", "exact": "cen-exact"}


def _width(wide: bool) -> int | None:
    return None if wide else WIDTH


def _prose(lines: list[str]) -> list[str]:
    """Prose lines wrapped to WIDTH (also under --wide, which widens tables only)."""
    out: list[str] = []
    for line in lines:
        body = line.lstrip(" ")
        out += wrap(body, line[: len(line) - len(body)])
    return out


PENDING_ROLE = "pending: not scored yet"


def audit_rows(audit: dict[str, Any]) -> list[list[str]]:
    """(stop reason, count, role) rows that add up to the lines below them: clean stops still
    waiting for their outcome get a row of their own, out of the clean row and its role."""
    rows = []
    pending = audit["pending_outcome"]
    for reason, count in audit["stop_reasons"].items():
        if reason == "clean" and pending:
            if count - pending:
                rows.append(["clean, outcome known", str(count - pending), audit["role_of"][reason]])
            rows.append(["clean, outcome pending", str(pending), PENDING_ROLE])
        elif count:
            rows.append([reason, str(count), audit["role_of"][reason]])
    return rows


def _audit_text(audit: dict[str, Any], wide: bool) -> str:
    rows = audit_rows(audit)
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
    if audit["pending_outcome"]:
        lines.append(f"  clean stops still waiting for their outcome (not scored): {audit['pending_outcome']}")
    if audit["outcome_ignored_on_unscored"]:
        lines.append(f"  outcomes given on non-clean stops (ignored): {audit['outcome_ignored_on_unscored']}")
    if not audit["default_policy"]:
        lines.append("  NOTE: non-default censoring policy (sensitivity analysis), see roles above")
    table = fit_table(["stop reason", "count", "role"], rows, width=_width(wide))
    return "\n".join(["Termination audit", table, *_prose(lines)])


def _coverage_text(report: dict[str, Any]) -> str | None:
    """Per predictor, the runs it scores of the working sample, in the words of the gate's coverage
    line and counted as the score table's `scored` column (its cen-simple row); the skip reasons are
    counted over the whole file (excluded runs too), and say so."""
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


def _varying(rows: list[dict[str, Any]], key: str) -> bool:
    """False when every row has the same value (one rule, one schedule): the header line names it."""
    return len({r[key] for r in rows}) > 1


def _scores_text(report: dict[str, Any], wide: bool) -> str:
    modes = list(dict.fromkeys(r["censoring"] for r in report["scores"]))
    by_key: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in report["scores"]:
        by_key.setdefault((r["predictor"], r["rule"], r["weights"]), {})[r["censoring"]] = r
    title = "TPS, mean [95% bootstrap CI] (reward-oriented: higher is better)"
    if wide:
        rows = []
        for (pred, rule, weights), cells in by_key.items():
            row = [pred, rule, weights]
            for m in modes:
                c = cells[m]
                row.append(f"{fmt_ci(c['mean'], c['ci_low'], c['ci_high'])}  scored={c['n']}")
            rows.append(row)
        table = render_table(["predictor", "rule", "weights", *(_MODE_TITLES[m] for m in modes)], rows)
    else:
        # One row per evaluator keeps the table narrow; a stream's evaluators stay adjacent.
        show_rule, show_w = _varying(report["scores"], "rule"), _varying(report["scores"], "weights")
        rows = []
        for (pred, rule, weights), cells in by_key.items():
            for m in modes:
                c = cells[m]
                ci = f"[{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]" if c["ci_low"] is not None else "-"
                keys = [pred, *([rule] if show_rule else []), *([weights] if show_w else [])]
                rows.append([*keys, _MODE_SHORT[m], fmt(c["mean"]), ci, str(c["n"])])
        headers = ["predictor", *(["rule"] if show_rule else []), *(["weights"] if show_w else [])]
        table = fit_table([*headers, "evaluator", "mean", "95% CI", "scored"], rows)
        if not (show_rule and show_w):
            fixed = [f"rule {report['scores'][0]['rule']}"] * (not show_rule)
            fixed += [f"weights {report['scores'][0]['weights']}"] * (not show_w)
            title = f"TPS, mean and 95% bootstrap CI (higher is better; {', '.join(fixed)})"
    out = [title, table]
    missing = {r["predictor"]: r["n_missing_q_z"] for r in report["scores"] if r.get("n_missing_q_z")}
    notes = [f"  cen-exact for {pred} leaves out {k} censored trajectories without q_z" for pred, k in missing.items()]
    return "\n".join(out + _prose(notes))


def _deltas_text(report: dict[str, Any], wide: bool) -> str:
    title = "Delta_practice: censored extension minus complete-only (paired bootstrap)"
    if wide:
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
        headers = ["predictor", "rule", "weights", "comparison", "delta [95% CI]", "delta/SE"]
        return "\n".join([title, render_table(headers, rows)])
    show_rule, show_w = _varying(report["deltas"], "rule"), _varying(report["deltas"], "weights")
    rows = []
    for d in report["deltas"]:
        keys = [d["predictor"], *([d["rule"]] if show_rule else []), *([d["weights"]] if show_w else [])]
        ci = f"[{fmt(d['ci_low'])}, {fmt(d['ci_high'])}]" if d["ci_low"] is not None else "-"
        rows.append([*keys, "cen-" + d["comparison"].split(" - ")[0], fmt(d["delta"]), ci, fmt(d["z"], 3)])
    headers = ["predictor", *(["rule"] if show_rule else []), *(["weights"] if show_w else [])]
    headers += ["evaluator", "delta", "95% CI", "delta/SE"]
    return "\n".join([title, fit_table(headers, rows)])


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
            fit_table(["predictor", "n", *head], rows, width=_width(wide)),
            "",
            "Scalar AUQ aggregators (not TPS inputs: they collapse the trace)",
            fit_table(["predictor", "aggregator", "n", *head], scalar, width=_width(wide)),
        ]
    )


def _recalibration_text(report: dict[str, Any], wide: bool) -> str | None:
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
    intro = [
        f"Recalibration: {cal['method']}, fitted with {cal['schedule']} step weights; "
        "recalibrated minus raw (paired bootstrap)",
        "  CI conditional on the fitted maps: they are not refitted in each replicate, so it covers the",
        "  effect of these maps, not the population effect of fitting Platt scaling (narrower than that;",
        "  `tps-tracer calibrate --refit-maps` refits them per replicate)",
    ]
    headers = ["predictor", "recalibrated", "statistic", "delta [95% CI]", "delta/SE"]
    lines = [*_prose(intro), fit_table(headers, rows, width=_width(wide))]
    notes = []
    if cal.get("schedule_mismatch"):
        notes.append(
            f"  WARNING: the calibrator was fitted with {cal['schedule']} step weights, not the evaluated "
            f"{report['settings']['weights'][0]}; refit it with matching weights (paper, Appendix Calibration)"
        )
    if fallbacks:
        notes.append("  monotone fallback (slope < 0 -> constant base rate): " + ", ".join(fallbacks))
    return "\n".join(lines + _prose(notes))


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
    s = report["settings"]
    audit = report["audit"]
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


def _missing_text(block: dict[str, Any] | None, wide: bool) -> str | None:
    """Per predictor: steps without a forecast, runs affected, cost, success with / without a gap."""
    if not block or not any(g["missing_steps"] for g in block["predictors"].values()):
        return None
    rows = [
        [
            name,
            f"{g['missing_steps']} / {g['steps']}",
            _share_text(g["missing_step_share"]),
            f"{g['runs_affected']} / {g['runs']}",
            _share_text(g["runs_affected_share"]),
            str(g.get("runs_silent", 0)),
            fmt(g["cost"]) if g["cost"] is not None else "n/a",
            _share_text(g["success_rate_affected"]),
            _share_text(g["success_rate_unaffected"]),
        ]
        for name, g in block["predictors"].items()
    ]
    head = ["predictor", "steps missing", "% steps", "runs hit", "% runs", "silent", "cost", "success hit", "rest"]
    lines = [
        f"Steps without a forecast: scored as {block['policy']} ({block['policy_note']})",
        fit_table(head, rows, width=_width(wide)),
    ]
    notes = [
        f"  cost: {block['cost']}",
        "  silent: runs hit that state the predictor at no step (under carry-forward scored at 0.5 throughout)",
        "  success hit / rest: success rate of complete runs with a gap / without one",
    ]
    return "\n".join([lines[0], lines[1], *_prose(notes)])


def _share_text(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def log_clipped_line(clipped: dict[str, Any] | None) -> str | None:
    """The line saying how many forecasts the log rule clipped (None without a log rule or a clip)."""
    if not clipped or not clipped["total"]:
        return None
    eps = clipped["eps"]
    counts = ", ".join(f"{name} {n}" for name, n in clipped["forecasts"].items() if n)
    return (
        f"  log rule: forecasts of 0 or 1 clipped to [{eps:g}, 1-{eps:g}]: {counts} "
        f"(one on a run that went the other way scores log({eps:g}) = {math.log(eps):.1f} times its step weight)"
    )


def render_report(report: dict[str, Any], source: str, wide: bool = False, legend: bool = True) -> str:
    """The text report; wide=True keeps the side-by-side tables; legend=False leaves the legend
    to the caller (`report --by` prints one legend for all groups)."""
    s = report["settings"]
    header = [
        f"TPS report: {source}",
        f"  {report['audit']['n_trajectories']} trajectories; rules {', '.join(s['rules'])}; "
        f"weights {', '.join(s['weights'])}; {s['bootstrap']} bootstrap replicates (seed {s['seed']})",
    ]
    parts = ["\n".join(_prose(header)), _audit_text(report["audit"], wide)]
    set_aside = report.get("input", {}).get("set_aside")
    if set_aside:  # lines read but not scored (records/limits.py)
        lines = ["Lines set aside (not scored)"]
        lines += [f"  {kind}: {v['count']} (first: {v['first']})" for kind, v in set_aside.items()]
        parts.append("\n".join(_prose(lines)))
    cov = _coverage_text(report)
    if cov:
        parts.append(cov)
    skipped = render_skipped(report.get("skipped_predictors", []))
    if skipped:
        parts.append(skipped)
    gaps = _missing_text(report.get("missing_forecasts"), wide)
    if gaps:
        parts.append(gaps)
    parts.append(_scores_text(report, wide))
    clipped = log_clipped_line(report.get("log_clipped"))
    if clipped:
        parts.append("\n".join(_prose([clipped])))
    parts.append(_deltas_text(report, wide))
    recal = _recalibration_text(report, wide)
    if recal:
        parts.append(recal)
    parts += [_diagnostics_text(report, wide), "\n".join(_prose([_disclosure(report)]))]
    if legend:
        parts.append("\n".join(legend_lines([report])))
    return "\n\n".join(parts) + "\n"


# A progress line on stderr for long reads, only when stderr is a terminal.
SHOW_AFTER_SECONDS = 2.0


def progress_for(path: str | os.PathLike[str], stream: TextIO | None = None) -> Callable[[Chunk], None] | None:
    """A chunk callback that draws `reading FILE  NN%` after a couple of seconds, or None off a TTY."""
    out = stream if stream is not None else sys.stderr
    if not out.isatty():
        return None
    start = time.monotonic()

    def update(chunk: Chunk) -> None:
        if time.monotonic() - start < SHOW_AFTER_SECONDS:
            return
        share = chunk.done / chunk.size if chunk.size else 1.0
        out.write(f"\r reading {chunk.source}  {100 * share:5.1f}%")
        if share >= 1.0:
            out.write("\n")
        out.flush()

    return update
