"""The trajectory core under both adapters, on inputs the simulator never produces.

Real LangChain / LangGraph loops (scripted models only) and the real OpenTelemetry SDK:
labels in other spellings, other callbacks attached, runs that never call a model, step
budgets written as text, streams whose final message carries only the last chunk's
logprobs, a capture queue that overflows or is closed, a forked process, and model calls
of a plain loop that are separate traces.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ToolException
from langgraph.graph import END, StateGraph
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from otel_support import instrumented
from world_check import new_accumulator, sink_records

from tps_tracer import Accumulator
from tps_tracer.capture.step_signals import RawStep
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.records.record_shape import InvalidOutcome, as_outcome
from tps_tracer.tracking.tracker import APPLY, CaptureWorker, TrajectoryState

# ---------------------------------------------------------------- one outcome rule


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, None),
        (True, 1),
        (False, 0),
        (1, 1),
        (0, 0),
        (1.0, 1),
        (0.0, 0),
        ("true", 1),
        (" FALSE ", 0),
        ("1", 1),
        ("0", 0),
        ("yes", 1),
        ("no", 0),
        ("success", 1),
        ("failure", 0),
    ],
)
def test_as_outcome_table(value, want):
    assert as_outcome(value) == want


@pytest.mark.parametrize("value", [2, -1, 0.5, float("nan"), float("inf"), "maybe", "", [1], {"y": 1}])
def test_as_outcome_rejects_everything_else(value):
    with pytest.raises(InvalidOutcome):
        as_outcome(value)


def test_strings_are_not_outcomes_in_records():
    with pytest.raises(InvalidOutcome):
        as_outcome("true", allow_strings=False)


def _one_call_graph(model: BaseChatModel):
    def call(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [*state["messages"], model.invoke(state["messages"], config)]}

    graph = StateGraph(dict)
    graph.add_node("model", call)
    graph.set_entry_point("model")
    graph.add_edge("model", END)
    return graph.compile()


@pytest.mark.parametrize(("label", "want"), [("false", 0), ("true", 1), (False, 0), (1, 1), ("0", 0)])
def test_an_up_front_label_means_the_same_on_both_paths(tmp_path, label, want):
    """`tps_outcome: "false"` was a success in the handler (int(bool("false"))) and a failure in the processor."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    graph = _one_call_graph(FakeListChatModel(responses=["<confidence>0.7</confidence> done"]))
    graph.invoke(
        {"messages": [("user", "q")]},
        config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "h", "tps_outcome": label}},
    )
    acc.close()
    assert sink_records(sink)["h"].outcome == want

    acc2 = Accumulator(bootstrap=0)
    scored: list[Any] = []
    acc2.add_listener(scored.append)  # each run's scores, once its outcome is known
    processor = TPSSpanProcessor(acc2, background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    for name, attrs in (
        ("attr", {"tps.trajectory_id": "a", "tps.outcome": label if not isinstance(label, bool) else str(label)}),
        ("meta", {"metadata": json.dumps({"tps_trajectory_id": "m", "tps_outcome": label})}),
    ):
        root = tracer.start_span(name, attributes=attrs)
        tracer.start_span(
            "llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": '{"verbal": 0.7}'}
        ).end()
        root.end()
    snap = acc2.snapshot()
    assert snap["online"]["finished"] == 2 and snap["online"]["pending_outcome"] == 0
    assert snap["audit"]["stop_reasons"]["clean"] == 2
    assert {s.trajectory_id: s.outcome for s in scored} == {"a": want, "m": want}


def test_an_invalid_label_is_counted_and_the_run_stays_pending(tmp_path):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    graph = _one_call_graph(FakeListChatModel(responses=["ok"]))
    graph.invoke(
        {"messages": [("user", "q")]},
        config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "h", "tps_outcome": "maybe"}},
    )
    acc.close()
    rec = sink_records(sink)["h"]
    assert rec.outcome is None and rec.outcome_pending
    assert handler.health.get("rejected", "invalid_outcome_label") == 1


