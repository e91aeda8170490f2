"""A run's lifetime (tps_tracer/open_runs.py) on the OpenTelemetry path: a LangGraph run paused by
`interrupt()` is not idle, and its resume continues the same trajectory (one clean record).

Before `OpenRuns`, the span processor recorded the run when the interrupted trace's root ended
(clean, 1 step) and rejected its resumed end (duplicate_stop, step_after_stop); without a
trajectory id the resume was a second trajectory. The handler's side of the same rule is
tests/test_langchain_handler.py::test_a_run_paused_by_an_interrupt_for_66_minutes_gives_one_clean_record.
"""

from __future__ import annotations

import pytest
from interrupt_graph import approval_graph, one_resumed_record
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from otel_support import instrumented
from world_check import new_accumulator, sink_records

from tps_tracer.errors import InputError
from tps_tracer.langchain.handler import TPSCallbackHandler
from tps_tracer.open_runs import OpenRuns, is_interrupt
from tps_tracer.otel.span_processor import TPSSpanProcessor

DAY = 86400.0


@pytest.mark.parametrize("named", [True, False])
def test_an_otel_run_paused_for_66_minutes_is_resumed_into_one_clean_record(tmp_path, named):
    app = approval_graph()
    now = [0.0]
    acc, sink = new_accumulator(tmp_path, clock=lambda: now[0])  # default idle_timeout 3600 s
    processor = TPSSpanProcessor(acc, clock=lambda: now[0], idle_timeout=60.0)  # far below the pause
    provider = TracerProvider()
    provider.add_span_processor(processor)
    metadata = {"tps_trajectory_id": "approval", "tps_outcome": 1} if named else {"tps_outcome": 1}
    cfg = {"configurable": {"thread_id": "t-1"}, "metadata": metadata}
    with instrumented(provider):
        first = app.invoke({"answer": ""}, config=cfg)
        assert "__interrupt__" in first
        processor.force_flush()
        assert processor.n_paused == 1 and acc.n_finished == 0
        now[0] = 66 * 60.0  # a human answers after 66 minutes
        assert processor.sweep() == 0 and acc.sweep() == 0  # paused is not idle
        assert app.invoke(Command(resume="yes"), config=cfg) == {"answer": "yes!"}
        processor.force_flush()
    assert processor.n_paused == 0 and processor.n_open == 0
    processor.shutdown()
    acc.close()
    rec = one_resumed_record(sink)
    assert not acc.health.category("rejected") and not acc.health.category("abandoned")
    if named:
        assert rec.trajectory_id == "approval"
    else:  # the first trace's id names the run
        assert len(rec.trajectory_id) == 32 and rec.trajectory_id != rec.metadata["otel_trace_id"]


def test_an_otel_run_never_resumed_is_recorded_at_shutdown_as_capture_lost(tmp_path):
    app = approval_graph()
    acc, sink = new_accumulator(tmp_path)
    processor = TPSSpanProcessor(acc, idle_timeout=1e-6)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with instrumented(provider):
        app.invoke(
            {"answer": ""}, config={"configurable": {"thread_id": "t-2"}, "metadata": {"tps_trajectory_id": "w"}}
        )
        processor.force_flush()
    assert processor.sweep() == 0 and processor.n_paused == 1  # however long: something can resume it
    processor.shutdown()
    acc.close()
    rec = sink_records(sink)["w"]
    assert (rec.stop_reason, rec.metadata["tps_abandoned"]) == ("capture_lost", "shutdown")
    assert [s.forecasts["verbal"] for s in rec.steps] == [0.6]
    assert acc.health.get("abandoned", "shutdown") == 1


def test_open_runs_rules():
    runs: OpenRuns[str] = OpenRuns(idle_timeout=10.0, pause_timeout=100.0)
    assert runs.pause("a", "th-1", "run-a", 0.0) and runs.n_paused == 1
    assert not runs.pause("hex", None, "run-x", 0.0, by_id=False)  # nothing could resume it: not kept
    assert runs.resume("b", None) is None  # another id does not resume it
    assert runs.resume(None, "th-1") == "run-a" and runs.n_paused == 0  # its thread does
    assert runs.resume(None, "th-1") is None  # once
    runs.pause("a", "th-1", "run-a", 0.0)
    assert runs.unpause("a", "another run with the same id") is None and runs.is_paused("a")
    assert runs.resume("a") == "run-a"
    runs.pause("a", "th-1", "run-a", 0.0)
    runs.pause("b", None, "run-b", 50.0)
    assert runs.expired(99.0) == [] and runs.expired(100.0) == ["run-a"]  # paused >= pause_timeout
    assert runs.resume(None, "th-1") is None and runs.expired(1e9) == ["run-b"] and runs.n_paused == 0
    assert OpenRuns(None, pause_timeout=None).expired(1e18) == []
    assert runs.idle(0.0, 10.0) and not runs.idle(0.5, 10.0)
    assert not OpenRuns(None).idle(0.0, 1e9)
    runs.remember_gone([1, 2], now=0.0)
    runs.remember_gone([3], now=30.0)
    runs.expire(now=45.0)  # GONE_MEMORY (4) idle timeouts: 40 s
    assert [k in runs.gone for k in (1, 2, 3)] == [False, False, True]
    assert is_interrupt("langgraph.errors.GraphInterrupt") and is_interrupt("NodeInterrupt")
    assert not is_interrupt("builtins.ValueError") and not is_interrupt(None) and not is_interrupt(KeyError)


