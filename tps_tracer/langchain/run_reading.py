"""What a LangChain run says: how its root ended, the caller's budget on its stream, a model call's
output, the OpenTelemetry span it joins."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import LLMResult
from langchain_core.tools import ToolException

from tps_tracer.capture.step_signals import RawStep
from tps_tracer.capture.stop_signals import classify_exception_names, is_budget_text
from tps_tracer.errors import InputError
from tps_tracer.records.stop_reasons import StopReason

TRACE_ID_KEY, SPAN_ID_KEY = "otel_trace_id", "otel_span_id"  # the span processor's names, so records join traces


def exception_names(exc: BaseException) -> list[str]:
    """Class names of an exception's chain (outermost first), LangChain's parser / tool bases added."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    bases = [b.__name__ for b in (OutputParserException, ToolException) if any(isinstance(e, b) for e in chain)]
    return [type(e).__name__ for e in chain] + bases


def classify_error(exc: BaseException, tool_failed: bool = False) -> tuple[StopReason, str]:
    """Stop reason of a root run that raised; `tool_failed`: a tool run errored just before."""
    return classify_exception_names(exception_names(exc), tool_failed)


def final_message(outputs: Any) -> Any:
    """The last message (LangGraph state) or the output value (AgentExecutor) of a root run."""
    if isinstance(outputs, Mapping):
        messages = outputs.get("messages")
        if isinstance(messages, Sequence) and not isinstance(messages, str) and messages:
            return messages[-1]
        return outputs["output"] if "output" in outputs else None
    if isinstance(outputs, BaseMessage):
        return outputs
    if isinstance(outputs, Sequence) and not isinstance(outputs, str) and outputs:
        return outputs[-1]
    return outputs


def classify_output(outputs: Any) -> tuple[StopReason | None, str]:
    """Stop reason a root run's return signals (budget text, only invalid tool calls, an error ToolMessage);
    None when it looks clean."""
    last = final_message(outputs)
    text = last if isinstance(last, str) else None
    if isinstance(last, BaseMessage):
        text = last.text if isinstance(last.text, str) else str(last.content)
    if text is not None and is_budget_text(text):
        return StopReason.MAX_STEPS, "budget message"
    if isinstance(last, AIMessage) and last.invalid_tool_calls and not last.tool_calls:
        return StopReason.PARSE_ERROR, "invalid_tool_calls"
    if isinstance(last, ToolMessage) and last.status == "error":
        return StopReason.TOOL_ERROR, "error ToolMessage"
    return None, ""


@dataclass
class StreamBudget:
    """What `handler.budget(...)` yields: the limit and the model calls started so far."""

    trajectory_id: str
    max_steps: int
    calls: int = 0

    @property
    def exhausted(self) -> bool:
        return self.calls >= self.max_steps


def new_budget(target: str | MutableMapping[str, Any], key: str, max_steps: Any) -> StreamBudget:
    """A budget on the string id, or on the config's metadata[key] (set when missing)."""
    if isinstance(target, str):
        if not target.strip():
            raise InputError("budget: the trajectory id is empty")
        tid: Any = target
    elif not isinstance(target, MutableMapping):
        raise TypeError(f"budget: give a trajectory id or the run config, got {type(target).__name__}")
    else:
        metadata = target.get("metadata")
        if metadata is None:
            metadata = target["metadata"] = {}
        if not isinstance(metadata, Mapping):
            raise TypeError("budget: config['metadata'] is not a mapping")
        tid = metadata.get(key)
        if tid is None or not str(tid).strip():
            tid = str(uuid.uuid4())
            target["metadata"] = {**metadata, key: tid}
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InputError(f"budget: max_steps must be a whole number >= 1, got {max_steps!r}")
    return StreamBudget(str(tid), max_steps)


def _span_ids(span: Any) -> dict[str, str] | None:
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return {TRACE_ID_KEY: f"{context.trace_id:032x}", SPAN_ID_KEY: f"{context.span_id:016x}"}


def current_span_ids() -> dict[str, str] | None:
    """The current span's ids; OpenTelemetry unloaded: none (never imported here)."""
    trace = sys.modules.get("opentelemetry.trace")
    return None if trace is None else _span_ids(trace.get_current_span())


def instrumentor_span_ids(run_id: object) -> dict[str, str] | None:
    """The span OpenInference's instrumentor opened for `run_id` (never made current); exists by the
    run's first model call."""
    module = sys.modules.get("openinference.instrumentation.langchain")
    if module is None:
        return None
    tracer = getattr(module.LangChainInstrumentor(), "_tracer", None)  # a singleton; None when not instrumented
    span = tracer.get_span(run_id) if tracer is not None else None
    return None if span is None else _span_ids(span)


def n_entries(logprobs: Any) -> int:
    entries = logprobs.get("content") if isinstance(logprobs, Mapping) else logprobs
    return len(entries) if isinstance(entries, Sequence) and not isinstance(entries, (str, bytes)) else 0


def _logprobs(gen: Any) -> Any:
    """A generation's (or streamed chunk's) logprobs: its generation_info's, else its message's metadata's."""
    logprobs = (getattr(gen, "generation_info", None) or {}).get("logprobs")
    if logprobs is None:
        logprobs = (getattr(getattr(gen, "message", None), "response_metadata", None) or {}).get("logprobs")
    return logprobs


def llm_output(response: LLMResult) -> tuple[RawStep, bool]:
    """The call's raw output and whether it is malformed (only invalid tool calls)."""
    gens = response.generations[0] if response.generations else []
    if not gens:
        return RawStep(None), True
    gen = gens[0]
    message = getattr(gen, "message", None)  # None for a completion model: no tool calls
    tool_calls = getattr(message, "tool_calls", None) or []
    malformed = bool(getattr(message, "invalid_tool_calls", None)) and not tool_calls
    tool_args: Any = [c.get("args") for c in tool_calls if isinstance(c, Mapping)] or None
    return RawStep(gen.text if isinstance(gen.text, str) else None, _logprobs(gen), tool_args), malformed


def observed_stop(
    outputs: Any, error: BaseException | None, tool_failed: bool, budget: StreamBudget | None
) -> tuple[tuple[StopReason, str], int | None]:
    """What a root run's end shows, and the limit of the caller's budget that stopped it (else None)."""
    if budget is not None and isinstance(error, GeneratorExit):  # stopped reading under its own budget: censored
        detail = f"stream closed under handler.budget(max_steps={budget.max_steps})"
        return (StopReason.MAX_STEPS, detail), budget.max_steps
    if error is not None:
        return classify_error(error, tool_failed), None
    found, detail = classify_output(outputs)
    return (found or StopReason.CLEAN, detail), None


def chunk_logprobs(logprobs: Any, chunk: Any) -> list[Any] | None:
    """A streamed chunk's logprob entries, kept in case the final result has fewer (LangGraph's v3 events)."""
    if logprobs is None and chunk is not None:
        logprobs = _logprobs(chunk)
    if not logprobs:
        return None
    entries = logprobs.get("content") if isinstance(logprobs, Mapping) else logprobs
    return entries if isinstance(entries, list) and entries else None