def test_a_grader_saying_false_in_words_is_a_failure(tmp_path):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False, grader=lambda output: "false")
    _one_call_graph(FakeListChatModel(responses=["ok"])).invoke(
        {"messages": [("user", "q")]}, config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "g"}}
    )
    acc.close()
    assert [r.outcome for r in _read_all(sink)] == [0]


def _read_all(sink):
    return list(sink_records(sink).values())


# ---------------------------------------------------------------- other callbacks see what they would without us


class Recorder(BaseCallbackHandler):
    """A user's own handler: which model runs it saw start and end."""

    def __init__(self) -> None:
        self.started: list[UUID] = []
        self.ended: list[UUID] = []
        self._lock = threading.Lock()

    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, **kw: Any) -> None:
        with self._lock:
            self.started.append(run_id)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kw: Any) -> None:
        with self._lock:
            self.started.append(run_id)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
        with self._lock:
            self.ended.append(run_id)


def _drive(model: Any, mode: str, callbacks: list[Any]) -> None:
    cfg = {"callbacks": callbacks, "metadata": {"tps_trajectory_id": f"loop-{mode}"}}
    if mode == "invoke":
        model.invoke("q", config=cfg)
    elif mode == "batch":
        model.batch(["q", "r"], config=cfg)
    elif mode == "stream":
        list(model.stream("q", config=cfg))
    elif mode == "ainvoke":
        asyncio.run(model.ainvoke("q", config=cfg))
    elif mode == "abatch":
        asyncio.run(model.abatch(["q", "r"], config=cfg))
    elif mode == "astream":

        async def consume() -> None:
            async for _ in model.astream("q", config=cfg):
                pass

        asyncio.run(consume())


@pytest.mark.parametrize("kind", ["completion", "chat"])
@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream", "astream", "batch", "abatch"])
def test_attaching_the_handler_does_not_change_what_other_callbacks_receive(kind, mode):
    """langchain issue 39633: an inline handler made langchain-core skip on_llm_start for the others."""
    responses = ["<confidence>0.6</confidence> a", "<confidence>0.4</confidence> b"] * 4

    def model() -> Any:
        return FakeListLLM(responses=responses) if kind == "completion" else FakeListChatModel(responses=responses)

    alone = Recorder()
    _drive(model(), mode, [alone])
    beside = Recorder()
    handler = TPSCallbackHandler(Accumulator(bootstrap=0), background=False)
    _drive(model(), mode, [handler, beside])
    assert len(beside.started) == len(alone.started) > 0
    assert sorted(beside.started, key=str) == sorted(beside.ended, key=str)  # every end had its start
    assert not handler.errors


# ---------------------------------------------------------------- runs that never call a model


def test_a_graph_that_fails_before_any_model_call_is_not_a_trajectory(tmp_path):
    def broken_tools(state: dict[str, Any]) -> dict[str, Any]:
        raise ToolException("the search backend is down")

    graph = StateGraph(dict)
    graph.add_node("tools", broken_tools)
    graph.set_entry_point("tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    with pytest.raises(ToolException):
        app.invoke({"x": 1}, config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "t"}})
    acc.close()
    assert sink.read_text() == ""
    assert handler.health.get("ignored", "runs_without_model_calls") == 1
    assert handler.health.get("rejected") == 0  # no "horizon 0" or other misleading warning


# ---------------------------------------------------------------- budgets written as text


def _looping_graph(model: BaseChatModel):
    def call(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [*state["messages"], model.invoke(state["messages"], config)]}

    graph = StateGraph(dict)
    graph.add_node("model", call)
    graph.set_entry_point("model")
    graph.add_edge("model", "model")
    return graph.compile()


@pytest.mark.parametrize("label", ["8 steps", float("nan"), float("inf"), -3, True, "1e99", 10**12])
def test_a_budget_stop_with_a_bad_horizon_label_keeps_the_stop(tmp_path, label):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    app = _looping_graph(FakeListChatModel(responses=["<confidence>0.5</confidence> again"]))
    with pytest.raises(Exception, match="Recursion limit"):
        app.invoke(
            {"messages": [("user", "q")]},
            config={
                "callbacks": [handler],
                "recursion_limit": 4,
                "metadata": {"tps_trajectory_id": "b", "tps_horizon": label},
            },
        )
    assert handler.n_open == 0
    acc.close()
    rec = sink_records(sink)["b"]
    assert rec.stop_reason == "max_steps" and len(rec.steps) == 4
    assert rec.horizon == rec.metadata["llm_calls"] == 4  # the calls made
    assert handler.health.get("rejected", "invalid_horizon_label") == 1


