"""`tps-tracer gate`: exit 0 pass, 1 fail, 2 bad input, an unusable sample or cannot decide. Settings: flags over a
`--config` TOML `[gate]` table (flag names, dashes as underscores); rendered as a terminal table or CI Markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tps_tracer import output
from tps_tracer.cli.main import WIDTH, CliError, censored_reasons, fit_table, fmt, progress_for, writing
from tps_tracer.evaluation.gate import (
    NON_INFERIORITY,
    SNAPSHOT_REPLICATES,
    GateCriteria,
    GateInputError,
    GateOptionError,
    describe_test,
    evaluate_gate_on_report,
    gate_paths,
    power_text,
    skip_reasons,
)
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import CensoringPolicy
from tps_tracer.records.limits import KINDS

# [gate] key and flag -> (type, GateCriteria field or None)
_SETTINGS: dict[str, tuple[type, str | None]] = {
    key: (kind, {"min": "min_score", "baseline": None, "treat_as_censored": None}.get(key, key))
    for kind, keys in (
        (str, "predictor rule weights censoring test missing baseline treat_as_censored"),
        (float, "min margin max_excluded_share max_skipped_share max_flip"),
        (int, "min_n bootstrap seed"),
        (bool, "vs_base_rate allow_capture_loss"),
    )
    for key in keys.split()
}

_FIELD_OF = {key: field for key, (_, field) in _SETTINGS.items() if field is not None}


def _read(flag: str, path: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, or invalid TOML / JSON
        raise GateInputError(f"cannot read {flag} {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if args.config:
        document = _read("--config", args.config, tomllib.loads)
        table = document.get("gate")
        if not isinstance(table, dict):  # settings outside [gate] would otherwise be ignored silently
            found = ", ".join(document) or "nothing"
            raise GateInputError(f"{args.config}: no [gate] table (found: {found}); put the settings under [gate]")
        for key, value in table.items():
            key = key.replace("-", "_")
            if key not in _SETTINGS:
                raise GateInputError(f"{args.config}: unknown setting {key!r} in [gate]")
            kind = _SETTINGS[key][0]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise GateInputError(f"{args.config}: {key} must be a {kind.__name__}, got {value!r}")
            merged[key] = value
    flags = {key: value for key in _SETTINGS if (value := getattr(args, key, None)) is not None}
    return merged | flags


def _criteria(settings: dict[str, Any]) -> GateCriteria:
    crit = GateCriteria(**{_FIELD_OF[key]: value for key, value in settings.items() if key in _FIELD_OF})
    reasons = censored_reasons(settings.get("treat_as_censored"))
    if reasons:
        crit.policy = CensoringPolicy.treating_as_censored(reasons)
    return crit


def _gate_on_ray(args: argparse.Namespace, settings: dict[str, Any], crit: GateCriteria) -> dict[str, Any]:
    """On Ray: per-trajectory rows for the checks that resample them (--baseline, --vs-base-rate,
    --max-flip), else the report, gated like a snapshot."""
    if len(args.files) != 1:
        raise GateInputError("--engine ray gates one file or directory of shards")
    from tps_tracer.distributed import gate_path_ray, report_from_path_ray  # imports Ray when called

    try:
        if settings.get("baseline") or crit.vs_base_rate or crit.max_flip is not None:
            result = gate_path_ray(args.files[0], crit, settings.get("baseline"), args.address)
            result["notes"] = ["per-trajectory rows computed with --engine ray", *result["notes"]]
            return result
        crit.validate(False)
        options = ReportOptions(
            predictors=[crit.predictor] if crit.predictor else None,
            rules=[crit.rule],
            schedules=[crit.weights],
            base_rate=False,
            **{name: getattr(crit, name) for name in ("bootstrap", "seed", "policy", "missing")},  # same names
        )
        report = report_from_path_ray(args.files[0], options, args.address)
    except ImportError as exc:
        raise GateInputError(f"--engine ray needs the 'ray' extra (Ray Data): {exc}") from None
    result = evaluate_gate_on_report(report, crit)
    # The report's audit gives the same censoring warnings as the local engine (evaluate_gate_on_report).
    result["notes"] = ["gated from the report computed with --engine ray", *result["notes"][1:]]
    if result.get("coverage"):  # its replicates are this gate's --bootstrap, not a saved snapshot's
        result["coverage"]["replicates_source"] = "the report computed with --engine ray (--bootstrap)"
    return result


# GateCriteria field -> its flag (a GateOptionError names the field).
_FLAG_OF = {field: "--" + key.replace("_", "-") for key, field in _FIELD_OF.items()}


def cmd_gate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    crit = _criteria(settings)
    try:  # bad values fail before any file is read, by flag
        crit.check_values()
    except GateOptionError as exc:
        raise CliError(f"{_FLAG_OF.get(exc.field, exc.field)}: {exc.detail}") from None
    if args.snapshot:
        if args.files or settings.get("baseline"):
            raise GateInputError("give either record files or --snapshot, and no --baseline with a snapshot")
        result = evaluate_gate_on_report(_read("--snapshot", args.snapshot, json.loads), crit)
    elif not args.files:
        raise GateInputError("give candidate trajectory file(s) or --snapshot")
    elif args.engine == "ray":
        result = _gate_on_ray(args, settings, crit)
    elif args.address:
        raise GateInputError("--address needs --engine ray")
    else:
        result = gate_paths(args.files, crit, settings.get("baseline"), progress=progress_for(args.files[0]))
    source = args.snapshot or ", ".join(args.files)
    if args.markdown:  # appended atomically (old summary + this one, then one rename)
        with writing("--markdown", args.markdown):
            output.write_text(args.markdown, render_gate_markdown(result, source), append=True)
    sys.stdout.write(output.dumps(result) if args.json else render_gate_text(result, source))
    return int(result["exit_code"])


# -- the human renderings --

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
SIDE_TERM = "side: the run a row is about: candidate, baseline, both (the difference), all (every decision)"
UNDECIDED = (
    "undecided: no verdict either way at this sample: a FAIL here would hit an unchanged candidate more "
    "often than the 5% false-alarm bound, or the verdict flips too often (CANNOT DECIDE, exit 2)"
)


_PASS_IF = {
    "absolute": "CI low >= ",
    "excluded_share": "share <= ",
    "skipped_share": "share <= ",
    "stability": "P(flip) <= ",
}


def _pass_if(c: dict[str, Any]) -> str:
    name, thr = c["name"], c.get("threshold")
    if c.get("test") and thr is not None:
        return f"CI {'low' if c['test'] == NON_INFERIORITY else 'high'} >= {fmt(float(thr) + 0.0)}"  # + 0.0: no "-0"
    if name in ("sample_size", "baseline_size"):
        return f"n >= {thr}"
    return _PASS_IF[name] + fmt(thr) if name in _PASS_IF else "see reasons"


def _two_sided(result: dict[str, Any]) -> bool:
    return any(c.get("side") == "baseline" for c in result["checks"])


def _table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The check table's headers and rows; a `side` column when a baseline is gated."""
    side = _two_sided(result)
    rows = []
    for c in result["checks"]:
        ci = f"[{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]" if c.get("ci_low") is not None else ""
        flip, est = c.get("flip_probability"), c.get("estimate")
        rows.append(
            [
                c["name"],
                *([c.get("side", "")] if side else []),
                "pass" if c["passed"] else ("undecided" if c.get("undecided") else "FAIL"),
                fmt(est) if isinstance(est, float) else ("" if est is None else str(est)),
                ci,
                _pass_if(c),
                "" if flip is None else f"{flip:.3f}",
            ]
        )
    return ([_HEADERS[0], "side", *_HEADERS[1:]] if side else _HEADERS), rows


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def coverage_line(block: dict[str, Any], predictor: str, side: str = "") -> str:
    label = f"coverage ({side})" if side else "coverage"
    parts = [f"{label}: scored {block['gated']} of {block['working_sample']} working-sample runs"]
    n_skipped = sum(block["skipped"].values())
    parts.append(f"no {predictor} forecast: {n_skipped}" + (f" ({skip_reasons(block)})" if n_skipped else ""))
    if block["dropped_by_censoring_mode"]:
        parts.append(f"dropped by the censoring mode: {block['dropped_by_censoring_mode']}")
    parts.append(f"clean runs waiting for an outcome: {block['pending_outcome']}")
    reps = block["replicates"]
    whose = " (the snapshot's)" if block["replicates_source"] == SNAPSHOT_REPLICATES else ""
    parts.append(f"CI from {reps if reps is not None else 'an unknown number of'} bootstrap replicates{whose}")
    return "; ".join(parts)


