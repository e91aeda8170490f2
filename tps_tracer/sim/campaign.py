"""Run every task of a simulated world through LangGraph's prebuilt ReAct agent with the handler attached
(trajectory "<label>/<task id>", the world's outcome as `tps_outcome`; with a checkpointer, one thread per run)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from tps_tracer.langchain.handler import TPSCallbackHandler
from tps_tracer.online.accumulator import Accumulator
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.agents import prebuilt_react_agent
from tps_tracer.sim.scripted_model import ScriptedReActModel, search_tool, task_prompt
from tps_tracer.sim.world import AgentWorld
from tps_tracer.tracking.keys import OUTCOME_KEY, TASK_ID_KEY, TRAJECTORY_ID_KEY

# An even LangGraph recursion limit 2B allows B model calls (the prebuilt agent ends with
# "Sorry, need more steps..." after the B-th), so 16 is a budget of 8 ReAct steps.
DEFAULT_RECURSION_LIMIT = 16


def run_campaign(
    world: AgentWorld,
    sink: str | os.PathLike[str],
    model: BaseChatModel | None = None,
    recursion_limit: int = DEFAULT_RECURSION_LIMIT,
    progress: Callable[[int], Any] | None = None,
    q_z_oracle: bool = False,
    checkpointer: Any = None,
) -> Any:
    """The compiled graph the runs were made with. q_z_oracle: give every run the world's budget cuts short
    its exact q_Z = P(Y=1 | H_Z) (a simulator privilege: real deployments estimate it, see the censoring toolkit)."""
    label = world.config.forecaster
    acc = Accumulator(sink=sink, bootstrap=0)  # the records are the product
    handler = TPSCallbackHandler(acc, horizon=recursion_limit // 2)
    tools = [search_tool(world, branches=checkpointer is not None)]
    agent = prebuilt_react_agent(model or ScriptedReActModel(world=world), tools, checkpointer=checkpointer)
    q_z_lines: list[tuple[str, float]] = []
    for task in world:
        trajectory_id = f"{label}/{task.task_id}"
        metadata = {TRAJECTORY_ID_KEY: trajectory_id, TASK_ID_KEY: task.task_id, OUTCOME_KEY: task.outcome}
        # The root run id is written into the record (langchain_run_id): derived from the trajectory
        # id, so equal campaigns write equal files.
        config: dict[str, Any] = {
            "callbacks": [handler],
            "metadata": metadata,
            "recursion_limit": recursion_limit,
            "run_id": uuid.uuid5(uuid.NAMESPACE_URL, trajectory_id),
        }
        if checkpointer is not None:
            config["configurable"] = {"thread_id": trajectory_id}
        with contextlib.suppress(Exception):  # the run ended on an error; the handler recorded why
            agent.invoke({"messages": [HumanMessage(task_prompt(task.task_id))]}, config=config)
        if q_z_oracle:
            expected = task.expected(recursion_limit // 2, repairs=False)
            if expected.stop_reason is StopReason.MAX_STEPS and expected.n_steps:
                q_z_lines.append((trajectory_id, task.steps[expected.n_steps - 1].q))
        if progress is not None:
            progress(1)
    # q_Z only after every record is written, so it always lands as a resolution line: equal campaigns, equal files.
    handler.flush()
    for trajectory_id, q_z in q_z_lines:
        handler.record_outcome(trajectory_id, q_z=q_z)
    handler.close()
    acc.close()
    return agent