def test_a_horizon_label_is_not_the_budget_that_stopped_the_run(tmp_path):
    """Issue 46: a run LangGraph's recursion_limit stopped (3 supersteps: 3 model calls) was recorded
    with the label's horizon (9), as if it had had 9 steps; the budget that stopped it did (3). The
    label that lost is counted."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False, horizon=20)
    app = _looping_graph(FakeListChatModel(responses=["again"]))
    with pytest.raises(Exception, match="Recursion limit"):
        app.invoke(
            {"messages": [("user", "q")]},
            config={
                "callbacks": [handler],
                "recursion_limit": 3,
                "metadata": {"tps_trajectory_id": "b", "tps_horizon": "9"},
            },
        )
    acc.close()
    rec = sink_records(sink)["b"]
    assert (rec.stop_reason, rec.horizon, rec.metadata["llm_calls"]) == ("max_steps", 3, 3)
    assert handler.health.get("ignored", "horizon_label_not_the_budget") == 1


# ---------------------------------------------------------------- streamed logprobs


def _entry(token: str, p: float) -> dict[str, Any]:
    return {"token": token, "logprob": math.log(p), "bytes": list(token.encode()), "top_logprobs": []}


class StreamingLogprobModel(BaseChatModel):
    """A scripted chat model that streams one token per chunk, each chunk carrying its own logprobs entry."""

    tokens: list[str]
    probs: list[float]

    @property
    def _llm_type(self) -> str:
        return "streaming-logprobs"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        entries = [_entry(t, p) for t, p in zip(self.tokens, self.probs, strict=True)]
        lp = {"content": entries}
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage("".join(self.tokens), response_metadata={"logprobs": lp}))]
        )

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        for token, p in zip(self.tokens, self.probs, strict=True):
            lp = {"content": [_entry(token, p)]}
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(content=token, response_metadata={"logprobs": lp}),
                generation_info={"logprobs": lp},
            )
            if run_manager is not None:
                run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk


TOKENS = ["<confidence>", "0.7", "</confidence>", " search", "[x]"]
PROBS = [0.9, 0.5, 0.8, 0.6, 0.3]


@pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")
@pytest.mark.parametrize("how", ["stream_events_v3", "stream", "stream_events_v2"])
def test_token_signals_use_every_streamed_token(tmp_path, how):
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    model = StreamingLogprobModel(tokens=TOKENS, probs=PROBS)
    app = _one_call_graph(model)
    cfg = {"callbacks": [handler], "metadata": {"tps_trajectory_id": "s"}}
    inputs = {"messages": [("user", "q")]}
    if how == "stream_events_v3":
        # LangGraph's v3 protocol hands the model's end a message carrying only the last chunk's
        # logprobs (measured: 1 of 5 entries): the streamed chunks are the complete record.
        for _ in app.stream_events(inputs, config=cfg, version="v3"):
            pass
    elif how == "stream":
        list(app.stream(inputs, config=cfg, stream_mode="messages"))
    else:

        async def consume() -> None:
            async for _ in app.astream_events(inputs, config=cfg, version="v2"):
                pass

        asyncio.run(consume())
    acc.close()
    got = sink_records(sink)["s"].steps[0].forecasts
    assert got["token_prob"] == pytest.approx(sum(PROBS) / len(PROBS), abs=1e-12)
    assert got["verbal"] == pytest.approx(0.7)


# ---------------------------------------------------------------- the capture worker: bounded, closed, forked


def test_a_full_queue_holds_the_caller_back_and_loses_nothing(tmp_path):
    """The full queue used to drop the step (counted) and mark the run: under a burst most runs were lost."""
    acc, _ = new_accumulator(tmp_path)
    worker = CaptureWorker(acc, max_queue_size=3)
    gate, busy = threading.Event(), threading.Event()
    worker.call(lambda: (busy.set(), gate.wait()))  # the worker is busy: everything after waits in the queue
    assert busy.wait(10)  # the job left the queue: its 3 slots are free
    threading.Timer(0.3, gate.set).start()  # the worker frees up while the caller is held back
    run = TrajectoryState("t")
    for i in range(6):
        worker.step(run, RawStep(f"<confidence>0.{i + 1}</confidence>"))
    assert gate.is_set()  # the 4th step could only be queued once the worker had made room
    assert worker.waits >= 1 and worker.waited_seconds > 0.1
    worker.stop(run, "clean", None, {}, outcome=1)
    worker.flush()
    assert run.capture_lost is None and acc.health.get("dropped") == 0 and acc.health.get("error") == 0
    acc.close()
    assert [s["verbal"] for s in _steps_of(tmp_path, "t")] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    worker.close()


def test_a_stuck_worker_gives_the_event_up_after_max_block_and_marks_its_run(tmp_path):
    acc, _ = new_accumulator(tmp_path)
    worker = CaptureWorker(acc, max_queue_size=1, max_block=0.05)
    gate, busy = threading.Event(), threading.Event()
    worker.call(lambda: (busy.set(), gate.wait()))
    assert busy.wait(10)
    run = TrajectoryState("t")
    worker.step(run, RawStep("<confidence>0.5</confidence>"))  # fits
    worker.step(run, RawStep("<confidence>0.6</confidence>"))  # waits 50 ms, given up
    assert run.capture_lost == "queue_full" and acc.health.get("dropped", "queue_full") == 1
    gate.set()
    worker.close()


def _steps_of(tmp_path: Any, tid: str) -> list[dict[str, Any]]:
    rec = next(r for r in _lines(tmp_path / "runs.jsonl") if r.get("trajectory_id") == tid)
    return [s["forecasts"] for s in rec["steps"]]


@pytest.mark.parametrize("stuck", [False, True])
def test_a_run_whose_worker_is_busy_is_recorded_whole_or_capture_lost(tmp_path, stuck):
    """A run that lost a step to the full queue was recorded `other` (an informative stop in reports);
    now the agent waits for room, and only a stuck worker (no room for max_block) loses the run."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, max_queue_size=2, max_block=0.05 if stuck else 60)
    gate = threading.Event()
    handler.feeder.call(gate.wait)
    if not stuck:
        threading.Timer(0.3, gate.set).start()
    graph = _looping_graph(FakeListChatModel(responses=["<confidence>0.5</confidence> x"]))
    with pytest.raises(Exception, match="Recursion limit"):
        graph.invoke(
            {"messages": [("user", "q")]},
            config={"callbacks": [handler], "recursion_limit": 6, "metadata": {"tps_trajectory_id": "q"}},
        )
    gate.set()
    handler.flush()
    acc.close()
    rec = sink_records(sink)["q"]
    if stuck:
        assert rec.stop_reason == "capture_lost" and rec.metadata["tps_abandoned"] == "queue_full"
        assert acc.health.get("abandoned", "queue_full") == 1 and acc.health.get("dropped", "queue_full") >= 1
    else:
        assert rec.stop_reason == "max_steps" and len(rec.steps) == 6 and "tps_abandoned" not in rec.metadata
        assert acc.health.get("dropped") == 0 and handler.feeder.waits >= 1


