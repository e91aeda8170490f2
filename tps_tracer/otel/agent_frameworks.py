"""Span shapes of agent frameworks beyond LangChain: pure functions over span attributes.

What each framework's instrumentation writes (versions tested: docs/otel.md "Agent frameworks"):

- smolagents (openinference-instrumentation-smolagents): the LLM span's text only in
  `llm.output_messages.0.message.contents.N.message_content.text` (no flat
  `message.content`); `output.value` is the ChatMessage as a dict (role, content,
  tool_calls with `function.arguments`). The agent span carries `smolagents.max_steps`.
- OpenAI Agents SDK (openinference-instrumentation-openai-agents): generation spans
  (Chat Completions models) put a list of chat message dicts in `output.value`, or, on
  the streamed path, a list holding one Responses-API response; response spans
  (Responses models) put the response object itself. A response's `output` holds
  `message` items whose `output_text` parts carry the text and, when requested,
  `logprobs` (OpenAI's token entries), and `function_call` items with the arguments.
- smolagents' budget stop without `return_full_result`: the run returns the answer of one
  more model call (`provide_final_answer`) made directly under the agent span, after the
  last "Step N" span; every other model call runs inside a step span, or, for planning,
  directly under the agent span but always before a step. So a smolagents run whose last
  model call is a direct child of its agent span stopped on max_steps
  (`forced_final_answer`).
- Budget stops that only a span other than the root shows (the Agents SDK leaves its
  workflow root OK and sets ERROR on the agent span): `budget_stop` reads any span's
  exception events and status description.

The recognisers of budget names and texts live in `capture/stop_signals.py`.
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

# Attributes stating the run's step budget, per framework.
STEP_BUDGET_ATTRIBUTES = ("smolagents.max_steps",)
# Agent spans of frameworks that answer a run cut by its budget with one more model call
# made directly under the agent span (smolagents' provide_final_answer).
FORCED_FINAL_ANSWER_ATTRIBUTES = ("smolagents.max_steps",)
# smolagents' RunResult stating a run that finished (return_full_result=True): no forced answer.
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
    """(text, logprobs, tool args) of an assistant message dict (smolagents ChatMessage, Agents SDK generation)."""
    return _message_text(message.get("content")), None, _first_arguments(message.get("tool_calls"))


def is_response(obj: Any) -> bool:
    """A Responses-API response (its `output` is a list of typed items)."""
    return (
        isinstance(obj, Mapping)
        and _is_list(obj.get("output"))
        and (obj.get("object") == "response" or all(isinstance(i, Mapping) and "type" in i for i in obj["output"]))
    )


def _from_response(response: Mapping[str, Any]) -> tuple[str | None, Any, Any]:
    """(text, logprobs, tool args) of a Responses-API response: its message items' output_text parts."""
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


# ---------------------------------------------------------------- budget stops on any span


def is_agent_span(attributes: Mapping[str, Any]) -> bool:
    return attributes.get(OI_KIND) == "AGENT" or attributes.get(GENAI_OPERATION) == "invoke_agent"


def budget_stop(
    attributes: Mapping[str, Any], events: Sequence[Any], description: str | None
) -> tuple[str, int | None] | None:
    """(detail, stated limit) when a span records a budget stop: a budget exception among its
    exception events, or a budget text as its status description; else None."""
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
    """The run's step budget as a framework's agent span states it (smolagents.max_steps), unchecked."""
    for key in STEP_BUDGET_ATTRIBUTES:
        value = attributes.get(key)
        if value is not None:
            return value
    return None


def forced_final_answer(attributes: Mapping[str, Any], last_call_under_root: bool) -> bool:
    """The run's last model call, made directly under a smolagents agent span, is the final
    answer smolagents forces once max_steps is reached (see the module docstring)."""
    if not last_call_under_root or all(attributes.get(k) is None for k in FORCED_FINAL_ANSWER_ATTRIBUTES):
        return False
    output = attributes.get("output.value")
    return not (isinstance(output, str) and _RUN_SUCCEEDED.search(output))
