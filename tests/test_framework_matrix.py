"""The framework matrix: each agent framework run offline with its REAL instrumentation, read by TPSSpanProcessor.

Every cell runs a scripted model (no network: pydantic-ai's own FunctionModel, or a local
OpenAI-compatible server on 127.0.0.1 answering the frameworks' real OpenAI clients) under
the framework's own OpenTelemetry instrumentation, with `TPSSpanProcessor` on the tracer
provider, and checks the records against the script: one trajectory per run, its steps,
each step's verbal confidence (and token signals where the spans carry logprobs,
computed independently in `framework_support.expected_forecasts`), the stop reason and
the horizon. LangChain / LangGraph (OpenInference and OpenLLMetry) are covered by
tests/test_constructs.py.

Each framework is an optional test dependency (`pip install -e '.[frameworks-test]'`);
without it its cells are skipped with that reason.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from framework_support import Turn, expected_forecasts, react_turns, scripted_openai_server
from opentelemetry.sdk.trace import TracerProvider
from world_check import new_accumulator, sink_records

from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.records.schema import TrajectoryRecord

TOL = 1e-9


class Captured:
    def __init__(self, provider: TracerProvider, processor: TPSSpanProcessor):
        self.provider = provider
        self.processor = processor
        self.records: list[TrajectoryRecord] = []


@contextmanager
def capture(
    tmp_path: Path, instrument: Callable[[TracerProvider], Callable[[], None]] | None = None
) -> Iterator[Captured]:
    """A provider with TPSSpanProcessor attached, instrumented by `instrument` (which returns its
    undo); the records are in `.records` once the block ends."""
    acc, sink = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    undo = instrument(provider) if instrument is not None else (lambda: None)
    box = Captured(provider, processor)
    try:
        yield box
    finally:
        undo()
        processor.force_flush()
        acc.close()
    assert not processor.errors, processor.errors
    if sink.exists() and sink.stat().st_size:  # no trajectory at all leaves the sink empty
        box.records.extend(sink_records(sink).values())


def check(
    rec: TrajectoryRecord,
    turns: Sequence[Turn],
    stop: str,
    horizon: int | None,
    logprobs: bool,
) -> None:
    """The record equals the script: steps, each step's signals, the stop reason and horizon."""
    where = f"{rec.stop_reason} h={rec.horizon} {len(rec.steps)} steps {rec.metadata}"
    assert rec.stop_reason == stop, where
    assert rec.horizon == horizon, where
    assert len(rec.steps) == len(turns), where
    for t, (step, turn) in enumerate(zip(rec.steps, turns, strict=True), 1):
        want = expected_forecasts(turn, logprobs)
        for name, value in want.items():
            got = step.forecasts.get(name)
            if value is None:
                assert got is None, (where, t, name, got)
            else:
                assert got == pytest.approx(value, abs=TOL), (where, t, name, got, value)


# ---------------------------------------------------------------- pydantic-ai (native GenAI spans)


def _pydantic_ai_agent(turns: Sequence[Turn], provider: TracerProvider) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    queue = list(turns)

    def scripted(messages: Any, info: Any) -> Any:
        turn = queue.pop(0)
        parts: list[Any] = [TextPart(turn.text)]
        if turn.tool is not None:
            parts.append(ToolCallPart(turn.tool[0], turn.tool[1]))
        return ModelResponse(parts=parts)

    agent = Agent(FunctionModel(scripted))
    agent.instrument = InstrumentationSettings(tracer_provider=provider)

    @agent.tool_plain
    def search(q: str) -> str:
        return f"result for {q}"

    return agent


def test_pydantic_ai_usage_limit_is_a_budget_stop_with_the_request_limit_as_horizon(tmp_path):
    pytest.importorskip("pydantic_ai", reason="install .[frameworks-test]")
    from pydantic_ai import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    budget_turns = react_turns(6, final=False)
    clean_turns = react_turns(2, final=True)
    with capture(tmp_path) as cap:
        with pytest.raises(UsageLimitExceeded):
            _pydantic_ai_agent(budget_turns, cap.provider).run_sync("task", usage_limits=UsageLimits(request_limit=4))
        result = _pydantic_ai_agent(clean_turns, cap.provider).run_sync(
            "task", usage_limits=UsageLimits(request_limit=4)
        )
        assert result.output == clean_turns[-1].text
    assert len(cap.records) == 2  # one trajectory per run
    clean, budget = sorted(cap.records, key=lambda r: len(r.steps))
    check(clean, clean_turns, "clean", None, logprobs=False)
    check(budget, budget_turns[:4], "max_steps", 4, logprobs=False)
    assert budget.metadata["stop_detail"] == "UsageLimitExceeded"


