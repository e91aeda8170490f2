"""The world's tool, as a real LangChain tool: `search("TASK clue t")` reveals evidence s_t.

A scripted tool failure raises `ToolException`. LangChain tools re-raise it unless
`handle_tool_error` is set, so by default a failing tool ends the run (the paper's harness
treats tool errors as terminal); pass `handle_errors=True` to turn failures into error
`ToolMessage`s the agent sees instead.
"""

from __future__ import annotations

import re

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from tps_tracer.sim.world import AgentWorld

_QUERY = re.compile(r"^\s*(?P<task>[\w.\-]+)\s+clue\s+(?P<t>\d+)\s*$")


def search_tool(world: AgentWorld, handle_errors: bool = False) -> BaseTool:
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
        return f"Clue {t}: the evidence is {'positive' if step.evidence else 'negative'}."

    return StructuredTool.from_function(search, name="search", handle_tool_error=handle_errors)
