"""Why an agent run stopped, from exception class names and canned final texts only, shared by the
LangChain handler and the OpenTelemetry span processor (docs/capture.md and docs/otel.md list the frameworks' stops).
Exceptions are matched by class name (last dotted component), so a class that moves is still found."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tps_tracer.records.stop_reasons import StopReason

BUDGET_EXCEPTIONS = frozenset(
    {
        "GraphRecursionError",
        "ModelCallLimitExceededError",
        "ToolCallLimitExceededError",
        "UsageLimitExceeded",  # pydantic-ai
        "MaxTurnsExceeded",  # OpenAI Agents SDK
        "AgentMaxStepsError",  # smolagents
        "BranchStepBudgetExceeded",  # tps_tracer.langchain.resume: a resumed branch used its step budget
    }
)
PARSE_EXCEPTIONS = frozenset(
    {
        "OutputParserException",
        "StructuredOutputError",  # langchain.agents.structured_output, and its two subclasses
        "StructuredOutputValidationError",
        "MultipleStructuredOutputsError",
    }
)
# Raised by a model call whose output its client could not parse: malformed output, not a failed call.
# Only for a model call: a tool or a node raising it is not the model's output failing.
MALFORMED_CALL_EXCEPTIONS = PARSE_EXCEPTIONS | {"JSONDecodeError"}
TOOL_EXCEPTIONS = frozenset({"ToolException"})
# CancelledError: asyncio.wait_for / asyncio.timeout cancel the run (the harness's time budget). A span
# carries only the raised class's name, so langchain-openai's subclasses are listed too.
TIMEOUT_EXCEPTIONS = frozenset(
    {
        "TimeoutError",
        "TimeoutException",
        "ReadTimeout",
        "APITimeoutError",
        "CancelledError",
        "OpenAITimeoutError",
        "ModelTimeoutError",
        "StreamChunkTimeoutError",
    }
)
# Exceptions a tool run ends with that are not the tool failing: the run was stopped from outside.
NOT_TOOL_FAILURES = frozenset({"CancelledError", "KeyboardInterrupt"})

# Canned final messages of budget stops that return normally (AgentExecutor, LangGraph's ReAct agent,
# the call-limit middlewares with exit_behavior="end", Agents SDK MaxTurnsExceeded as OpenInference
# writes it, smolagents' RunResult); anchored, so an agent that merely talks about limits is not one.
_BUDGET_TEXT = re.compile(
    r"^\s*(?:Agent stopped due to (?:iteration limit or time limit|max iterations)\.?\s*$"
    r"|Sorry, need more steps to process this request\.?\s*$"
    r"|Model call limits exceeded: "
    r"|(?:Tool|'[^']*' tool) call limit reached: "
    r"|Max turns (?:\(\d+\) )?exceeded\b"
    r"|(?s:RunResult\(.*\bstate=['\"]max_steps_error['\"]))"
)

# The step budget a budget stop states (group 1); at most 9 digits, as int() of a huge digit run is slow.
BUDGET_LIMITS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\brequest_limit of (\d{1,9})(?!\d)"),  # pydantic-ai UsageLimitExceeded
    re.compile(r"\bMax turns \((\d{1,9})\) exceeded"),  # Agents SDK MaxTurnsExceeded
    re.compile(r"['\"]max_turns['\"]\s*:\s*(\d{1,9})(?!\d)"),  # Agents SDK error data on the agent span
)


def short_name(exception_type: str) -> str:
    """'langgraph.errors.GraphRecursionError' -> 'GraphRecursionError'."""
    return exception_type.rsplit(".", 1)[-1]


def classify_exception_names(names: Iterable[str], tool_failed: bool = False) -> tuple[StopReason, str]:
    """Stop reason of a run that raised, from its exception chain's class names (outermost first)."""
    chain = [short_name(n) for n in names]
    detail = chain[0] if chain else "error"
    if any(n in BUDGET_EXCEPTIONS for n in chain):
        return StopReason.MAX_STEPS, detail
    if any(n in PARSE_EXCEPTIONS for n in chain):
        return StopReason.PARSE_ERROR, detail
    if tool_failed or any(n in TOOL_EXCEPTIONS for n in chain):
        return StopReason.TOOL_ERROR, detail
    if any(n in TIMEOUT_EXCEPTIONS for n in chain):
        return StopReason.TIMEOUT, detail
    return StopReason.OTHER, detail


def classify_failed_call(names: Iterable[str]) -> tuple[StopReason, str]:
    """PARSE_ERROR when the call returned output its client could not parse (a repair), else as for a run."""
    chain = [short_name(n) for n in names]
    if any(n in MALFORMED_CALL_EXCEPTIONS for n in chain):
        return StopReason.PARSE_ERROR, chain[0]
    return classify_exception_names(chain)


# langchain 1.x create_agent: its runs carry this `ls_integration` metadata, its model node `langgraph_node` "model".
AGENT_INTEGRATION = "langchain_create_agent"


def is_agent_model_node(metadata: Any) -> bool:
    """Whether a chain run (its metadata) is create_agent's model node, which keeps only its last model call."""
    return (
        isinstance(metadata, Mapping)
        and metadata.get("ls_integration") == AGENT_INTEGRATION
        and metadata.get("langgraph_node") == "model"
    )


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _message(obj: Any) -> tuple[str, Any]:
    """(type, fields) of a message object, a plain dict, or OpenInference's {"type", "data"}."""
    data = _field(obj, "data")
    return str(_field(obj, "type") or ""), data if isinstance(data, Mapping) else obj


def node_rejected_answer(output: Any) -> bool:
    """Whether create_agent's model node output (Commands, objects or JSON) rejects the answer: a
    ToolMessage answers its last AI message's tool call with no `structured_response` (ToolStrategy's
    retry); earlier messages are history re-sent when it repairs invalid tool calls."""
    commands = output if isinstance(output, Sequence) and not isinstance(output, str) else [output]
    for command in commands:
        update = _field(command, "update")
        messages = _field(update, "messages")
        if not isinstance(messages, Sequence) or isinstance(messages, str):
            continue
        read = [_message(m) for m in messages]
        last_ai = max((i for i, (kind, _) in enumerate(read) if kind == "ai"), default=None)
        if last_ai is None:
            continue
        asked = {_field(c, "id") for c in _field(read[last_ai][1], "tool_calls") or ()}
        if any(kind == "tool" and _field(fields, "tool_call_id") in asked for kind, fields in read[last_ai + 1 :]):
            return _field(update, "structured_response") is None
    return False


# Whether a run's final text is a canned budget-stop message (a match or None): the pattern's own
# search, so the handler's per-run check runs no Python frame.
is_budget_text = _BUDGET_TEXT.search


def budget_limit(text: str) -> int | None:
    """The step budget a budget stop's message states ("request_limit of 4", "Max turns (3) exceeded")."""
    found = next(filter(None, (pattern.search(text) for pattern in BUDGET_LIMITS)), None)
    return int(found.group(1)) if found else None
