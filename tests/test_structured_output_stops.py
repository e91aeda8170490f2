"""langchain 1.x `create_agent` with structured output and retry middleware: the stop reason, steps and
repairs of each construct, the same through the handler and through OpenInference + the span processor
(issue 46, items 4-6).

The agents are real `create_agent` loops around the real `ChatOpenAI`, talking over HTTP to a scripted
OpenAI-compatible server on 127.0.0.1, so the failures are LangChain's and langchain-openai's own: a
ProviderStrategy answer that fails its schema raises StructuredOutputValidationError; a malformed tool
call under ProviderStrategy (strict tools) makes the openai client's parse raise JSONDecodeError;
ToolStrategy answers a schema-invalid structured tool call with an error ToolMessage and asks again;
ModelRetryMiddleware with on_failure="continue" answers for the model once its retries run out.

Before the fix these were `other` with the rejected output as a step, `other` with the malformed call
counted as a failed call (no repair), a step with `verbal: null` (the run dropped from the verbal
score), and `clean` records with no model answer. Two guards passed before and must still: a repaired
history is no rejection ("repaired tool call history"), and retries that recover keep the real steps.
The server speaks JSON and server-sent events, so `astream` drives langchain-openai's streaming path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelFallbackMiddleware, ModelRetryMiddleware, ToolRetryMiddleware
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
from langchain_core.tools import tool
from pydantic import BaseModel

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler


class Answer(BaseModel):
    city: str
    confidence: float


ANSWER = '{"city": "Paris", "confidence": 0.7}'  # a valid ProviderStrategy answer: verbal 0.7


def reply(content: str = "", calls: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """One chat completion message: content and (name, raw JSON arguments) tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call-{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    return message


FAIL = 500  # the server answers this status: an InternalServerError
SLOW = "slow"  # the server answers after the client's timeout: a timeout


def _completion(message: dict[str, Any], finish: str) -> str:
    choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    return json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]})


def _chunks(message: dict[str, Any], finish: str) -> str:
    """The same reply as server-sent events: the whole delta in one chunk, then the finish reason."""
    delta = {**message, "tool_calls": [{"index": i, **c} for i, c in enumerate(message.get("tool_calls", []))]}
    chunks = [{"index": 0, "delta": delta, "finish_reason": None}, {"index": 0, "delta": {}, "finish_reason": finish}]
    events = [
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [c]} for c in chunks
    ]
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


@contextlib.contextmanager
def scripted_server(script: list[Any]) -> Iterator[str]:
    """An OpenAI-compatible /v1 on 127.0.0.1 answering each request with the script's next reply."""
    replies = iter(script)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            streamed = json.loads(self.rfile.read(int(self.headers["Content-Length"]))).get("stream")
            item = next(replies)
            if item == SLOW:  # past the client's timeout: it has hung up by now
                time.sleep(0.5)
                return
            kind = "text/event-stream" if streamed else "application/json"
            if item == FAIL:
                kind = "application/json"
                body = json.dumps({"error": {"message": "overloaded", "type": "server_error"}}).encode()
                self.send_response(500)
            else:
                finish = "tool_calls" if item.get("tool_calls") else "stop"
                body = (_chunks(item, finish) if streamed else _completion(item, finish)).encode()
                self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return "found " + q


FLAKY_CALLS: list[str] = []


@tool
def flaky(q: str) -> str:
    """Look something up on a service that drops every first request."""
    FLAKY_CALLS.append(q)
    if len(FLAKY_CALLS) % 2:
        raise ConnectionError("connection reset")
    return "found " + q


def _model(url: str, timeout: float | None = None) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=url, api_key="k", model="m", max_retries=0, timeout=timeout)


def _retry(**kw: Any) -> ModelRetryMiddleware:
    return ModelRetryMiddleware(initial_delay=0, jitter=False, **kw)


