"""The world's `search` tool as a real LangChain tool. A scripted failure raises `ToolException`,
which ends the run unless `handle_errors`; with `branches=True` a continuation branch's clue is drawn
from the world's law given the clues in the graph state (`InjectedState`: LangGraph's ToolNode only).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.prebuilt import InjectedState

from tps_tracer.sim.world import AgentWorld, clue_text, continuation_clue

_QUERY = re.compile(r"^\s*(?P<task>[\w.\-]+)\s+clue\s+(?P<t>\d+)\s*$")


def search_tool(world: AgentWorld, handle_errors: bool = False, branches: bool = False) -> BaseTool:
    def search(query: str) -> str:
        """Look up one clue about the task, e.g. 'task-00017 clue 3'."""
        m = _QUERY.match(query)
        if not m or m.group("task") not in world.tasks:
            raise ToolException(f"no such clue: {query!r}")
        script = world[m.group("task")]
        t = int(m.group("t"))
        if not 1 <= t <= len(script.steps):
            raise ToolException(f"no such clue: {query!r}")
        step = script.steps[t - 1]
        if step.tool_fails:
            raise ToolException("search backend unavailable")
        return clue_text(t, step.evidence)

    if not branches:
        return StructuredTool.from_function(search, name="search", handle_tool_error=handle_errors)

    from tps_tracer.sim.scripted_model import branch_thread, clues_seen

    def search_or_branch(query: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Look up one clue about the task, e.g. 'task-00017 clue 3'."""
        thread = branch_thread()
        if thread is None:
            return search(query)
        seen = clues_seen(state.get("messages", []))
        m = _QUERY.match(query)
        if not m or m.group("task") not in world.tasks or int(m.group("t")) != len(seen) + 1:
            raise ToolException(f"no such clue: {query!r} (clue {len(seen) + 1} is next)")
        fails, evidence = continuation_clue(world.config, world.seed, thread, seen)
        if fails:
            raise ToolException("search backend unavailable")
        return clue_text(len(seen) + 1, evidence)

    return StructuredTool.from_function(search_or_branch, name="search", handle_tool_error=handle_errors)
