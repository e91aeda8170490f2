"""`tps-tracer demo`: the main job, end to end on embedded defaults (no network, no API keys).

Runs a few hundred tasks of the simulated world through LangGraph's prebuilt ReAct agent
with `TPSCallbackHandler` attached, once per agent: one states truthful confidences, one is
saturated-overconfident like the paper's Tau2 verbal stream. Writes the JSON Lines records
the accumulators' sinks produce, adds the cross-fitted Platt recalibration of the
overconfident verbal stream, prints the report, and computes the paper's two findings on
this data (nothing in the findings is hard-coded: they are read off the scores):

1. recalibration barely moves AUROC but moves TPS_log by many standard errors;
2. censored-aware scoring changes the verdict relative to complete-only evaluation.

Censored runs carry the world's exact q_Z (the simulator knows it), so the report also has
cen-exact rows next to the simple (q_Z ~ 0) form.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tps_tracer import strict_json
from tps_tracer.cli.errors import CliError, writing
from tps_tracer.cli.report_text import render_report
from tps_tracer.evaluation.calibration import cross_fit_platt
from tps_tracer.evaluation.paired import paired_auroc_delta, paired_mean_delta
from tps_tracer.evaluation.pairs import AGGREGATOR_NAMES, pair_table_from_arrays
from tps_tracer.evaluation.report import ReportOptions, build_report
from tps_tracer.evaluation.tps import COMPLETE_ONLY, EXACT, SIMPLE, score_matrix
from tps_tracer.records import read_trajectories, to_arrays, write_trajectories
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import get_rule
from tps_tracer.scoring.schedules import get_schedule

DEMO_TASKS = 300
DEMO_SEED = 7
PLATT = "verbal+platt"
PRIMARY_RULE = "log"
PRIMARY_WEIGHTS = "linear-front"


def add_demo_parser(sub: Any) -> None:
    d = sub.add_parser("demo", help="end-to-end demo: simulated tasks through a real LangGraph agent (no network)")
    d.add_argument("--out", help="directory for the generated record files (default: a temp dir)")
    d.add_argument("--tasks", type=int, default=DEMO_TASKS, help=f"tasks per agent (default {DEMO_TASKS})")
    d.add_argument("--seed", type=int, default=DEMO_SEED, help="world and bootstrap seed")
    d.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    d.add_argument("--json", action="store_true", help="print the findings as JSON instead of the report")
    d.set_defaults(func=cmd_demo)


def _with_platt(records: list[TrajectoryRecord], values: np.ndarray) -> list[TrajectoryRecord]:
    out, i = [], 0
    for rec in records:
        rec = rec.model_copy(deep=True)
        for step in rec.steps:
            v = values[i]
            step.forecasts[PLATT] = None if np.isnan(v) else round(float(v), 9)
            i += 1
        out.append(rec)
    return out


def _run_agents(args: argparse.Namespace, out_dir: Path) -> dict[str, Path]:
    from tps_tracer.sim.campaign import run_campaign
    from tps_tracer.sim.world import AgentWorld, WorldConfig

    config = WorldConfig(malformed_rate=0.02, tool_failure_rate=0.005, max_length=14)
    agents = ("truthful", "overconfident")
    paths = {}
    bar = _progress(len(agents) * args.tasks, quiet=args.json)
    try:
        for name in agents:
            world = AgentWorld(args.tasks, seed=args.seed, config=replace(config, forecaster=name))
            paths[name] = out_dir / f"{name}.jsonl"
            paths[name].unlink(missing_ok=True)
            bar.set_description(f"{name} agent")
            run_campaign(world, paths[name], progress=bar.update, bootstrap=0, q_z_oracle=True)
    finally:
        bar.close()
    return paths


def _progress(total: int, quiet: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="run", file=sys.stderr, disable=quiet, leave=False)


def _scores(arrays: Any, predictors: list[str], mode: str) -> dict[str, np.ndarray]:
    sm = score_matrix(arrays, predictors, [get_rule(PRIMARY_RULE)], [get_schedule(PRIMARY_WEIGHTS)], modes=(mode,))
    return {k.predictor: col for k, col in zip(sm.keys, sm.columns, strict=True)}


def findings(arrays: Any, bootstrap: int, seed: int) -> dict[str, Any]:
    """The paper's two findings, computed on the overconfident agent's records (raw + Platt)."""
    predictors = [p for p in arrays.predictors if arrays.predictors[p].usable.any()]
    simple = _scores(arrays, predictors, SIMPLE)
    complete = _scores(arrays, predictors, COMPLETE_ONLY)
    tps = paired_mean_delta(simple["verbal"], simple[PLATT], arrays.ids, bootstrap, seed, "tps_log")
    table = pair_table_from_arrays(arrays, ["verbal", PLATT], [get_rule(PRIMARY_RULE)], [get_schedule(PRIMARY_WEIGHTS)])
    w = AGGREGATOR_NAMES.index("phi_w")
    clean = ~np.isnan(table.outcome)
    phi = {p: np.where(clean, table.predictors[p].aggregates[:, w], np.nan) for p in ("verbal", PLATT)}
    auroc = paired_auroc_delta(phi["verbal"], phi[PLATT], table.outcome, arrays.ids, bootstrap, seed)

    exact = _scores(arrays, predictors, EXACT)
    modes = ((COMPLETE_ONLY, complete), (SIMPLE, simple), (EXACT, exact))
    means = {mode: {p: float(np.nanmean(col)) for p, col in cols.items()} for mode, cols in modes}
    best = {mode: max(m, key=m.__getitem__) for mode, m in means.items()}
    a, b = best[COMPLETE_ONLY], best[SIMPLE]
    head_to_head = {
        mode: paired_mean_delta(cols[a], cols[b], arrays.ids, bootstrap, seed, f"{b} - {a}").as_dict()
        for mode, cols in modes
    }
    n_censored = int(np.sum(table.role_masks(CensoringPolicy())[1]))
    return {
        "recalibration": {"auroc": auroc.as_dict(), "tps_log": tps.as_dict()},
        "censoring": {
            "n_trajectories": arrays.n,
            "n_censored": n_censored,
            "mean_tps_log": means,
            "best": best,
            "verdict_changes": a != b,
            "head_to_head": head_to_head,
        },
    }


def _print_findings(f: dict[str, Any]) -> None:
    au, tp = f["recalibration"]["auroc"], f["recalibration"]["tps_log"]
    print("\nFinding 1: recalibration moves the probability scale, not the ranking")
    print("  cross-fitted Platt on the overconfident agent's verbal confidence (log rule, linear-front, cen-simple):")
    print(f"    AUROC    {au['a']:.3f} -> {au['b']:.3f}   Delta {au['delta']:+.4f}   Delta/SE {au['z']:+.1f}")
    print(f"    TPS_log  {tp['a']:.3f} -> {tp['b']:.3f}   Delta {tp['delta']:+.4f}   Delta/SE {tp['z']:+.1f}")
    c = f["censoring"]
    print(
        f"\nFinding 2: {c['n_censored']} of {c['n_trajectories']} runs hit the step budget "
        "(administratively censored); mean TPS_log by evaluator:"
    )
    for mode in (COMPLETE_ONLY, SIMPLE, EXACT):
        ranked = sorted(c["mean_tps_log"][mode].items(), key=lambda kv: -kv[1])
        label = {EXACT: "exact (true q_Z)"}.get(mode, mode)
        print(f"  {label:>16}: " + ", ".join(f"{p} {v:.3f}" for p, v in ranked[:4]))
    a, b = c["best"][COMPLETE_ONLY], c["best"][SIMPLE]
    if c["verdict_changes"]:
        print(f"  The best stream changes: complete-only picks {a}, censored-aware (simple) scoring picks {b}.")
        for mode, d in c["head_to_head"].items():
            print(f"    {b} minus {a}, {mode}: {d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]")
    else:
        print(f"  Both evaluators pick {a}; see Delta_practice in the report for how much each stream shifts.")


def cmd_demo(args: argparse.Namespace) -> int:
    if args.tasks < 1:
        raise CliError(f"--tasks must be >= 1, got {args.tasks}")
    if args.bootstrap < 0:
        raise CliError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tps-demo-"))
    with writing("--out", out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    if not args.json:
        print(
            f"tps-tracer demo: {args.tasks} simulated tasks, each run by two agents (truthful and overconfident\n"
            "verbal confidence) through LangGraph's prebuilt ReAct agent with TPSCallbackHandler attached\n"
            "(budget: 8 model calls). The world knows every task's success process q_t exactly.\n",
            flush=True,
        )
    paths = _run_agents(args, out_dir)
    records = read_trajectories(paths["overconfident"])
    arrays = to_arrays(records)
    platt = cross_fit_platt(arrays, "verbal", PRIMARY_WEIGHTS)
    calibrated = _with_platt(records, platt.values)
    paths["overconfident+platt"] = out_dir / "overconfident+platt.jsonl"
    write_trajectories(calibrated, paths["overconfident+platt"])
    cal_arrays = to_arrays(calibrated)
    f = findings(cal_arrays, args.bootstrap, args.seed)
    f["platt"] = platt.diagnostics()
    f["files"] = {k: str(v) for k, v in paths.items()}
    if args.json:
        sys.stdout.write(strict_json.dumps(f))
        return 0
    print("Wrote " + ", ".join(str(p) for p in paths.values()))
    opts = ReportOptions(rules=("log", "brier"), bootstrap=args.bootstrap, seed=args.seed)
    print()
    print(render_report(build_report(cal_arrays, opts), str(paths["overconfident+platt"])))
    truthful = build_report(to_arrays(read_trajectories(paths["truthful"])), replace(opts, rules=("log",)))
    ref = next(
        s for s in truthful["scores"] if s["predictor"] == "verbal" and s["censoring"] == SIMPLE and s["rule"] == "log"
    )
    ci = f" [{ref['ci_low']:.3f}, {ref['ci_high']:.3f}]" if ref.get("ci_low") is not None else ""
    print(f"Reference: the truthful agent's verbal TPS_log (cen-simple) is {ref['mean']:.3f}{ci} on the same tasks.")
    _print_findings(f)
    print(f"\nScore any of these files yourself: tps-tracer report {paths['overconfident+platt']}")
    return 0