def test_events_after_close_are_dropped_with_the_reason_never_run_later(tmp_path):
    acc, _ = new_accumulator(tmp_path)
    worker = CaptureWorker(acc)
    run = TrajectoryState("a")
    worker.step(run, RawStep("<confidence>0.5</confidence>"))
    worker.close()
    worker.step(run, RawStep("<confidence>0.6</confidence>"))
    worker.stop(run, "clean", None, {})
    worker.flush()
    assert acc.health.get("dropped", "after_close") == 2 and run.capture_lost == "after_close"
    assert len(run.steps) == 1 and acc.n_finished == 0  # the stop submitted after close never ran


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_fresh_worker():
    acc = Accumulator(bootstrap=0)
    worker = CaptureWorker(acc)
    parent = TrajectoryState("parent")
    worker.step(parent, RawStep("<confidence>0.5</confidence>"))
    worker.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its worker restarts on the first event and applies it
        try:
            child = TrajectoryState("child")
            worker.step(child, RawStep("<confidence>0.25</confidence>"))
            worker.stop(child, "max_steps", 3, {})
            ok = worker.flush(5) and acc.n_finished == 1
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
    assert len(parent.steps) == 1 and acc.n_finished == 0  # the parent never saw the child's events


# ---------------------------------------------------------------- the span processor


