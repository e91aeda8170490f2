"""The OpenTelemetry span current when a LangChain run starts, so its record joins its trace.

Written into the record's metadata under the span processor's own names (`otel_trace_id`,
`otel_span_id`, lowercase hex), so records from either adapter join traces the same way
(`tps-tracer export`, `TraceLinks.for_metadata`).

OpenTelemetry is never imported here: if `opentelemetry.trace` is not loaded yet, nothing
in the process can have made a span current, so there is nothing to read (and the handler's
import stays light: tests/test_adapter_imports.py).
"""

from __future__ import annotations

import sys

TRACE_ID_KEY = "otel_trace_id"
SPAN_ID_KEY = "otel_span_id"


def current_span_ids() -> dict[str, str] | None:
    """{otel_trace_id, otel_span_id} of the current span, None without a valid one."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return {TRACE_ID_KEY: f"{context.trace_id:032x}", SPAN_ID_KEY: f"{context.span_id:016x}"}


def instrumentor_span_ids(run_id: object) -> dict[str, str] | None:
    """The span OpenInference's LangChain instrumentor opened for `run_id`, when it is loaded.

    OpenInference never makes its spans current (a callback system cannot promise to detach
    them), so `current_span_ids()` at the run's start sees only an enclosing span, or none:
    without an enclosing span the agent's root span starts a trace of its own. Its span is
    the one the span processor links the run to (`otel_span_id`), so it is preferred; it
    exists once the instrumentor's own callback has run, which is before the run's first
    model call."""
    module = sys.modules.get("openinference.instrumentation.langchain")
    if module is None:
        return None
    tracer = getattr(module.LangChainInstrumentor(), "_tracer", None)  # a singleton; None when not instrumented
    span = tracer.get_span(run_id) if tracer is not None else None
    if span is None:
        return None
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return {TRACE_ID_KEY: f"{context.trace_id:032x}", SPAN_ID_KEY: f"{context.span_id:016x}"}
