"""A script that exits without `handler.close()` / `acc.close()` still gets every run in its file.

The trial's script (defect D3) ran 200 invokes through `TPSCallbackHandler(Accumulator(sink=...))`
and ended without closing anything: the capture worker is a daemon thread, so the runs still in
its queue at exit were lost without a word (196-198 records). `tps_tracer/at_exit.py` now drains
every live adapter into its accumulator and closes every accumulator with a sink at interpreter
exit. Each test runs a real `create_agent` loop with a scripted model in a subprocess (an exit is
only an exit in a process of its own) and reads the file it left.

A grader that takes 20 ms per run (longer than an invoke of the scripted agent) keeps the worker
behind the loop, so without the exit drain the last runs are certainly still queued at exit.
On the code before the drain these scripts left 15-17 of 40 records, no record of the run in
flight, and a late outcome after `acc.close()` refused without a word.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tps_tracer
from tps_tracer import Accumulator, at_exit
from tps_tracer.errors import InputError
from tps_tracer.online.accumulator import AccumulatorClosedError

N_RUNS = 40
TOOL_TURNS = 2
STATED = [0.4, 0.65, 0.9]  # the confidence stated at each model call of a run (TOOL_TURNS + 1 calls)

MODEL = f'''
import sys, threading, time
from typing import Any
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler

STATED = {STATED!r}
TOOL_TURNS = {TOOL_TURNS}
hanging = threading.Event()  # set when the "hang" run's second model call has started (it never returns)


class Scripted(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kw: Any) -> "Scripted":
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        task = next(m.content for m in messages if isinstance(m, HumanMessage))
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if task == "hang" and turn == 1:
            hanging.set()
            threading.Event().wait()  # a model call still in flight when the script exits
        if turn < TOOL_TURNS:
            calls = [{{"name": "search", "args": {{"q": task}}, "id": f"call-{{turn}}"}}]
            return ChatResult(generations=[ChatGeneration(message=AIMessage(
                f"Searching. Confidence: {{STATED[turn]}}", tool_calls=calls))])
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            f"Done {{task}}. Confidence: {{STATED[turn]}}"))])


@tool
def search(q: str) -> str:
    """Search."""
    return "result " + q


def grader(output: Any) -> bool:
    time.sleep(0.02)  # slower than an invoke: the worker falls behind the loop
    return int(output.content.split()[1].strip("q.")) % 2 == 0  # "Done q<i>. ..." -> even i passes

'''

HANDLER_LOOP = f"""
acc = Accumulator(sink=sys.argv[1], bootstrap=0)
handler = TPSCallbackHandler(acc, grader=grader)
agent = create_agent(Scripted(), [search])


def invoke(task: str, tid: str) -> None:
    agent.invoke({{"messages": [("user", task)]}},
                 {{"callbacks": [handler], "metadata": {{"tps_trajectory_id": tid}}}})


for i in range({N_RUNS}):
    invoke(f"q{{i}}", f"task-{{i}}")
"""

# The span processor fed by a real OpenInference instrumentor; the provider's own exit hook is off,
# so what closes the processor at exit is tps-tracer's.
OTEL_LOOP = f"""
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from tps_tracer.otel import TPSSpanProcessor

acc = Accumulator(sink=sys.argv[1], bootstrap=0)
provider = TracerProvider(shutdown_on_exit=False)
processor = TPSSpanProcessor(acc)
provider.add_span_processor(processor)
LangChainInstrumentor().instrument(tracer_provider=provider)
agent = create_agent(Scripted(), [search])


def invoke(task: str, tid: str) -> None:
    agent.invoke({{"messages": [("user", task)]}}, {{"metadata": {{"tps_trajectory_id": tid}}}})


for i in range({N_RUNS}):
    invoke(f"q{{i}}", f"task-{{i}}")
"""


def _run_script(tmp_path: Path, ending: str, timeout: float = 120, loop: str = HANDLER_LOOP) -> tuple[list[dict], str]:
    script = tmp_path / "script.py"
    script.write_text(MODEL + loop + textwrap.dedent(ending))
    sink = tmp_path / "runs.jsonl"
    root = str(Path(tps_tracer.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(script), str(sink)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in sink.read_text().splitlines()] if sink.exists() else []
    return lines, proc.stderr


def _verbal(record: dict) -> list[float]:
    return [step["forecasts"]["verbal"] for step in record["steps"]]


def _check_clean_runs(records: list[dict], graded: bool = True) -> None:
    """Every run of the loop, once, whole: its three stated confidences and the grader's verdict."""
    ids = [r["trajectory_id"] for r in records]
    assert sorted(ids) == sorted(f"task-{i}" for i in range(N_RUNS))  # all of them, none twice
    for r in records:
        i = int(r["trajectory_id"].split("-")[1])
        assert r["stop_reason"] == "clean"
        assert _verbal(r) == STATED
        assert r["outcome"] == ((1 if i % 2 == 0 else 0) if graded else None)


