"""The legend under a text report: every term the report printed, in one line each.

Only terms that appear in the report are listed (a report without cen-exact rows does not
explain cen-exact), so the legend stays short and true. docs/report-terms.md is the long
form of the same list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tps_tracer.cli.tables import WIDTH, wrap

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
    t["mean / 95% CI / n"] = (
        "mean TPS over n runs, and its bootstrap percentile interval (runs resampled with replacement; "
        f"{s['bootstrap']} replicates; '-' when there are none)"
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
