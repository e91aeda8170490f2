"""The demo's Finding 2 is stated against the ground truth the simulator has (issue 34).

The ground truth is cen-exact TPS_log with the world's exact q_Z. It is recomputed here by
hand from the files the demo wrote and the world it ran (log rule, linear-front weights
normalised over the horizon and truncated at the last step, eta = Y or q_Z), then every
evaluator's verdict printed by the demo is checked against it.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from tests.cli_support import call
from tps_tracer.cli.demo_cmd import DEMO_WORLD, _print_findings
from tps_tracer.constants import DEMO_SEED
from tps_tracer.sim.world import AgentWorld

TASKS = 120
EPS = 1e-6  # the log rule's clip (scoring.py)


def _tps_log(forecasts: list[float], horizon: int, eta: float) -> float:
    total = horizon * (horizon + 1) / 2
    s = 0.0
    for t, f in enumerate(forecasts, start=1):
        f = min(max(f, EPS), 1 - EPS)
        s += (horizon - t + 1) / total * (eta * math.log(f) + (1 - eta) * math.log(1 - f))
    return s


def _hand_means(lines: list[dict], world: AgentWorld) -> dict[str, dict[str, float]]:
    """mean TPS_log per predictor under complete-only, cen-simple and the ground truth."""
    sums: dict[str, dict[str, list[float]]] = {"complete-only": {}, "simple": {}, "truth": {}}
    for x in lines:
        steps = x["steps"]
        horizon = x["horizon"] or len(steps)
        if x["stop_reason"] == "clean":
            labels = {"complete-only": x["outcome"], "simple": x["outcome"], "truth": x["outcome"]}
        elif x["stop_reason"] == "max_steps":
            q = world[x["metadata"]["task_id"]].steps[len(steps) - 1].q  # P(Y=1 | the prefix)
            labels = {"simple": 0.0, "truth": q}
        else:
            continue  # informative stops are excluded
        for p in steps[0]["forecasts"]:
            values = [s["forecasts"][p] for s in steps]
            for mode, eta in labels.items():
                sums[mode].setdefault(p, []).append(_tps_log(values, horizon, eta))
    return {mode: {p: sum(v) / len(v) for p, v in d.items()} for mode, d in sums.items()}


def test_finding_2_is_checked_against_the_world_s_exact_q_z(tmp_path, capsys):
    code, out, err = call(
        ["demo", "--out", str(tmp_path), "--tasks", str(TASKS), "--bootstrap", "200", "--json"], capsys
    )
    assert code == 0, err
    f = json.loads(out)
    lines = [json.loads(x) for x in (tmp_path / "overconfident+platt.jsonl").read_text().splitlines()]
    world = AgentWorld(TASKS, seed=DEMO_SEED, config=replace(DEMO_WORLD, forecaster="overconfident"))
    hand = _hand_means(lines, world)
    c = f["censoring"]
    g = c["ground_truth"]

    assert g["mean_tps_log"] == pytest.approx(hand["truth"], abs=1e-9)
    assert c["mean_tps_log"]["complete-only"] == pytest.approx(hand["complete-only"], abs=1e-9)
    assert c["mean_tps_log"]["simple"] == pytest.approx(hand["simple"], abs=1e-9)
    truth_best = max(hand["truth"], key=hand["truth"].__getitem__)
    truth_rank = sorted(hand["truth"], key=lambda p: -hand["truth"][p])
    assert g["best"] == truth_best
    for mode in ("complete-only", "simple"):
        pick = max(hand[mode], key=hand[mode].__getitem__)
        v = g["verdicts"][mode]
        assert (v["pick"], v["agrees"], v["truth_rank"]) == (pick, pick == truth_best, truth_rank.index(pick) + 1)
        if pick != truth_best:
            # The gap is measured under the ground truth's own scores, point estimate by hand.
            assert v["truth_delta"]["delta"] == pytest.approx(hand["truth"][pick] - hand["truth"][truth_best], abs=1e-9)

    # The printed finding says the same: the truth's pick and each evaluator's agreement, never a
    # verdict the ground truth contradicts.
    _print_findings(f)
    text = " ".join(capsys.readouterr().out.split())
    assert f"It ranks {truth_best} first." in text
    for mode, name in (("complete-only", "complete-only"), ("simple", "cen-simple (q_Z~0)")):
        v = g["verdicts"][mode]
        if v["agrees"]:
            assert f"{name} picks {v['pick']}: agrees with the ground truth." in text
        else:
            assert f"{name} picks {v['pick']}: the ground truth ranks it #{v['truth_rank']}" in text
    if all(v["agrees"] for v in g["verdicts"].values()):
        assert "Every evaluator ranks the ground truth's best stream first" in text
    else:
        assert "put first a stream the ground truth ranks lower" in text