def missing_line(block: dict[str, Any], predictor: str) -> str | None:
    g = block.get("missing_forecasts")
    if not g or g.get("steps") is None:
        return None
    line = (
        f"steps without a {predictor} forecast: {g['missing_steps']} of {g['steps']} "
        f"({_pct(g['missing_step_share'])}), in {g['runs_affected']} of {g['runs']} runs "
        f"({_pct(g['runs_affected_share'])}"
        + (f", {g['runs_silent']} of them without any" if g.get("runs_silent") else "")
        + f"); scored as {g['policy']}"
    )
    if g["runs_affected"]:
        cost = "n/a" if g["cost"] is None else f"{g['cost']:+.4f}"
        line += (
            f"; cost of missingness {cost}; success rate with a gap "
            f"{_pct(g['success_rate_affected'])}, without {_pct(g['success_rate_unaffected'])}"
        )
    return line


def set_aside_lines(block: dict[str, Any] | None) -> list[str]:
    """Per side, the lines the gate did not judge (a re-run, an empty shard)."""
    lines = []
    for who, side in (("", block or {}), ("baseline: ", (block or {}).get("baseline") or {})):
        if kinds := side.get("set_aside"):
            text = "; ".join(f"{k} {kinds[k]['count']} (first: {kinds[k]['first']})" for k in KINDS if k in kinds)
            lines.append(f"{who}set aside (not scored): {text}")
    return lines


