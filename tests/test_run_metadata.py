"""What the user attaches to a run reaches the record, and parse errors follow the agent (issue 29).

Real LangGraph loops (`text_react_graph`, the paper's tagged format, with the agent's own
repair budget) driven by langchain-core's GenericFakeChatModel (a real BaseChatModel that
answers from a script), the real handler, accumulator, sink and CLI.
"""

from __future__ import annotations

import json
import math
from typing import Any

from cli_support import call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from scale_support import assert_reports_equal

from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.online import Accumulator
from tps_tracer.records import read_trajectories, write_trajectories
from tps_tracer.sim.agents import text_react_graph, text_react_inputs
from tps_tracer.tracking.keys import MAX_VALUE_CHARS


@tool
def search(query: str) -> str:
    """Look something up."""
    return f"result for {query}"


MALFORMED = "<think>let me think</think>\n<confidence>0.5</confidence>"  # no action: the parser rejects it


def answer(confidence: float) -> str:
    return f"<think>I know it</think>\n<confidence>{confidence}</confidence>\n<action>finish[Paris]</action>"


def searching(confidence: float) -> str:
    return f"<think>need a clue</think>\n<confidence>{confidence}</confidence>\n<action>search[capital]</action>"


def run_graph(texts: list[str], handler: TPSCallbackHandler, metadata: dict[str, Any], repair_budget: int) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(t) for t in texts]))
    graph = text_react_graph(model, [search], repair_budget=repair_budget)
    try:
        graph.invoke(
            text_react_inputs("What is the capital of France?"), config={"callbacks": [handler], "metadata": metadata}
        )
    except Exception:  # the agent's own parse error (repairs exhausted) ends the run by raising
        pass


def grader(final: Any) -> bool:
    return "finish[Paris]" in final.text


def test_three_repairs_then_a_clean_answer_is_clean_with_the_repairs_counted(tmp_path):
    """The agent allows 3 repairs; its run recovers after 3 malformed outputs and answers. Before
    issue 29 a fixed tracker budget of 2 recorded it parse_error, dropped the final step and the grade."""
    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(bootstrap=50, sink=sink)
    handler = TPSCallbackHandler(acc, grader=grader, background=False)
    run_graph([searching(0.4), *[MALFORMED] * 3, answer(0.8)], handler, {"tps_trajectory_id": "recovers"}, 3)
    # The agent gives up after its 3 repairs: the run ends on malformed output, a parse error.
    run_graph([searching(0.4), *[MALFORMED] * 4], handler, {"tps_trajectory_id": "gives-up"}, 3)
    handler.close()
    acc.close()
    recs = {r.trajectory_id: r for r in read_trajectories(sink)}
    ok = recs["recovers"]
    assert (ok.stop_reason, ok.outcome, len(ok.steps)) == ("clean", 1, 2)
    assert [s.forecasts["verbal"] for s in ok.steps] == [0.4, 0.8]
    assert ok.metadata["parse_repairs"] == 3 and ok.metadata["llm_calls"] == 5
    bad = recs["gives-up"]
    assert (bad.stop_reason, bad.outcome, len(bad.steps)) == ("parse_error", None, 1)
    assert bad.metadata["llm_calls"] == 5 and bad.metadata["parse_repairs"] == 4


def test_an_explicit_harness_budget_still_stops_the_run(tmp_path):
    """repair_budget=2 states a harness budget the agent does not enforce: the third malformed
    output in a row fixes parse_error, and later calls are ignored (counted)."""
    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(bootstrap=50, sink=sink)
    handler = TPSCallbackHandler(acc, repair_budget=2, background=False)
    run_graph([searching(0.4), *[MALFORMED] * 3, answer(0.8)], handler, {"tps_trajectory_id": "r"}, 3)
    handler.close()
    acc.close()
    rec = read_trajectories(sink)[0]
    assert (rec.stop_reason, len(rec.steps), rec.metadata["stop_detail"]) == ("parse_error", 1, "repairs exhausted")
    assert rec.metadata["ignored_calls"] == 1 and rec.metadata["parse_repairs"] == 2


