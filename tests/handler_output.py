"""Record files exactly as `TPSCallbackHandler` writes them for a native tool-calling agent.

A native tool-calling model puts its action in `tool_calls`, not in the text, so the handler
finds no action span in the tokens: every step's `action_token_prob` and
`action_entropy_conf` are null (the handler's own output shape, which every command must
accept). The agent is LangChain's real `create_agent` loop with the real handler and its
JSON Lines sink; only the chat model is scripted (`NativeToolCallingModel`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.messages import AIMessage, HumanMessage

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.sim.agents import tool_calling_agent
from tps_tracer.sim.scripted_model import ScriptedReActModel, search_tool, task_prompt
from tps_tracer.sim.world import AgentWorld, StepScript, WorldConfig, openai_logprobs, query_of, tokenize

ACTION_PREDICTORS = ("action_token_prob", "action_entropy_conf")


class NativeToolCallingModel(ScriptedReActModel):
    """The world's script, spoken like a native tool-calling model: thought + confidence in the
    text, the action only as a tool call (so the text has no action span)."""

    def _message(self, task_id: str, step: StepScript, attempt: int) -> tuple[AIMessage, dict[str, Any] | None]:
        if attempt:  # malformed: only an invalid tool call (the agent ends the run on it)
            return super()._message(task_id, step, attempt)
        text = (
            f"<think>Step {step.t}: {'I have enough evidence' if step.final else 'I need another clue'}.</think>\n"
            f"<confidence>{step.verbal:.2f}</confidence>"
        )
        tokens = tokenize(text)
        probs = np.random.default_rng(step.token_seed).uniform(0.6, 0.999, len(tokens))
        lp = openai_logprobs(tokens, probs)
        if step.final:
            return AIMessage(content=text), lp
        call = {"name": "search", "args": {"query": query_of(task_id, step.t)}, "id": f"call_{task_id}_{step.t}"}
        return AIMessage(content=text, tool_calls=[call]), lp


def write_handler_output(
    path: Path, n_tasks: int = 60, seed: int = 11, config: WorldConfig | None = None, recursion_limit: int = 12
) -> Path:
    """Run `n_tasks` of a simulated world through `create_agent` with the handler; the sink is `path`."""
    world = AgentWorld(n_tasks, seed=seed, config=config or WorldConfig(malformed_rate=0.03, max_length=9))
    acc = Accumulator(sink=path, bootstrap=0)
    handler = TPSCallbackHandler(acc, horizon=recursion_limit // 2)
    agent = tool_calling_agent(NativeToolCallingModel(world=world), [search_tool(world)])
    for task in world:
        meta = {"tps_trajectory_id": task.task_id, "tps_outcome": task.outcome}
        cfg = {"callbacks": [handler], "metadata": meta, "recursion_limit": recursion_limit}
        try:
            agent.invoke({"messages": [HumanMessage(task_prompt(task.task_id))]}, config=cfg)
        except Exception:  # budget / tool errors end runs by raising; the handler recorded why
            pass
    handler.close()
    acc.close()
    return path