def test_an_active_trace_is_never_finished_as_idle():
    """The idle clock was set at the first sweep and never refreshed: a slow run was split in two."""
    clock = [0.0]
    acc = Accumulator(bootstrap=0)
    processor = TPSSpanProcessor(acc, background=False, idle_timeout=150.0, clock=lambda: clock[0])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    root = tracer.start_span("agent", attributes={"tps.trajectory_id": "slow"})
    ctx = trace.set_span_in_context(root)
    for t in (0.0, 100.0, 200.0, 300.0):
        clock[0] = t
        processor.sweep()
        tracer.start_span("llm", context=ctx, attributes={"tps.forecasts": '{"verbal": 0.5}'}).end()
    clock[0] = 400.0
    assert processor.sweep() == 0
    root.end()
    snap = acc.snapshot()
    assert snap["online"]["finished"] == 1 and snap["audit"]["stop_reasons"]["clean"] == 1
    assert acc.health.get("abandoned") == 0


def test_a_plain_loop_of_separate_traces_is_one_trajectory_until_declared():
    acc = Accumulator(bootstrap=0)
    scored: list[Any] = []
    acc.add_listener(scored.append)
    processor = TPSSpanProcessor(acc, background=True)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with instrumented(provider):
        model = FakeListChatModel(
            responses=[
                "<confidence>0.2</confidence> a",
                "<confidence>0.4</confidence> b",
                "<confidence>0.9</confidence> c",
            ]
        )
        for _ in range(3):  # each call is its own trace: no agent span around them
            model.invoke("q", config={"metadata": {"tps_trajectory_id": "loop-1"}})
        model.invoke("q", config={"metadata": {"tps_trajectory_id": "loop-2"}})
        processor.declare_stop("loop-1", "max_steps", horizon=5)
        processor.force_flush()
        assert processor.n_open == 1  # loop-2 waits for its declare_stop
        processor.declare_stop("loop-3", "clean")  # unknown: counted
        processor.shutdown()
    snap = acc.snapshot(predictors=["verbal"])
    assert snap["online"]["finished"] == 2
    assert snap["audit"]["stop_reasons"]["max_steps"] == 1 and snap["audit"]["stop_reasons"]["capture_lost"] == 1
    assert acc.health.get("rejected", "declare_stop_unknown") == 1
    assert acc.health.get("abandoned", "shutdown") == 1
    # loop-1: three steps, verbal 0.2, 0.4, 0.9 under horizon 5, censored: the simple score is the
    # failure branch, sum_t w_t log(1 - p_t) with linear-front weights w_t = 2 (T - t + 1) / (T (T + 1)).
    s0 = sum(2 * (5 - t + 1) / 30 * math.log(1 - p) for t, p in enumerate((0.2, 0.4, 0.9), start=1))
    score = next(sc for sc in scored if sc.trajectory_id == "loop-1")
    assert score.n_steps == 3 and score.horizon == 5
    assert score.primary("verbal", "log", "linear-front").value == pytest.approx(s0, abs=1e-12)


