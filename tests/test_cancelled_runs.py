"""A run cancelled from outside: asyncio.wait_for / asyncio.timeout bound an agent's time by
cancelling its task, and the run sees only CancelledError (the caller gets TimeoutError).

A new-user trial found such runs recorded `tool_error` (cancelled while its async tool slept: the
tool's CancelledError was counted as the tool failing) or `other` (cancelled while the model ran),
never `timeout`: the termination audit blamed the tool for the harness's time budget. Now both are
`timeout` (stop_detail CancelledError), and a cancelled tool is not counted as a tool error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler

SLOW = 5.0  # seconds: far beyond the harness's timeout below


class OneToolTurn(BaseChatModel):
    """Calls `lookup` once, then answers; `slow_model` makes the second call hang (async), `slow_first`
    the first."""

    slow_model: bool = False
    slow_first: bool = False

    @property
    def _llm_type(self) -> str:
        return "one-tool-turn"

    def bind_tools(self, tools: Any, **kwargs: Any) -> OneToolTurn:
        return self

    def _reply(self, messages: list[BaseMessage]) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        calls = [{"name": "lookup", "args": {"q": "x"}, "id": "call-0"}] if turn == 0 else []
        return ChatResult(generations=[ChatGeneration(message=AIMessage("Confidence: 0.6", tool_calls=calls))])

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        answered = any(isinstance(m, AIMessage) for m in messages)
        if (self.slow_model and answered) or (self.slow_first and not answered):
            await asyncio.sleep(SLOW)
        return self._reply(messages)


def _tool(slow: bool) -> Any:
    @tool
    async def lookup(q: str) -> str:
        """Look something up."""
        if slow:
            await asyncio.sleep(SLOW)
        return "found " + q

    return lookup


@pytest.mark.parametrize("where", ["tool", "model", "first_model"])
def test_a_run_cut_by_asyncio_wait_for_is_a_timeout_not_a_tool_error(tmp_path, where):
    """first_model (issue 46): cancelled during its first model call, a run left no record (counted
    only as ignored/runs_without_model_calls): langchain-core reports the shielded call's error after
    the root's. A model call in flight when the run ends is a call made."""
    acc = Accumulator(sink=tmp_path / "runs.jsonl", bootstrap=0)
    handler = TPSCallbackHandler(acc)
    model = OneToolTurn(slow_model=where == "model", slow_first=where == "first_model")
    agent = create_agent(model, [_tool(slow=where == "tool")])

    async def main() -> list[str]:
        raised = []
        for i in range(3):
            config = {"callbacks": [handler], "metadata": {"tps_trajectory_id": f"run-{i}"}}
            try:
                await asyncio.wait_for(agent.ainvoke({"messages": [("user", "go")]}, config=config), timeout=0.3)
            except BaseException as exc:  # the harness's TimeoutError
                raised.append(type(exc).__name__)
        return raised

    assert asyncio.run(main()) == ["TimeoutError"] * 3
    handler.flush()
    acc.close()
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["trajectory_id"] for r in records] == ["run-0", "run-1", "run-2"]
    for r in records:
        assert r["stop_reason"] == "timeout", (r, r["metadata"])
        assert r["metadata"]["stop_detail"] == "CancelledError"
        assert "tool_errors" not in r["metadata"]  # the tool did not fail: it was cancelled
        # The first model call's step; the call cancelled in flight never returned, so it has none.
        assert [s["forecasts"]["verbal"] for s in r["steps"]] == ([] if where == "first_model" else [0.6])
        assert r["metadata"]["llm_calls"] == {"tool": 1, "model": 2, "first_model": 1}[where]
    assert handler.health.snapshot().get("ignored", {}).get("runs_without_model_calls", 0) == 0


