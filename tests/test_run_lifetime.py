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

from tps_tracer.open_runs import OpenRuns, is_interrupt
from tps_tracer.otel.span_processor import TPSSpanProcessor


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
    runs: OpenRuns[str] = OpenRuns(idle_timeout=10.0)
    assert runs.pause("a", "th-1", "run-a") and runs.n_paused == 1
    assert not runs.pause("hex", None, "run-x", by_id=False)  # nothing could resume it: not kept
    assert runs.resume("b", None) is None  # another id does not resume it
    assert runs.resume(None, "th-1") == "run-a" and runs.n_paused == 0  # its thread does
    assert runs.resume(None, "th-1") is None  # once
    runs.pause("a", "th-1", "run-a")
    assert runs.unpause("a", "another run with the same id") is None and runs.is_paused("a")
    assert runs.resume("a") == "run-a"
    assert runs.idle(0.0, 10.0) and not runs.idle(0.5, 10.0)
    assert not OpenRuns(None).idle(0.0, 1e9)
    runs.remember_gone([1, 2], now=0.0)
    runs.remember_gone([3], now=30.0)
    runs.expire(now=45.0)  # GONE_MEMORY (4) idle timeouts: 40 s
    assert [runs.is_gone(k) for k in (1, 2, 3)] == [False, False, True]
    assert is_interrupt("langgraph.errors.GraphInterrupt") and is_interrupt("NodeInterrupt")
    assert not is_interrupt("builtins.ValueError") and not is_interrupt(None) and not is_interrupt(KeyError)
