"""Why an agent run stopped, from names and texts only (no framework imports).

Shared by the LangChain handler (which sees exception objects) and the OpenTelemetry
span processor (which sees only `exception.type` strings and serialised outputs).

Several budget stops look like clean finishes: the runtime returns normally with a canned
final message instead of raising. They are recognised by that message:

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
ToolCallLimitExceededError. Exceptions are matched by class name (the last dotted
component), so a class that moves between modules is still recognised.

Other frameworks' budget stops (read from spans by the OpenTelemetry span processor):

- pydantic-ai, `UsageLimits(request_limit=N)` (and token / tool-call limits): the
  `UsageLimitExceeded` exception on the agent span; N from "request_limit of N" in its
  message;
- OpenAI Agents SDK, `Runner.run(max_turns=N)`: `MaxTurnsExceeded`; with OpenInference
  only the agent span's status says so, "Max turns exceeded: {'max_turns': N}";
- smolagents, `max_steps=N`: `RunResult(... state='max_steps_error' ...)` as the run's
  output (with `return_full_result=True`), or `AgentMaxStepsError`; N from the agent
  span's `smolagents.max_steps`.

A token or cost limit (pydantic-ai) is a budget too, so max_steps; only a request limit
states a step budget, so only it gives the horizon (otherwise T is the calls made).

Structured output and retries in langchain 1.x `create_agent` (read the same way from callbacks
and from OpenInference spans):

- a structured answer the agent rejects raises StructuredOutputValidationError /
  MultipleStructuredOutputsError (`ProviderStrategy`, or `ToolStrategy(handle_errors=False)`):
  parse failures, like OutputParserException;
- a model call that raised JSONDecodeError returned output its client could not parse
  (langchain-openai parses strict tool calls when `response_format` is set): a malformed
  output, not a failed call (`classify_failed_call`);
- `ToolStrategy` retries a rejected answer inside the model node, whose output is then the
  answer plus a ToolMessage answering its structured tool call, with no `structured_response`
  (`node_rejected_answer`);
- a retry middleware (ModelRetryMiddleware, ModelFallbackMiddleware) calls the model again
  inside the same model node (`is_agent_model_node`): only the node's last call is its answer,
  the earlier ones were discarded.
"""

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
# CancelledError: asyncio.wait_for / asyncio.timeout bound a run's time by cancelling it, and the
# run sees only the cancellation (the caller gets the TimeoutError): the harness's time budget.
# langchain-openai 1.x raises its own subclasses (OpenAITimeoutError of APITimeoutError and langchain-core's
# ModelTimeoutError; StreamChunkTimeoutError); a span carries only the raised class's name, so each is listed.
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

# Canned final texts of budget stops (see the module table). Anchored, so an agent that
# merely talks about limits is not mistaken for one that hit them.
BUDGET_TEXTS: tuple[re.Pattern[str], ...] = (
    re.compile(r"^\s*Agent stopped due to (?:iteration limit or time limit|max iterations)\.?\s*$"),
    re.compile(r"^\s*Sorry, need more steps to process this request\.?\s*$"),
    re.compile(r"^\s*Model call limits exceeded: "),
    re.compile(r"^\s*(?:Tool|'[^']*' tool) call limit reached: "),
    # OpenAI Agents SDK: the MaxTurnsExceeded message, and the agent span's status as
    # OpenInference writes it ("{message}: {data}").
    re.compile(r"^\s*Max turns (?:\(\d+\) )?exceeded\b"),
    # smolagents' RunResult (return_full_result=True), as the instrumentor writes it: str(result).
    re.compile(r"^\s*RunResult\(.*\bstate=['\"]max_steps_error['\"]", re.DOTALL),
)

# The step budget a budget stop states, where it states one (first group: N). At most 9
# digits (MAX_HORIZON's order): int() of a huge digit string is slow, or refused.
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
    """What a model call that raised says, from its exception chain's class names: PARSE_ERROR when
    it returned output its client could not parse (a repair), else as for a run that raised."""
    chain = [short_name(n) for n in names]
    if any(n in MALFORMED_CALL_EXCEPTIONS for n in chain):
        return StopReason.PARSE_ERROR, chain[0]
    return classify_exception_names(chain)


# langchain 1.x create_agent: its runs carry this `ls_integration` metadata, its model node this `langgraph_node`.
AGENT_INTEGRATION = "langchain_create_agent"
AGENT_MODEL_NODE = "model"


def is_agent_model_node(metadata: Any) -> bool:
    """Whether a chain run (its metadata) is create_agent's model node, which keeps only its last model call."""
    return (
        isinstance(metadata, Mapping)
        and metadata.get("ls_integration") == AGENT_INTEGRATION
        and metadata.get("langgraph_node") == AGENT_MODEL_NODE
    )


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _message(obj: Any) -> tuple[str, Any]:
    """(type, fields) of a message object, a plain dict, or OpenInference's {"type", "data"}."""
    data = _field(obj, "data")
    return str(_field(obj, "type") or ""), data if isinstance(data, Mapping) else obj


def node_rejected_answer(output: Any) -> bool:
    """Whether create_agent's model node output (its Commands, as objects or as JSON) rejects the
    model's answer: a ToolMessage in it answers a tool call of its last AI message and no
    `structured_response` came with it (ToolStrategy's retry). Earlier messages in the same update
    are the history it re-sends when it repairs invalid tool calls."""
    commands = output if isinstance(output, Sequence) and not isinstance(output, str) else [output]
    for command in commands:
        update = _field(command, "update")
        messages = _field(update, "messages") if update is not None else None
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


def is_budget_text(text: str) -> bool:
    """Whether a run's final text is one of the canned budget-stop messages."""
    return any(pattern.search(text) for pattern in BUDGET_TEXTS)


def budget_limit(text: str) -> int | None:
    """The step budget stated in a budget stop's message ("request_limit of 4", "Max turns (3) exceeded")."""
    for pattern in BUDGET_LIMITS:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None
