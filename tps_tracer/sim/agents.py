"""Real agent loops over the simulated world, one per runtime the handler supports, each taking any chat model
(LangGraph's `recursion_limit` 2B allows B model calls; AgentExecutor's budget is `max_iterations`), and the
campaign that runs every task of a world through LangGraph's prebuilt ReAct agent with the handler attached."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
import warnings
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.output_parsers import BaseOutputParser
from langchain_core.tools import BaseTool
from langgraph.graph import END, StateGraph
from langgraph.graph.message import add_messages

from tps_tracer.langchain.handler import TPSCallbackHandler
from tps_tracer.online.accumulator import Accumulator
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.sim.scripted_model import ScriptedReActModel, search_tool, task_prompt
from tps_tracer.sim.world import DEFAULT_REPAIR_BUDGET, AgentWorld
from tps_tracer.tracking.keys import OUTCOME_KEY, TASK_ID_KEY, TRAJECTORY_ID_KEY


def prebuilt_react_agent(model: BaseChatModel, tools: list[BaseTool], checkpointer: Any = None) -> Any:
    from langgraph.prebuilt import create_react_agent

    # Deprecated in favour of create_agent, but still what many deployed agents run on.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(model, tools, checkpointer=checkpointer)


def tool_calling_agent(model: BaseChatModel, tools: list[BaseTool], middleware: list[Any] | None = None) -> Any:
    from langchain.agents import create_agent

    return create_agent(model, tools, middleware=middleware or ())


# ---------------------------------------------------------------- the paper's tagged text loop

_ACTION = re.compile(r"<action>\s*(?P<tool>\w+)\[(?P<arg>[^\]]*)\]\s*</action>", re.IGNORECASE)


class TaggedActionParser(BaseOutputParser[tuple[str, str]]):
    """Reads `<action>tool[argument]</action>`; raises OutputParserException otherwise."""

    def parse(self, text: str) -> tuple[str, str]:
        found = list(_ACTION.finditer(text))
        if not found:
            raise OutputParserException(f"no <action>tool[argument]</action> in the output: {text[:80]!r}")
        return found[-1].group("tool"), found[-1].group("arg")


class TextReActState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    repairs: int
    answer: str | None


def text_react_graph(model: BaseChatModel, tools: list[BaseTool], repair_budget: int = DEFAULT_REPAIR_BUDGET) -> Any:
    by_name = {t.name: t for t in tools}
    parser = TaggedActionParser()

    def agent(state: TextReActState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def act(state: TextReActState) -> dict[str, Any]:
        last = state["messages"][-1]
        text = last.text if isinstance(last, AIMessage) else str(last.content)
        try:
            tool, arg = parser.invoke(text)
        except OutputParserException as exc:
            if state.get("repairs", 0) >= repair_budget:
                raise  # repairs exhausted: the run ends as a parse error
            nudge = f"Your output could not be parsed ({exc}). Answer again using <action>tool[argument]</action>."
            return {"messages": [HumanMessage(nudge)], "repairs": state.get("repairs", 0) + 1}
        if tool == "finish":
            return {"answer": arg, "repairs": 0}
        if tool not in by_name:
            return {"messages": [HumanMessage(f"Observation: unknown tool {tool!r}.")], "repairs": 0}
        observation = by_name[tool].invoke(arg)
        return {"messages": [HumanMessage(f"Observation: {observation}")], "repairs": 0}

    def route(state: TextReActState) -> str:
        return END if state.get("answer") is not None else "agent"

    graph = StateGraph(TextReActState)
    graph.add_node("agent", agent)
    graph.add_node("act", act)
    graph.set_entry_point("agent")
    graph.add_edge("agent", "act")
    graph.add_conditional_edges("act", route, {END: END, "agent": "agent"})
    return graph.compile(name="text_react_agent")


def text_react_inputs(prompt: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(prompt)], "repairs": 0, "answer": None}


# ---------------------------------------------------------------- langchain-classic AgentExecutor

REACT_PROMPT = """Answer the question as best you can. You have access to the following tools:

{tools}

Use this format:
Thought: what to do next
Confidence: your probability (0 to 1) that the task will succeed
Action: one of [{tool_names}]
Action Input: the input to the action
Observation: the result of the action
... (repeat Thought/Confidence/Action/Action Input/Observation as needed)
Thought: I now know the final answer
Confidence: your probability that the answer is right
Final Answer: the answer

Question: {input}
Thought:{agent_scratchpad}"""


def classic_react_executor(model: BaseChatModel, tools: list[BaseTool], max_iterations: int | None = 15) -> Any:
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.prompts import PromptTemplate

    agent = create_react_agent(model, tools, PromptTemplate.from_template(REACT_PROMPT))
    return AgentExecutor(agent=agent, tools=tools, max_iterations=max_iterations, handle_parsing_errors=True)


# ---------------------------------------------------------------- a campaign: a world's every task, recorded

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
    acc = Accumulator(sink=sink, bootstrap=0)  # the records are the product
    handler = TPSCallbackHandler(acc, horizon=recursion_limit // 2)
    tools = [search_tool(world, branches=checkpointer is not None)]
    agent = prebuilt_react_agent(model or ScriptedReActModel(world=world), tools, checkpointer=checkpointer)
    q_z_lines: list[tuple[str, float]] = []
    for task in world:
        trajectory_id = f"{world.config.forecaster}/{task.task_id}"
        # The root run id is written into the record (langchain_run_id): derived from the trajectory
        # id, so equal campaigns write equal files.
        config: dict[str, Any] = {
            "callbacks": [handler],
            "metadata": {TRAJECTORY_ID_KEY: trajectory_id, TASK_ID_KEY: task.task_id, OUTCOME_KEY: task.outcome},
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
