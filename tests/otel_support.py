"""Shared by the OpenTelemetry tests: instrument LangChain with a real instrumentor, run sim agents."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from langchain_core.messages import HumanMessage
from opentelemetry.sdk.trace import TracerProvider

from tps_tracer.sim.agents import (
    classic_react_executor,
    prebuilt_react_agent,
    text_react_graph,
    text_react_inputs,
    tool_calling_agent,
)
from tps_tracer.sim.scripted_model import ScriptedReActModel, search_tool, task_prompt
from tps_tracer.sim.world import AgentWorld


@contextlib.contextmanager
def instrumented(provider: TracerProvider, source: str = "openinference", hide_inputs: bool = False) -> Iterator[None]:
    """LangChain instrumented by OpenInference (Arize) or OpenLLMetry (Traceloop), undone afterwards.

    hide_inputs: OpenInference's privacy setting (prompts are not recorded; outputs, which carry
    the logprobs, are), which also keeps the spans small for a real backend."""
    options: dict[str, Any] = {}
    if source == "openinference":
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.langchain import LangChainInstrumentor

        instrumentor: Any = LangChainInstrumentor()
        options["config"] = TraceConfig(hide_inputs=hide_inputs, hide_input_messages=hide_inputs)
    else:
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        instrumentor = LangchainInstrumentor()
    instrumentor.instrument(tracer_provider=provider, **options)
    try:
        yield
    finally:
        if source == "openinference":
            instrumentor.uninstrument()
        else:
            _uninstrument_openllmetry(instrumentor)


def _uninstrument_openllmetry(instrumentor: Any) -> None:
    """opentelemetry-instrumentation-langchain 0.62 unwraps with unwrap("langchain_core.callbacks",
    "BaseCallbackManager.__init__"); the dotted attribute is never resolved, so nothing is undone
    and every later callback manager keeps a Traceloop handler (and LangGraph's Pregel.stream its
    wrapper). Uninstrument with an unwrap that follows dotted attributes."""
    import opentelemetry.instrumentation.langchain as openllmetry
    from opentelemetry.instrumentation.utils import unwrap

    def dotted_unwrap(obj: Any, attr: str) -> None:
        if isinstance(obj, str):
            module_path, _, rest = attr.rpartition(".")
            obj = importlib.import_module(obj)
            for part in module_path.split(".") if module_path else []:
                obj = getattr(obj, part)
            attr = rest
        unwrap(obj, attr)

    original = openllmetry.unwrap
    openllmetry.unwrap = dotted_unwrap  # type: ignore[attr-defined]
    try:
        instrumentor.uninstrument()
    finally:
        openllmetry.unwrap = original  # type: ignore[attr-defined]


def messages(task_id: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(task_prompt(task_id))]}


def agent_for(runtime: str, world: AgentWorld) -> tuple[Any, Callable[[str], Any], dict[str, Any], str]:
    """(agent, inputs(task_id), extra config, rendering style) for one of the sim runtimes."""
    if runtime == "prebuilt":
        return prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)]), messages, {}, "tagged"
    if runtime in ("model-limit", "tool-limit"):
        from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware

        middleware = (
            ModelCallLimitMiddleware(run_limit=5, exit_behavior="end")
            if runtime == "model-limit"
            else ToolCallLimitMiddleware(run_limit=4, exit_behavior="error")
        )
        agent = tool_calling_agent(ScriptedReActModel(world=world), [search_tool(world)], [middleware])
        return agent, messages, {}, "tagged"
    if runtime == "text-graph":
        graph = text_react_graph(ScriptedReActModel(world=world, style="tagged"), [search_tool(world)])
        return graph, lambda tid: text_react_inputs(task_prompt(tid)), {"recursion_limit": 12}, "tagged"
    if runtime == "executor":
        executor = classic_react_executor(ScriptedReActModel(world=world, style="react"), [search_tool(world)], 6)
        return executor, lambda tid: {"input": task_prompt(tid)}, {}, "react"
    raise ValueError(runtime)


def run_tasks(agent: Any, inputs: Callable[[str], Any], world: AgentWorld, callbacks: list[Any], **config: Any) -> int:
    """Invoke the agent on every task of the world (metadata carries the task id); returns how many raised."""
    raised = 0
    extra_metadata = config.pop("metadata", {})
    for task in world:
        metadata = {"tps_trajectory_id": task.task_id, **extra_metadata}
        try:
            agent.invoke(inputs(task.task_id), config={"callbacks": callbacks, "metadata": metadata, **config})
        except Exception:
            raised += 1
    return raised