def run_agent(
    route: str, tmp_path: Any, script: list[Any], build: Any, timeout: float | None = None, streamed: bool = False
) -> tuple[dict[str, Any], str | None]:
    """Run one agent (`build(model_factory)` -> agent) against the script through one route (`invoke`, or
    `astream` of its messages): its record, and the class name of what the run raised (None if it returned)."""
    acc = Accumulator(sink=tmp_path / f"{route}.jsonl", bootstrap=0)
    config: dict[str, Any] = {"metadata": {"tps_trajectory_id": "run-0"}}
    raised = None
    with scripted_server(script) as url:
        agent = build(lambda: _model(url, timeout))
        provider: Any = None
        if route == "handler":
            handler = TPSCallbackHandler(acc)
            config["callbacks"] = [handler]
            instrumentation: Any = contextlib.nullcontext()
        else:
            from opentelemetry.sdk.trace import TracerProvider
            from otel_support import instrumented

            from tps_tracer.otel import TPSSpanProcessor

            provider = TracerProvider()
            provider.add_span_processor(TPSSpanProcessor(acc))
            instrumentation = instrumented(provider)
        with instrumentation:
            try:
                if streamed:
                    asyncio.run(
                        _drain(agent.astream({"messages": [("user", "Which city?")]}, config, stream_mode="messages"))
                    )
                else:
                    agent.invoke({"messages": [("user", "Which city?")]}, config=config)
            except Exception as exc:
                raised = type(exc).__name__
        handler.close() if provider is None else provider.shutdown()
    acc.close()
    [record] = [json.loads(line) for line in (tmp_path / f"{route}.jsonl").read_text().splitlines()]
    return record, raised


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What this file checks of a record: stop, the verbal forecast of each step, and the counts."""
    md = record["metadata"]
    return {
        "stop": record["stop_reason"],
        "verbal": [s["forecasts"]["verbal"] for s in record["steps"]],
        "calls": md["llm_calls"],
        "repairs": md.get("parse_repairs", 0),
        "failed": md.get("failed_calls", 0),
        "detail": md.get("stop_detail"),
    }


BAD_SCHEMA = "Confidence: 0.4. Paris, I think."  # not the JSON the schema asks for
MALFORMED_CALL = reply("", (("lookup", '{"q": "Par'),))  # truncated arguments of a strict tool


def provider(build_model: Any, middleware: tuple[Any, ...] = ()) -> Any:
    return create_agent(build_model(), [lookup], response_format=ProviderStrategy(Answer), middleware=middleware)


def tool_strategy(build_model: Any) -> Any:
    return create_agent(build_model(), [lookup], response_format=ToolStrategy(Answer))


def fallback(build_model: Any) -> Any:
    middleware = (ModelFallbackMiddleware(build_model()),)
    return create_agent(build_model(), [lookup], response_format=ProviderStrategy(Answer), middleware=middleware)


def plain_retry(build_model: Any) -> Any:
    return create_agent(build_model(), [lookup], middleware=[_retry(max_retries=1)])


CASES: dict[str, tuple[list[Any], Any, dict[str, Any]]] = {
    # ProviderStrategy, an answer that fails the schema: the run raises StructuredOutputValidationError.
    "provider, invalid answer": (
        [reply(BAD_SCHEMA)],
        provider,
        {"stop": "parse_error", "verbal": [], "calls": 1, "repairs": 1, "failed": 0},
    ),
    # ProviderStrategy, a malformed tool call: langchain-openai raises JSONDecodeError from the call itself.
    "provider, malformed tool call": (
        [MALFORMED_CALL],
        provider,
        {"stop": "parse_error", "verbal": [], "calls": 1, "repairs": 1, "failed": 0},
    ),
    # Both failures retried by ModelRetryMiddleware inside one model node, then a valid answer.
    "provider, retried": (
        [reply(BAD_SCHEMA), MALFORMED_CALL, reply(ANSWER)],
        lambda m: provider(m, (_retry(max_retries=2),)),
        {"stop": "clean", "verbal": [0.7], "calls": 3, "repairs": 2, "failed": 0},
    ),
    # ModelFallbackMiddleware: the primary's invalid answer replaced by the fallback's valid one.
    "provider, fallback model": (
        [reply(BAD_SCHEMA), reply(ANSWER)],
        fallback,
        {"stop": "clean", "verbal": [0.7], "calls": 2, "repairs": 1, "failed": 0},
    ),
    # ToolStrategy: a schema-invalid structured tool call (no confidence) answered with an error and retried.
    "tool strategy, retried": (
        [reply("", (("Answer", '{"city": 3}'),)), reply("", (("Answer", '{"city": "Paris", "confidence": 0.8}'),))],
        tool_strategy,
        {"stop": "clean", "verbal": [0.8], "calls": 2, "repairs": 1, "failed": 0},
    ),
    # ModelRetryMiddleware(on_failure="continue") out of retries: its canned AIMessage is no model answer.
    # ToolStrategy: two structured answers in one reply (MultipleStructuredOutputsError), retried.
    "tool strategy, two answers retried": (
        [
            reply(
                "",
                (("Answer", '{"city": "Lyon", "confidence": 0.5}'), ("Answer", '{"city": "Nice", "confidence": 0.4}')),
            ),
            reply("", (("Answer", '{"city": "Paris", "confidence": 0.8}'),)),
        ],
        tool_strategy,
        {"stop": "clean", "verbal": [0.8], "calls": 2, "repairs": 1, "failed": 0},
    ),
    # Not a rejection: a call with one valid and one malformed tool call. The next model node re-sends the
    # history with the malformed call answered (an error ToolMessage), ahead of the model's answer.
    "repaired tool call history": (
        [
            reply("Confidence: 0.6", (("lookup", '{"q": "capital"}'), ("lookup", '{"q": '))),
            reply("Confidence: 0.9. Paris."),
        ],
        lambda m: create_agent(m(), [lookup]),
        {"stop": "clean", "verbal": [0.6, 0.9], "calls": 2, "repairs": 0, "failed": 0},
    ),
    "model retry exhausted, first call": (
        [FAIL, FAIL],
        plain_retry,
        {"stop": "other", "verbal": [], "calls": 2, "repairs": 0, "failed": 2},
    ),
    "model retry exhausted, later call": (
        [reply("Confidence: 0.6", (("lookup", '{"q": "capital"}'),)), FAIL, FAIL],
        plain_retry,
        {"stop": "other", "verbal": [0.6], "calls": 3, "repairs": 0, "failed": 2},
    ),
    "model retry exhausted by timeouts": (
        [SLOW, SLOW],
        plain_retry,
        {"stop": "timeout", "verbal": [], "calls": 2, "repairs": 0, "failed": 2},
    ),
}


@pytest.mark.parametrize("route", ["handler", "spans"])
@pytest.mark.parametrize("case", list(CASES))
def test_structured_output_and_retries_give_their_stop_and_repairs(tmp_path, case, route):
    script, build, expected = CASES[case]
    timeout = 0.25 if SLOW in script else None
    record, raised = run_agent(route, tmp_path, list(script), build, timeout)
    got = summary(record)
    detail = got.pop("detail")
    assert got == expected, (case, route, detail)
    # What LangChain itself does in each case: the run raises exactly when it ends on a parse failure.
    if expected["stop"] == "parse_error":
        langchain_raises = "JSONDecodeError" if script == [MALFORMED_CALL] else "StructuredOutputValidationError"
        assert raised == detail == langchain_raises
    else:
        assert raised is None
    if expected["stop"] in ("other", "timeout"):  # the failure the retries ended on, by class name
        # langchain-openai 1.x wraps the openai client's errors in its own classes
        assert detail == "last model call failed: " + ("OpenAITimeoutError" if SLOW in script else "OpenAIAPIError")


@pytest.mark.parametrize("route", ["handler", "spans"])
def test_retries_that_recover_keep_the_real_steps(tmp_path, route):
    """Already right before the fix, kept as the construct table's rows: a model call that raised and a
    tool that raised, each retried successfully, are counted (failed_calls, tool_errors), the run is
    clean and scored on the steps that were answers."""
    FLAKY_CALLS.clear()
    script = [FAIL, reply("Confidence: 0.6", (("flaky", '{"q": "capital"}'),)), reply("Confidence: 0.9. Paris.")]

    def build(m: Any) -> Any:
        return create_agent(m(), [flaky], middleware=[_retry(max_retries=1), ToolRetryMiddleware(initial_delay=0)])

    record, raised = run_agent(route, tmp_path, script, build)
    assert raised is None
    got = summary(record)
    assert (got["stop"], got["verbal"], got["calls"], got["failed"]) == ("clean", [0.6, 0.9], 3, 1)
    assert record["metadata"]["tool_errors"] == 1 and len(FLAKY_CALLS) == 2


@pytest.mark.parametrize("route", ["handler", "spans"])
@pytest.mark.parametrize("case", ["provider, retried", "tool strategy, retried", "model retry exhausted, later call"])
def test_the_same_records_when_the_agent_is_streamed(tmp_path, case, route):
    """`astream(stream_mode="messages")` on the event loop: the same callbacks and spans, the same records."""
    script, build, expected = CASES[case]
    record, _ = run_agent(route, tmp_path, list(script), build, streamed=True)
    got = summary(record)
    got.pop("detail")
    assert got == expected
