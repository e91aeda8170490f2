"""The accumulator used on its own follows OpenRuns' lifetime rules (online/row_store.py, LiveStore).

An accumulator finishing a run early (evicted past max_live, or idle) remembers it as the
adapters do (`OpenRuns.remember_gone`, by age): a late step or stop for it is rejected, never
opened as a new trajectory under the same id, also in summary mode once its row is folded and its
id otherwise forgotten; after GONE_MEMORY idle timeouts the run is forgotten, but not its id:
summary mode keeps folded ids' keys, so a new run under it is a counted repeat (as in row mode).
"""

from __future__ import annotations

from tps_tracer.online.accumulator import Accumulator
from tps_tracer.open_runs import GONE_MEMORY


def make(clock: list[float], **kw) -> Accumulator:
    return Accumulator(
        predictors=["v"], bootstrap=0, mode="summary", batch_size=1, idle_timeout=10.0, clock=lambda: clock[0], **kw
    )


def test_a_late_step_of_an_evicted_folded_run_is_rejected_not_reopened():
    now = [0.0]
    acc = make(now, max_live=2)
    for tid in ("a", "b", "c"):
        assert acc.observe(tid, {"v": 0.5})
    acc.flush()
    assert acc.abandoned == {"evicted": 1} and acc.n_live == 2
    acc._background.wait_idle(30)
    assert "a" not in acc._rows.row_of  # folded: the row store forgot it
    assert acc.observe("a", {"v": 0.4}) is False  # late: rejected, not a new trajectory
    assert acc.stop("a", "clean") is False
    assert acc.rejected == {"step_after_stop": 1, "duplicate_stop": 1}
    assert acc.n_live == 2 and acc.abandoned == {"evicted": 1}
    report = acc.snapshot()
    assert report["online"]["finished"] == 1


def test_idle_runs_follow_open_runs_rule_and_are_forgotten_after_gone_memory():
    now = [0.0]
    acc = make(now)
    acc.observe("a", {"v": 0.5})
    now[0] = 9.99
    acc.observe("b", {"v": 0.5})
    assert acc.sweep(now[0]) == 0  # a: 9.99 s < idle_timeout
    now[0] = 10.0
    assert acc.sweep(now[0]) == 1 and acc.abandoned == {"idle": 1}  # OpenRuns.idle: >= idle_timeout
    acc.flush()
    acc._background.wait_idle(30)
    assert acc.observe("a", {"v": 0.3}) is False  # late step of the idled run
    now[0] = 10.0 + GONE_MEMORY * 10.0 + 1
    acc.sweep(now[0])  # b idles out too; a's memory expires
    assert acc.abandoned == {"idle": 2}
    # The gone memory has expired, but a's row was folded and its id's key kept (online/summary_store.py, FoldedIds),
    # as row mode keeps its row: a bare step is still late; a new run (begin) is a counted repeat,
    # recorded and set aside as the report of a sink sets a second record of an id aside.
    assert acc.observe("a", {"v": 0.3}) is False
    assert acc.rejected == {"step_after_stop": 2}
    assert acc.begin("a") is True
    assert acc.observe("a", {"v": 0.3}) is True
    assert acc.n_live == 1
    assert acc.stop("a", "clean", outcome=1) is True
    report = acc.snapshot()
    assert report["online"]["finished"] == 2 and report["online"]["set_aside"] == {"duplicate_id": 1}