# ---------------------------------------------------------------- OpenAI Agents SDK (OpenInference instrumentor)


def _agents_instrument(provider: TracerProvider) -> Callable[[], None]:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)  # exclusive: the SDK's own exporter is replaced
    return instrumentor.uninstrument


def _agents_run(base_url: str, api: str, streamed: bool, max_turns: int) -> Any:
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="offline", max_retries=0)
    model: Any = (
        OpenAIChatCompletionsModel("scripted", client) if api == "chat" else OpenAIResponsesModel("scripted", client)
    )

    @function_tool
    def search(q: str) -> str:
        """Search the web."""
        return f"result for {q}"

    agent = Agent(
        name="researcher",
        instructions="Answer.",
        model=model,
        tools=[search],
        model_settings=ModelSettings(top_logprobs=2),
    )

    async def go() -> Any:
        if not streamed:
            return (await Runner.run(agent, "task", max_turns=max_turns)).final_output
        run = Runner.run_streamed(agent, "task", max_turns=max_turns)
        async for _ in run.stream_events():
            pass
        return run.final_output

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("api", "streamed", "logprobs"),
    [
        ("chat", False, False),  # generation span: output.value a list of chat message dicts (no logprobs kept)
        ("chat", True, True),  # generation span: output.value a list of Responses-API objects
        ("responses", False, True),  # response span: output.value a Responses-API object
    ],
)
def test_openai_agents_max_turns_on_the_agent_span_is_a_budget_stop(tmp_path, api, streamed, logprobs):
    pytest.importorskip("agents", reason="install .[frameworks-test]")
    pytest.importorskip("openinference.instrumentation.openai_agents", reason="install .[frameworks-test]")
    from agents import MaxTurnsExceeded

    budget_turns = react_turns(5, final=False)
    clean_turns = react_turns(2, final=True)
    with capture(tmp_path, _agents_instrument) as cap:
        with scripted_openai_server(budget_turns) as server, pytest.raises(MaxTurnsExceeded):
            _agents_run(server.base_url, api, streamed, max_turns=3)
        with scripted_openai_server(clean_turns) as server:
            assert _agents_run(server.base_url, api, streamed, max_turns=3) == clean_turns[-1].text
    assert len(cap.records) == 2
    clean, budget = sorted(cap.records, key=lambda r: r.stop_reason != "clean")
    check(clean, clean_turns, "clean", None, logprobs)
    check(budget, budget_turns[:3], "max_steps", 3, logprobs)


# ---------------------------------------------------------------- smolagents (OpenInference instrumentor)


def _smolagents_instrument(provider: TracerProvider) -> Callable[[], None]:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    instrumentor = SmolagentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument


def _smolagents_agent(base_url: str, max_steps: int, planning_interval: int | None = None) -> Any:
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def search(q: str) -> str:
        """Search the web.

        Args:
            q: the query
        """
        return f"result for {q}"

    model = OpenAIServerModel("scripted", api_base=base_url, api_key="offline")
    return ToolCallingAgent(
        tools=[search], model=model, max_steps=max_steps, verbosity_level=-1, planning_interval=planning_interval
    )


def _final_answer(text: str, verbal: float) -> Turn:
    """smolagents ends a run through its final_answer tool; the text states the confidence."""
    return Turn(f"Done <confidence>{verbal}</confidence>", ("final_answer", {"answer": text}), (0.9, 0.8))


def _plan(k: int) -> Turn:
    return Turn(f"Plan {k}: search then answer <confidence>0.5</confidence>", None, (0.9,) * 6)


