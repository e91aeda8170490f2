"""Why a LangChain / LangGraph run stopped, from how its root run ended.

The budget texts and exception names are in `tps_tracer.capture.stop_signals` (shared
with the OpenTelemetry span processor); here they are applied to LangChain's objects:
exception chains (with isinstance checks for parser and tool failures) and final
messages (invalid tool calls, error ToolMessages).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import ToolException

from tps_tracer.capture.stop_signals import PARSE_EXCEPTIONS, classify_exception_names, is_budget_text
from tps_tracer.records.stop_reasons import StopReason


def _exception_chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen and len(seen) < 8:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def exception_names(exc: BaseException) -> list[str]:
    """Class names of an exception's chain (outermost first); subclasses of LangChain's parser / tool
    exceptions are named as their base too."""
    chain = _exception_chain(exc)
    names = [type(e).__name__ for e in chain]
    if any(isinstance(e, OutputParserException) for e in chain):
        names.append("OutputParserException")
    if any(isinstance(e, ToolException) for e in chain):
        names.append("ToolException")
    return names


def classify_error(exc: BaseException, tool_failed: bool = False) -> tuple[StopReason, str]:
    """Stop reason of a root run that raised; `tool_failed`: a tool run errored just before."""
    return classify_exception_names(exception_names(exc), tool_failed)


def is_parse_failure(exc: BaseException) -> bool:
    """A chain run raised because it rejected the model's output (a parser, create_agent's structured output)."""
    return isinstance(exc, OutputParserException) or type(exc).__name__ in PARSE_EXCEPTIONS


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
    if text is not None and is_budget_text(text):
        return StopReason.MAX_STEPS, "budget message"
    if isinstance(last, AIMessage) and last.invalid_tool_calls and not last.tool_calls:
        return StopReason.PARSE_ERROR, "invalid_tool_calls"
    if isinstance(last, ToolMessage) and last.status == "error":
        return StopReason.TOOL_ERROR, "error ToolMessage"
    return None, ""
