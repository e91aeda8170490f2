"""Why a LangChain / LangGraph run stopped, from how its root run ended.

Several budget stops look like clean finishes: the runtime returns normally with a
canned final message instead of raising. They are recognised by that message:


- langchain-classic AgentExecutor (max_iterations / max_execution_time, early stopping
  "force"): output "Agent stopped due to iteration limit or time limit.";
- LangGraph's prebuilt ReAct agent (remaining_steps guard): final AIMessage "Sorry, need
  more steps to process this request.";
- langchain `ModelCallLimitMiddleware(exit_behavior="end")`: final AIMessage "Model call
  limits exceeded: ...";
- langchain `ToolCallLimitMiddleware(exit_behavior="end")`: final AIMessage "... call limit
  reached: ...".

LangGraph's recursion limit raises GraphRecursionError (on the root run only); the
middlewares with exit_behavior="error" raise ModelCallLimitExceededError /
ToolCallLimitExceededError.

Exceptions are matched by class name, so this module imports neither langgraph nor
langchain (and keeps working when they move a class).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import ToolException

from tps_tracer.records.stop_reasons import StopReason

BUDGET_EXCEPTIONS = frozenset({"GraphRecursionError", "ModelCallLimitExceededError", "ToolCallLimitExceededError"})
TIMEOUT_EXCEPTIONS = frozenset({"TimeoutError", "TimeoutException", "ReadTimeout", "APITimeoutError"})

# Canned final texts of budget stops (see the module table). Anchored, so an agent that
# merely talks about limits is not mistaken for one that hit them.
BUDGET_TEXTS: tuple[re.Pattern[str], ...] = (
    re.compile(r"^\s*Agent stopped due to (?:iteration limit or time limit|max iterations)\.?\s*$"),
    re.compile(r"^\s*Sorry, need more steps to process this request\.?\s*$"),
    re.compile(r"^\s*Model call limits exceeded: "),
    re.compile(r"^\s*(?:Tool|'[^']*' tool) call limit reached: "),
)


def _exception_chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen and len(seen) < 8:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def classify_error(exc: BaseException, tool_failed: bool = False) -> tuple[StopReason, str]:
    """Stop reason of a root run that raised; `tool_failed`: a tool run errored just before."""
    chain = _exception_chain(exc)
    names = [type(e).__name__ for e in chain]
    detail = names[0]
    if any(n in BUDGET_EXCEPTIONS for n in names):
        return StopReason.MAX_STEPS, detail
    if any(isinstance(e, OutputParserException) for e in chain):
        return StopReason.PARSE_ERROR, detail
    if tool_failed or any(isinstance(e, ToolException) for e in chain):
        return StopReason.TOOL_ERROR, detail
    if any(n in TIMEOUT_EXCEPTIONS for n in names):
        return StopReason.TIMEOUT, detail
    return StopReason.OTHER, detail


def final_message(outputs: Any) -> Any:
    """The last message (LangGraph state) or the output value (AgentExecutor) of a root run."""
    if isinstance(outputs, Mapping):
        messages = outputs.get("messages")
        if isinstance(messages, Sequence) and not isinstance(messages, str) and messages:
            return messages[-1]
        if "output" in outputs:
            return outputs["output"]
        return None
    if isinstance(outputs, BaseMessage):
        return outputs
    if isinstance(outputs, Sequence) and not isinstance(outputs, str) and outputs:
        return outputs[-1]
    return outputs


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseMessage):
        return value.text if isinstance(value.text, str) else str(value.content)
    return None


def classify_output(outputs: Any) -> tuple[StopReason | None, str]:
    """Stop reason signalled by a root run's normal return, or None when it looks clean.

    Recognises the budget texts above, a final message with only invalid tool calls (the
    run ended on malformed output), and a final error ToolMessage (it ended on a tool error).
    """
    last = final_message(outputs)
    text = _text(last)
    if text is not None:
        for pattern in BUDGET_TEXTS:
            if pattern.search(text):
                return StopReason.MAX_STEPS, "budget message"
    if isinstance(last, AIMessage) and last.invalid_tool_calls and not last.tool_calls:
        return StopReason.PARSE_ERROR, "invalid_tool_calls"
    if isinstance(last, ToolMessage) and last.status == "error":
        return StopReason.TOOL_ERROR, "error ToolMessage"
    return None, ""