@pytest.mark.parametrize(
    ("full_result", "planning"),
    [
        (True, False),  # RunResult(state='max_steps_error') is the root's output
        (False, False),  # only the answer is: the final-answer call directly under the agent span shows the stop
        (False, True),  # planning calls are directly under the agent span too, but never last
    ],
)
def test_smolagents_max_steps_is_a_budget_stop(tmp_path, full_result, planning):
    pytest.importorskip("smolagents", reason="install .[frameworks-test]")
    pytest.importorskip("openinference.instrumentation.smolagents", reason="install .[frameworks-test]")
    # max_steps=3: three tool-calling steps, then smolagents asks the model once more for a final answer.
    steps = react_turns(3, final=False)
    forced = Turn("Paris maybe <confidence>0.3</confidence>", None, (0.7, 0.6, 0.5))
    budget_turns = [*[t for i, s in enumerate(steps) for t in ([_plan(i), s] if planning else [s])], forced]
    clean_steps = [react_turns(1, final=False)[0], _final_answer("Paris", 0.85)]
    clean_turns = [t for i, s in enumerate(clean_steps) for t in ([_plan(i), s] if planning else [s])]
    with capture(tmp_path, _smolagents_instrument) as cap:
        with scripted_openai_server(budget_turns) as server:
            agent = _smolagents_agent(server.base_url, 3, planning_interval=1 if planning else None)
            result = agent.run("task", return_full_result=full_result)
            assert (result.state if full_result else None) == ("max_steps_error" if full_result else None)
        with scripted_openai_server(clean_turns) as server:
            agent = _smolagents_agent(server.base_url, 3, planning_interval=1 if planning else None)
            assert agent.run("task") == "Paris"
    assert len(cap.records) == 2
    clean, budget = sorted(cap.records, key=lambda r: r.stop_reason != "clean")
    check(clean, clean_turns, "clean", None, logprobs=False)  # the text is in message.contents.0.message_content
    # Every model call is a step (planning and the forced final answer included): T = max(max_steps, calls).
    check(budget, budget_turns, "max_steps", len(budget_turns), logprobs=False)


# ---------------------------------------------------------------- the raw OpenAI SDK (OpenInference instrumentor)


def _openai_instrument(provider: TracerProvider) -> Callable[[], None]:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument


def test_raw_openai_sdk_loop_under_an_application_span(tmp_path):
    """A hand-written ReAct loop: the application's span is the run, its tps.* attributes the budget."""
    pytest.importorskip("openinference.instrumentation.openai", reason="install .[frameworks-test]")
    from openai import OpenAI

    turns = react_turns(3, final=False)
    with capture(tmp_path, _openai_instrument) as cap, scripted_openai_server(turns) as server:
        client = OpenAI(base_url=server.base_url, api_key="offline", max_retries=0)
        tracer = cap.provider.get_tracer("my-app")
        with tracer.start_as_current_span("agent", attributes={"tps.trajectory_id": "loop-1"}) as span:
            messages: list[Any] = [{"role": "user", "content": "task"}]
            for _ in range(3):
                reply = (
                    client.chat.completions.create(model="scripted", messages=messages, logprobs=True, top_logprobs=2)
                    .choices[0]
                    .message
                )
                messages.append({"role": "assistant", "content": reply.content})
            span.set_attribute("tps.stop_reason", "max_steps")
            span.set_attribute("tps.horizon", 3)
    (rec,) = cap.records
    assert rec.trajectory_id == "loop-1"
    check(rec, turns, "max_steps", 3, logprobs=True)


