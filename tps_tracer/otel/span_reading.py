"""What ended spans say about an agent run: pure functions over span attributes and events, run on
the capture worker (only `is_llm_span` runs in `on_end`). Dialects: OpenInference, the GenAI
conventions (with Traceloop's), smolagents, the OpenAI Agents SDK, and our own `tps.*` overrides.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from tps_tracer.capture.step_signals import RawStep, gc_paused
from tps_tracer.capture.stop_signals import (
    AGENT_INTEGRATION,
    BUDGET_EXCEPTIONS,
    NOT_TOOL_FAILURES,
    PARSE_EXCEPTIONS,
    budget_limit,
    classify_exception_names,
    is_agent_model_node,
    is_budget_text,
    node_rejected_answer,
    short_name,
)
from tps_tracer.open_runs import is_interrupt
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking.keys import (
    HORIZON_KEY,
    INTERNAL_CALL_KEY,
    OUTCOME_KEY,
    PARSE_RETRY_TOOL,
    TASK_ID_KEY,
    TRAJECTORY_ID_KEY,
    VERBAL_SCALE_KEY,
)

OI_KIND = "openinference.span.kind"
OI_OUTPUT_VALUE = "output.value"
OI_METADATA = "metadata"
GENAI_OPERATION = "gen_ai.operation.name"
GENAI_OUTPUT_MESSAGES = "gen_ai.output.messages"
TRACELOOP_PROPERTIES = "traceloop.association.properties."
OI_CONTENTS = "llm.output_messages.0.message.contents.{}.message_content.{}"
MAX_STEPS = "smolagents.max_steps"  # on the agent span: the run's step budget
# smolagents' RunResult of a run that finished (return_full_result=True): no forced answer.
_RUN_SUCCEEDED = re.compile(r"^\s*RunResult\(.*\bstate=['\"]success['\"]", re.DOTALL)

TPS_FORECASTS = "tps.forecasts"
TPS_STOP_REASON = "tps.stop_reason"
TPS_HORIZON = "tps.horizon"


def attrs_of(span: Any) -> Mapping[str, Any]:
    """The span's attributes as the plain dict the SDK keeps (read only: the span's own storage), else
    `span.attributes`, whose proxy raises and catches a KeyError per absent key and copies on iteration."""
    inner = getattr(span, "_attributes", None)
    if type(inner) is dict:
        return inner
    inner = getattr(inner, "_dict", None)
    if type(inner) is dict:
        return inner
    return span.attributes or {}


def events_of(span: Any) -> Sequence[Any]:
    """An ended span's events (read only): the SDK's deque, a tuple or list as given, else `span.events`
    (a new tuple per access)."""
    inner = getattr(span, "_events", None)
    if type(inner) is tuple or type(inner) is list:
        return inner
    dq = getattr(inner, "_dq", None)
    if dq is not None and hasattr(dq, "maxlen"):
        return dq
    return span.events or ()


def _is_map(value: Any) -> TypeGuard[Mapping[Any, Any]]:
    """`isinstance(value, Mapping)`, a plain dict decided without the ABC machinery (asked ~15 times a step)."""
    return type(value) is dict or isinstance(value, Mapping)


def _is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    """A JSON array (any sequence but a string), a plain list decided without the ABC machinery."""
    return type(value) is list or (isinstance(value, Sequence) and not isinstance(value, (str, bytes)))


def is_llm_span(attributes: Mapping[str, Any]) -> bool:
    """The fast test run in on_end for every span: is this one model call (or a tps-annotated step)?"""
    get = attributes.get
    return (
        get(OI_KIND) == "LLM"
        or get(GENAI_OPERATION) in {"chat", "text_completion", "generate_content", "completion"}
        or get(TPS_FORECASTS) is not None
    )


def is_internal_call(attributes: Mapping[str, Any]) -> bool:
    """A model call a LangChain middleware made for itself (its run metadata names INTERNAL_CALL_KEY)."""
    meta = attributes.get(OI_METADATA)
    return isinstance(meta, str) and f'"{INTERNAL_CALL_KEY}"' in meta


def _json(value: Any) -> Any:
    """A string decoded as `json` decodes it (None if it is not JSON), by orjson (a model's output is
    most of a step's cost), with what orjson refuses (NaN, Infinity, lone surrogates) left to `json`."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(value)
    except ValueError:
        return None


# Outputs at least this long (characters) are decoded with the cyclic GC paused (capture/step_signals.py):
# below it, a decode allocates fewer containers than one collection's threshold (700).
_PAUSE_GC_ABOVE = 8192


def _output_json(value: Any) -> Any:
    if not (isinstance(value, str) and len(value) >= _PAUSE_GC_ABOVE):
        return _json(value)
    with gc_paused():  # its dicts would set off the cyclic collector every 700 (4.5x the decoding)
        return _json(value)


# ---------------------------------------------------------------- serialised LangChain messages


def _message_fields(obj: Any) -> tuple[str, Mapping[str, Any]] | None:
    """(type, fields) of a message in any serialised form: OpenInference {"type", "data"},
    LangChain's {"lc": 1, "id": [..., "AIMessage"], "kwargs"}, or a plain {"role"/"type", ...}."""
    if not _is_map(obj):
        return None
    if _is_map(obj.get("data")):
        return str(obj.get("type", "")), obj["data"]
    if _is_map(obj.get("kwargs")):
        ident = obj.get("id")
        name = str(ident[-1]) if _is_list(ident) and ident else ""
        kind = {"AIMessage": "ai", "AIMessageChunk": "ai", "ToolMessage": "tool", "HumanMessage": "human"}.get(name)
        return kind or str(obj["kwargs"].get("type", "")), obj["kwargs"]
    kind = obj.get("type") or obj.get("role")
    return (str(kind), obj) if kind is not None else None


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if _is_list(content):  # content blocks
        parts = [b.get("text") if _is_map(b) else b for b in content]
        texts = [p for p in parts if isinstance(p, str)]
        return "".join(texts) if texts else None
    return None


def _final_message(output: Any) -> Any:
    """The last message of a LangGraph state / message list, or AgentExecutor's {"output": text}."""
    if _is_map(output):
        for key in ("messages", "outputs"):
            inner = output.get(key)
            if _is_list(inner) and inner:
                return inner[-1]
            if _is_map(inner):
                return _final_message(inner)
        if "output" in output:
            return output["output"]
        return output if "kwargs" in output or "data" in output else None
    if _is_list(output) and output:
        return output[-1]
    return output


# ---------------------------------------------------------------- metadata


def run_metadata(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The run's `tps_*` metadata from OpenInference's `metadata` JSON and Traceloop association properties."""
    out: dict[str, Any] = {}
    meta = _json(attributes.get(OI_METADATA))
    if _is_map(meta):
        out.update({k: v for k, v in meta.items() if isinstance(k, str) and k.startswith("tps_")})
    for key in (TRAJECTORY_ID_KEY, TASK_ID_KEY, HORIZON_KEY, OUTCOME_KEY, VERBAL_SCALE_KEY):
        value = attributes.get(TRACELOOP_PROPERTIES + key)
        if value is not None:
            out.setdefault(key, value)
    return out


def thread_id_of(attributes: Mapping[str, Any]) -> str | None:
    """LangGraph's checkpointer thread (`thread_id` in the run's metadata): where a paused run resumes."""
    meta = _json(attributes.get(OI_METADATA))
    found = meta.get("thread_id") if _is_map(meta) else None
    if found is None:
        found = attributes.get(TRACELOOP_PROPERTIES + "thread_id")
    return None if found is None else str(found)


def stated(attributes: Mapping[str, Any], metadata: Mapping[str, Any], key: str) -> Any:
    """What a span states as `tps.<name>`, else its run metadata as `key` (`tps_<name>`, tracking/keys.py),
    unchecked (horizon, outcome: see `as_outcome`)."""
    value = attributes.get("tps." + key.removeprefix("tps_"))
    return value if value is not None else metadata.get(key)


# ---------------------------------------------------------------- other frameworks' shapes


def _contents_text(attributes: Mapping[str, Any]) -> str | None:
    """The text parts of the first output message in OpenInference's structured form (smolagents), joined."""
    texts = []
    for i in range(64):  # a bound, not a limit any framework reaches
        kind = attributes.get(OI_CONTENTS.format(i, "type"))
        text = attributes.get(OI_CONTENTS.format(i, "text"))
        if kind is None and text is None:
            break
        if kind in (None, "text") and isinstance(text, str):
            texts.append(text)
    return "".join(texts) if texts else None


def _from_chat_message(message: Mapping[str, Any]) -> tuple[str | None, Any, Any, bool]:
    content = message.get("content")
    text = content if isinstance(content, str) else None
    if _is_list(content):  # content blocks [{"type": "text", "text": ...}]
        blocks = [b.get("text") for b in content if _is_map(b) and b.get("type", "text") == "text"]
        texts = [t for t in blocks if isinstance(t, str)]
        text = "".join(texts) if texts else None
    calls = message.get("tool_calls")
    args = None
    if _is_list(calls) and calls and _is_map(calls[0]):
        function = calls[0].get("function")
        args = function.get("arguments") if _is_map(function) else calls[0].get("arguments")
    return text, None, args, False


def _is_response(obj: Any) -> bool:
    return (
        _is_map(obj)
        and _is_list(obj.get("output"))
        and (obj.get("object") == "response" or all(_is_map(i) and "type" in i for i in obj["output"]))
    )


def _from_response(response: Mapping[str, Any]) -> tuple[str | None, Any, Any, bool]:
    texts: list[str] = []
    logprobs: list[Any] | None = None
    tool_args = None
    for item in response["output"]:
        if not _is_map(item):
            continue
        if item.get("type") == "message" and _is_list(item.get("content")):
            for part in item["content"]:
                if not _is_map(part) or part.get("type") != "output_text":
                    continue
                if isinstance(part.get("text"), str):
                    texts.append(part["text"])
                if _is_list(part.get("logprobs")):
                    logprobs = [*(logprobs or []), *part["logprobs"]]
        elif item.get("type") == "function_call" and tool_args is None:
            tool_args = item.get("arguments")
    return ("".join(texts) if texts else None), logprobs, tool_args, False


def _from_output_value(output: Any) -> tuple[str | None, Any, Any, bool] | None:
    """(text, logprobs, tool args, malformed) from the OpenAI Agents SDK's spans: a generation span's chat message
    dicts (streamed: [one Responses-API response]), a response span's response (`message` items with
    `output_text` parts and their `logprobs`, `function_call` items)."""
    if _is_response(output):
        return _from_response(output)
    if _is_list(output) and output:
        if _is_response(output[-1]):
            return _from_response(output[-1])
        assistant = [m for m in output if _is_map(m) and m.get("role") == "assistant"]
        return _from_chat_message(assistant[-1]) if assistant else None
    if _is_map(output) and output.get("role") == "assistant":
        return _from_chat_message(output)
    return None


def budget_stop(events: Sequence[Any], description: str | None) -> tuple[str, int | None] | None:
    """(detail, stated limit) when a span's exception events or status description say budget stop
    (any span: the Agents SDK leaves the workflow root OK and sets ERROR on the agent span)."""
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


# ---------------------------------------------------------------- LLM spans


@dataclass(frozen=True)
class LlmStep:
    raw: RawStep
    malformed: bool  # the output had only invalid tool calls: a repair, not a step


def _from_llm_result(output: Any) -> tuple[str | None, Any, Any, bool] | None:
    """(text, logprobs, tool args, malformed) from a serialised LangChain LLMResult."""
    gens = output.get("generations") if _is_map(output) else None
    if not (_is_list(gens) and gens and _is_list(gens[0]) and gens[0] and _is_map(gens[0][0])):
        return None
    gen = gens[0][0]
    info = gen.get("generation_info") or {}
    logprobs = info.get("logprobs") if _is_map(info) else None
    fields = _message_fields(gen.get("message"))
    tool_args, malformed = None, False
    if fields is not None:
        msg = fields[1]
        if logprobs is None:
            metadata = msg.get("response_metadata") or {}
            logprobs = metadata.get("logprobs") if _is_map(metadata) else None
        calls = msg.get("tool_calls") or []
        invalid = msg.get("invalid_tool_calls") or []
        malformed = bool(invalid) and not calls
        if calls and _is_map(calls[0]):
            tool_args = calls[0].get("args")
    text = gen.get("text")
    return (text if isinstance(text, str) else None), logprobs, tool_args, malformed


def _from_openai_response(output: Any) -> tuple[str | None, Any, Any, bool] | None:
    """(text, logprobs, tool args, malformed) from a raw OpenAI chat / completions response."""
    choices = output.get("choices") if _is_map(output) else None
    if not (_is_list(choices) and choices and _is_map(choices[0])):
        return None
    choice = choices[0]
    message = choice.get("message")
    if _is_map(message) and message:  # chat (content as text or text blocks), else completions
        text, _, tool_args, _ = _from_chat_message(message)
    else:
        text, tool_args = choice.get("text"), None
    return (text if isinstance(text, str) else None), choice.get("logprobs"), tool_args, False


def _from_genai_messages(value: Any) -> tuple[str | None, Any] | None:
    """(text, tool args) from `gen_ai.output.messages` (role + parts)."""
    messages = _json(value)
    if not _is_list(messages) or not messages or not _is_map(messages[-1]):
        return None
    parts = messages[-1].get("parts") or []
    texts = [p.get("content") for p in parts if _is_map(p) and p.get("type") == "text"]
    calls = [p for p in parts if _is_map(p) and p.get("type") == "tool_call"]
    text = "".join(t for t in texts if isinstance(t, str)) if texts else None
    return text, (calls[0].get("arguments") if calls else None)


def read_llm_step(attributes: Mapping[str, Any]) -> LlmStep:
    """One model call's raw output, from whichever dialect the span speaks. A large `output.value` is
    decoded with the cyclic GC paused and its logprobs parsed before the pause ends, so its decoded
    dicts are freed by reference counting, never scanned (capture/step_signals.py)."""
    value = attributes.get(OI_OUTPUT_VALUE)
    if not (isinstance(value, str) and len(value) >= _PAUSE_GC_ABOVE):
        return _read_llm_step(attributes, parse=False)
    with gc_paused():
        return _read_llm_step(attributes, parse=True)  # its decoded tree is freed when it returns


def _read_llm_step(attributes: Mapping[str, Any], parse: bool) -> LlmStep:
    own = _json(attributes.get(TPS_FORECASTS))
    if _is_map(own):
        return LlmStep(RawStep(None, forecasts=dict(own)), False)
    text = attributes.get("llm.output_messages.0.message.content")
    if not isinstance(text, str):
        text = _contents_text(attributes)
    tool_args = attributes.get("llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments")
    logprobs = None
    malformed = False
    output = _output_json(attributes.get(OI_OUTPUT_VALUE))
    if output is not None:
        found = _from_llm_result(output) or _from_openai_response(output) or _from_output_value(output)
        if found is not None:
            out_text, logprobs, out_args, malformed = found
            if parse and logprobs is not None:  # as TokenLogprobs, or as given when malformed
                from tps_tracer.capture.token_logprobs import parse_logprobs

                # LogprobsFormatError (or a bug): left as given, the extractor rejects and counts it
                with contextlib.suppress(Exception):
                    logprobs = parse_logprobs(logprobs)
            text = text if isinstance(text, str) else out_text
            tool_args = tool_args if tool_args is not None else out_args
    if text is None and tool_args is None:
        genai = _from_genai_messages(attributes.get(GENAI_OUTPUT_MESSAGES))
        if genai is not None:
            text, tool_args = genai
        else:
            text = attributes.get("gen_ai.completion.0.content")
            tool_args = attributes.get("gen_ai.completion.0.tool_calls.0.arguments")
    return LlmStep(RawStep(text if isinstance(text, str) else None, logprobs, tool_args), malformed)


# ---------------------------------------------------------------- the root span: why the run stopped


def exception_names(events: Sequence[Any], attributes: Mapping[str, Any]) -> list[str]:
    """Exception class names recorded on a span (exception events, then `error.type`)."""
    names = [
        str(e.attributes.get("exception.type"))
        for e in events
        if e.name == "exception" and e.attributes and e.attributes.get("exception.type")
    ]
    err = attributes.get("error.type")
    if err:
        names.append(str(err))
    return names


_OUTPUT_KEYS = (OI_OUTPUT_VALUE, GENAI_OUTPUT_MESSAGES, "traceloop.entity.output")


def _root_output(attributes: Mapping[str, Any]) -> Any:
    for key in _OUTPUT_KEYS:
        value = attributes.get(key)
        if value is not None:
            decoded = _output_json(value)
            return decoded if decoded is not None else value
    return None


def _only_invalid_tool_calls(kind: str, msg: Mapping[str, Any]) -> bool:
    return kind in ("ai", "assistant") and bool(msg.get("invalid_tool_calls")) and not msg.get("tool_calls")


def classify_output(attributes: Mapping[str, Any]) -> tuple[StopReason | None, str]:
    """Stop reason signalled by a root span that ended normally, or None when it looks clean."""
    output = _root_output(attributes)
    last = _final_message(output)
    if isinstance(last, str):
        return (StopReason.MAX_STEPS, "budget message") if is_budget_text(last) else (None, "")
    fields = _message_fields(last)
    if fields is None:
        return None, ""
    kind, msg = fields
    text = _content_text(msg.get("content"))
    if text is None and _is_list(msg.get("parts")):  # GenAI semconv message
        text = _content_text([{"text": p.get("content")} for p in msg["parts"] if _is_map(p)])
    if text is not None and is_budget_text(text):
        return StopReason.MAX_STEPS, "budget message"
    if _only_invalid_tool_calls(kind, msg):
        return StopReason.PARSE_ERROR, "invalid_tool_calls"
    if kind == "tool" and msg.get("status") == "error":
        return StopReason.TOOL_ERROR, "error ToolMessage"
    return None, ""


def classify_run(
    root: Any, attributes: Mapping[str, Any], failed: bool, steps: Sequence[Any], failures: Sequence[Any]
) -> tuple[tuple[StopReason, str], Any]:
    """(stop reason, detail) of a trajectory and the step budget its spans state (None if none).

    attributes: the root's, completed (`root_attributes`); failures: the trace's other spans that
    ended in ERROR. A clean-looking root is still a budget stop when an agent span under it records
    one after the last model call ended (the OpenAI Agents SDK's "Max turns exceeded"), or when the
    last call is a direct child of a smolagents root: the answer it forces at max_steps."""
    explicit = attributes.get(TPS_STOP_REASON)
    if explicit is not None:  # the application's word, with its own tps.horizon
        try:
            return (StopReason(str(explicit)), "tps.stop_reason"), attributes.get(TPS_HORIZON)
        except ValueError:
            return (StopReason.OTHER, f"unknown tps.stop_reason {explicit!r}"), attributes.get(TPS_HORIZON)
    last_call: Any = max(steps, key=lambda s: s.end_time or 0, default=None)
    last_end = (last_call.end_time or 0) if last_call is not None else 0
    root_events = events_of(root)
    names = exception_names(root_events, attributes)
    if names or failed:  # a tool span failed after the last model call: the run ended on that failure
        tool_failed = any(tool_failure(f) and (f.end_time or 0) > last_end for f in failures)
        observed = classify_exception_names(names, tool_failed)
    else:
        reason, detail = classify_output(attributes)
        observed = reason or StopReason.CLEAN, detail
    if observed[0] is StopReason.MAX_STEPS:
        found = budget_stop(root_events, root.status.description)
        limit = found[1] if found is not None else None
        return observed, limit if limit is not None else attributes.get(MAX_STEPS)
    if observed[0] is StopReason.CLEAN:
        for span in failures:
            span_attrs = attrs_of(span)
            is_agent = span_attrs.get(OI_KIND) == "AGENT" or span_attrs.get(GENAI_OPERATION) == "invoke_agent"
            if not is_agent or (span.end_time or 0) < last_end:
                continue
            found = budget_stop(events_of(span), span.status.description)
            if found is not None:
                limit = found[1] if found[1] is not None else attributes.get(MAX_STEPS)
                return (StopReason.MAX_STEPS, found[0]), limit
        # At max_steps smolagents (without `return_full_result`) forces one more call, the answer, directly
        # under its agent span: the only call there after a step.
        parent = last_call.parent if last_call is not None else None
        output = attributes.get(OI_OUTPUT_VALUE)
        if (
            parent is not None
            and parent.span_id == root.context.span_id
            and attributes.get(MAX_STEPS) is not None
            and not (isinstance(output, str) and _RUN_SUCCEEDED.search(output))
        ):
            return (StopReason.MAX_STEPS, "final answer forced by max_steps"), attributes.get(MAX_STEPS)
    return observed, None


# ---------------------------------------------------------------- a trace's spans read together


def tool_failure(span: Any) -> bool:
    """A tool span that ended in error because the tool failed: not the parser's retry tool, nor a tool
    cancelled with its run (CancelledError), which did not fail."""
    attributes = attrs_of(span)
    get = attributes.get
    if span.name == PARSE_RETRY_TOOL:
        return False
    if not (get(OI_KIND) == "TOOL" or get(GENAI_OPERATION) == "execute_tool" or get("traceloop.span.kind") == "tool"):
        return False
    return not {short_name(n) for n in exception_names(events_of(span), attributes)} & NOT_TOOL_FAILURES


def interrupted(span: Any) -> bool:
    """The span recorded LangGraph's interrupt (an `exception` event; the node's status stays OK)."""
    return any(
        e.name == "exception" and is_interrupt((e.attributes or {}).get("exception.type")) for e in events_of(span)
    )


def root_attributes(root: Any, child: Any) -> Mapping[str, Any]:
    """The root's attributes, completed by its last child's when the root records no output
    (OpenLLMetry's `invoke_agent` root: the run's output and metadata are on `LangGraph.workflow`)."""
    attrs = attrs_of(root) if root is not None else {}
    if (
        root is None
        or child is None
        or child.parent is None
        or child.parent.span_id != root.context.span_id
        or any(attrs.get(key) is not None for key in _OUTPUT_KEYS)
    ):
        return attrs
    return {**attrs_of(child), **attrs}


def run_identity(root_attrs: Mapping[str, Any], steps: Sequence[Any]) -> tuple[str | None, dict[str, Any], bool]:
    """The trajectory id the run names (its root's, else its first model call's; a blank one is none),
    its run metadata, and whether it named only a blank id ("" from an unfilled template)."""
    metadata = run_metadata(root_attrs)  # decoded once: the id is read from it
    named = False
    for i, attrs in enumerate((root_attrs, *(attrs_of(s) for s in steps))):
        span_metadata = run_metadata(attrs) if i else metadata
        found = stated(attrs, span_metadata, TRAJECTORY_ID_KEY)
        tid = None if found is None else str(found)
        if tid is not None and tid.strip():
            return tid, {**span_metadata, **metadata}, False
        named = named or tid is not None
    return None, metadata, named


def parser_failures(steps: Sequence[Any], failures: Sequence[Any]) -> set[int]:
    """Indices of model calls whose output a parser then rejected (OutputParserException, "_Exception"):
    the last call to end before the failure did."""
    marked: set[int] = set()
    for f in failures:
        names = {short_name(n) for n in exception_names(events_of(f), attrs_of(f))}
        if not names & PARSE_EXCEPTIONS and f.name != PARSE_RETRY_TOOL:
            continue
        before = [i for i, s in enumerate(steps) if (s.end_time or 0) <= (f.end_time or 0)]
        if before:
            marked.add(before[-1])
    return marked


def enclosing_malformed(steps: Sequence[Any], callers: Mapping[int, Any]) -> set[int]:
    """Indices of model calls whose enclosing span shows their output malformed or discarded: a parent
    holding one call records its whole AIMessage (GenAI-semconv LLM spans drop `invalid_tool_calls`);
    create_agent's model node keeps only its last call and may reject that one too."""
    marked: set[int] = set()
    per_parent: dict[int | None, list[int]] = {}
    for i, s in enumerate(steps):
        per_parent.setdefault(s.parent.span_id if s.parent is not None else None, []).append(i)
    for pid, calls in per_parent.items():
        caller = callers.get(pid) if pid is not None else None
        if caller is None:
            continue
        attrs = attrs_of(caller)
        meta, value = attrs.get(OI_METADATA), attrs.get(OI_OUTPUT_VALUE)
        # Decoded only when it can matter (~6 us each): metadata naming create_agent, an output holding a ToolMessage.
        if isinstance(meta, str) and AGENT_INTEGRATION in meta and is_agent_model_node(_json(meta)):
            marked.update(calls[:-1])  # the node keeps only its last call, and may reject it (ToolStrategy's retry)
            if isinstance(value, str) and "tool_call_id" in value and node_rejected_answer(_output_json(value)):
                marked.add(calls[-1])
        elif len(calls) == 1:  # its output a model message with only invalid tool calls
            fields = _message_fields(_final_message(_root_output(attrs)))
            if fields is not None and _only_invalid_tool_calls(*fields):
                marked.add(calls[0])
    return marked
