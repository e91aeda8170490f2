"""Summary mode's fold: O(1) amortised per folded trajectory, and never under the agent's lock.

1. `PartialState.merge` keeps every complete trajectory's four summaries and outcome per
   predictor. Merging a small part into a big state must not copy the big arrays (it did:
   `np.concatenate` on every fold, quadratic over a service's life), and must still leave both
   inputs unchanged.
2. A fold builds its PartialState (bootstrap weights for B replicates x the settled rows): that
   must run outside the accumulator's lock, so the agent's threads calling observe / stop /
   resolve never wait for it, while snapshots, state() and close taken meanwhile still see the
   rows being folded.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
import pytest
from test_accumulator_state import assert_same_report, feed, make

from tps_tracer.evaluation import partial_state as ps_module
from tps_tracer.evaluation.partial_state import PartialState, StateSpec, concat_rows
from tps_tracer.evaluation.report import report_from_state
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.online.accumulator import FOLD_THREAD_NAME
from tps_tracer.records import read_trajectories, to_arrays
from tps_tracer.scoring import parse_rules, parse_schedules
from tps_tracer.synthetic import example_records

SPEC = StateSpec(tuple(parse_rules("log,brier")), tuple(parse_schedules("linear-front")), bootstrap=4)


def _state(n: int, offset: int, rng: np.random.Generator) -> PartialState:
    """n complete runs of two steps, ids offset.. (so parts are disjoint)."""
    from tps_tracer.records.schema import StepRecord, TrajectoryRecord

    recs = [
        TrajectoryRecord(
            trajectory_id=f"t{offset + i}",
            stop_reason="clean" if i % 4 else "max_steps",
            outcome=int(rng.random() < 0.5) if i % 4 else None,
            steps=[
                StepRecord(t=t + 1, forecasts={"v": float(rng.random()), "w": float(rng.random())}) for t in range(2)
            ],
        )
        for i in range(n)
    ]
    return PartialState.from_arrays(to_arrays(recs), SPEC)


def _per_trajectory_arrays(st: PartialState) -> list[np.ndarray]:
    return [a for p in st.predictors.values() for a in (p.summaries, p.outcomes)] + [st.base.outcomes]


def test_merging_a_small_part_into_a_big_state_appends_in_place():
    rng = np.random.default_rng(0)
    big = _state(3000, 0, rng)
    state = big.merge(_state(3, 10_000, rng))  # the first merge copies once, into a buffer with room
    reallocations = 0
    for i in range(200):
        before = _per_trajectory_arrays(state)
        nxt = state.merge(_state(3, 20_000 + 10 * i, rng))
        after = _per_trajectory_arrays(nxt)
        for a, b in zip(before, after, strict=True):
            assert b.shape[0] >= a.shape[0]
            if not np.shares_memory(a, b):
                reallocations += 1
        state = nxt
    # Every per-trajectory array grows by half when full: a handful of reallocations in 200 merges
    # (np.concatenate reallocated all 5 arrays on each: 1000).
    assert reallocations <= 5 * 2
    assert state.n == 3000 + 3 + 200 * 3


def test_merge_leaves_both_inputs_unchanged_and_a_branch_copies():
    rng = np.random.default_rng(1)
    base = _state(400, 0, rng).merge(_state(2, 1000, rng))  # now an appendable prefix
    frozen = [a.copy() for a in _per_trajectory_arrays(base)]
    x, y = _state(5, 2000, rng), _state(7, 3000, rng)
    bx = base.merge(x)  # takes base's free rows
    by = base.merge(y)  # the same prefix again: must not overwrite bx's rows
    for a, f in zip(_per_trajectory_arrays(base), frozen, strict=True):
        np.testing.assert_array_equal(a, f)
    for merged, part in ((bx, x), (by, y)):
        for m, b0, p in zip(_per_trajectory_arrays(merged), frozen, _per_trajectory_arrays(part), strict=True):
            np.testing.assert_array_equal(m, np.concatenate([b0, p]))
    assert not _per_trajectory_arrays(bx)[0].flags.writeable  # shared prefixes are read-only


def test_concat_rows_is_concatenate():
    a = np.arange(12.0).reshape(6, 2)
    out = a
    pieces = [a]
    for k in (0, 3, 1, 100, 2):
        b = np.full((k, 2), float(k))
        out = concat_rows(out, b)
        pieces.append(b)
        np.testing.assert_array_equal(out, np.concatenate(pieces))
    with pytest.raises(ValueError):
        concat_rows(np.zeros((2, 4)), np.zeros((2, 3)))


def test_merged_states_report_as_before(tmp_path):
    """The in-place merge gives the report of one state of everything (the merge-order test's check)."""
    rng = np.random.default_rng(2)
    parts = [_state(60, 100 * i, rng) for i in range(8)]
    acc = parts[0]
    for p in parts[1:]:
        acc = acc.merge(p)
    rev = parts[-1]
    for p in reversed(parts[:-1]):
        rev = rev.merge(p)
    opts = ReportOptions(rules=("log", "brier"), bootstrap=4)
    a, b = report_from_state(acc, opts), report_from_state(rev, opts)
    assert a["audit"] == b["audit"] and len(a["scores"]) == len(b["scores"])
    for ra, rb in zip(a["scores"], b["scores"], strict=True):
        assert ra["n"] == rb["n"] and abs(ra["mean"] - rb["mean"]) <= 1e-12


# ---------------------------------------------------------------- the accumulator's fold


def test_folds_append_to_the_summary_in_place():
    """3000 graded runs folded 16 at a time: the summary's per-trajectory arrays are reallocated a
    logarithmic number of times (growth by half), not once per fold as with concatenation."""
    acc = make(mode="summary", batch_size=16)
    rng = np.random.default_rng(3)
    folds = copies = 0
    before: list[np.ndarray] = []
    for i in range(3000):
        acc.observe(f"r{i}", {"p": float(rng.random()), "q": float(rng.random())})
        acc.stop(f"r{i}", "clean" if i % 5 else "max_steps", q_z=None)
        acc.resolve(f"r{i}", outcome=i % 2) if i % 5 else None
        acc._background.wait_idle()  # folds run on the background thread: see each one
        if acc._summaries.summary is None:
            continue
        after = _per_trajectory_arrays(acc._summaries.summary)
        if before and after[0].shape != before[0].shape:
            folds += 1
            copies += sum(not np.shares_memory(a, b) for a, b in zip(before, after, strict=True) if a.size)
        before = after
    assert folds > 100
    assert copies <= len(before) * (math.log(3000 / 64, 1.5) + 3)  # concatenation: folds x arrays


class _Gate:
    """Holds the fold's PartialState.from_table (the heavy part) until released, to see who waits for it."""

    def __init__(self, monkeypatch):
        self.entered = threading.Event()
        self.release = threading.Event()
        real = PartialState.from_table.__func__  # type: ignore[attr-defined]
        self.calls = 0

        def from_table(cls, table, spec, first_seen=None, keys=None):
            if threading.current_thread().name == FOLD_THREAD_NAME:  # the fold of the folder's batch
                self.calls += 1
                self.entered.set()
                assert self.release.wait(30)
            return real(cls, table, spec, first_seen, keys)

        monkeypatch.setattr(ps_module.PartialState, "from_table", classmethod(from_table))


def _run(fn, name="other"):
    box: dict[str, object] = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # pragma: no cover - reported below
            box["error"] = exc

    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    return t, box


def test_the_agent_never_waits_for_a_fold(monkeypatch):
    """While a fold builds its state, observe / stop / resolve / snapshot / state() of other threads
    complete, and they see the rows being folded; the result equals row mode fed the same events."""
    gate = _Gate(monkeypatch)
    records = [r for r in example_records() if r.steps][:120]
    summary, rows = make(mode="summary", batch_size=8), make()
    feed(rows, records, late_outcomes=False)
    first, rest = records[:8], records[8:]

    folder, box = _run(lambda: feed(summary, first, late_outcomes=False), name="folder")
    assert gate.entered.wait(30), "the fold never started"
    # The fold is parked inside its heavy part. Other threads go on:
    t, other = _run(lambda: (feed(summary, rest[:50], late_outcomes=False), summary.snapshot()))
    t.join(20)
    alive = t.is_alive()
    gate.release.set()
    folder.join(30)
    assert not alive, "another thread waited for the fold (it ran under the accumulator's lock)"
    assert "error" not in other and "error" not in box
    snap_during = other["value"][1]
    # The 8 runs being folded were in that snapshot (with the 50 others), none lost or doubled.
    assert snap_during["audit"]["n_trajectories"] == 58
    feed(summary, rest[50:], late_outcomes=False)
    assert gate.calls >= 1
    assert_same_report(summary.snapshot(), rows.snapshot())


def test_state_and_close_while_a_fold_is_in_flight(monkeypatch):
    gate = _Gate(monkeypatch)
    records = [r for r in example_records() if r.steps][:40]
    summary, rows = make(mode="summary", batch_size=8), make()
    feed(rows, records, late_outcomes=False)
    folder, _ = _run(lambda: feed(summary, records[:8], late_outcomes=False), name="folder")
    assert gate.entered.wait(30)
    t, other = _run(lambda: summary.state())
    t.join(20)
    assert not t.is_alive(), "state() waited for the fold"
    blob = other["value"]
    gate.release.set()
    folder.join(30)
    copy = make(mode="summary")
    copy.merge_state(blob)  # the in-flight rows travelled, as folded
    feed(copy, records[8:], late_outcomes=False)
    feed(summary, records[8:], late_outcomes=False)
    summary.close()
    assert_same_report(copy.snapshot(), rows.snapshot())
    assert_same_report(summary.snapshot(), rows.snapshot())


def test_many_threads_folding_resolving_merging_and_snapshotting_give_row_modes_result():
    """Real threads, no gate, a tiny GIL switch interval for more interleavings: stops with late
    outcomes (resolves racing the folds of their batch), budget stops, snapshots, state() and a
    merge_state of another accumulator all at once; nothing lost, nothing counted twice."""
    records = [r for r in example_records() if r.steps]
    rows = make()
    feed(rows, records, late_outcomes=True)
    side = make(mode="summary", batch_size=4)
    feed(side, records[5::6], late_outcomes=True)  # one share arrives by merge_state, mid-run
    blob = side.state()
    summary = make(mode="summary", batch_size=4, max_pending=10_000)
    chunks = [records[i::6] for i in range(5)]
    barrier = threading.Barrier(len(chunks) + 3)
    errors: list[BaseException] = []
    done = threading.Event()

    def agent(chunk):
        barrier.wait()
        for rec in chunk:
            feed(summary, [rec], late_outcomes=True)

    def watcher(kind):
        barrier.wait()
        if kind == "merge":
            summary.merge_state(blob)
            return
        while not done.is_set():
            if kind == "snapshot":
                snap = summary.snapshot()
                assert snap["audit"]["n_trajectories"] == snap["online"]["finished"]
            else:
                copy = type(summary).from_state(summary.state())
                assert copy.n_finished <= len(records)

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:
            errors.append(exc)

    agents = [threading.Thread(target=guarded, args=(agent, c)) for c in chunks]
    watchers = [threading.Thread(target=guarded, args=(watcher, k)) for k in ("snapshot", "state", "merge")]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in agents + watchers:
            t.start()
        for t in agents:
            t.join(300)
        done.set()
        for t in watchers:
            t.join(300)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert summary.rejected == {}
    assert summary.n_finished == len(records)
    assert summary._summaries.summary is not None and summary._summaries.summary.n > len(records) // 2
    assert_same_report(summary.snapshot(), rows.snapshot())


def test_partial_state_of_a_file_chunk_by_chunk_still_matches(tmp_path):
    """The chunked reader merges part after part into one state: unchanged result."""
    from scale_support import assert_reports_equal, trajectory_dicts, write_jsonl

    from tps_tracer.evaluation.chunked import report_from_path
    from tps_tracer.evaluation.report import build_report

    path = write_jsonl(tmp_path / "r.jsonl", trajectory_dicts(400, seed=5))
    opts = ReportOptions(bootstrap=20)
    assert_reports_equal(
        build_report(to_arrays(read_trajectories(path)), opts), report_from_path(path, opts, chunk_bytes=2_000)
    )


def test_a_fold_that_fails_puts_its_rows_back(monkeypatch):
    """Building a fold's state failing (a bug, memory) loses nothing: counted, rows back in the store,
    folded by the next fold; the result still equals row mode."""
    records = [r for r in example_records() if r.steps][:60]
    summary, rows = make(mode="summary", batch_size=8), make()
    feed(rows, records, late_outcomes=False)
    real = PartialState.from_table.__func__  # type: ignore[attr-defined]
    failures = []

    def flaky(cls, table, spec, first_seen=None, keys=None):
        if not failures and table.n >= 8:
            failures.append(table.n)
            raise MemoryError("simulated")
        return real(cls, table, spec, first_seen, keys)

    monkeypatch.setattr(ps_module.PartialState, "from_table", classmethod(flaky))
    feed(summary, records[:8], late_outcomes=False)
    summary._background.wait_idle()  # the fold runs on the accumulator's background thread
    assert failures == [8] and summary.health.get("error", "accumulator.fold") == 1
    assert summary._rows.n == 8 and not summary._summaries.folding  # back in the store, none in flight
    feed(summary, records[8:], late_outcomes=False)
    summary._background.wait_idle()
    assert summary._rows.n < 8
    assert_same_report(summary.snapshot(), rows.snapshot())


def test_stop_and_resolve_never_score_or_fold_on_the_callers_thread(monkeypatch):
    """Summary mode used to score every 64th stop's batch and fold it on the caller's thread (p99.9
    of stop() 6-9 ms). Now both run on the accumulator's background thread; the result is row mode's."""
    from tps_tracer.online.accumulator import Accumulator
    from tps_tracer.online.summary_store import SummaryStore

    threads: list[str] = []
    calls: dict[str, int] = {"_score": 0, "finish": 0}
    for owner, name in ((Accumulator, "_score"), (SummaryStore, "finish")):
        real = getattr(owner, name)

        def spy(self, *args, _real=real, _name=name):
            if getattr(self, "mode", "summary") == "summary":  # a row-mode accumulator never folds
                threads.append(threading.current_thread().name)
                calls[_name] += 1
            return _real(self, *args)

        monkeypatch.setattr(owner, name, spy)
    records = [r for r in example_records() if r.steps][:200]
    summary, rows = make(mode="summary", batch_size=8), make()
    feed(rows, records, late_outcomes=True)
    feed(summary, records, late_outcomes=True)  # late outcomes: resolves that fold
    summary._background.wait_idle()
    assert calls["_score"] == len(records) // 8 and calls["finish"] >= 5  # every batch, many folds
    assert set(threads) == {FOLD_THREAD_NAME}, set(threads)
    assert_same_report(summary.snapshot(), rows.snapshot())


def test_background_work_runs_in_order_and_holds_the_caller_back_when_full():
    """Full: submit waits (blocked, no CPU) for a free place instead of running the job on the caller."""
    from tps_tracer.online.summary_store import BackgroundWork

    work = BackgroundWork("bg-test", max_pending=2, linger=0.05)
    gate, done, ran_on = threading.Event(), [], []

    def job(x):
        done.append(x)
        ran_on.append(threading.get_ident())

    assert work.submit(lambda: gate.wait(10))  # parks the thread
    assert work.submit(job, 1)
    submitted = []
    waiter = threading.Thread(target=lambda: submitted.append(work.submit(job, 2)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and work.waits == 1 and done == []  # full: the caller waits, nothing ran on it
    gate.set()
    waiter.join(10)
    assert submitted == [True] and work.wait_idle(10) and work.unfinished == 0
    assert done == [1, 2] and work.inline_runs == 0 and waiter.ident not in ran_on
    assert work.submit(done.append, 3) and work.wait_idle(10) and done == [1, 2, 3]
    deadline = 0
    while work._thread is not None and deadline < 200:  # idle for `linger`: the thread ends
        threading.Event().wait(0.01)
        deadline += 1
    assert work._thread is None
    assert work.submit(lambda: 1 / 0) and work.wait_idle(10) and work.failures == 1  # counted, thread goes on
    assert work.submit(done.append, 4) and work.wait_idle(10) and done[-1] == 4


def test_background_work_runs_a_job_where_submitted_only_when_waiting_could_be_forever():
    """From the background thread itself (a listener calling stop) or after `stall_timeout` seconds
    without progress, submit returns False (the caller runs it: never lost), counted."""
    from tps_tracer.online.summary_store import BackgroundWork

    work = BackgroundWork("bg-stall", max_pending=1, linger=0.05, stall_timeout=0.2)
    gate = threading.Event()
    assert work.submit(gate.wait, 10)
    assert work.submit(len, ()) is False and work.inline_runs == 1 and work.waits == 1  # stalled
    gate.set()
    assert work.wait_idle(10)
    inner: list[bool] = []
    assert work.submit(lambda: inner.append(work.submit(len, ())))  # full while it runs: itself
    assert work.wait_idle(10) and inner == [False] and work.inline_runs == 2
    assert work.run_queued_here() == 0 and work.run_queued_here() == 0


def test_a_tight_stop_loop_never_scores_or_folds_on_the_caller_and_loses_no_run(monkeypatch):
    """Issue 28: with the background queue full (one job of room, a tight loop), stop() and resolve()
    wait instead of doing the work; every score, row take-out and fold runs on the background
    thread (thread ids recorded inside them), and every run ends up folded (counts equal)."""
    from tps_tracer.online.accumulator import Accumulator
    from tps_tracer.online.summary_store import BackgroundWork, SummaryStore

    ran_on: dict[str, set[int]] = {"_score": set(), "take": set(), "finish": set()}
    folded = []
    for owner, name in ((Accumulator, "_score"), (SummaryStore, "take"), (SummaryStore, "finish")):
        real = getattr(owner, name)

        def spy(self, *args, _real=real, _name=name):
            ran_on[_name].add(threading.get_ident())
            out = _real(self, *args)
            if _name == "take" and out is not None:
                folded.append(out.n)
            return out

        monkeypatch.setattr(owner, name, spy)
    acc = Accumulator(predictors=["a", "b"], bootstrap=8, mode="summary", idle_timeout=None, batch_size=4)
    acc._background = BackgroundWork(FOLD_THREAD_NAME, max_pending=1)  # full after one job: forces waits
    n = 600
    for i in range(n):
        tid = f"r{i}"
        for t in range(3):
            acc.observe(tid, {"a": ((i + t) % 9 + 1) / 11, "b": ((i * 3 + t) % 7 + 1) / 9})
        if i % 3:
            acc.resolve(tid, outcome=i & 1)  # graded before its stop: settled at once
            acc.stop(tid, "clean")
        else:
            acc.stop(tid, "clean")
            acc.resolve(tid, outcome=i & 1)  # graded after: settles a stored row, resolves fold too
    caller = threading.get_ident()
    assert acc._background.waits > 0 and acc._background.inline_runs == 0  # backpressure was exercised
    acc._background.wait_idle(60)
    for name, idents in ran_on.items():
        assert idents and caller not in idents, (name, idents)
    assert sum(folded) + acc._rows.n == n  # every run folded or still a row: none lost
    assert acc._summaries.summary is not None and acc._summaries.summary.n == sum(folded)
    report = acc.snapshot()
    assert report["online"]["finished"] == n and report["online"]["pending_outcome"] == 0