def test_user_metadata_reaches_the_record_and_report_splits_by_it(tmp_path, capsys):
    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(bootstrap=100, sink=sink)
    handler = TPSCallbackHandler(acc, grader=grader, background=False)
    plan = [
        # (agent, model, confidences, answers right)
        ("planner", "m-small", (0.3, 0.9), True),
        ("planner", "m-large", (0.6, 0.7), True),
        ("planner", "m-small", (0.5, 0.2), False),
        ("coder", "m-large", (0.45, 0.65), True),
        ("coder", "m-small", (0.8, 0.35), False),
    ]
    for i, (agent, model, (c1, c2), right) in enumerate(plan):
        final = answer(c2) if right else answer(c2).replace("Paris", "Lyon")
        metadata = {
            "tps_trajectory_id": f"run-{i}",
            "agent": agent,
            "model": model,
            "task_id": f"hotpot-{i % 3}",  # the plain key: the gate pairs on it
            "temperature": 0.2,
            "seed": i,
            "debug": False,
            "tools": ["search"],  # not a scalar: left out, counted
            "notes": "x" * (MAX_VALUE_CHARS + 1),  # too long: left out, counted
            "source": "user's own",  # tps-tracer's key wins a clash
        }
        run_graph([searching(c1), final], handler, metadata, 2)
    handler.close()
    acc.close()
    records = read_trajectories(sink)
    first = records[0].metadata
    assert {k: first[k] for k in ("agent", "model", "task_id", "temperature", "seed", "debug")} == {
        "agent": "planner",
        "model": "m-small",
        "task_id": "hotpot-0",
        "temperature": 0.2,
        "seed": 0,
        "debug": False,
    }
    assert first["source"] == "langchain" and first["tps_metadata_dropped"] == 2
    assert "tools" not in first and "notes" not in first
    assert not any(k.startswith(("langgraph_", "checkpoint_", "tps_trajectory")) for k in first)

    code, out, err = call(["report", str(sink), "--by", "agent", "--json", "--bootstrap", "100"], capsys)
    assert code == 0, err
    split = json.loads(out)
    assert split["by"] == "agent" and [(g["value"], g["n"]) for g in split["groups"]] == [("planner", 3), ("coder", 2)]
    for group in split["groups"]:  # each group's report is `report` on a file of that group alone
        only = tmp_path / f"{group['value']}.jsonl"
        write_trajectories([r for r in records if r.metadata["agent"] == group["value"]], only)
        code, alone, _ = call(["report", str(only), "--json", "--bootstrap", "100"], capsys)
        assert code == 0
        assert_reports_equal(group["report"], json.loads(alone))
    planner = next(g["report"] for g in split["groups"] if g["value"] == "planner")
    log_row = next(
        r
        for r in planner["scores"]
        if (r["predictor"], r["rule"], r["censoring"]) == ("verbal", "log", "complete-only")
    )
    # linear-front over T = 2 steps: w = (2/3, 1/3); outcomes 1, 1, 0
    expected = (
        (2 / 3) * math.log(0.3)
        + (1 / 3) * math.log(0.9)
        + (2 / 3) * math.log(0.6)
        + (1 / 3) * math.log(0.7)
        + (2 / 3) * math.log(0.5)
        + (1 / 3) * math.log(0.8)
    ) / 3
    assert abs(log_row["mean"] - expected) < 1e-12

    code, out, _ = call(["report", str(sink), "--by", "model", "--bootstrap", "100"], capsys)
    flat = " ".join(out.split())  # the report wraps its title at 100 columns (a long tmp path)
    assert code == 0 and "[model = m-small, 3 trajectories]" in flat and "[model = m-large, 2 trajectories]" in flat
    code, _, err = call(["report", str(sink), "--by", "nothing-here", "--bootstrap", "100"], capsys)
    assert code == 0  # one group, "(missing)"
