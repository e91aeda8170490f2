"""The `tps-tracer` command line: report, gate, calibrate, censoring, plot and demo."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tps_tracer import strict_json
from tps_tracer.cli.calibrate_cmd import add_calibrate_parser
from tps_tracer.cli.censoring_cmd import add_censoring_parser
from tps_tracer.cli.convert_cmd import add_convert_parser
from tps_tracer.cli.demo_cmd import add_demo_parser
from tps_tracer.cli.errors import DEBUG_ENV, EXIT_OK, CliError, OneLineParser, flag, reading, run_guarded
from tps_tracer.cli.gate_cmd import add_gate_parser
from tps_tracer.cli.plot_cmd import add_plot_parser
from tps_tracer.cli.report_text import render_report
from tps_tracer.evaluation.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from tps_tracer.evaluation.calibration.calibrator import Calibrator
from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.progress import progress_for
from tps_tracer.evaluation.report import ReportOptions
from tps_tracer.evaluation.report_options_check import OptionError
from tps_tracer.records import CensoringPolicy
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring import parse_rules, parse_schedules


def _add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--predictors", help="comma-separated predictor names (default: all in the file)")
    p.add_argument("--rules", default="log,brier,beta(2,4)", help="score rules, e.g. 'log,brier,beta(2,4)'")
    p.add_argument(
        "--weights",
        default="linear-front",
        help="weight schedules: linear-front, uniform, exponential-front, linear-back, or 'all'",
    )
    p.add_argument("--bootstrap", type=int, default=DEFAULT_REPLICATES, help="bootstrap replicates (0: no CIs)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    p.add_argument("--ece-bins", type=int, default=10, help="quantile bins for T-ECE")
    p.add_argument(
        "--no-base-rate",
        action="store_true",
        help="omit the constant base-rate reference predictor",
    )
    p.add_argument(
        "--treat-as-censored",
        default="",
        help="sensitivity analysis: informative stop reasons to treat as censored, e.g. 'parse_error'",
    )
    p.add_argument(
        "--calibrate",
        choices=["platt"],
        help="add cross-fitted recalibrated '<predictor>+platt' rows and paired raw-vs-recalibrated deltas",
    )
    p.add_argument("--calibrator", help="apply a saved calibrator (from `tps-tracer calibrate`) instead of refitting")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local (this process, chunked) or ray (Ray Data reads the shards; needs the 'ray' extra)",
    )
    p.add_argument("--address", help="with --engine ray: the Ray cluster to join (default: a local one, 127.0.0.1)")


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
        )
    except OptionError as exc:
        raise CliError(f"{_FLAG_OF.get(exc.field, exc.field)}: {exc.detail}") from None


def _report(path: str, args: argparse.Namespace) -> int:
    options = _options(args)
    if args.engine == "ray":
        report = _report_on_ray(path, options, args.address)
    else:
        if args.address:
            raise CliError("--address needs --engine ray")
        report = report_from_path(path, options, progress=progress_for(path))
    if args.json:
        sys.stdout.write(strict_json.dumps(report))
    else:
        sys.stdout.write(render_report(report, path))
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


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="tps-tracer", description="Trajectory Proper Scores for agent uncertainty.")
    parser.add_argument("--debug", action="store_true", help=f"show tracebacks (also: {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("report", help="score a trajectory file (JSON Lines, Parquet, or a directory of shards)")
    p.add_argument("file", help="trajectory records: JSON Lines, Parquet, or a directory of .parquet/.jsonl shards")
    _add_report_options(p)
    p.set_defaults(func=cmd_report)
    add_demo_parser(sub)
    add_gate_parser(sub)
    add_calibrate_parser(sub)
    add_censoring_parser(sub)
    add_plot_parser(sub)
    add_convert_parser(sub)
    for command in sub.choices.values():  # `--debug` also after the command name
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run one command inside the error boundary (exit codes: tps_tracer.cli.errors)."""
    args = build_parser().parse_args(argv)
    return run_guarded(args.func, args, f"tps-tracer {args.command}")


if __name__ == "__main__":
    sys.exit(main())
