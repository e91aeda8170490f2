"""The `tps-tracer` command line: report, gate, calibrate, censoring, plot and demo."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tps_tracer.cli.calibrate_cmd import add_calibrate_parser
from tps_tracer.cli.censoring_cmd import add_censoring_parser
from tps_tracer.cli.demo_cmd import add_demo_parser
from tps_tracer.cli.gate_cmd import add_gate_parser
from tps_tracer.cli.plot_cmd import add_plot_parser
from tps_tracer.cli.report_text import render_report
from tps_tracer.evaluation.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from tps_tracer.evaluation.calibrator import Calibrator
from tps_tracer.evaluation.report import ReportOptions, build_report
from tps_tracer.records import CensoringPolicy, TrajectoryFileError, read_trajectories, to_arrays
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring import parse_rules, parse_schedules

EXIT_OK = 0
EXIT_BAD_INPUT = 2


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


def _options(args: argparse.Namespace) -> ReportOptions:
    if args.bootstrap < 0:
        raise ValueError("--bootstrap must be >= 0")
    reasons = [r.strip() for r in args.treat_as_censored.split(",") if r.strip()]
    valid = {r.value for r in StopReason}
    bad = [r for r in reasons if r not in valid]
    if bad:
        raise ValueError(f"unknown stop reason(s) in --treat-as-censored: {', '.join(bad)}")
    if args.calibrate and args.calibrator:
        raise ValueError("use either --calibrate (cross-fitted refit) or --calibrator FILE (saved maps), not both")
    return ReportOptions(
        predictors=[p.strip() for p in args.predictors.split(",") if p.strip()] if args.predictors else None,
        rules=parse_rules(args.rules),
        schedules=parse_schedules(args.weights),
        bootstrap=args.bootstrap,
        seed=args.seed,
        policy=CensoringPolicy.treating_as_censored(reasons) if reasons else CensoringPolicy(),
        base_rate=not args.no_base_rate,
        ece_bins=args.ece_bins,
        calibrate=args.calibrate,
        calibrator=Calibrator.load(args.calibrator) if args.calibrator else None,
    )


def _report(path: str, args: argparse.Namespace) -> int:
    options = _options(args)
    arrays = to_arrays(read_trajectories(path))
    report = build_report(arrays, options)
    if args.json:
        json.dump(report, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_report(report, path))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    return _report(args.file, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tps-tracer", description="Trajectory Proper Scores for agent uncertainty.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("report", help="score a trajectory JSON Lines file")
    p.add_argument("file", help="trajectory records, one JSON object per line")
    _add_report_options(p)
    p.set_defaults(func=cmd_report)
    add_demo_parser(sub)
    add_gate_parser(sub)
    add_calibrate_parser(sub)
    add_censoring_parser(sub)
    add_plot_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except TrajectoryFileError as exc:
        print(f"tps-tracer: bad input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as exc:
        print(f"tps-tracer: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
