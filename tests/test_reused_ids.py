"""A trajectory id re-used by a NEW run (a second agent on the same task ids, a script re-run into the
same process) is never dropped: the new run leaves a second record in the sink, which the report
sets aside (records/limits.py: first record kept), and the accumulator counts it under the same
name (`snapshot()["online"]["set_aside"]["duplicate_id"]`), so the snapshot and the report of the
file agree run by run. Late events of the SAME run after its stop are still rejected.

Real loops: `langchain.agents.create_agent` with a scripted chat model (tests/burst_support.py),
watched by the LangChain handler, and the same loop traced by OpenInference into the real
OpenTelemetry SDK and the span processor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from burst_support import burst_agent, expected_log_tps, verbal_of
from opentelemetry.sdk.trace import TracerProvider
from otel_support import instrumented

from tps_tracer import Accumulator
from tps_tracer.evaluation.chunked import report_from_path
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor

N = 6  # tasks per agent


def _run_both_agents(callbacks: list[Any]) -> None:
    """Agent A (one tool turn: 2 steps) then agent B (two tool turns: 3 steps) on task ids b0..b{N-1}."""
    for name, turns in (("A", 1), ("B", 2)):
        agent = burst_agent(step_delay=0.0, tool_turns=turns)
        for i in range(N):
            metadata = {"tps_trajectory_id": f"b{i}", "tps_outcome": i % 2, "agent": name}
            agent.invoke({"messages": [("user", f"task {i}")]}, config={"callbacks": callbacks, "metadata": metadata})


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_records_and_counts(acc: Accumulator, path: Path) -> None:
    snap = acc.snapshot(bootstrap=0)
    acc.close()
    lines = _lines(path)
    # Every run left its record: A's first (2 steps each), then B's under the same ids (3 steps),
    # each with its own forecasts (the span processor keeps no user metadata: the steps tell them apart).
    assert [(r["trajectory_id"], len(r["steps"])) for r in lines] == [
        *((f"b{i}", 2) for i in range(N)),
        *((f"b{i}", 3) for i in range(N)),
    ]
    for r in lines:
        i = int(r["trajectory_id"][1:])
        assert [s["forecasts"]["verbal"] for s in r["steps"]] == [verbal_of(i, t) for t in range(len(r["steps"]))]
        assert r["stop_reason"] == "clean" and r["outcome"] == i % 2
    # Counted as the repeats they are, never as late events of the first runs.
    online = snap["online"]
    assert online["set_aside"] == {"duplicate_id": N}
    assert online["rejected"] == {}
    assert online["finished"] == N and online["live"] == 0
    # The snapshot scores agent A's runs (the first of each id), as the report of the file does.
    report = report_from_path(path, ReportOptions(bootstrap=0))
    assert report["input"]["set_aside"]["duplicate_id"]["count"] == N
    assert snap["audit"] == report["audit"]
    if acc.mode == "rows":
        assert snap["scores"] == report["scores"]
    else:  # summary mode's sums are folded in another order: equal to ~1e-12 (online/summary_store.py)
        assert [(s["predictor"], s["rule"], s["censoring"], s["n"]) for s in snap["scores"]] == [
            (s["predictor"], s["rule"], s["censoring"], s["n"]) for s in report["scores"]
        ]
        assert [s["mean"] for s in snap["scores"]] == pytest.approx([s["mean"] for s in report["scores"]], abs=1e-12)
    log_complete = next(
        s for s in snap["scores"] if (s["predictor"], s["rule"], s["censoring"]) == ("verbal", "log", "complete-only")
    )
    assert log_complete["n"] == N
    assert log_complete["mean"] == pytest.approx(expected_log_tps(N, tool_turns=1), rel=1e-12)


@pytest.mark.parametrize("mode", ["rows", "summary"])
def test_handler_a_reused_id_leaves_a_second_record_counted_not_scored(tmp_path, mode):
    """Summary mode with batches of 2: agent A's runs are folded (their rows forgotten) before agent
    B re-uses their ids; the folded ids' keys still make B's runs repeats, as the report decides."""
    path = tmp_path / "runs.jsonl"
    acc = Accumulator(sink=path, bootstrap=0, mode=mode, batch_size=2)
    handler = TPSCallbackHandler(acc)
    _run_both_agents([handler])
    handler.flush()
    _check_records_and_counts(acc, path)


def test_span_processor_a_reused_id_leaves_a_second_record_counted_not_scored(tmp_path):
    path = tmp_path / "spans.jsonl"
    acc = Accumulator(sink=path, bootstrap=0)
    provider = TracerProvider()
    processor = TPSSpanProcessor(acc)
    provider.add_span_processor(processor)
    with instrumented(provider):
        _run_both_agents([])
    processor.force_flush()
    _check_records_and_counts(acc, path)


def test_late_events_of_the_same_run_are_still_rejected(tmp_path):
    """Without a new run's start (`begin`), a step or a stop after the stop is the same run's late event."""
    acc = Accumulator(sink=tmp_path / "r.jsonl", bootstrap=0)
    acc.observe("t", {"verbal": 0.7})
    acc.stop("t", "clean", outcome=1)
    assert acc.observe("t", {"verbal": 0.2}) is False
    assert acc.stop("t", "clean") is False
    snap = acc.snapshot(bootstrap=0)
    assert snap["online"]["rejected"] == {"step_after_stop": 1, "duplicate_stop": 1}
    assert snap["online"]["set_aside"] == {}
    acc.close()
    assert len(_lines(tmp_path / "r.jsonl")) == 1


def test_a_resolution_after_a_repeat_belongs_to_the_repeat_in_snapshot_and_file(tmp_path):
    """The reader gives a resolution line to the nearest record of its id above it: after a repeat's
    record that is the repeat (set aside). The accumulator decides the same: the first run keeps its
    pending outcome in both, and both count the resolution as set aside."""
    path = tmp_path / "r.jsonl"
    acc = Accumulator(sink=path, bootstrap=0)
    acc.observe("u", {"verbal": 0.6})
    acc.stop("u", "clean", outcome=1)  # a complete run, so the file has something to score
    acc.observe("t", {"verbal": 0.7})
    acc.stop("t", "clean")  # outcome pending
    assert acc.begin("t") is True
    acc.observe("t", {"verbal": 0.4})
    acc.resolve("t", outcome=0)  # the live repeat takes it: written with its record
    acc.stop("t", "clean")
    acc.resolve("t", outcome=1)  # after the repeat's record: a line, set aside with it
    snap = acc.snapshot(bootstrap=0)
    acc.close()
    assert snap["online"]["set_aside"] == {"duplicate_id": 1, "duplicate_resolution": 1}
    assert snap["online"]["pending_outcome"] == 1 and snap["online"]["rejected"] == {}
    lines = _lines(path)
    assert [line.get("outcome", "-") if "resolves" not in line else ("res", line["outcome"]) for line in lines] == [
        1,
        None,
        0,
        ("res", 1),
    ]
    report = report_from_path(path, ReportOptions(bootstrap=0))
    assert {k: v["count"] for k, v in report["input"]["set_aside"].items()} == {
        "duplicate_id": 1,
        "duplicate_resolution": 1,
    }
    assert report["audit"] == snap["audit"] and report["scores"] == snap["scores"]


def test_folded_ids_find_every_folded_id_and_no_other():
    """Across the set-to-array merges (4096 keys a set): each folded id is found, ids never folded
    are not (checked against a plain set of the ids)."""
    from tps_tracer.evaluation.bootstrap import trajectory_key
    from tps_tracer.online.summary_store import FoldedIds

    folded = FoldedIds()
    ids = [f"run-{i}" for i in range(0, 30_000, 3)]
    for start in range(0, len(ids), 700):  # batches, as folds come
        folded.add(trajectory_key(t) for t in ids[start : start + 700])
    assert len(folded) == len(ids) and folded.nbytes() == 8 * len(ids)
    kept = set(ids)
    probes = [f"run-{i}" for i in range(30_000)]
    assert [t in folded for t in probes] == [t in kept for t in probes]
    assert 12 not in folded


@pytest.mark.parametrize("via", ["merge", "merge_state"])
def test_a_live_repeat_and_a_repeats_resolution_survive_a_merge(via):
    """A repeat still live in one process, and an id whose repeat was recorded there, merged into
    another accumulator: the repeat stays a repeat (counted when it stops, never a duplicate), and a
    later resolution of the recorded one is still set aside, not applied to the first run."""
    worker = Accumulator(bootstrap=0)
    for tid in ("x", "y"):
        worker.observe(tid, {"verbal": 0.7})
        worker.stop(tid, "clean")  # outcomes pending
        assert worker.begin(tid) is True
        worker.observe(tid, {"verbal": 0.2})
    worker.stop("y", "clean", outcome=0)  # y's repeat recorded; x's still live
    main = Accumulator(bootstrap=0)
    main.merge(worker) if via == "merge" else main.merge_state(worker.state())
    assert main.n_live == 1
    assert main.stop("x", "clean", outcome=1) is True
    assert main.resolve("y", outcome=1) is True  # after y's repeat: the repeat's
    snap = main.snapshot(bootstrap=0)
    online = snap["online"]
    assert online["rejected"] == {} and online["finished"] == 2 and online["pending_outcome"] == 2
    assert online["set_aside"] == {"duplicate_id": 2, "duplicate_resolution": 1}