def test_the_mark_of_a_lost_step_lives_on_its_run(tmp_path):
    """The marks used to live in a set capped at the queue size: 4 of these 5 runs lost theirs and
    were scored as if whole."""
    from tps_tracer.tracking.tracker import TrajectoryTracker

    acc, sink = new_accumulator(tmp_path)
    tracker = TrajectoryTracker(acc, source="test", max_queue_size=1, max_block=0.0)
    gate, busy = threading.Event(), threading.Event()
    tracker.worker.call(lambda: (busy.set(), gate.wait()))
    assert busy.wait(10)
    states = [tracker.open(f"r{i}") for i in range(5)]
    for state in states:
        for _ in range(2):  # the first run's first step fits the queue; every other step is given up
            tracker.model_call(state, RawStep("<confidence>0.5</confidence>"), malformed=False)
    assert [s.capture_lost for s in states] == ["queue_full"] * 5
    for state in states:
        tracker.finish(state)
    gate.set()
    tracker.worker.flush()
    acc.close()
    records = sink_records(sink)
    assert {tid: (r.stop_reason, r.metadata["tps_abandoned"]) for tid, r in records.items()} == {
        f"r{i}": ("capture_lost", "queue_full") for i in range(5)
    }


# ---------------------------------------------------------------- a tool that raises, on both paths


class _ToolCaller(BaseChatModel):
    """Always asks for the `lookup` tool, stating its confidence."""

    @property
    def _llm_type(self) -> str:
        return "tool-caller"

    def bind_tools(self, tools: Any, **kwargs: Any) -> _ToolCaller:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        call = {"name": "lookup", "args": {"query": "x"}, "id": f"c{len(messages)}"}
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage("<confidence>0.7</confidence>", tool_calls=[call]))]
        )


def _raising_tool(exc: type[Exception]) -> Any:
    from langchain_core.tools import tool

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        raise exc("backend 503")

    return lookup


