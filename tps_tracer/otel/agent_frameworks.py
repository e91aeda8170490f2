"""Span shapes of agent frameworks beyond LangChain (versions: docs/otel.md "Agent frameworks").

- smolagents: the LLM text only in `llm.output_messages.0.message.contents.N...`; `output.value` a
  ChatMessage dict. Stopped by max_steps without `return_full_result`, it makes one more model call
  (`provide_final_answer`) directly under the agent span, after the last step: the only call there
  after a step, so a run whose last call is a direct child of its agent span was cut by its budget.
- OpenAI Agents SDK: generation spans hold chat message dicts (or, streamed, [one Responses-API
  response]); response spans the response itself (`message` items with `output_text` parts and
  their `logprobs`, `function_call` items). It leaves the workflow root OK and sets ERROR on the
  agent span, so `budget_stop` reads any span.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tps_tracer.capture.stop_signals import BUDGET_EXCEPTIONS, budget_limit, is_budget_text, short_name

OI_CONTENTS = "llm.output_messages.0.message.contents.{}.message_content.{}"
MAX_CONTENTS = 64  # content parts read per message (a bound, not a limit any framework reaches)
OI_KIND = "openinference.span.kind"
GENAI_OPERATION = "gen_ai.operation.name"

MAX_STEPS = "smolagents.max_steps"  # on the agent span: the run's step budget
# smolagents' RunResult of a run that finished (return_full_result=True): no forced answer.
_RUN_SUCCEEDED = re.compile(r"^\s*RunResult\(.*\bstate=['\"]success['\"]", re.DOTALL)


def contents_text(attributes: Mapping[str, Any]) -> str | None:
    """The text parts of the first output message in OpenInference's structured form, joined."""
    texts = []
    for i in range(MAX_CONTENTS):
        kind = attributes.get(OI_CONTENTS.format(i, "type"))
        text = attributes.get(OI_CONTENTS.format(i, "text"))
        if kind is None and text is None:
            break
        if kind in (None, "text") and isinstance(text, str):
            texts.append(text)
    return "".join(texts) if texts else None


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _first_arguments(calls: Any) -> Any:
    if _is_list(calls) and calls and isinstance(calls[0], Mapping):
        function = calls[0].get("function")
        return function.get("arguments") if isinstance(function, Mapping) else calls[0].get("arguments")
    return None


def _message_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if _is_list(content):  # content blocks [{"type": "text", "text": ...}]
        texts = [b.get("text") for b in content if isinstance(b, Mapping) and b.get("type", "text") == "text"]
        joined = [t for t in texts if isinstance(t, str)]
        return "".join(joined) if joined else None
    return None


def _from_chat_message(message: Mapping[str, Any]) -> tuple[str | None, Any, Any]:
    return _message_text(message.get("content")), None, _first_arguments(message.get("tool_calls"))


def is_response(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and _is_list(obj.get("output"))
        and (obj.get("object") == "response" or all(isinstance(i, Mapping) and "type" in i for i in obj["output"]))
    )


def _from_response(response: Mapping[str, Any]) -> tuple[str | None, Any, Any]:
    texts: list[str] = []
    logprobs: list[Any] = []
    has_logprobs = False
    tool_args = None
    for item in response["output"]:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message" and _is_list(item.get("content")):
            for part in item["content"]:
                if not isinstance(part, Mapping) or part.get("type") != "output_text":
                    continue
                if isinstance(part.get("text"), str):
                    texts.append(part["text"])
                if _is_list(part.get("logprobs")):
                    has_logprobs = True
                    logprobs.extend(part["logprobs"])
        elif item.get("type") == "function_call" and tool_args is None:
            tool_args = item.get("arguments")
    return ("".join(texts) if texts else None), (logprobs if has_logprobs else None), tool_args


def from_output_value(output: Any) -> tuple[str | None, Any, Any] | None:
    """(text, logprobs, tool args) from `output.value` in the shapes above, or None when it is none of them."""
    if is_response(output):
        return _from_response(output)
    if _is_list(output) and output:
        last = output[-1]
        if is_response(last):  # the Agents SDK's streamed generation span: [response]
            return _from_response(last)
        assistant = [m for m in output if isinstance(m, Mapping) and m.get("role") == "assistant"]
        if assistant:
            return _from_chat_message(assistant[-1])
        return None
    if isinstance(output, Mapping) and output.get("role") == "assistant":
        return _from_chat_message(output)
    return None


def is_agent_span(attributes: Mapping[str, Any]) -> bool:
    return attributes.get(OI_KIND) == "AGENT" or attributes.get(GENAI_OPERATION) == "invoke_agent"


def budget_stop(
    attributes: Mapping[str, Any], events: Sequence[Any], description: str | None
) -> tuple[str, int | None] | None:
    """(detail, stated limit) when a span's exception events or status description say budget stop."""
    for e in events:
        if e.name != "exception" or not e.attributes:
            continue
        kind = e.attributes.get("exception.type")
        if kind and short_name(str(kind)) in BUDGET_EXCEPTIONS:
            message = e.attributes.get("exception.message")
            return short_name(str(kind)), budget_limit(message) if isinstance(message, str) else None
    if description and is_budget_text(description):
        return "budget status", budget_limit(description)
    return None


def step_budget_attribute(attributes: Mapping[str, Any]) -> Any:
    """As the agent span states it, unchecked."""
    return attributes.get(MAX_STEPS)


def forced_final_answer(attributes: Mapping[str, Any], last_call_under_root: bool) -> bool:
    """The run's last model call, directly under a smolagents agent span, is the answer smolagents
    forces at max_steps (module docstring)."""
    if not last_call_under_root or attributes.get(MAX_STEPS) is None:
        return False
    output = attributes.get("output.value")
    return not (isinstance(output, str) and _RUN_SUCCEEDED.search(output))
