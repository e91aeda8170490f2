"""Human renderings of a gate result: a terminal table and a Markdown summary for CI logs."""

from __future__ import annotations

from typing import Any

from tps_tracer.cli.tables import fmt, render_table

_HEADERS = ["check", "result", "estimate", "CI", "threshold", "P(flip)"]


def _rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in result["checks"]:
        ci = f"[{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]" if c.get("ci_low") is not None else ""
        flip = c.get("flip_probability")
        rows.append(
            [
                c["name"],
                "pass" if c["passed"] else "FAIL",
                fmt(c["estimate"]) if isinstance(c["estimate"], float) else str(c["estimate"]),
                ci,
                fmt(c["threshold"]) if isinstance(c["threshold"], float) else str(c["threshold"]),
                "" if flip is None else f"{flip:.3f}",
            ]
        )
    return rows


def _headline(result: dict[str, Any]) -> str:
    s = result["score"]
    return (
        f"TPS {s['censoring']} / {s['rule']} / {s['weights']} for {s['predictor']}: "
        f"{fmt(s['mean'])} [{fmt(s['ci_low'])}, {fmt(s['ci_high'])}] over {s['n']} trajectories"
    )


def render_gate_text(result: dict[str, Any], source: str) -> str:
    verdict = result["verdict"].upper()
    lines = [f"tps-tracer gate: {verdict}  ({source})", "  " + _headline(result), ""]
    lines += ["  " + line for line in render_table(_HEADERS, _rows(result)).splitlines()]
    for w in result["warnings"]:
        lines.append(f"  warning: {w}")
    for n in result["notes"]:
        lines.append(f"  note: {n}")
    if result["verdict"] == "unusable":
        lines.append("  the sample is too small for a CI-based verdict (exit 2)")
    return "\n".join(lines) + "\n"


def render_gate_markdown(result: dict[str, Any], source: str) -> str:
    icon = {"pass": "✅", "fail": "❌", "unusable": "⚠️"}[result["verdict"]]
    out = [f"## {icon} tps-tracer gate: {result['verdict'].upper()}", "", f"`{source}`: {_headline(result)}", ""]
    out.append("| " + " | ".join(_HEADERS) + " |")
    out.append("|" + "---|" * len(_HEADERS))
    for row in _rows(result):
        out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    out.append("")
    for w in result["warnings"]:
        out.append(f"- **warning**: {w}")
    for n in result["notes"]:
        out.append(f"- {n}")
    return "\n".join(out) + "\n\n"
