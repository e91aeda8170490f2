"""`tps-tracer demo`: two simulated agents (truthful and overconfident verbal confidence) through LangGraph's
prebuilt ReAct agent with the handler attached, the report, and the paper's two findings checked against the
world's exact q_Z; `--q-z resume` estimates q_Z by resuming every censored run's checkpoint instead."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tps_tracer import output
from tps_tracer.cli.main import CliError, check_replicates, wrap, writing
from tps_tracer.cli.report_cmd import render_report
from tps_tracer.constants import COMPLETE_ONLY, EXACT, SIMPLE
from tps_tracer.errors import missing_extra
from tps_tracer.evaluation.calibration import cross_fit_platt, paired_auroc_delta, paired_mean_delta
from tps_tracer.evaluation.censoring.continuations import DEFAULT_MIN_VALID, attach_q_z, mc_q_z, read_continuations
from tps_tracer.evaluation.pairs import pair_table_from_arrays, score_matrix
from tps_tracer.evaluation.report import build_report
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES
from tps_tracer.records import read_trajectories, to_arrays, write_trajectories
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring import get_rule, get_schedule
from tps_tracer.sim.world import AgentWorld, WorldConfig

DEMO_WORLD = WorldConfig(malformed_rate=0.02, tool_failure_rate=0.005, max_length=14)  # forecaster set per agent
PLATT = "verbal+platt"
PRIMARY_RULE = "log"
PRIMARY_WEIGHTS = "linear-front"


def _resume_q_z(
    args: argparse.Namespace, graph: Any, records: list[TrajectoryRecord], arrays: Any, out: Path
) -> tuple[Any, dict[str, Any]]:
    """Resume the censored runs from their checkpoints: the arrays with q_hat as q_z (NaN below the minimum
    valid branches: half the branches, at most 5 as in the paper), and the comparison with the exact q_Z."""
    from scipy.stats import binom

    from tps_tracer.langchain.resume import resume_continuations
    from tps_tracer.sim.agents import DEFAULT_RECURSION_LIMIT  # resumed branches get a fresh budget
    from tps_tracer.sim.scripted_model import grade_final_state

    out.unlink(missing_ok=True)
    censored = sum(1 for r in records if r.stop_reason.value == "max_steps")
    with _progress(censored * args.branches, quiet=args.json, desc="resuming censored runs") as bar:
        summary = resume_continuations(
            graph,
            records,
            out,
            branches=args.branches,
            grader=grade_final_state,
            budget=DEFAULT_RECURSION_LIMIT,
            concurrency=args.concurrency,
            progress=bar.update,
        )
    mc = mc_q_z(read_continuations(out), min_valid=min(DEFAULT_MIN_VALID, max(1, args.branches // 2)))
    resumed = attach_q_z(arrays, mc.as_mapping()).arrays
    has = ~np.isnan(resumed.q_z)
    exact = np.where(has, arrays.q_z, np.nan)  # the world's q_Z on the same prefixes
    valid_of = dict(zip(mc.ids, mc.n_valid.tolist(), strict=True))
    n_valid = np.array([valid_of[tid] for tid in np.asarray(arrays.ids)[has]], dtype=np.int64)
    # E|k/n - q| for k ~ Binomial(n, q) per prefix: the best a q_hat from n branches can do (pmf 0 for k > n).
    k, n, q = np.arange(n_valid.max(initial=0) + 1), n_valid[:, None], exact[has][:, None]
    binomial = np.sum(binom.pmf(k, n, q) * np.abs(k / n - q), axis=1)
    with_q_hat = _scores(resumed, EXACT)
    with_q_z = _scores(replace(arrays, q_z=exact), EXACT)

    def mean(x: np.ndarray) -> float | None:
        return float(x.mean()) if has.any() else None

    return resumed, {
        "mean_abs_error": mean(np.abs(resumed.q_z[has] - exact[has])),
        "binomial_mean_abs_error": mean(binomial),
        "n_prefixes": int(has.sum()),
        "branches_per_prefix": args.branches,
        "mean_valid_branches": mean(n_valid),
        "min_valid": mc.min_valid,
        "censored_without_estimate": int(censored - has.sum()),
        "mean_q_hat": mean(resumed.q_z[has]),
        "mean_q_z": mean(exact[has]),
        "cen_exact_tps_log": {
            p: {"q_hat": float(with_q_hat[p][has].mean()), "q_z": float(with_q_z[p][has].mean())}
            for p in with_q_hat
            if has.any()
        },
        "resume": summary.as_dict(),
        "continuations": str(out),
    }


def _progress(total: int, quiet: bool, desc: str | None = None) -> Any:
    """A progress bar on stderr, only on a terminal (in a CI log its redraws are noise)."""
    from tqdm import tqdm

    interactive = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    return tqdm(total=total, unit="run", file=sys.stderr, disable=quiet or not interactive, leave=False, desc=desc)


def _scores(arrays: Any, mode: str) -> dict[str, np.ndarray]:
    """Per predictor with data, its primary-rule score column under `mode`."""
    predictors = [p for p in arrays.predictors if arrays.predictors[p].usable.any()]
    sm = score_matrix(arrays, predictors, [get_rule(PRIMARY_RULE)], [get_schedule(PRIMARY_WEIGHTS)], modes=(mode,))
    return {k.predictor: col for k, col in zip(sm.keys, sm.columns, strict=True)}


def findings(arrays: Any, truth_arrays: Any, bootstrap: int, seed: int) -> dict[str, Any]:
    """The paper's two findings on the overconfident agent's records (raw + Platt), and each evaluator's pick
    checked against the ground truth, cen-exact on `truth_arrays` (the records with the world's exact q_Z):
    its rank there and, when not the best, the paired difference (pick minus best) under the truth's scores."""
    scores = {mode: _scores(arrays, mode) for mode in (COMPLETE_ONLY, SIMPLE, EXACT)}
    tps = paired_mean_delta(scores[SIMPLE]["verbal"], scores[SIMPLE][PLATT], arrays.ids, bootstrap, seed, "tps_log")
    table = pair_table_from_arrays(arrays, ["verbal", PLATT], [get_rule(PRIMARY_RULE)], [get_schedule(PRIMARY_WEIGHTS)])
    w = AGGREGATOR_NAMES.index("phi_w")
    clean = ~np.isnan(table.outcome)
    phi = {p: np.where(clean, table.predictors[p].aggregates[:, w], np.nan) for p in ("verbal", PLATT)}
    auroc = paired_auroc_delta(phi["verbal"], phi[PLATT], table.outcome, arrays.ids, bootstrap, seed)

    means = {mode: {p: float(np.nanmean(col)) for p, col in cols.items()} for mode, cols in scores.items()}
    best = {mode: max(m, key=m.__getitem__) for mode, m in means.items()}
    a, b = best[COMPLETE_ONLY], best[SIMPLE]
    head_to_head = {
        mode: paired_mean_delta(cols[a], cols[b], arrays.ids, bootstrap, seed, f"{b} - {a}").as_dict()
        for mode, cols in scores.items()
    }
    truth = _scores(truth_arrays, EXACT)
    truth_means = {p: float(np.nanmean(col)) for p, col in truth.items()}
    ranking = sorted(truth_means, key=lambda p: -truth_means[p])
    verdicts: dict[str, dict[str, Any]] = {}
    for mode, pick in best.items():
        verdicts[mode] = {"pick": pick, "agrees": pick == ranking[0], "truth_rank": ranking.index(pick) + 1}
        if pick != ranking[0]:
            d = paired_mean_delta(truth[ranking[0]], truth[pick], arrays.ids, bootstrap, seed, f"{pick} - {ranking[0]}")
            verdicts[mode]["truth_delta"] = d.as_dict()
    return {
        "recalibration": {"auroc": auroc.as_dict(), "tps_log": tps.as_dict()},
        "censoring": {
            "n_trajectories": arrays.n,
            "n_censored": int(np.sum(table.role_masks(CensoringPolicy())[1])),
            "mean_tps_log": means,
            "best": best,
            "verdict_changes": a != b,
            "head_to_head": head_to_head,
            "ground_truth": {"mean_tps_log": truth_means, "ranking": ranking, "best": ranking[0], "verdicts": verdicts},
        },
    }


def _say(text: str, prefix: str = "") -> None:
    print("\n".join(wrap(text, prefix)))


def _print_findings(f: dict[str, Any]) -> None:
    au, tp = f["recalibration"]["auroc"], f["recalibration"]["tps_log"]
    print("\nFinding 1: recalibration moves the probability scale, not the ranking")
    _say(
        "cross-fitted Platt on the overconfident agent's verbal confidence (log rule, linear-front, cen-simple):", "  "
    )
    print(f"    AUROC    {au['a']:.3f} -> {au['b']:.3f}   Delta {au['delta']:+.4f}   Delta/SE {au['z']:+.1f}")
    print(f"    TPS_log  {tp['a']:.3f} -> {tp['b']:.3f}   Delta {tp['delta']:+.4f}   Delta/SE {tp['z']:+.1f}")
    c = f["censoring"]
    print()
    _say(
        f"Finding 2: {c['n_censored']} of {c['n_trajectories']} runs hit the step budget (administratively "
        "censored); the best three streams by mean TPS_log under each evaluator:"
    )
    # Without --q-z resume the cen-exact row is the ground truth itself: printed once, under that name.
    g = c["ground_truth"]
    modes = (COMPLETE_ONLY, SIMPLE, EXACT) if "q_z_resume" in f else (COMPLETE_ONLY, SIMPLE)
    label = {COMPLETE_ONLY: "complete-only", SIMPLE: "cen-simple", EXACT: "cen-exact (resumed q)"}
    for name, means in [*((label[m], c["mean_tps_log"][m]) for m in modes), ("ground truth", g["mean_tps_log"])]:
        ranked = sorted(means.items(), key=lambda kv: -kv[1])[:3]
        _say(f"{name}: " + ", ".join(f"{p} {v:.3f}" for p, v in ranked), "    ")
    _say(
        "ground truth = cen-exact with the world's exact q_Z (the simulator knows it): each budget-stopped "
        "run is scored by its true chance of success, so on average it is the score the runs would get if "
        f"their outcome were observed. It ranks {g['best']} first.",
        "  ",
    )
    names = {**label, SIMPLE: "cen-simple (q_Z~0)"}
    wrong, separated_any = [], False
    for mode in modes:
        v = g["verdicts"][mode]
        if v["agrees"]:
            _say(f"{names[mode]} picks {v['pick']}: agrees with the ground truth.", "    ")
            continue
        d = v["truth_delta"]
        separated = d["ci_low"] > 0 or d["ci_high"] < 0
        separated_any = separated_any or separated
        wrong.append(names[mode])
        _say(
            f"{names[mode]} picks {v['pick']}: the ground truth ranks it #{v['truth_rank']}, "
            f"{d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}] against {g['best']}"
            + ("." if separated else " (the interval covers 0: not separated on this sample)."),
            "    ",
        )
    if not wrong:
        _say("Every evaluator ranks the ground truth's best stream first on this sample.", "  ")
    else:
        how = "a gap the ground truth separates from 0" if separated_any else "a gap within this sample's noise"
        _say(f"So {' and '.join(wrong)} put first a stream the ground truth ranks lower: {how}.", "  ")
    if "q_z_resume" not in f:
        return
    r, run = f["q_z_resume"], f["q_z_resume"]["resume"]
    print()
    _say(
        f"q_Z from resumed checkpoints: {r['n_prefixes']} censored runs x {r['branches_per_prefix']} branches "
        f"({run['wall_seconds_per_branch']} s of wall time per branch; branch stops {run['stop_reasons']})"
    )
    if r["n_prefixes"]:
        _say(
            f"mean |q_hat - q_Z| = {r['mean_abs_error']:.4f} against the world's exact q_Z "
            f"(binomial sampling alone: {r['binomial_mean_abs_error']:.4f})",
            "  ",
        )
        print("  cen-exact TPS_log on these prefixes, with q_hat vs with the exact q_Z:")
        for p, v in r["cen_exact_tps_log"].items():
            print(f"    {p:>20}: {v['q_hat']:.4f} vs {v['q_z']:.4f}")


def cmd_demo(args: argparse.Namespace) -> int:
    try:  # the simulated world's agent and the progress bar: the `demo` extra, named before any work
        import langgraph.prebuilt  # noqa: F401
        import tqdm  # noqa: F401
        from langgraph.checkpoint.memory import InMemorySaver

        from tps_tracer.sim.agents import run_campaign
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "the demo", "demo") or exc from exc
    if args.tasks < 1:
        raise CliError(f"--tasks must be >= 1, got {args.tasks}")
    check_replicates(args.bootstrap, 0, "0: no confidence intervals")
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
    # The two agents' record files (censored runs carry the world's exact q_Z), and the overconfident agent's
    # compiled graph (with checkpoints under --q-z resume).
    paths, graph = {}, None
    with _progress(2 * args.tasks, quiet=args.json) as bar:
        for name in ("truthful", "overconfident"):
            world = AgentWorld(args.tasks, seed=args.seed, config=replace(DEMO_WORLD, forecaster=name))
            paths[name] = out_dir / f"{name}.jsonl"
            paths[name].unlink(missing_ok=True)
            bar.set_description(f"{name} agent")
            saver = InMemorySaver() if args.q_z == "resume" and name == "overconfident" else None
            graph = run_campaign(world, paths[name], progress=bar.update, q_z_oracle=True, checkpointer=saver)
    records = read_trajectories(paths["overconfident"])
    platt = cross_fit_platt(to_arrays(records), "verbal", PRIMARY_WEIGHTS)
    steps = (step for rec in records for step in rec.steps)
    for step, v in zip(steps, platt.values.tolist(), strict=True):  # the records gain the cross-fitted stream
        step.forecasts[PLATT] = None if np.isnan(v) else round(v, 9)
    paths["overconfident+platt"] = out_dir / "overconfident+platt.jsonl"
    write_trajectories(records, paths["overconfident+platt"])
    truth_arrays = cal_arrays = to_arrays(records)
    resumed: dict[str, Any] = {}
    if args.q_z == "resume":
        paths["continuations"] = out_dir / "overconfident.continuations.jsonl"
        cal_arrays, resumed["q_z_resume"] = _resume_q_z(args, graph, records, cal_arrays, paths["continuations"])
    f = findings(cal_arrays, truth_arrays, args.bootstrap, args.seed)
    f.update(resumed, platt=platt.diagnostics(), files={k: str(v) for k, v in paths.items()})
    if args.json:
        sys.stdout.write(output.dumps(f))
        return 0
    _say("Wrote " + ", ".join(str(p) for p in paths.values()))
    opts = ReportOptions(rules=("log", "brier"), bootstrap=args.bootstrap, seed=args.seed)
    print("\n" + render_report(build_report(cal_arrays, opts), str(paths["overconfident+platt"])))
    truthful = build_report(to_arrays(read_trajectories(paths["truthful"])), replace(opts, rules=("log",)))
    ref = next(
        s for s in truthful["scores"] if s["predictor"] == "verbal" and s["censoring"] == SIMPLE and s["rule"] == "log"
    )
    ci = f" [{ref['ci_low']:.3f}, {ref['ci_high']:.3f}]" if ref.get("ci_low") is not None else ""
    _say(f"Reference: the truthful agent's verbal TPS_log (cen-simple) is {ref['mean']:.3f}{ci} on the same tasks.")
    _print_findings(f)
    print(f"\nScore any of these files yourself: tps-tracer report {paths['overconfident+platt']}")
    return 0
