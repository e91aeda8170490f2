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
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tps_tracer.records.stop_reasons import StopReason

BUDGET_EXCEPTIONS = frozenset({"GraphRecursionError", "ModelCallLimitExceededError", "ToolCallLimitExceededError"})
PARSE_EXCEPTIONS = frozenset({"OutputParserException"})
TOOL_EXCEPTIONS = frozenset({"ToolException"})
TIMEOUT_EXCEPTIONS = frozenset({"TimeoutError", "TimeoutException", "ReadTimeout", "APITimeoutError"})

# Canned final texts of budget stops (see the module table). Anchored, so an agent that
# merely talks about limits is not mistaken for one that hit them.
BUDGET_TEXTS: tuple[re.Pattern[str], ...] = (
    re.compile(r"^\s*Agent stopped due to (?:iteration limit or time limit|max iterations)\.?\s*$"),
    re.compile(r"^\s*Sorry, need more steps to process this request\.?\s*$"),
    re.compile(r"^\s*Model call limits exceeded: "),
    re.compile(r"^\s*(?:Tool|'[^']*' tool) call limit reached: "),
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


def is_budget_text(text: str) -> bool:
    """Whether a run's final text is one of the canned budget-stop messages."""
    return any(pattern.search(text) for pattern in BUDGET_TEXTS)