def _pause_many(app, invoke, n: int) -> None:
    """n approval_graph runs, each paused at its interrupt() and never answered (a service's
    approvals that nobody gives)."""
    for i in range(n):
        first = invoke(app, {"configurable": {"thread_id": f"t-{i}"}, "metadata": {"tps_trajectory_id": f"p{i}"}})
        assert "__interrupt__" in first


def _finished_by_pause_timeout(sink, acc, n: int) -> None:
    acc.close()
    records = sink_records(sink)
    assert sorted(records) == sorted(f"p{i}" for i in range(n))
    for rec in records.values():
        assert rec.stop_reason == "capture_lost"
        assert (rec.metadata["tps_abandoned"], rec.metadata["stop_detail"]) == (
            "pause_timeout",
            "abandoned: pause_timeout",
        )
        assert len(rec.steps) == 1  # the step made before the pause (the scripted model cycles 0.6, 0.8)
    assert acc.health.get("abandoned", "pause_timeout") == n


def test_runs_paused_and_never_resumed_are_finished_after_pause_timeout_by_the_handler(tmp_path):
    """Paused runs were kept until the handler closed: 1,000 never-answered approvals were all still
    open after 10 simulated days in a service. Now a pause is bounded by `pause_timeout` (default a
    week): the next sweep records each as capture_lost (abandoned: pause_timeout), counted."""
    app = approval_graph()
    now = [0.0]
    acc, sink = new_accumulator(tmp_path, clock=lambda: now[0])
    handler = TPSCallbackHandler(acc, clock=lambda: now[0])
    _pause_many(app, lambda a, cfg: a.invoke({"answer": ""}, config={**cfg, "callbacks": [handler]}), 30)
    handler.flush()
    assert handler.n_paused == 30
    now[0] = 6 * DAY
    assert handler.sweep() == 0 and handler.n_paused == 30  # within the week: still waiting
    now[0] = 10 * DAY
    assert handler.sweep() == 30 and handler.n_paused == 0 and handler.n_open == 0
    handler.flush()
    assert not handler.errors
    _finished_by_pause_timeout(sink, acc, 30)


def test_runs_paused_and_never_resumed_are_finished_after_pause_timeout_by_the_span_processor(tmp_path):
    app = approval_graph()
    now = [0.0]
    acc, sink = new_accumulator(tmp_path, clock=lambda: now[0])
    processor = TPSSpanProcessor(acc, clock=lambda: now[0], pause_timeout=DAY)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with instrumented(provider):
        _pause_many(app, lambda a, cfg: a.invoke({"answer": ""}, config=cfg), 30)
        processor.force_flush()
    assert processor.n_paused == 30
    now[0] = 10 * DAY
    assert processor.sweep() == 30 and processor.n_paused == 0 and processor.n_open == 0
    processor.force_flush()
    assert not processor.errors
    _finished_by_pause_timeout(sink, acc, 30)


def test_a_resume_within_pause_timeout_still_continues_the_run(tmp_path):
    app = approval_graph()
    now = [0.0]
    acc, sink = new_accumulator(tmp_path, clock=lambda: now[0], idle_timeout=None)
    handler = TPSCallbackHandler(acc, clock=lambda: now[0], pause_timeout=3 * DAY)
    cfg = {"callbacks": [handler], "configurable": {"thread_id": "t-1"}, "metadata": {"tps_outcome": 1}}
    app.invoke({"answer": ""}, config=cfg)
    now[0] = 3 * DAY - 1
    assert handler.sweep() == 0
    assert app.invoke(Command(resume="yes"), config=cfg) == {"answer": "yes!"}
    handler.close()
    acc.close()
    one_resumed_record(sink)


def test_the_accumulators_idle_timeout_applies_with_an_adapter_attached(tmp_path):
    """`Accumulator(idle_timeout=10)` was silently ignored once a handler or span processor was
    attached (the adapter's own 3600 s / 600 s applied). The tighter of the two bounds applies."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    now = [0.0]
    acc, sink = new_accumulator(tmp_path, clock=lambda: now[0], idle_timeout=10.0)
    handler = TPSCallbackHandler(acc, clock=lambda: now[0])
    assert handler.idle_timeout == 10.0
    assert TPSSpanProcessor(acc, capture=False).idle_timeout == 10.0
    assert TPSCallbackHandler(acc, idle_timeout=5.0).idle_timeout == 5.0  # the adapter's, when tighter
    model = FakeListChatModel(responses=["<confidence>0.6</confidence> thinking"])
    model.invoke("q", config={"callbacks": [handler], "metadata": {"tps_trajectory_id": "loop"}})
    now[0] = 9.0
    assert handler.sweep() == 0
    now[0] = 10.0
    assert handler.sweep() == 1 and handler.n_open == 0
    handler.close()
    acc.close()
    rec = sink_records(sink)["loop"]
    assert (rec.stop_reason, rec.metadata["tps_abandoned"], len(rec.steps)) == ("capture_lost", "idle", 1)
    assert acc.health.get("abandoned", "idle") == 1


@pytest.mark.parametrize("bad", [0, -1.0, "soon"])
def test_lifetime_bounds_must_be_positive_seconds(tmp_path, bad):
    acc, _ = new_accumulator(tmp_path)
    for name in ("idle_timeout", "pause_timeout"):
        with pytest.raises(InputError, match=name):
            TPSCallbackHandler(acc, **{name: bad})
        with pytest.raises(InputError, match=name):
            TPSSpanProcessor(acc, **{name: bad})