def _raising_node_graph(model: BaseChatModel):
    """One model call, then a plain graph node (not a tool) raises."""

    def call(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [*state["messages"], model.invoke(state["messages"], config)]}

    def boom(state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("database gone")

    graph = StateGraph(dict)
    graph.add_node("model", call)
    graph.add_node("boom", boom)
    graph.set_entry_point("model")
    graph.add_edge("model", "boom")
    graph.add_edge("boom", END)
    return graph.compile()


@pytest.mark.parametrize("background", [True, False])
@pytest.mark.parametrize(
    ("make_agent", "want"),
    [
        (lambda: create_agent(_ToolCaller(), [_raising_tool(RuntimeError)]), "tool_error"),
        (lambda: create_agent(_ToolCaller(), [_raising_tool(ToolException)]), "tool_error"),
        (lambda: create_agent(_ToolCaller(), [_raising_tool(TimeoutError)]), "tool_error"),
        (lambda: _raising_node_graph(FakeListChatModel(responses=["<confidence>0.7</confidence> x"])), "other"),
    ],
    ids=["RuntimeError-in-tool", "ToolException", "TimeoutError-in-tool", "RuntimeError-in-node"],
)
def test_a_run_ending_on_a_raising_tool_is_tool_error_on_both_paths(tmp_path, background, make_agent, want):
    """The handler said "other" for any tool exception but ToolException (its deferred commit of the
    last model output reset the tool-failed mark); the span processor said tool_error. An exception
    that no tool raised stays "other" on both paths."""
    provider = TracerProvider()
    acc_span, span_sink = new_accumulator(tmp_path, "spans.jsonl")
    processor = TPSSpanProcessor(acc_span, background=background)
    provider.add_span_processor(processor)
    acc_cb, cb_sink = new_accumulator(tmp_path, "handler.jsonl")
    handler = TPSCallbackHandler(acc_cb, background=background)
    agent = make_agent()
    with instrumented(provider):
        for i in range(3):
            with pytest.raises(Exception, match=r"503|database gone"):
                agent.invoke(
                    {"messages": [("user", "q")]},
                    config={"callbacks": [handler], "metadata": {"tps_trajectory_id": f"r{i}"}},
                )
    processor.force_flush()
    handler.flush()
    acc_span.close()
    acc_cb.close()
    from_spans, from_callbacks = sink_records(span_sink), sink_records(cb_sink)
    assert set(from_spans) == set(from_callbacks) == {"r0", "r1", "r2"}
    for tid in from_spans:
        for rec in (from_spans[tid], from_callbacks[tid]):
            assert rec.stop_reason == want
            assert [s.forecasts["verbal"] for s in rec.steps] == [0.7]
            assert rec.metadata.get("tool_errors", 0) == (1 if want == "tool_error" else 0)
    assert not handler.errors and not processor.errors


# ---------------------------------------------------------------- an empty trajectory id


@pytest.mark.parametrize("empty", ["", "   "])
def test_an_empty_trajectory_id_falls_back_to_the_run_id_on_both_paths(tmp_path, empty):
    """`tps_trajectory_id: ""` reached the accumulator, which rejected every event (invalid_id): the run was lost."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    graph = _one_call_graph(FakeListChatModel(responses=["<confidence>0.7</confidence> done"]))
    graph.invoke(
        {"messages": [("user", "q")]}, config={"callbacks": [handler], "metadata": {"tps_trajectory_id": empty}}
    )
    acc.close()
    records = sink_records(sink)
    tid = handler.last_trajectory_id
    assert tid is not None and str(UUID(tid)) == tid  # the root run's id
    assert list(records) == [tid] and [s.forecasts["verbal"] for s in records[tid].steps] == [0.7]
    assert acc.health.get("ignored", "empty_trajectory_id") == 1 and acc.health.get("rejected") == 0

    acc2, sink2 = new_accumulator(tmp_path, "spans.jsonl")
    processor = TPSSpanProcessor(acc2, background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    for attrs in ({"tps.trajectory_id": empty}, {"metadata": json.dumps({"tps_trajectory_id": empty})}):
        root = tracer.start_span("agent", attributes=attrs)
        tracer.start_span(
            "llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": '{"verbal": 0.7}'}
        ).end()
        root.end()
    acc2.close()
    records = sink_records(sink2)
    assert sorted(records) == sorted(r.metadata["otel_trace_id"] for r in records.values())  # the trace ids
    assert len(records) == 2 and all(len(r) == 32 for r in records)
    assert acc2.health.get("ignored", "empty_trajectory_id") == 2 and acc2.health.get("rejected") == 0


# ---------------------------------------------------------------- an outcome known by the time the record is written


def _lines(sink: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in sink.read_text().splitlines()]


def test_an_outcome_known_at_the_stop_is_written_with_the_record_not_as_a_resolution(tmp_path):
    """The tracker stopped first and resolved after, so every run with a `tps_outcome` label (or a
    grader, or an outcome recorded while its stop waited in the queue) took two lines:
    `outcome_pending` plus `{"resolves": ...}`, which forces report/gate onto the slow reader."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, grader=lambda final: "graded" in final.text)
    graph = _one_call_graph(FakeListChatModel(responses=["<confidence>0.7</confidence> graded"]))
    plain = TPSCallbackHandler(acc)  # no grader: outcomes from labels and record_outcome
    for i, label in enumerate([1, 0, "true"]):
        graph.invoke(
            {"messages": [("user", "q")]},
            config={"callbacks": [plain], "metadata": {"tps_trajectory_id": f"label{i}", "tps_outcome": label}},
        )
    graph.invoke({"messages": [("user", "q")]}, config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "g"}})
    gate = threading.Event()
    plain.feeder.call(gate.wait)  # the worker is busy: the next run's stop waits in the queue
    graph.invoke({"messages": [("user", "q")]}, config={"callbacks": [plain], "metadata": {"tps_trajectory_id": "rec"}})
    plain.record_outcome("rec", success=False)  # before the worker writes the run
    gate.set()
    plain.flush()
    handler.flush()
    lines = _lines(sink)
    assert len(lines) == 5  # two workers: their lines interleave in any order
    assert {r["trajectory_id"]: r["outcome"] for r in lines} == {
        "label0": 1,
        "label1": 0,
        "label2": 1,
        "g": 1,
        "rec": 0,
    }
    assert not any("outcome_pending" in r for r in lines)
    # An outcome that arrives after the record is written is still a resolution line (the accumulator's rule).
    graph.invoke(
        {"messages": [("user", "q")]}, config={"callbacks": [plain], "metadata": {"tps_trajectory_id": "late"}}
    )
    plain.flush()
    plain.record_outcome("late", success=True)
    plain.flush()
    acc.close()
    tail = _lines(sink)[5:]
    assert tail[0]["trajectory_id"] == "late" and tail[0]["outcome_pending"] is True
    assert tail[1] == {"resolves": "late", "outcome": 1}
    assert {k: r.outcome for k, r in sink_records(sink).items()} == {
        "label0": 1,
        "label1": 0,
        "label2": 1,
        "g": 1,
        "rec": 0,
        "late": 1,
    }
    assert acc.health.get("rejected") == 0

    acc2, sink2 = new_accumulator(tmp_path, "spans.jsonl")
    processor = TPSSpanProcessor(acc2, background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    root = tracer.start_span("agent", attributes={"tps.trajectory_id": "a", "tps.outcome": "1"})
    tracer.start_span(
        "llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": '{"verbal": 0.7}'}
    ).end()
    root.end()
    acc2.close()
    assert [(r["trajectory_id"], r["outcome"], "outcome_pending" in r) for r in _lines(sink2)] == [("a", 1, False)]