@pytest.mark.parametrize("where", ["tool", "model", "first_model"])
@pytest.mark.parametrize("ends_by", ["close", "grace"])
def test_the_span_processor_reads_the_same_cancelled_run_as_a_timeout(tmp_path, where, ends_by):
    """The same agent traced by OpenInference into TPSSpanProcessor: the cancelled tool span (error,
    CancelledError) is not a tool failure, and the run is a timeout with the steps that completed.

    Cancelled inside the async model call (issue 46), OpenInference never ends the model span: the
    run's root ended (CancelledError) with a child still open, and the processor waited for it until
    it recorded the run capture_lost (abandoned: closed, or idle after 600 s in a service). A trace
    whose root has ended is finished from its root: at close, or ROOT_ENDED_GRACE after its last span."""
    from opentelemetry.sdk.trace import TracerProvider
    from otel_support import instrumented

    from tps_tracer.otel import TPSSpanProcessor
    from tps_tracer.otel.span_processor import ROOT_ENDED_GRACE

    clock = [0.0]
    acc = Accumulator(sink=tmp_path / "runs.jsonl", bootstrap=0)
    processor = TPSSpanProcessor(acc, clock=lambda: clock[0])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    model = OneToolTurn(slow_model=where == "model", slow_first=where == "first_model")
    agent = create_agent(model, [_tool(slow=where == "tool")])

    async def main() -> None:
        for i in range(2):
            config = {"metadata": {"tps_trajectory_id": f"run-{i}"}}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(agent.ainvoke({"messages": [("user", "go")]}, config=config), timeout=0.3)

    with instrumented(provider):
        asyncio.run(main())
    processor.force_flush()
    if ends_by == "grace":  # a service: nothing closes, the runs end by the processor's own sweep
        clock[0] = ROOT_ENDED_GRACE
        assert processor.sweep() == (0 if where == "tool" else 2)
        processor.force_flush()
        assert processor.n_open == 0
    acc.close()
    provider.shutdown()
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert sorted(r["trajectory_id"] for r in records) == ["run-0", "run-1"]
    for r in records:
        assert r["stop_reason"] == "timeout", (r, r["metadata"])
        assert r["metadata"]["stop_detail"] == "CancelledError"
        assert "tool_errors" not in r["metadata"], r
        assert "abandoned" not in r["metadata"], r
        # As the handler records it: the first call's step; the call cancelled in flight has none.
        assert [s["forecasts"]["verbal"] for s in r["steps"]] == ([] if where == "first_model" else [0.6])
        assert r["metadata"].get("unended_spans", 0) == (0 if where == "tool" else 1)
        assert r["metadata"]["llm_calls"] == {"tool": 1, "model": 2, "first_model": 1}[where]
    assert processor.health.get("abandoned") == 0


@contextlib.contextmanager
def _silent_server() -> Any:
    """An OpenAI-compatible address on 127.0.0.1 that never answers in time (it sleeps, then closes)."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            time.sleep(2.0)
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("route", ["handler", "spans"])
def test_a_client_timeout_is_a_timeout_on_both_routes(tmp_path, route):
    """`ChatOpenAI(timeout=..., max_retries=0)` past its timeout: langchain-openai 1.x raises its own
    `OpenAITimeoutError` (an APITimeoutError and a langchain-core ModelTimeoutError). The span
    processor sees only that class name and recorded `other` (22 of 22 in a new user's trial) where the
    handler, which sees the exception chain, said `timeout`."""
    from langchain_openai import ChatOpenAI

    acc = Accumulator(sink=tmp_path / "runs.jsonl", bootstrap=0)
    config: dict[str, Any] = {"metadata": {"tps_trajectory_id": "slow-0"}}
    with _silent_server() as url:
        agent = create_agent(ChatOpenAI(base_url=url, api_key="k", model="m", timeout=0.3, max_retries=0), [])
        if route == "handler":
            handler = TPSCallbackHandler(acc)
            with pytest.raises(Exception, match=r"[Tt]imed? ?out"):
                agent.invoke({"messages": [("user", "go")]}, config={**config, "callbacks": [handler]})
            handler.close()
        else:
            from opentelemetry.sdk.trace import TracerProvider
            from otel_support import instrumented

            from tps_tracer.otel import TPSSpanProcessor

            provider = TracerProvider()
            provider.add_span_processor(TPSSpanProcessor(acc))
            with instrumented(provider), pytest.raises(Exception, match=r"[Tt]imed? ?out"):
                agent.invoke({"messages": [("user", "go")]}, config=config)
            provider.shutdown()
    acc.close()
    [record] = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert record["stop_reason"] == "timeout", record
