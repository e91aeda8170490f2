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
from tps_tracer.cli.errors import CliError, writing
from tps_tracer.cli.gate_text import render_gate_markdown, render_gate_text
from tps_tracer.evaluation.gate import (
    GateCriteria,
    GateInputError,
    GateOptionError,
    evaluate_gate_on_report,
    gate_paths,
)
from tps_tracer.evaluation.progress import progress_for
from tps_tracer.records import CensoringPolicy

# flag -> (type, GateCriteria field or None)
_SETTINGS: dict[str, tuple[type, str | None]] = {
    "predictor": (str, "predictor"),
    "rule": (str, "rule"),
    "weights": (str, "weights"),
    "censoring": (str, "censoring"),
    "min": (float, "min_score"),
    "vs_base_rate": (bool, "vs_base_rate"),
    "margin": (float, "margin"),
    "test": (str, "test"),
    "min_n": (int, "min_n"),
    "max_excluded_share": (float, "max_excluded_share"),
    "allow_capture_loss": (bool, "allow_capture_loss"),
    "max_skipped_share": (float, "max_skipped_share"),
    "max_flip": (float, "max_flip"),
    "bootstrap": (int, "bootstrap"),
    "seed": (int, "seed"),
    "baseline": (str, None),
    "treat_as_censored": (str, None),
}


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if args.config:
        try:
            document = tomllib.loads(Path(args.config).read_text(encoding="utf-8-sig"))
        except OSError as exc:
            raise GateInputError(f"cannot read --config {args.config}: {exc.strerror or exc}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise GateInputError(f"cannot read --config {args.config}: {exc}") from None
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


def _gate_on_ray(args: argparse.Namespace, settings: dict[str, Any], crit: GateCriteria) -> dict[str, Any]:
    """The report of one file or directory computed on Ray, gated like a snapshot: the paired
    checks (--vs-base-rate, --baseline) and --max-flip need the per-trajectory replicates."""
    if len(args.files) != 1:
        raise GateInputError("--engine ray gates one file or directory of shards")
    if settings.get("baseline") or crit.vs_base_rate or crit.max_flip is not None:
        # The paired checks need each trajectory's rows: computed per block on Ray (ray_gate.py).
        from tps_tracer.distributed.ray_gate import gate_path_ray

        try:
            result = gate_path_ray(args.files[0], crit, settings.get("baseline"), args.address)
        except ImportError as exc:
            raise GateInputError(f"--engine ray needs the 'ray' extra (Ray Data): {exc}") from None
        result["notes"] = ["per-trajectory rows computed with --engine ray", *result["notes"]]
        return result
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
    # The report's audit gives the same censoring warnings as the local engine (evaluate_gate_on_report).
    result["notes"] = ["gated from the report computed with --engine ray", *result["notes"][1:]]
    if result.get("coverage"):  # its replicates are this gate's --bootstrap, not a saved snapshot's
        result["coverage"]["replicates_source"] = "the report computed with --engine ray (--bootstrap)"
    return result


# GateCriteria field -> its flag (a GateOptionError names the field).
_FLAG_OF = {field: "--" + key.replace("_", "-") for key, (_, field) in _SETTINGS.items() if field is not None}


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
            result = gate_paths(args.files, crit, settings.get("baseline"), progress=progress_for(args.files[0]))
        source = ", ".join(args.files)
    if args.markdown:  # appended atomically (old summary + this one, then one rename)
        with writing("--markdown", args.markdown):
            append_text(args.markdown, render_gate_markdown(result, source))
    if args.json:
        sys.stdout.write(strict_json.dumps(result))
    else:
        sys.stdout.write(render_gate_text(result, source))
    return int(result["exit_code"])