def test_a_script_that_never_closes_gets_every_run(tmp_path):
    lines, stderr = _run_script(tmp_path, "# no handler.flush(), no acc.close()\n")
    assert len(lines) == N_RUNS  # only records: each outcome came with its record
    _check_clean_runs(lines)
    assert "still open at interpreter exit" not in stderr  # nothing was in flight


def test_a_run_still_in_flight_at_exit_is_recorded_capture_lost(tmp_path):
    ending = """
    threading.Thread(target=invoke, args=("hang", "in-flight"), daemon=True).start()
    assert hanging.wait(30)
    # the script ends while the run's second model call is in flight
    """
    lines, stderr = _run_script(tmp_path, ending)
    by_id = {r["trajectory_id"]: r for r in lines}
    lost = by_id.pop("in-flight")
    _check_clean_runs(list(by_id.values()))
    assert lost["stop_reason"] == "capture_lost"
    assert lost["metadata"]["tps_abandoned"] == at_exit.ABANDONED_AT_EXIT
    assert _verbal(lost) == STATED[:1]  # the model call that returned; the one in flight is no step
    assert "1 run(s) still open at interpreter exit were recorded as capture_lost" in stderr


def test_a_span_processor_never_shut_down_records_every_run_and_the_one_in_flight(tmp_path):
    ending = """
    threading.Thread(target=invoke, args=("hang", "in-flight"), daemon=True).start()
    assert hanging.wait(30)
    """
    lines, stderr = _run_script(tmp_path, ending, loop=OTEL_LOOP)
    by_id = {r["trajectory_id"]: r for r in lines}
    lost = by_id.pop("in-flight")
    _check_clean_runs(list(by_id.values()), graded=False)  # the processor takes no grader
    assert lost["stop_reason"] == "capture_lost"
    assert lost["metadata"]["tps_abandoned"] == at_exit.ABANDONED_AT_EXIT
    assert _verbal(lost) == STATED[:1]
    assert "1 run(s) still open at interpreter exit were recorded as capture_lost" in stderr


def test_a_script_that_closes_writes_nothing_twice_and_a_late_outcome_is_refused_aloud(tmp_path):
    ending = """
    handler.flush()
    acc.close()
    n = len(open(sys.argv[1]).read().splitlines())
    handler.record_outcome("task-0", True)  # after close: refused, said so, never written
    print(n)
    """
    lines, stderr = _run_script(tmp_path, ending)
    assert len(lines) == N_RUNS  # the exit added nothing to a closed accumulator's file
    _check_clean_runs(lines)
    assert not any("resolves" in line for line in lines)
    assert "record_outcome('task-0') after acc.close()" in stderr
    assert "error (sink)" not in stderr


def test_a_run_in_flight_when_the_script_closes_is_recorded_once(tmp_path):
    ending = """
    threading.Thread(target=invoke, args=("hang", "in-flight"), daemon=True).start()
    assert hanging.wait(30)
    acc.close()  # records the run in flight (closed); the exit must add nothing
    """
    lines, stderr = _run_script(tmp_path, ending)
    assert [r["trajectory_id"] for r in lines].count("in-flight") == 1
    (lost,) = [r for r in lines if r["trajectory_id"] == "in-flight"]
    assert lost["stop_reason"] == "capture_lost" and lost["metadata"]["tps_abandoned"] == "closed"
    assert _verbal(lost) == STATED[:1]  # its first model output, held by the handler until the close
    _check_clean_runs([r for r in lines if r is not lost])
    assert "still open at interpreter exit" not in stderr


def test_exit_never_hangs_on_a_grader_that_does(tmp_path):
    ending = """
    from tps_tracer import at_exit
    at_exit.set_timeout(1.0)
    handler.tracker.grader = lambda output: threading.Event().wait()  # the next run's grader never returns
    invoke("q0", "stuck")
    """
    lines, stderr = _run_script(tmp_path, ending, timeout=60)  # the grader would hold the worker forever
    assert "capture did not finish within 1.0 s of interpreter exit" in stderr
    assert str(tmp_path / "runs.jsonl") in stderr
    assert "stuck" not in {r["trajectory_id"] for r in lines}  # the warning is about this one


def test_resolve_after_close_raises_and_steps_after_close_are_counted(tmp_path):
    acc = Accumulator(sink=tmp_path / "runs.jsonl", bootstrap=0)
    acc.observe("a", {"verbal": 0.7})
    acc.stop("a", "clean")
    acc.close()
    with pytest.raises(AccumulatorClosedError, match="the accumulator is closed") as err:
        acc.resolve("a", outcome=1)
    assert isinstance(err.value, InputError)
    assert acc.observe("b", {"verbal": 0.5}) is False
    assert acc.stop("b", "clean") is False
    assert acc.rejected == {"after_close": 2, "resolve_after_close": 1}
    acc.close()  # closing twice writes nothing
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["trajectory_id"] for line in lines] == ["a"]


def test_set_timeout_refuses_a_bad_value():
    for bad in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(InputError, match="exit timeout"):
            at_exit.set_timeout(bad)
