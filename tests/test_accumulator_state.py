"""Accumulator state across processes (state() / merge_state) and the constant-memory summary mode."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tps_tracer.online import Accumulator
from tps_tracer.online.accumulator_state import MAGIC
from tps_tracer.records import CensoringPolicy
from tps_tracer.synthetic import example_records

RULES = ("log", "brier", "beta(2,4)")
SCHEDULES = ("linear-front", "uniform")
B = 30


def _scores(report):
    return {(r["predictor"], r["rule"], r["weights"], r["censoring"]): r for r in report["scores"]}


def assert_same_report(a_rep, b_rep, tol=1e-12):
    a, b = _scores(a_rep), _scores(b_rep)
    assert a and set(a) == set(b)
    for key in a:
        assert a[key]["n"] == b[key]["n"], key
        for f in ("mean", "se", "ci_low", "ci_high"):
            x, y = a[key][f], b[key][f]
            assert (x is None and y is None) or math.isclose(x, y, rel_tol=0, abs_tol=tol), (key, f, x, y)
    for k in ("audit", "coverage", "skipped_predictors", "base_rate"):
        assert a_rep.get(k) == b_rep.get(k), k
    assert len(a_rep["deltas"]) == len(b_rep["deltas"])
    for da, db in zip(a_rep["deltas"], b_rep["deltas"], strict=True):
        assert da["comparison"] == db["comparison"] and math.isclose(da["delta"], db["delta"], abs_tol=tol)
    for part in ("diagnostics", "scalar_predictors"):
        assert len(a_rep[part]) == len(b_rep[part])
        for da, db in zip(a_rep[part], b_rep[part], strict=True):
            assert da.keys() == db.keys()
            for k in da:
                x, y = da[k], db[k]
                if isinstance(x, float) and isinstance(y, float):
                    assert math.isclose(x, y, rel_tol=0, abs_tol=tol), (part, k, x, y)
                else:
                    assert x == y, (part, k)


def feed(acc, records, late_outcomes=True):
    """q_z before or with the stop (as the summary mode requires), outcomes after every stop when late."""
    for rec in records:
        for step in rec.steps:
            assert acc.observe(rec.trajectory_id, step.forecasts)
        if rec.q_z is not None and rec.steps:
            assert acc.resolve(rec.trajectory_id, q_z=rec.q_z)
        if rec.outcome is not None and not late_outcomes and rec.steps:
            assert acc.resolve(rec.trajectory_id, outcome=rec.outcome)
        q_at_stop = rec.q_z if not rec.steps else None  # a run never observed gets q_z with its stop
        assert acc.stop(rec.trajectory_id, rec.stop_reason, rec.horizon, q_z=q_at_stop)
        if rec.outcome is not None and not late_outcomes and not rec.steps:
            assert acc.resolve(rec.trajectory_id, outcome=rec.outcome)
    if late_outcomes:
        for rec in reversed(records):
            if rec.outcome is not None:
                assert acc.resolve(rec.trajectory_id, outcome=rec.outcome)


def make(**kw):
    return Accumulator(rules=RULES, weights=SCHEDULES, bootstrap=B, **kw)


def strip(report):
    report = dict(report)
    report.pop("online")
    return report


# ---------------------------------------------------------------- state across processes


def test_state_merge_of_four_accumulators_equals_one():
    records = example_records()[:160]
    whole = make()
    feed(whole, records, late_outcomes=False)
    whole.observe("still-live", {"verbal": 0.3})
    parts = [make() for _ in range(4)]
    for i, rec in enumerate(records):
        feed(parts[i % 4], [rec], late_outcomes=False)
    parts[2].observe("still-live", {"verbal": 0.3})
    parts[1].observe("x", {"verbal": 2.0})  # a rejected forecast: the health ledger travels too
    blobs = [p.state() for p in parts]
    assert all(isinstance(b, bytes) and b.startswith(MAGIC) for b in blobs)
    merged = make()
    for blob in blobs:
        merged.merge_state(blob)
    assert merged.n_finished == whole.n_finished == len(records)
    # The live trajectory arrives live: stopping it on both sides gives the same report.
    assert merged.n_live == 2 and merged.rejected == {"invalid_forecast": 1}
    for acc in (whole, merged):
        acc.stop("still-live", "max_steps", horizon=4)
    merged.stop("x", "other")
    whole.observe("x", {"verbal": None})
    whole.stop("x", "other")
    assert strip(whole.snapshot()) == strip(merged.snapshot())  # rows travel bit-exactly


def test_state_merge_rejects_duplicates_and_bad_bytes():
    a, b = make(), make()
    for acc in (a, b):
        acc.observe("same", {"p": 0.5})
        acc.stop("same", "clean")
    a.merge_state(b.state())
    assert a.n_finished == 1 and a.rejected["duplicate_id"] == 1
    with pytest.raises(ValueError, match="bad magic"):
        a.merge_state(b"pickle me")
    with pytest.raises(ValueError, match="version 9"):
        a.merge_state(MAGIC + bytes([9]) + b"{}")
    with pytest.raises(ValueError, match="corrupt"):
        a.merge_state(MAGIC + bytes([1]) + b"{not json")
    with pytest.raises(ValueError, match="corrupt"):
        a.merge_state(MAGIC + bytes([1]) + b'{"settings": {}}')
    with pytest.raises(ValueError, match="different rules"):
        a.merge_state(Accumulator(rules=("log",)).state())


# ---------------------------------------------------------------- summary mode


@pytest.mark.parametrize("late", [False, True])
def test_summary_mode_equals_row_mode(late):
    records = example_records()
    rows, summary = make(), make(mode="summary", batch_size=8)
    feed(rows, records, late_outcomes=late)
    feed(summary, records, late_outcomes=late)
    summary._background.wait_idle()  # folds run on the accumulator's background thread
    assert summary._summaries.summary is not None and summary._summaries.summary.n > 0  # really folded
    assert summary._rows.n < len(records) // 2
    a, b = summary.snapshot(), rows.snapshot()
    assert {k[3] for k in _scores(a)} == {"complete-only", "simple", "exact"}
    assert_same_report(a, b)
    assert a["online"]["finished"] == b["online"]["finished"] == len(records)


def test_summary_mode_with_a_late_predictor_and_partial_outcomes():
    """A predictor first seen after folds, and some outcomes never arriving (pending)."""
    records = example_records()[:90]
    rows, summary = make(), make(mode="summary", batch_size=4)
    for acc in (rows, summary):
        feed(acc, records[:60], late_outcomes=False)
        for i in range(10):
            acc.observe(f"late-{i}", {"newcomer": 0.1 * i, "verbal": 0.5})
            acc.stop(f"late-{i}", "clean")
            if i % 3:
                acc.resolve(f"late-{i}", outcome=i % 2)
        feed(acc, records[60:], late_outcomes=True)
    a, b = summary.snapshot(), rows.snapshot()
    assert a["audit"]["pending_outcome"] == 4
    assert "newcomer" in {r["predictor"] for r in a["scores"]}
    assert_same_report(a, b)


def test_summary_mode_late_outcome_waits_then_overflow_is_counted():
    acc = make(mode="summary", batch_size=1, max_pending=3)
    for i in range(5):
        acc.observe(f"r{i}", {"p": 0.2 + 0.1 * i})
        acc.stop(f"r{i}", "clean")
    acc._background.wait_idle()  # batches are scored (and the overflow folded) in the background
    # five waited, the bound is three: the two oldest were folded as pending, counted
    assert acc.health.get("ignored", "pending_folded") == 2
    assert acc.resolve("r4", outcome=1)  # still waiting: works
    assert not acc.resolve("r0", outcome=1)  # folded: its id is forgotten, the resolve is counted
    assert acc.rejected["resolve_unknown"] == 1
    snap = acc.snapshot()
    assert snap["audit"]["pending_outcome"] == 4 and snap["online"]["finished"] == 5
    row = {k: v for k, v in _scores(snap).items() if k[:3] == ("p", "log", "uniform") and k[3] == "complete-only"}
    (only,) = row.values()
    assert only["n"] == 1 and math.isclose(only["mean"], math.log(0.6), abs_tol=1e-12)  # positively oriented: log p


def test_summary_mode_keeps_no_row_per_settled_trajectory():
    acc = make(mode="summary", batch_size=64)
    for i in range(3000):
        acc.observe(f"a{i}", {"p": 0.5})
        acc.stop(f"a{i}", "other" if i % 3 else "clean")
        if i % 3 == 0:
            acc.resolve(f"a{i}", outcome=i % 2)
    acc.flush()
    assert acc._rows.n < 64 + 64
    assert acc.snapshot()["audit"]["stop_reasons"]["other"] == 2000
    # per predictor, a complete usable trajectory keeps 4 summaries + its outcome: 40 bytes
    st = acc._summaries.summary
    held = sum(p.summaries.nbytes + p.outcomes.nbytes for p in st.predictors.values()) + st.base.outcomes.nbytes
    assert held <= 1000 * (40 + 8)


def test_summary_state_merge_of_four_equals_one_and_row_mode():
    records = example_records()
    whole_rows, whole_summary = make(), make(mode="summary", batch_size=8)
    feed(whole_rows, records)
    feed(whole_summary, records)
    parts = [make(mode="summary", batch_size=8) for _ in range(4)]
    for i, rec in enumerate(records):
        feed(parts[i % 4], [rec])
    merged = make(mode="summary")
    for p in parts:
        merged.merge_state(p.state())
    assert_same_report(merged.snapshot(), whole_summary.snapshot())
    assert_same_report(merged.snapshot(), whole_rows.snapshot())


def test_summary_mode_refuses_other_settings_and_row_mode_merges():
    acc = make(mode="summary")
    feed(acc, example_records()[:20])
    with pytest.raises(ValueError, match="summary-mode accumulator reports with"):
        acc.snapshot(policy=CensoringPolicy.treating_as_censored(["parse_error"]))
    with pytest.raises(ValueError, match="summary-mode accumulator reports with"):
        acc.snapshot(bootstrap=B + 1)
    with pytest.raises(ValueError, match="unknown predictor"):
        acc.snapshot(predictors=["nope"])
    with pytest.raises(ValueError, match="unknown predictor"):
        make().snapshot(predictors=["nope"])  # row mode says the same
    with pytest.raises(ValueError, match="merges only into a summary-mode"):
        make().merge_state(acc.state())
    with pytest.raises(ValueError, match="mode must be"):
        make(mode="sketch")


def test_summary_mode_empty_and_no_complete_snapshots_match_row_mode():
    for setup in (lambda a: None, lambda a: (a.observe("z", {"p": 0.4}), a.stop("z", "tool_error"))):
        rows, summary = make(), make(mode="summary", batch_size=1)
        setup(rows), setup(summary)
        a, b = strip(summary.snapshot()), strip(rows.snapshot())
        assert a == b
    assert np.isfinite(0.0)


def test_summary_equals_rows_on_random_trajectories():
    """Random mixes (missing forecasts, empty runs, every role, horizons beyond the steps), small batches."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from test_accumulator import to_records, trajectory

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(trajectory, min_size=1, max_size=30), st.booleans(), st.integers(1, 5))
    def check(drawn, late, batch):
        records = to_records(drawn)
        rows, summary = make(), make(mode="summary", batch_size=batch)
        feed(rows, records, late_outcomes=late)
        feed(summary, records, late_outcomes=late)
        a, b = summary.snapshot(), rows.snapshot()
        assert a["online"]["rejected"] == {} and a["online"]["finished"] == b["online"]["finished"]
        assert_same_report(a, b)
        merged = make(mode="summary")
        merged.merge_state(summary.state())
        assert_same_report(merged.snapshot(), b)

    check()


