"""`tps-tracer gate`: exit 0 pass, 1 fail, 2 bad input or an unusable sample.

Settings come from flags, or from a TOML file checked into the user's repository
(`--config gate.toml`, a `[gate]` table with the flag names, dashes as underscores);
flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tps_tracer import strict_json
from tps_tracer.atomic_write import append_text
from tps_tracer.cli.errors import writing
from tps_tracer.cli.gate_text import render_gate_markdown, render_gate_text
from tps_tracer.evaluation.gate import (
    GateCriteria,
    GateInputError,
    evaluate_gate,
    evaluate_gate_on_report,
)
from tps_tracer.records import CensoringPolicy
from tps_tracer.records.parquet import read_records
from tps_tracer.records.schema import TrajectoryRecord

# flag -> (type, GateCriteria field or None)
_SETTINGS: dict[str, tuple[type, str | None]] = {
    "predictor": (str, "predictor"),
    "rule": (str, "rule"),
    "weights": (str, "weights"),
    "censoring": (str, "censoring"),
    "min": (float, "min_score"),
    "vs_base_rate": (bool, "vs_base_rate"),
    "margin": (float, "margin"),
    "min_n": (int, "min_n"),
    "max_excluded_share": (float, "max_excluded_share"),
    "max_flip": (float, "max_flip"),
    "bootstrap": (int, "bootstrap"),
    "seed": (int, "seed"),
    "baseline": (str, None),
    "treat_as_censored": (str, None),
}


def add_gate_parser(sub: Any) -> None:
    g = sub.add_parser("gate", help="pass/fail a candidate agent on censored TPS with confidence intervals")
    g.add_argument("files", nargs="*", help="candidate trajectory file(s): JSON Lines or Parquet, read as one run")
    g.add_argument("--snapshot", help="gate a saved `report --json` / Accumulator.snapshot() instead of records")
    g.add_argument("--config", help="TOML file with a [gate] table of these settings")
    g.add_argument("--predictor", help="predictor to gate on (default: the first in the file)")
    g.add_argument("--rule", help="score rule (default log)")
    g.add_argument("--weights", help="weight schedule (default linear-front)")
    g.add_argument("--censoring", help="complete-only, simple (default) or exact")
    g.add_argument("--min", type=float, help="pass only if the score's CI lower bound is >= this")
    g.add_argument("--vs-base-rate", action="store_true", default=None, help="non-inferiority to the base rate")
    g.add_argument("--baseline", help="baseline run's trajectory file: non-inferiority to it")
    g.add_argument("--margin", type=float, help="tolerated shortfall for --vs-base-rate / --baseline (default 0)")
    g.add_argument("--min-n", type=int, help="minimum scored trajectories (default 30; fewer: exit 2)")
    g.add_argument("--max-excluded-share", type=float, help="maximum share of informative exclusions")
    g.add_argument("--max-flip", type=float, help="fail if a verdict flips under resampling more often than this")
    g.add_argument("--treat-as-censored", help="informative stop reasons to treat as censored (sensitivity)")
    g.add_argument("--bootstrap", type=int, help="bootstrap replicates (default 2000)")
    g.add_argument("--seed", type=int, help="bootstrap seed (default 0)")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.add_argument("--markdown", help="also write a Markdown summary to this file (e.g. $GITHUB_STEP_SUMMARY)")
    g.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="ray: score one file or directory on Ray and gate on its report (--min and assumption checks only)",
    )
    g.add_argument("--address", help="with --engine ray: the Ray cluster to join (default: a local one)")
    g.set_defaults(func=cmd_gate)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if args.config:
        try:
            table = tomllib.loads(Path(args.config).read_text(encoding="utf-8-sig")).get("gate", {})
        except OSError as exc:
            raise GateInputError(f"cannot read --config {args.config}: {exc.strerror or exc}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise GateInputError(f"cannot read --config {args.config}: {exc}") from None
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
    for key in _SETTINGS:
        value = getattr(args, key, None)
        if value is not None:
            merged[key] = value
    return merged


def _criteria(settings: dict[str, Any]) -> GateCriteria:
    crit = GateCriteria()
    for key, value in settings.items():
        field = _SETTINGS[key][1]
        if field is not None:
            setattr(crit, field, value)
    reasons = [r.strip() for r in settings.get("treat_as_censored", "").split(",") if r.strip()]
    if reasons:
        crit.policy = CensoringPolicy.treating_as_censored(reasons)
    return crit


def _read_all(paths: list[str]) -> list[TrajectoryRecord]:
    records: list[TrajectoryRecord] = []
    seen: set[str] = set()
    for path in paths:
        for rec in read_records(path):  # JSON Lines, Parquet or a directory of Parquet shards
            if rec.trajectory_id in seen:
                raise GateInputError(f"{path}: trajectory id {rec.trajectory_id!r} also appears in an earlier file")
            seen.add(rec.trajectory_id)
            records.append(rec)
    return records


def _gate_on_ray(args: argparse.Namespace, settings: dict[str, Any], crit: GateCriteria) -> dict[str, Any]:
    """The report of one file or directory computed on Ray, gated like a snapshot: the paired
    checks (--vs-base-rate, --baseline) and --max-flip need the per-trajectory replicates."""
    if len(args.files) != 1:
        raise GateInputError("--engine ray gates one file or directory of shards")
    if settings.get("baseline") or crit.vs_base_rate or crit.max_flip is not None:
        raise GateInputError(
            "--engine ray supports --min and the assumption checks (not --baseline, --vs-base-rate, --max-flip)"
        )
    crit.validate(False)
    from tps_tracer.distributed.ray_engine import report_from_path_ray
    from tps_tracer.evaluation.report import ReportOptions

    options = ReportOptions(
        predictors=[crit.predictor] if crit.predictor else None,
        rules=[crit.rule],
        schedules=[crit.weights],
        bootstrap=crit.bootstrap,
        seed=crit.seed,
        policy=crit.policy,
        base_rate=False,
    )
    try:
        report = report_from_path_ray(args.files[0], options, args.address)
    except ImportError as exc:
        raise GateInputError(f"--engine ray needs the 'ray' extra (Ray Data): {exc}") from None
    result = evaluate_gate_on_report(report, crit)
    result["notes"] = ["gated from the report computed with --engine ray"]
    return result


def cmd_gate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    crit = _criteria(settings)
    if args.snapshot:
        if args.files or settings.get("baseline"):
            raise GateInputError("give either record files or --snapshot, and no --baseline with a snapshot")
        try:
            report = json.loads(Path(args.snapshot).read_text(encoding="utf-8-sig"))
        except OSError as exc:
            raise GateInputError(f"cannot read --snapshot {args.snapshot}: {exc.strerror or exc}") from None
        except ValueError as exc:  # invalid JSON or not UTF-8
            raise GateInputError(f"cannot read --snapshot {args.snapshot}: {exc}") from None
        result = evaluate_gate_on_report(report, crit)
        source = args.snapshot
    else:
        if not args.files:
            raise GateInputError("give candidate trajectory file(s) or --snapshot")
        if args.engine == "ray":
            result = _gate_on_ray(args, settings, crit)
        else:
            if args.address:
                raise GateInputError("--address needs --engine ray")
            baseline = _read_all([settings["baseline"]]) if settings.get("baseline") else None
            result = evaluate_gate(_read_all(args.files), crit, baseline)
        source = ", ".join(args.files)
    if args.markdown:  # appended atomically (old summary + this one, then one rename)
        with writing("--markdown", args.markdown):
            append_text(args.markdown, render_gate_markdown(result, source))
    if args.json:
        sys.stdout.write(strict_json.dumps(result))
    else:
        sys.stdout.write(render_gate_text(result, source))
    return int(result["exit_code"])
