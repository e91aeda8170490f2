"""The text report explains itself: <= 100 columns by default, a legend of every printed term,
and a disclosure that says only what the file supports (issue 34).

Inputs are real handler records: the demo's world run through LangGraph's prebuilt agent with
`TPSCallbackHandler` (run_campaign), then variants of that file (q_z removed from all or some
censored runs, a long user predictor name, a metadata key for --by).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cli_support import call
from tps_tracer.cli.demo_cmd import DEMO_WORLD
from tps_tracer.sim.agents import run_campaign
from tps_tracer.sim.world import AgentWorld

WIDTH = 100
LONG = "verbal_confidence_from_the_second_reviewer_model_v2"  # a user's name: 51 characters


@pytest.fixture(scope="module")
def demo_lines(tmp_path_factory) -> list[dict]:
    """The demo's overconfident agent on 40 tasks: several predictors, censored runs with q_z."""
    tmp = tmp_path_factory.mktemp("report_text")
    world = AgentWorld(40, seed=3, config=replace(DEMO_WORLD, forecaster="overconfident"))
    sink = tmp / "runs.jsonl"
    run_campaign(world, sink, q_z_oracle=True)
    lines = [json.loads(x) for x in sink.read_text().splitlines()]
    # A q_z recorded after its run's line was written arrives as a resolution line: fold it in,
    # so every test works on whole records (which lines are late depends on the writer's timing).
    records = {x["trajectory_id"]: x for x in lines if "resolves" not in x}
    for res in (x for x in lines if "resolves" in x):
        records[res["resolves"]].update({k: v for k, v in res.items() if k != "resolves"})
    lines = list(records.values())
    censored = [x for x in lines if x["stop_reason"] == "max_steps"]
    assert len(censored) >= 4 and all(x["q_z"] is not None for x in censored)  # the file the tests need
    assert len({p for x in lines for s in x["steps"] for p in s["forecasts"]}) >= 4
    return lines