def test_stop_takes_q_z_like_an_earlier_resolve(tmp_path):
    acc = make(sink=tmp_path / "s.jsonl")
    acc.observe("a", {"p": 0.5})
    assert acc.stop("a", "max_steps", horizon=3, q_z=0.25)
    assert acc.stop("never-observed", "max_steps", horizon=2, q_z=0.5)
    acc.observe("b", {"p": 0.5})
    acc.resolve("b", q_z=0.1)
    assert acc.stop("b", "max_steps", horizon=3, q_z=0.9)  # the stop is kept, the other q_z is a conflict
    assert acc.rejected == {"conflicting_resolution": 1}
    acc.observe("c", {"p": 0.5})
    acc.stop("c", "clean", q_z=2.0)
    assert acc.rejected["invalid_q_z"] == 1
    acc.close()
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [x["q_z"] for x in lines] == [0.25, 0.5, 0.1, None]
    assert acc.snapshot()["audit"]["censored_with_q_z"] == 3


# ---------------------------------------------------------------- folded ids across merges


def _folded(prefix: str, n: int) -> Accumulator:
    """A summary-mode accumulator whose n clean runs are all folded away (rows gone, keys kept)."""
    acc = make(mode="summary", batch_size=2)
    for i in range(n):
        tid = f"{prefix}{i}"
        assert acc.observe(tid, {"verbal": 0.6})
        assert acc.stop(tid, "clean", 4, outcome=i % 2)
    acc.flush()
    acc._background.wait_idle()  # folds run on the accumulator's background thread
    assert acc._rows.n == 0 and acc._summaries.summary is not None and acc._summaries.summary.n == n  # really folded
    return acc


