"""A newcomer with the README only: attach the handler to their own small agent, read the report, gate.

Issue 34's newcomer test. The agent is written here, not taken from tps_tracer.sim: a hand-built
LangGraph ReAct loop (model node, tool node) around a scripted chat model of this file, which states
its confidence the way the README asks ("Confidence: 0.73"). The README's own blocks are run, found by
their section: the handler block once per task (the newcomer's one edit: the task's id and grade in
place of "task-17" and `success=True`), then the report and gate commands as written, in a folder
that holds only what the README names (runs.jsonl, the bundled examples/). The TPS the report prints is
checked against the log score computed here from the stated confidences.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
N_TASKS = 60


def _section_blocks(heading: str) -> list[tuple[str, str]]:
    """(language, code) of the fenced blocks under one `## heading` of the README."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w+)\n(.*?)^```", section, re.M | re.S)


def _agent(confidences: list[float]) -> Any:
    """A ReAct loop: the model searches once, then answers; each call states its confidence."""

    @tool
    def search(query: str) -> str:
        """Look something up."""
        return f"results for {query}"

    class Scripted(BaseChatModel):
        confidence: float

        @property
        def _llm_type(self) -> str:
            return "newcomer-scripted"

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any):
            searched = any(m.type == "tool" for m in messages)
            if searched:
                msg = AIMessage(f"The answer is 42.\nConfidence: {self.confidence}")
            else:
                call = {"name": "search", "args": {"query": "the question"}, "id": "call-1", "type": "tool_call"}
                msg = AIMessage(f"Let me search.\nConfidence: {self.confidence}", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=msg)])

    def build(confidence: float) -> Any:
        model = Scripted(confidence=confidence)

        def call_model(state: MessagesState) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        def route(state: MessagesState) -> str:
            return "tools" if state["messages"][-1].tool_calls else END

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode([search]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route, ["tools", END])
        graph.add_edge("tools", "model")
        return graph.compile()

    return [build(c) for c in confidences]


def _campaign(folder: Path, sink: str, confidences: list[float], outcomes: list[int]) -> None:
    """The README's handler block, once per task, in `folder` (the newcomer edits only the id and grade)."""
    [(lang, code)] = [b for b in _section_blocks("Attach to your agent") if "TPSCallbackHandler" in b[1]]
    assert lang == "python" and '"task-17"' in code and "success=True" in code and 'sink="runs.jsonl"' in code
    from tps_tracer import Accumulator

    cwd = Path.cwd()
    os.chdir(folder)
    try:
        for i, (agent, y) in enumerate(zip(_agent(confidences), outcomes, strict=True)):
            mine = code.replace('"task-17"', repr(f"task-{i}")).replace("success=True", f"success={bool(y)}")
            ns: dict[str, Any] = {"agent": agent, "question": f"question {i}"}
            exec(compile(mine.replace('sink="runs.jsonl"', f"sink={sink!r}"), f"README:{i}", "exec"), ns)
            ns["handler"].close()
            for value in ns.values():
                if isinstance(value, Accumulator):
                    value.close()
    finally:
        os.chdir(cwd)


def _tps_log_linear_front(forecasts: list[float], y: int) -> float:
    """sum_t w_t log(F_t if y else 1 - F_t), w_t proportional to T - t + 1, summing to 1 (T = steps)."""
    T = len(forecasts)
    w = np.arange(T, 0, -1, dtype=float)
    w /= w.sum()
    return float(sum(wt * math.log(f if y else 1 - f) for wt, f in zip(w, forecasts, strict=True)))


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory) -> tuple[Path, list[float], list[int]]:
    folder = tmp_path_factory.mktemp("newcomer")
    shutil.copytree(ROOT / "examples", folder / "examples")  # the README's bundled example file
    rng = np.random.default_rng(34)
    q = [round(float(x), 2) for x in rng.uniform(0.05, 0.95, N_TASKS)]  # each task's chance of success
    y = [int(rng.random() < p) for p in q]
    _campaign(folder, "runs.jsonl", q, y)  # a truthful agent: it states its task's chance
    shutil.copy(folder / "runs.jsonl", folder / "main.jsonl")  # the released agent, as the baseline
    _campaign(folder, "cand.jsonl", [0.99] * N_TASKS, y)  # a candidate sure of everything
    return folder, q, y


def _sh(line: str, cwd: Path, summary: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "GITHUB_STEP_SUMMARY": str(summary)}
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=cwd, env=env, capture_output=True, text=True)


def test_the_handler_records_every_run_of_my_agent(newcomer):
    folder, q, y = newcomer
    records = [json.loads(x) for x in (folder / "runs.jsonl").read_text().splitlines()]
    records = {r["trajectory_id"]: r for r in records if "trajectory_id" in r}
    assert sorted(records) == sorted(f"task-{i}" for i in range(N_TASKS))
    for i in range(N_TASKS):
        r = records[f"task-{i}"]
        assert r["stop_reason"] == "clean" and r["outcome"] == y[i]
        assert [s["forecasts"]["verbal"] for s in r["steps"]] == [q[i], q[i]]  # two model calls


def test_the_report_commands_print_what_the_readme_says(newcomer, tmp_path):
    folder, q, y = newcomer
    [(lang, code)] = _section_blocks("Read the report")
    assert lang == "sh"
    for line in [x for x in code.splitlines() if x.strip()]:
        out = _sh(line, folder, tmp_path / "summary.md")
        assert out.returncode == 0, f"{line}: {out.stderr[-2000:]}"
    report = json.loads((folder / "report.json").read_text())
    [row] = [
        r
        for r in report["scores"]
        if (r["predictor"], r["rule"], r["weights"], r["censoring"])
        == ("verbal", "log", "linear-front", "complete-only")
    ]
    expected = np.mean([_tps_log_linear_front([p, p], yi) for p, yi in zip(q, y, strict=True)])
    assert row["n"] == N_TASKS and row["mean"] == pytest.approx(expected, abs=1e-12)
    text = _sh("tps-tracer report runs.jsonl --bootstrap 0", folder, tmp_path / "s.md").stdout
    for part in ["Termination audit", "complete-only", "cen-simple (q_Z~0)", "Delta_practice", "AUROC"]:
        assert part in text, part  # the parts the README tells the newcomer to look at


def test_the_gate_passes_my_agent_and_fails_an_overconfident_candidate(newcomer, tmp_path):
    folder, _, _ = newcomer
    [(lang, code)] = _section_blocks("Gate in CI")
    assert lang == "sh"
    vs_base, vs_baseline = [x for x in code.splitlines() if x.strip()]
    summary = tmp_path / "summary.md"
    passed = _sh(vs_base, folder, summary)
    assert passed.returncode == 0, passed.stdout + passed.stderr  # a truthful agent beats the base rate
    failed = _sh(vs_baseline, folder, summary)
    assert failed.returncode == 1, failed.stdout + failed.stderr  # 0.99 on every task: a drop
    assert "| vs_baseline | both | FAIL |" in summary.read_text()
