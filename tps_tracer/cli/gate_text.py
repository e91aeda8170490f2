"""Human renderings of a gate result: a terminal table and a Markdown summary for CI logs.

Both read in one pass: what was gated and under which test, a table whose "pass if" column
states each check's condition, the failing checks by name, the power of the comparisons,
warnings, notes, and a legend of every symbol. Terminal lines are at most WIDTH columns.
"""

from __future__ import annotations

import textwrap
from typing import Any

from tps_tracer.cli.tables import WIDTH, fit_table, fmt
from tps_tracer.evaluation.gate import coverage_line, set_aside_lines
from tps_tracer.evaluation.gate_stats import describe_test, power_text, rule_text

_HEADERS = ["check", "result", "estimate", "95% CI", "pass if", "P(flip)"]

CENSORING_TERMS = {
    "simple": "cen-simple: a run stopped by the step budget is scored as if it would fail "
    "(q_Z ~ 0; pessimistic when such runs could still succeed)",
    "exact": "cen-exact: a run stopped by the step budget is scored with its recorded q_z, the "
    "probability it would have succeeded; runs without q_z are left out",
    "complete-only": "complete-only: runs stopped by the step budget are dropped (survivor bias)",
}
LEGEND = [
    "estimate / 95% CI: mean score (absolute) or candidate minus reference (vs_*), with its "
    "bootstrap percentile interval; higher is better",
    "pass if: the condition the check needs; CI low / CI high are the bounds of the 95% CI; "
    "-margin is the tolerated drop",
    "P(flip): share of bootstrap replicates whose own verdict differs from this one (0: robust, "
    "0.5: a coin flip; above 0.2 the verdict is fragile; --max-flip makes it a check)",
]


def _pass_if(c: dict[str, Any], settings: dict[str, Any]) -> str:
    name, thr = c["name"], c.get("threshold")
    if c.get("test") and thr is not None:
        return rule_text(c["test"], -float(thr))
    if name == "absolute":
        return f"CI low >= {fmt(thr)}"
    if name in ("sample_size", "baseline_size"):
        return f"n >= {thr}"
    if name in ("excluded_share", "skipped_share"):
        return f"share <= {fmt(thr)}"
    if name == "stability":
        return f"max P(flip) <= {fmt(thr)}"
    return "see reasons"


def _rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in result["checks"]:
        ci = f"[{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]" if c.get("ci_low") is not None else ""
        flip = c.get("flip_probability")
        est = c.get("estimate")
        rows.append(
            [
                c["name"],
                "pass" if c["passed"] else "FAIL",
                fmt(est) if isinstance(est, float) else ("" if est is None else str(est)),
                ci,
                _pass_if(c, result.get("settings") or {}),
                "" if flip is None else f"{flip:.3f}",
            ]
        )
    return rows


def _headline(result: dict[str, Any]) -> list[str]:
    s = result["score"]
    source = s.get("predictor_source")
    gated = f"gated: TPS cen-{s['censoring']} / {s['rule']} / {s['weights']} on {s['predictor']}"
    if s.get("censoring") == "complete-only":
        gated = f"gated: TPS complete-only / {s['rule']} / {s['weights']} on {s['predictor']}"
    lines = [gated + (f" ({source})" if source else "")]
    if s.get("mean") is not None:
        lines.append(f"score: {fmt(s['mean'])} [{fmt(s['ci_low'])}, {fmt(s['ci_high'])}] over {s['n']} trajectories")
    if result.get("coverage"):  # what the verdict rests on, in every output form
        lines.append(coverage_line(result["coverage"], str(s["predictor"])))
    lines += set_aside_lines(result.get("input"))  # lines the gate did not judge (a re-run, an empty shard)
    settings = result.get("settings") or {}
    if any(c.get("test") for c in result["checks"]):
        lines.append("test: " + describe_test(settings["test"], float(settings["margin"])))
    return lines


def _power_lines(result: dict[str, Any]) -> list[str]:
    out = []
    margin = float((result.get("settings") or {}).get("margin") or 0.0)
    for c in result["checks"]:
        if c.get("power"):
            text = power_text(c["name"], c["test"], margin, c["power"])
            if text:
                out.append(text)
    return out


def _legend(result: dict[str, Any]) -> list[str]:
    term = CENSORING_TERMS.get(result["score"].get("censoring", ""))
    return [*LEGEND, *([term] if term else [])]


def _wrap(prefix: str, text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=prefix, subsequent_indent=" " * (len(prefix) + 2))


def render_gate_text(result: dict[str, Any], source: str) -> str:
    verdict = result["verdict"].upper()
    lines = _wrap("", f"tps-tracer gate: {verdict}  ({source})")
    for h in _headline(result):
        lines += _wrap("  ", h)
    lines.append("")
    lines += fit_table(_HEADERS, _rows(result), indent="    ").splitlines()  # rows as blocks past WIDTH
    failed = result.get("failed_checks") or []
    if failed:
        lines += _wrap("  ", f"failed: {', '.join(failed)}")
    for r in result.get("reasons") or []:
        lines += _wrap("  ", f"unusable: {r}")
    for p in _power_lines(result):
        lines += _wrap("  ", f"power: {p}")
    for w in result["warnings"]:
        lines += _wrap("  ", f"warning: {w}")
    for n in result["notes"]:
        lines += _wrap("  ", f"note: {n}")
    if result["verdict"] == "unusable":
        lines.append("  no verdict on this sample (exit 2): see the unusable reasons above")
    lines.append("  legend:")
    for item in _legend(result):
        lines += _wrap("    ", item)
    return "\n".join(lines) + "\n"


def render_gate_markdown(result: dict[str, Any], source: str) -> str:
    icon = {"pass": "✅", "fail": "❌", "unusable": "⚠️"}[result["verdict"]]
    out = [f"## {icon} tps-tracer gate: {result['verdict'].upper()}", "", f"`{source}`", ""]
    out += [f"- {h}" for h in _headline(result)]
    out += ["", "| " + " | ".join(_HEADERS) + " |", "|" + "---|" * len(_HEADERS)]
    for row in _rows(result):
        out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    out.append("")
    failed = result.get("failed_checks") or []
    if failed:
        out.append(f"- **failed**: {', '.join(failed)}")
    for r in result.get("reasons") or []:
        out.append(f"- **unusable**: {r}")
    for p in _power_lines(result):
        out.append(f"- power: {p}")
    for w in result["warnings"]:
        out.append(f"- **warning**: {w}")
    for n in result["notes"]:
        out.append(f"- {n}")
    out += ["", "<details><summary>legend</summary>", ""]
    out += [f"- {item}" for item in _legend(result)]
    out += ["", "</details>"]
    return "\n".join(out) + "\n\n"