@pytest.mark.parametrize("via", ["merge", "merge_state"])
def test_an_id_folded_by_the_other_accumulator_is_a_repeat_after_a_merge(via):
    a, b = _folded("a", 6), _folded("b", 6)
    if via == "merge":
        a.merge(b)
    else:
        a.merge_state(b.state())
    assert a.begin("b3") is True  # a new run under an id b folded: a repeat, as it would be in b
    assert a.begin("a3") is True and a.begin("c0") is False
    assert a.observe("b3", {"verbal": 0.9}) and a.stop("b3", "clean", 4, outcome=1)
    a.flush()
    snap = a.snapshot()
    assert snap["online"]["set_aside"] == {"duplicate_id": 1}  # recorded, not scored
    assert snap["audit"]["n_trajectories"] == 12 and snap["online"]["rejected"] == {}
    # The repeat's 0.9 is not in the scores: every run scored said 0.6 (one step, T = 4: w_1 = 4/10).
    log = next(s for s in snap["scores"] if (s["predictor"], s["rule"], s["weights"]) == ("verbal", "log", "uniform"))
    want = np.mean([0.25 * (math.log(0.6) if i % 2 else math.log(0.4)) for i in range(6)])
    assert log["n"] == 12 and log["mean"] == pytest.approx(want, abs=1e-12)


def test_folded_ids_travel_in_the_saved_state_and_a_run_folded_on_both_sides_is_counted():
    a = _folded("a", 4)
    restored = Accumulator.from_state(a.state())
    assert [restored.begin(f"a{i}") for i in range(4)] == [True] * 4
    assert restored.begin("a4") is False
    c = _folded("a", 2)  # a0, a1 finished (and folded) in another process too
    merged = Accumulator.from_state(a.state())
    merged.merge(c)
    assert merged.rejected == {"duplicate_folded_id": 2}  # a0 and a1: both copies are in the sums
    assert merged.snapshot()["audit"]["n_trajectories"] == 6
    d = _folded("d", 2)
    d.observe("a2", {"verbal": 0.5})  # live in d, folded in a: the other's copy is left out
    merged.merge(d)
    assert merged.rejected == {"duplicate_folded_id": 2, "duplicate_id": 1}