def _headline(result: dict[str, Any]) -> list[str]:
    s = result["score"]
    source = s.get("predictor_source")
    mode = "complete-only" if s.get("censoring") == "complete-only" else f"cen-{s['censoring']}"
    lines = [
        f"gated: TPS {mode} / {s['rule']} / {s['weights']} on {s['predictor']}" + (f" ({source})" if source else "")
    ]
    if s.get("mean") is not None:
        lines.append(f"score: {fmt(s['mean'])} [{fmt(s['ci_low'])}, {fmt(s['ci_high'])}] over {s['n']} scored runs")
    base = (result.get("comparison") or {}).get("baseline_coverage")
    if result.get("coverage"):
        lines.append(coverage_line(result["coverage"], str(s["predictor"]), "candidate" if base else ""))
        gaps = missing_line(result["coverage"], str(s["predictor"]))
        lines += [gaps] if gaps else []
    if base:
        lines.append(coverage_line(base, str(s["predictor"]), "baseline"))
    lines += set_aside_lines(result.get("input"))
    settings = result.get("settings") or {}
    if any(c.get("test") for c in result["checks"]):
        lines.append("test: " + describe_test(settings["test"], float(settings["margin"])))
    return lines


def _messages(result: dict[str, Any]) -> list[tuple[str, str]]:
    two_sided = _two_sided(result)
    failed = [
        f"{c['name']} ({c['side']})" if two_sided else c["name"]
        for c in result["checks"]
        if not c["passed"] and not c.get("undecided")
    ]
    out = [("failed", ", ".join(failed))] if result.get("failed_checks") else []
    out += [(result["verdict"], r) for r in result.get("reasons") or []]
    margin = float((result.get("settings") or {}).get("margin") or 0.0)
    powers = (power_text(c["name"], c["test"], margin, c["power"]) for c in result["checks"] if c.get("power"))
    out += [("power", p) for p in powers if p]
    out += [("warning", w) for w in result["warnings"]]
    return out + [("note", n) for n in result["notes"]]


def _legend(result: dict[str, Any]) -> list[str]:
    term = CENSORING_TERMS.get(result["score"].get("censoring", ""))
    side = [SIDE_TERM] if _two_sided(result) else []
    return [*LEGEND, *side, *([UNDECIDED] if result.get("undecided_checks") else []), *([term] if term else [])]


def _wrap(prefix: str, text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=prefix, subsequent_indent=" " * (len(prefix) + 2))


def render_gate_text(result: dict[str, Any], source: str) -> str:
    lines = _wrap("", f"tps-tracer gate: {result['verdict'].upper()}  ({source})")
    for h in _headline(result):
        lines += _wrap("  ", h)
    lines.append("")
    lines += fit_table(*_table(result), indent="    ").splitlines()  # rows as blocks past WIDTH
    for label, text in _messages(result):
        lines += _wrap("  ", f"{label}: {text}")
    if result["exit_code"] == 2:
        lines.append(f"  no verdict on this sample (exit 2): see the {result['verdict']} reasons above")
    lines.append("  legend:")
    for item in _legend(result):
        lines += _wrap("    ", item)
    return "\n".join(lines) + "\n"


def render_gate_markdown(result: dict[str, Any], source: str) -> str:
    icon = {"pass": "✅", "fail": "❌"}.get(result["verdict"], "⚠️")
    out = [f"## {icon} tps-tracer gate: {result['verdict'].upper()}", "", f"`{source}`", ""]
    out += [f"- {h}" for h in _headline(result)]
    headers, rows = _table(result)
    out += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    out.append("")
    for label, text in _messages(result):
        out.append(
            f"- {text}" if label == "note" else f"- {label}: {text}" if label == "power" else f"- **{label}**: {text}"
        )
    out += ["", "<details><summary>legend</summary>", "", *(f"- {item}" for item in _legend(result)), "", "</details>"]
    return "\n".join(out) + "\n\n"
