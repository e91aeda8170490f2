"""`tps-tracer report`: score a trajectory file (JSON Lines, Parquet, a directory of shards)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tps_tracer import strict_json
from tps_tracer.cli.errors import EXIT_OK, CliError, flag, reading
from tps_tracer.cli.text import legend_lines, progress_for, render_report, wrap
from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.report import TooManyGroups, reports_by
from tps_tracer.evaluation.report_options import OptionError, ReportOptions
from tps_tracer.records.stop_reasons import CensoringPolicy, StopReason
from tps_tracer.scoring import parse_rules, parse_schedules

# ReportOptions fields -> the flags that set them (an OptionError names the field).
_FLAG_OF = {
    "predictors": "--predictors",
    "rules": "--rules",
    "schedules": "--weights",
    "bootstrap": "--bootstrap",
    "seed": "--seed",
    "ece_bins": "--ece-bins",
    "calibrate": "--calibrate",
    "calibrator": "--calibrator",
    "missing": "--missing",
}


def _options(args: argparse.Namespace) -> ReportOptions:
    reasons = [r.strip() for r in args.treat_as_censored.split(",") if r.strip()]
    valid = {r.value for r in StopReason}
    bad = [r for r in reasons if r not in valid]
    if bad:
        raise CliError(f"--treat-as-censored: unknown stop reason(s) {', '.join(bad)} (known: {', '.join(valid)})")
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
            predictors=[p.strip() for p in args.predictors.split(",") if p.strip()] if args.predictors else None,
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
        raise CliError(f"{_FLAG_OF.get(exc.field, exc.field)}: {exc.detail}") from None


def _report(path: str, args: argparse.Namespace) -> int:
    options = _options(args)
    if args.by is not None:
        return _report_by(path, args.by, options, args)
    if args.engine == "ray":
        report = _report_on_ray(path, options, args.address)
    else:
        if args.address:
            raise CliError("--address needs --engine ray")
        report = report_from_path(path, options, progress=progress_for(path))
    if args.json:
        sys.stdout.write(strict_json.dumps(report))
    else:
        sys.stdout.write(render_report(report, path, wide=args.wide))
    return EXIT_OK


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
        sys.stdout.write(strict_json.dumps(split))
        return EXIT_OK
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
    return EXIT_OK


def _report_on_ray(path: str, options: ReportOptions, address: str | None) -> dict[str, Any]:
    try:
        from tps_tracer.distributed.ray_engine import report_from_path_ray
    except ImportError as exc:  # pragma: no cover - the module itself imports ray lazily
        raise CliError(f"--engine ray: {exc}") from None
    if options.calibrate is not None or options.calibrator is not None:
        raise CliError("--calibrate / --calibrator refit on the whole sample: not available with --engine ray")
    try:
        return report_from_path_ray(path, options, address)
    except ImportError as exc:
        raise CliError(f"--engine ray needs the 'ray' extra (Ray Data): {exc}") from None


def cmd_report(args: argparse.Namespace) -> int:
    return _report(args.file, args)
