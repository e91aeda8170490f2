"""A forked child owns only its own runs (tps_tracer/at_exit.py, "A forked child...").

A child made by `os.fork` or multiprocessing's "fork" start method inherits copies of the
handler and the accumulator holding the parent's run in flight. Before this, the child's exit
pass (or its `acc.close()`) recorded that run again as `capture_lost`, a repeat the readers set
aside, although the parent finished it normally. Each test runs a real `create_agent` loop with
a scripted model in a subprocess (an exit is only an exit in a process of its own), through the
LangChain handler or the span processor (a real OpenInference instrumentor): the parent
has a run in flight (blocked in a model call on a thread) when it forks; the child runs and
finishes its own runs, leaves one of its own in flight, and exits; the parent then finishes its
run. The file must hold every run exactly once: no repeat, nothing lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_exit_drain import MODEL, STATED

import tps_tracer
from tps_tracer import at_exit

# The scripted model of tests/test_exit_drain.py (three calls per run, a stated confidence at
# each; task "hang" never returns from its second call), plus task "hold", which returns from
# its second call when the parent lets it.
HOLD = """
import multiprocessing, os

release = threading.Event()


class Holding(Scripted):
    def _generate(self, messages, stop=None, run_manager=None, **kw):
        task = next(m.content for m in messages if isinstance(m, HumanMessage))
        if task == "hold" and sum(isinstance(m, AIMessage) for m in messages) == 1:
            hanging.set()
            release.wait()
        return super()._generate(messages, stop, run_manager, **kw)


"""

SCRIPT = (
    MODEL
    + HOLD
    + """
acc = Accumulator(sink=sys.argv[1], bootstrap=0)
if sys.argv[3] == "otel":  # the span processor fed by a real OpenInference instrumentor
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from tps_tracer.otel import TPSSpanProcessor

    provider = TracerProvider(shutdown_on_exit=False)
    adapter = TPSSpanProcessor(acc)
    provider.add_span_processor(adapter)
    LangChainInstrumentor().instrument(tracer_provider=provider)
    callbacks, flush = [], adapter.force_flush
else:
    adapter = TPSCallbackHandler(acc)
    callbacks, flush = [adapter], adapter.flush
agent = create_agent(Holding(), [search])


def invoke(task: str, tid: str) -> None:
    agent.invoke({"messages": [("user", task)]}, {"callbacks": callbacks, "metadata": {"tps_trajectory_id": tid}})


def child(close: bool) -> None:
    hanging.clear()
    for i in range(3):
        invoke(f"c{i}", f"child-{i}")
    threading.Thread(target=invoke, args=("hang", "child-in-flight"), daemon=True).start()
    assert hanging.wait(30)
    print("child health", acc.health.category("ignored"), file=sys.stderr)
    if close:  # multiprocessing ends its children with os._exit: no exit pass, the child closes
        acc.close()


for i in range(2):
    invoke(f"p{i}", f"parent-{i}")
parent_run = threading.Thread(target=invoke, args=("hold", "parent-in-flight"))
parent_run.start()
assert hanging.wait(30)  # the parent's run is open at the fork
flush()  # what the adapter was handed so far is applied: the run is open in it
if sys.argv[2] == "os.fork":
    pid = os.fork()
    if pid == 0:
        child(close=False)
        sys.exit(0)  # a normal exit: the at-exit pass runs in the child
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
else:
    process = multiprocessing.get_context("fork").Process(target=child, args=(True,))
    process.start()
    process.join(60)
    code = process.exitcode
assert code == 0, code
release.set()
parent_run.join(30)
invoke("p2", "parent-2")
# the parent exits without closing: its own exit pass writes what is left
"""
)


def _run(tmp_path: Path, how: str, source: str = SCRIPT, adapter: str = "langchain") -> tuple[list[dict], str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    sink = tmp_path / "runs.jsonl"
    root = str(Path(tps_tracer.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(script), str(sink), how, adapter], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in sink.read_text().splitlines()], proc.stderr


@pytest.mark.parametrize("adapter", ["langchain", "otel"])
@pytest.mark.parametrize("how, child_end", [("os.fork", at_exit.ABANDONED_AT_EXIT), ("multiprocessing", "closed")])
def test_a_forked_child_records_only_its_own_runs(tmp_path, how, child_end, adapter):
    records, stderr = _run(tmp_path, how, adapter=adapter)
    ids = [r["trajectory_id"] for r in records]
    expected = ["parent-0", "parent-1", "parent-in-flight", "parent-2", "child-0", "child-1", "child-2"]
    assert sorted(ids) == sorted([*expected, "child-in-flight"])  # every run, none twice
    by_id = {r["trajectory_id"]: r for r in records}
    for tid in expected:  # finished normally, each by the process that ran it
        assert by_id[tid]["stop_reason"] == "clean", by_id[tid]
        assert [s["forecasts"]["verbal"] for s in by_id[tid]["steps"]] == STATED
    # The child's own run in flight at its end is still the child's to record, once.
    lost = by_id["child-in-flight"]
    assert lost["stop_reason"] == "capture_lost"
    assert lost["metadata"]["tps_abandoned"] == child_end
    assert [s["forecasts"]["verbal"] for s in lost["steps"]] == STATED[:1]
    # What the child's copy of the adapter left to the parent is counted there.
    assert "child health {'open_at_fork': 1}" in stderr


# The accumulator fed directly (no adapter): its trajectories live at the fork are the parent's.
DIRECT = """
import os, sys
from tps_tracer import Accumulator

acc = Accumulator(sink=sys.argv[1], bootstrap=0)
acc.observe("parent-live", {"verbal": 0.5})
acc.observe("parent-done", {"verbal": 0.3})
acc.stop("parent-done", "clean", outcome=1)
pid = os.fork()
if pid == 0:
    acc.observe("child-done", {"verbal": 0.7})
    acc.stop("child-done", "clean", outcome=1)
    acc.observe("child-live", {"verbal": 0.2})
    print("child health", acc.health.category("ignored"), file=sys.stderr)
    sys.exit(0)  # the exit pass closes the child's copy: child-live is the child's to record
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
acc.observe("parent-live", {"verbal": 0.6})
acc.stop("parent-live", "clean", outcome=0)
acc.close()
"""


def test_an_accumulator_fed_directly_leaves_its_live_trajectories_to_the_parent(tmp_path):
    records, stderr = _run(tmp_path, "direct", DIRECT)
    by_id = {r["trajectory_id"]: r for r in records}
    assert sorted(r["trajectory_id"] for r in records) == ["child-done", "child-live", "parent-done", "parent-live"]
    assert [s["forecasts"]["verbal"] for s in by_id["parent-live"]["steps"]] == [0.5, 0.6]
    assert (by_id["parent-live"]["stop_reason"], by_id["parent-live"]["outcome"]) == ("clean", 0)
    assert by_id["child-done"]["stop_reason"] == "clean"
    assert by_id["child-live"]["stop_reason"] == "capture_lost"
    assert by_id["child-live"]["metadata"]["tps_abandoned"] == at_exit.ABANDONED_AT_EXIT
    assert "child health {'live_at_fork': 1}" in stderr