def test_raw_openai_sdk_streamed_calls_grouped_by_metadata(tmp_path):
    """Root-level streamed calls of a plain loop, grouped by `tps_trajectory_id` metadata, stopped by declare_stop."""
    pytest.importorskip("openinference.instrumentation.openai", reason="install .[frameworks-test]")
    from openai import OpenAI
    from openinference.instrumentation import using_metadata

    turns = react_turns(2, final=True)
    with capture(tmp_path, _openai_instrument) as cap, scripted_openai_server(turns) as server:
        client = OpenAI(base_url=server.base_url, api_key="offline", max_retries=0)
        with using_metadata({"tps_trajectory_id": "loop-2"}):
            for _ in turns:
                stream = client.chat.completions.create(
                    model="scripted",
                    messages=[{"role": "user", "content": "task"}],
                    logprobs=True,
                    top_logprobs=2,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        cap.processor.declare_stop("loop-2", "clean")
        cap.processor.record_outcome("loop-2", True)
    (rec,) = cap.records
    assert rec.trajectory_id == "loop-2" and rec.outcome == 1
    check(rec, turns, "clean", None, logprobs=True)


# ---------------------------------------------------------------- the same readings on hand-made spans (real SDK)


def _spans_run(
    root_attrs: dict[str, Any],
    build: Callable[[Any, Any], None],
    after: Callable[[Any, Any], None] = lambda t, r: None,
    **kw: Any,
) -> Any:
    """One root span (given attributes): build(tracer, root), two LLM spans, after(tracer, root);
    returns the TrajectoryScore."""
    from opentelemetry import trace

    from tps_tracer import Accumulator

    acc = Accumulator(bootstrap=0)
    seen: list = []
    acc.add_listener(seen.append)
    processor = TPSSpanProcessor(acc, background=False, **kw)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    # tps.outcome: a clean run is scored (and seen by the listener) only with its outcome
    with tracer.start_as_current_span("run", attributes={"tps.outcome": 1, **root_attrs}) as root:
        build(tracer, root)
        for verbal in (0.2, 0.7):
            with tracer.start_as_current_span("llm", context=trace.set_span_in_context(root)) as llm:
                llm.set_attribute("openinference.span.kind", "LLM")
                llm.set_attribute("llm.output_messages.0.message.content", f"<confidence>{verbal}</confidence>")
        after(tracer, root)
    processor.force_flush()
    assert not processor.errors
    (score,) = seen
    return score


def _raise_in(tracer: Any, name: str, exc: Exception) -> None:
    try:
        with tracer.start_as_current_span(name):
            raise exc
    except type(exc):
        pass


class UsageLimitExceeded(Exception):  # same class name as pydantic-ai's: names are matched, not classes
    pass


def _budget_on_root(exc: Exception) -> Callable[[Any, Any], None]:
    def build(tracer: Any, root: Any) -> None:
        root.record_exception(exc)
        from opentelemetry.trace import Status, StatusCode

        root.set_status(Status(StatusCode.ERROR))

    return build


@pytest.mark.parametrize(
    ("root_attrs", "build", "stop", "horizon"),
    [
        # the request limit stated in the message is the horizon (2 calls made)
        (
            {},
            _budget_on_root(UsageLimitExceeded("The next request would exceed the request_limit of 9")),
            "max_steps",
            9,
        ),
        # a token limit is a budget too, but states no step budget: T = the calls made
        ({}, _budget_on_root(UsageLimitExceeded("Exceeded the output_tokens_limit of 50")), "max_steps", 2),
        # the framework's limit stopped the run, not the user's tps.horizon (issue 46: it used to win)
        (
            {"tps.horizon": 12},
            _budget_on_root(UsageLimitExceeded("The next request would exceed the request_limit of 9")),
            "max_steps",
            9,
        ),
        # smolagents' RunResult as the root's output, its max_steps on the root
        (
            {"smolagents.max_steps": 6, "output.value": "RunResult(output='x', state='max_steps_error', steps=[])"},
            lambda t, r: None,
            "max_steps",
            6,
        ),
        # smolagents' default output (the answer only): the last call directly under the agent span is the
        # final answer forced by max_steps (here every call is; the LLM spans of _spans_run are the root's children)
        ({"smolagents.max_steps": 6, "output.value": "Paris"}, lambda t, r: None, "max_steps", 6),
        (
            {"smolagents.max_steps": 6, "output.value": "RunResult(output='x', state='success')"},
            lambda t, r: None,
            "clean",
            2,  # a clean run: T = its steps
        ),
    ],
)
def test_budget_stop_on_the_root_and_its_stated_limit(root_attrs, build, stop, horizon):
    score = _spans_run(root_attrs, build)
    assert (score.stop_reason, score.horizon, score.n_steps) == (stop, horizon, 2)


def _agent_span(description: str | None, kind: str = "AGENT") -> Callable[[Any, Any], None]:
    def build(tracer: Any, root: Any) -> None:
        from opentelemetry.trace import Status, StatusCode

        with tracer.start_as_current_span("researcher", attributes={"openinference.span.kind": kind}) as span:
            span.set_status(Status(StatusCode.ERROR, description))

    return build


@pytest.mark.parametrize(
    ("build", "stop", "horizon"),
    [
        (_agent_span("Max turns exceeded: {'max_turns': 7}"), "max_steps", 7),
        (_agent_span("Max turns (5) exceeded"), "max_steps", 5),
        # the same text on a span that is not an agent's (a tool's) is not the run's stop
        (
            _agent_span("Max turns exceeded: {'max_turns': 7}", kind="TOOL"),
            "clean",
            2,
        ),  # a clean run's horizon is its steps
        # an agent span's other errors under a root that ended OK: the root decides (left clean)
        (_agent_span("Guardrail tripwire triggered"), "clean", 2),
    ],
)
def test_budget_stop_on_an_agent_span_under_an_ok_root(build, stop, horizon):
    score = _spans_run({}, lambda t, r: None, after=build)  # the agent span ends after the last model call
    assert (score.stop_reason, score.horizon) == (stop, horizon)


def test_a_nested_agents_budget_stop_the_run_survived_is_not_the_runs_stop():
    """A sub-agent that hit its max turns, then more model calls of the run: the run finished (clean)."""
    score = _spans_run({}, _agent_span("Max turns exceeded: {'max_turns': 7}"))
    assert (score.stop_reason, score.horizon) == ("clean", 2)


@pytest.mark.parametrize(
    ("output", "text", "args", "n_logprobs"),
    [
        # smolagents ChatMessage dict, content as blocks, arguments as a dict
        (
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}],
                "tool_calls": [{"function": {"name": "s", "arguments": {"q": 1}}}],
            },
            "a b",
            {"q": 1},
            None,
        ),
        # Agents SDK generation span: a list of chat message dicts (the input echo is not the output)
        (
            [{"role": "assistant", "content": "x", "tool_calls": [{"function": {"arguments": '{"q": 2}'}}]}],
            "x",
            '{"q": 2}',
            None,
        ),
        # a Responses-API response: reasoning item, two output_text parts with logprobs, a function call
        (
            {
                "object": "response",
                "output": [
                    {"type": "reasoning", "summary": []},
                    {
                        "type": "message",
                        "content": [
                            {
                                "type": "output_text",
                                "text": "ab",
                                "logprobs": [{"token": "ab", "logprob": -0.1, "top_logprobs": []}],
                            },
                            {
                                "type": "output_text",
                                "text": "c",
                                "logprobs": [{"token": "c", "logprob": -0.2, "top_logprobs": []}],
                            },
                        ],
                    },
                    {"type": "function_call", "arguments": '{"q": 3}'},
                ],
            },
            "abc",
            '{"q": 3}',
            2,
        ),
        # the streamed generation span's [response], without logprobs
        ([{"output": [{"type": "message", "content": [{"type": "output_text", "text": "z"}]}]}], "z", None, None),
        # not an assistant output at all
        ([{"role": "user", "content": "hi"}], None, None, None),
    ],
)
def test_output_value_shapes(output, text, args, n_logprobs):
    import json

    from tps_tracer.otel.span_reading import read_llm_step

    step = read_llm_step({"openinference.span.kind": "LLM", "output.value": json.dumps(output)}).raw
    assert (step.text, step.tool_arguments) == (text, args)
    assert (None if step.logprobs is None else len(step.logprobs)) == n_logprobs