def test_more_open_traces_than_max_open_traces_are_all_kept_whole(caplog):
    """max_open_traces used to evict the oldest open trace; its later spans were then dropped and the
    run recorded `other` with 1 of its 2 steps."""
    acc = Accumulator(bootstrap=0)
    processor = TPSSpanProcessor(acc, background=False, max_open_traces=2)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    roots = {}
    for name in "ABC":
        roots[name] = root = tracer.start_span("agent", attributes={"tps.trajectory_id": name, "tps.outcome": 1})
        tracer.start_span(
            "llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": '{"verbal": 0.6}'}
        ).end()
    for name in "ABC":
        root = roots[name]
        tracer.start_span(
            "llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": '{"verbal": 0.4}'}
        ).end()
        root.end()
    processor.shutdown()
    snap = acc.snapshot()
    assert snap["online"]["finished"] == 3 and snap["audit"]["stop_reasons"]["clean"] == 3
    assert acc.health.get("abandoned") == 0 and acc.health.get("dropped") == 0
    assert processor.n_open == 0
    assert sum("more than 2 traces open" in r.message for r in caplog.records) == 1


def test_the_late_spans_of_an_idle_trace_are_dropped_not_a_second_trajectory():
    """A trace finished by the idle rule: its later spans must not open it again (one run, two records)."""
    now = [0.0]
    acc = Accumulator(bootstrap=0)
    processor = TPSSpanProcessor(acc, background=False, idle_timeout=10, clock=lambda: now[0])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    root = tracer.start_span("agent", attributes={"tps.trajectory_id": "A"})
    tracer.start_span(
        "llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": '{"verbal": 0.6}'}
    ).end()
    now[0] = 11.0
    assert processor.sweep() == 1
    tracer.start_span(
        "llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": '{"verbal": 0.4}'}
    ).end()
    root.end()
    processor.shutdown()
    snap = acc.snapshot()
    assert snap["online"]["finished"] == 1 and snap["audit"]["stop_reasons"]["capture_lost"] == 1
    assert acc.health.get("abandoned", "idle") == 1
    assert acc.health.get("dropped", "abandoned_run_event") == 3  # the late call (start, end) and the root's end


def test_the_worker_never_waits_on_its_own_full_queue(tmp_path):
    """A job on the worker (a grader that emits spans) putting into the full queue would wait for
    itself until max_block and then lose the event; it goes in past the bound instead."""
    acc, _ = new_accumulator(tmp_path)
    worker = CaptureWorker(acc, max_queue_size=1, max_block=30)
    put = worker.handoff()
    ran: list[int] = []
    gate, busy = threading.Event(), threading.Event()
    worker.call(lambda: (busy.set(), gate.wait()))
    assert busy.wait(10)
    put((APPLY, ran.append, 1))  # fills the queue

    def job() -> None:  # blocking here until max_block would miss the flush(10) below and lose 4
        put((APPLY, ran.append, 3))  # fits
        put((APPLY, ran.append, 4))  # on the worker, with the queue full
        ran.append(2)

    worker.call(job)
    gate.set()
    assert worker.flush(10) and worker.flush(10)  # the second: the job's own puts queued behind the first
    assert ran == [1, 2, 3, 4] and acc.health.get("dropped") == 0
    worker.close()