def _write(tmp_path: Path, lines: list[dict], name: str = "runs.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def _without_q_z(lines: list[dict], keep: int = 0) -> list[dict]:
    out, kept = [], 0
    for x in lines:
        x = json.loads(json.dumps(x))
        if x["stop_reason"] == "max_steps":
            if kept < keep:
                kept += 1
            else:
                x["q_z"] = None
        out.append(x)
    return out


def _renamed(lines: list[dict]) -> list[dict]:
    out = json.loads(json.dumps(lines))
    for x in out:
        for s in x["steps"]:
            if "verbal" in s["forecasts"]:
                s["forecasts"][LONG] = s["forecasts"].pop("verbal")
    return out


def _with_agent_key(lines: list[dict]) -> list[dict]:
    out = json.loads(json.dumps(lines))
    for i, x in enumerate(out):
        x["metadata"]["agent"] = "planner" if i % 2 else "executor-with-a-longer-name"
    return out


def _report(capsys, path: str, *extra: str) -> str:
    code, out, err = call(["report", path, "--bootstrap", "20", *extra], capsys)
    assert code == 0, err
    return out


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


VARIANTS = {
    "demo records": (lambda x: x, ()),
    "no q_z": (_without_q_z, ()),
    "q_z on some": (lambda x: _without_q_z(x, keep=2), ()),
    "long predictor name": (_renamed, ()),
    "every rule and schedule": (lambda x: x, ("--rules", "log,brier,beta(2,4)", "--weights", "all")),
    "by KEY": (_with_agent_key, ("--by", "agent")),
    "recalibrated": (lambda x: x, ("--calibrate", "platt")),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_line_fits_in_100_columns(variant, demo_lines, tmp_path, capsys):
    change, extra = VARIANTS[variant]
    lines = change(demo_lines)
    text = _report(capsys, _write(tmp_path, lines), *extra)
    assert _too_wide(text) == []
    # Nothing was lost to fit: every predictor's name and every scored mean is printed whole.
    for p in {p for x in lines for s in x["steps"] for p in s["forecasts"]}:
        assert p in text
    if "--by" not in extra:
        code, out, _ = call(
            ["report", _write(tmp_path, lines, "j.jsonl"), "--bootstrap", "20", "--json", *extra], capsys
        )
        assert code == 0
        for row in json.loads(out)["scores"]:
            if row["mean"] is not None:
                assert f"{row['mean']:.4g}" in text


def test_wide_keeps_the_side_by_side_tables(demo_lines, tmp_path, capsys):
    path = _write(tmp_path, demo_lines)
    wide = _report(capsys, path, "--wide")
    header = next(line for line in wide.splitlines() if "cen-simple (q_Z~0)" in line and "complete-only" in line)
    assert len(header) > WIDTH  # one column per evaluator, as before
    narrow = _report(capsys, path)
    assert narrow.split("Disclosure")[1] == wide.split("Disclosure")[1]  # same disclosure and legend


def test_narrow_rows_carry_the_same_numbers_as_the_json(demo_lines, tmp_path, capsys):
    path = _write(tmp_path, demo_lines)
    text = _report(capsys, path, "--rules", "log", "--bootstrap", "50")
    _, out, _ = call(["report", path, "--rules", "log", "--bootstrap", "50", "--json"], capsys)
    rows = json.loads(out)["scores"]
    label = {"complete-only": "complete-only", "simple": "cen-simple", "exact": "cen-exact"}
    for r in rows:
        ci = f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]" if r["ci_low"] is not None else "-"
        mean = f"{r['mean']:.4g}"
        pattern = (
            rf"^  {re.escape(r['predictor'])} +{label[r['censoring']]} +{re.escape(mean)} +{re.escape(ci)} +{r['n']}$"
        )
        assert re.search(pattern, text, re.M), pattern


def _legend(text: str) -> str:
    return text.split("How to read this report")[1]


def _entries(legend: str) -> dict[str, str]:
    """Legend term -> its explanation, wrapped lines joined."""
    out: dict[str, str] = {}
    term = None
    for line in legend.splitlines()[1:]:
        if line.startswith("    ") and term:
            out[term] += " " + line.strip()
        elif line.startswith("  "):
            term, _, text = line.strip().partition(": ")
            out[term] = text
    return out


def test_the_legend_explains_every_printed_term(demo_lines, tmp_path, capsys):
    text = _report(capsys, _write(tmp_path, demo_lines), "--rules", "log,beta(2,4)", "--calibrate", "platt")
    legend = _legend(text)
    body = text.split("How to read this report")[0]
    for term in (
        "TPS",
        "log",
        "beta(2,4)",
        "linear-front",
        "complete-only",
        "cen-simple (q_Z~0)",
        "cen-exact (q_z)",
        "Delta_practice",
        "delta/SE",
        "base_rate",
        "+platt",
        "AUROC^",
        "AURC_v",
        "T-ECE_v",
        "T-Brier_v",
        "phi_w",
        "phi_last",
        "phi_avg",
        "phi_min",
        "working sample",
        "censoring rate",
    ):
        assert f"\n  {term}" in legend, term
        assert term.split(" ")[0].rstrip("^_v") in body  # a term the report printed
    # Direction stated where it applies.
    entries = _entries(legend)
    for higher in ("TPS", "AUROC^ / AUPRC^"):
        assert "higher is better" in entries[higher]
    for lower in ("AURC_v", "T-ECE_v", "T-Brier_v"):
        assert "lower is better" in entries[lower], lower
    # brier is not printed, so not explained.
    assert "\n  brier:" not in legend


def test_the_legend_lists_only_terms_the_report_printed(demo_lines, tmp_path, capsys):
    text = _report(capsys, _write(tmp_path, _without_q_z(demo_lines)), "--no-base-rate")
    legend = _legend(text)
    assert "cen-exact" not in text.split("Disclosure")[0]  # no q_z: no cen-exact rows ...
    assert not [k for k in _entries(legend) if k.startswith("cen-exact")]  # ... and nothing to explain
    assert "base_rate" not in _entries(legend) and "+platt" not in _entries(legend)


def test_the_by_report_prints_one_legend(demo_lines, tmp_path, capsys):
    text = _report(capsys, _write(tmp_path, _with_agent_key(demo_lines)), "--by", "agent")
    assert text.count("TPS report:") == 2
    assert text.count("How to read this report") == 1


def _disclosure(text: str) -> str:
    return " ".join(text.split("Disclosure: ")[1].split("\n\n")[0].split())


def test_the_disclosure_states_what_cen_exact_rests_on(demo_lines, tmp_path, capsys):
    n_censored = sum(x["stop_reason"] == "max_steps" for x in demo_lines)
    full = _disclosure(_report(capsys, _write(tmp_path, demo_lines)))
    assert f"cen-exact uses the q_z recorded in the file for all {n_censored} censored runs" in full

    none = _disclosure(_report(capsys, _write(tmp_path, _without_q_z(demo_lines))))
    assert "no censored run carries q_z, so there are no cen-exact rows" in none
    assert "uses the q_z" not in none  # the sentence earlier versions printed regardless

    some = _disclosure(_report(capsys, _write(tmp_path, _without_q_z(demo_lines, keep=2))))
    assert f"for 2 of {n_censored} censored runs and leaves the others out" in some

    clean_only = [x for x in demo_lines if x["stop_reason"] != "max_steps"]
    nothing = _disclosure(_report(capsys, _write(tmp_path, clean_only)))
    assert "no run in the working sample was censored" in nothing and "q_z" not in nothing


def test_the_disclosure_names_the_roles_of_the_policy_in_force(demo_lines, tmp_path, capsys):
    path = _write(tmp_path, demo_lines)
    reasons = {x["stop_reason"] for x in demo_lines}
    assert "parse_error" in reasons
    default = _disclosure(_report(capsys, path))
    assert "max_steps stops are treated as administrative" in default
    assert "parse_error" in default.split("informative stops (")[1].split(")")[0]
    sens = _disclosure(_report(capsys, path, "--treat-as-censored", "parse_error"))
    assert "max_steps and parse_error stops are treated as administrative" in sens


def _audit_table(text: str) -> dict[str, tuple[int, str]]:
    """stop reason -> (count, role) from the text report's audit table (rows under its header)."""
    block = text.split("Termination audit\n", 1)[1].split("\n  working sample", 1)[0]
    rows = {}
    for line in block.splitlines()[1:]:
        m = re.match(r"^\s*(\S.*?)\s{2,}(\d+)\s{2,}(\S.*?)\s*$", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), m.group(3))
    return rows


def test_audit_table_adds_up_when_outcomes_are_pending(demo_lines, tmp_path, capsys):
    lines = json.loads(json.dumps(demo_lines))
    clean = [x for x in lines if x["stop_reason"] == "clean"]
    for x in clean[:3]:
        x["outcome"], x["outcome_pending"] = None, True
    text = _report(capsys, _write(tmp_path, lines))
    table = _audit_table(text)
    # Independent counts from the records themselves.
    by_reason: dict[str, int] = {}
    for x in lines:
        by_reason[x["stop_reason"]] = by_reason.get(x["stop_reason"], 0) + 1
    assert table["clean, outcome pending"] == (3, "pending: not scored yet")
    assert table["clean, outcome known"] == (len(clean) - 3, "complete")
    assert "clean" not in table
    assert sum(count for count, _ in table.values()) == len(lines)
    complete = sum(c for c, role in table.values() if role == "complete")
    censored = sum(c for c, role in table.values() if role == "censored")
    assert complete == len(clean) - 3
    working = re.search(r"working sample (\d+) = (\d+) complete \+ (\d+) censored", text)
    assert working is not None
    assert tuple(map(int, working.groups())) == (complete + censored, complete, censored)
    assert censored == by_reason["max_steps"]