def test_structured_contents_text_parts_only():
    from tps_tracer.otel.span_reading import read_llm_step

    key = "llm.output_messages.0.message.contents.{}.message_content.{}"
    attrs = {
        key.format(0, "type"): "text",
        key.format(0, "text"): "Paris <confidence>0.6</confidence>",
        key.format(1, "type"): "image",
        key.format(1, "image"): "...",
        key.format(2, "type"): "text",
        key.format(2, "text"): " done",
    }
    assert read_llm_step(attrs).raw.text == "Paris <confidence>0.6</confidence> done"


# ---------------------------------------------------------------- custom model classes (README recipes)


def test_openai_agents_custom_model_opens_a_generation_span(tmp_path):
    """A custom Agents SDK `Model` is not traced by itself: opening the SDK's generation_span makes its LLM span."""
    pytest.importorskip("agents", reason="install .[frameworks-test]")
    pytest.importorskip("openinference.instrumentation.openai_agents", reason="install .[frameworks-test]")
    from agents import Agent, MaxTurnsExceeded, Model, ModelResponse, Runner, Usage, function_tool
    from agents.tracing import generation_span
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    turns = react_turns(4, final=False)

    class ScriptedModel(Model):
        def __init__(self, traced: bool):
            self.queue, self.traced = list(turns), traced

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            turn = self.queue.pop(0)
            text = ResponseOutputText(type="output_text", text=turn.text, annotations=[])
            output: list[Any] = [
                ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[text])
            ]
            assert turn.tool is not None
            output.append(
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"c{len(self.queue)}",
                    name=turn.tool[0],
                    arguments=json.dumps(turn.tool[1]),
                )
            )
            if self.traced:  # the recipe: the model's output as chat message dicts on a generation span
                with generation_span(model="scripted") as span:
                    span.span_data.output = [{"role": "assistant", "content": turn.text}]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def search(q: str) -> str:
        """Search the web."""
        return "result"

    records = {}
    for traced in (False, True):
        path = tmp_path / str(traced)
        path.mkdir()
        with capture(path, _agents_instrument) as cap:
            agent = Agent(name="researcher", model=ScriptedModel(traced), tools=[search])
            with pytest.raises(MaxTurnsExceeded):
                Runner.run_sync(agent, "task", max_turns=3)
        records[traced] = cap.records
    assert records[False] == []  # no model call seen: not a trajectory (counted as ignored)
    (rec,) = records[True]
    check(rec, turns[:3], "max_steps", 3, logprobs=False)


def test_smolagents_custom_model_class_with_its_own_llm_span(tmp_path):
    """A smolagents Model subclass overriding generate is not wrapped by the instrumentor; an LLM span of
    its own (OpenInference attributes) makes each call a step."""
    pytest.importorskip("smolagents", reason="install .[frameworks-test]")
    pytest.importorskip("openinference.instrumentation.smolagents", reason="install .[frameworks-test]")
    from opentelemetry import trace
    from smolagents import Model, ToolCallingAgent, tool
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction

    turns = [*react_turns(1, final=False), _final_answer("Paris", 0.85)]

    @tool
    def search(q: str) -> str:
        """Search the web.

        Args:
            q: the query
        """
        return "result"

    class ScriptedModel(Model):
        def __init__(self, tracer: Any):
            super().__init__(model_id="scripted")
            self.queue, self.tracer = list(turns), tracer

        def generate(self, messages: Any, **kwargs: Any) -> Any:
            turn = self.queue.pop(0)
            assert turn.tool is not None
            call = ChatMessageToolCall(
                id=f"c{len(self.queue)}",
                type="function",
                function=ChatMessageToolCallFunction(name=turn.tool[0], arguments=turn.tool[1]),
            )
            message = ChatMessage(role="assistant", content=turn.text, tool_calls=[call])
            if self.tracer is not None:  # the recipe: one span per call, kind LLM, the output text on it
                with self.tracer.start_as_current_span("ScriptedModel.generate") as span:
                    span.set_attribute("openinference.span.kind", "LLM")
                    span.set_attribute("llm.output_messages.0.message.content", turn.text)
            return message

    for traced in (False, True):
        path = tmp_path / str(traced)
        path.mkdir()
        with capture(path, _smolagents_instrument) as cap:
            tracer = trace.get_tracer("my-model", tracer_provider=cap.provider) if traced else None
            assert (
                ToolCallingAgent(tools=[search], model=ScriptedModel(tracer), verbosity_level=-1).run("task") == "Paris"
            )
        if traced:
            (rec,) = cap.records
            check(rec, turns, "clean", None, logprobs=False)
        else:
            assert cap.records == []


@pytest.mark.parametrize(
    "output",
    [
        {
            "object": "response",
            "output": [1, "x", {"type": "message", "content": "not a list"}, {"type": "function_call"}],
        },
        [{"role": "assistant", "content": 5, "tool_calls": "x"}],
        {"role": "assistant", "content": [{"type": "text", "text": 3}], "tool_calls": [{"function": "f"}]},
        [[], {}],
        {
            "output": [
                {"type": "message", "content": [{"type": "output_text", "text": "a", "logprobs": [{"token": "a"}]}]}
            ]
        },
    ],
)
def test_malformed_output_values_give_missing_signals_never_errors(output):
    """Payloads nobody scripted: the step is still a step, unreadable parts are None (counted), nothing raises."""
    import json

    def build(tracer: Any, root: Any) -> None:
        with tracer.start_as_current_span("odd") as span:
            span.set_attribute("openinference.span.kind", "LLM")
            span.set_attribute("output.value", json.dumps(output))

    score = _spans_run({}, build)
    assert score.n_steps == 3  # the odd call and the two readable ones


def test_an_absurd_stated_limit_keeps_the_stop_and_uses_the_calls_made():
    exc = UsageLimitExceeded("The next request would exceed the request_limit of " + "9" * 5000)
    score = _spans_run({}, _budget_on_root(exc))
    assert (score.stop_reason, score.horizon) == ("max_steps", 2)
