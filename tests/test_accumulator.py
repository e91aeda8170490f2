"""The online accumulator against the batch report, and its lifecycle and safety rules."""

from __future__ import annotations

import math
import random
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tps_tracer as tt
from tps_tracer.online import Accumulator, AccumulatorError, JsonlSink
from tps_tracer.records import CensoringPolicy, TrajectoryRecord, read_trajectories
from tps_tracer.records.jsonl import TrajectoryFileError

RULES = ("log", "brier", "beta(2,4)")
SCHEDULES = ("linear-front", "uniform", "exponential-front", "linear-back")
B = 40


def _scores(report):
    return {(r["predictor"], r["rule"], r["weights"], r["censoring"]): r for r in report["scores"]}


def assert_same_report(online, batch, tol=1e-12):
    a, b = _scores(online), _scores(batch)
    assert set(a) == set(b)
    for key in a:
        assert a[key]["n"] == b[key]["n"], key
        for field in ("mean", "se", "ci_low", "ci_high"):
            x, y = a[key][field], b[key][field]
            assert (x is None and y is None) or math.isclose(x, y, rel_tol=0, abs_tol=tol), (key, field, x, y)
    assert online["audit"] == batch["audit"]
    assert online["coverage"] == batch["coverage"]
    assert len(online["deltas"]) == len(batch["deltas"])
    for da, db in zip(online["deltas"], batch["deltas"], strict=True):
        assert da["comparison"] == db["comparison"] and math.isclose(da["delta"], db["delta"], abs_tol=tol)
    for da, db in zip(online["scalar_predictors"], batch["scalar_predictors"], strict=True):
        assert (da["predictor"], da["aggregator"], da["n"]) == (db["predictor"], db["aggregator"], db["n"])
        for k in ("auroc", "t_brier", "t_ece"):
            assert (da[k] is None and db[k] is None) or math.isclose(da[k], db[k], abs_tol=1e-9)


forecast = st.one_of(st.none(), st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0, 0.5]))
trajectory = st.fixed_dictionaries(
    {
        "steps": st.lists(st.fixed_dictionaries({"a": forecast, "b": st.floats(0.0, 1.0)}), max_size=6),
        "stop_reason": st.sampled_from(["clean", "clean", "max_steps", "parse_error", "tool_error"]),
        "outcome": st.sampled_from([0, 1]),
        "extra_horizon": st.one_of(st.none(), st.integers(0, 4)),
        "q_z": st.one_of(st.none(), st.floats(0.0, 1.0)),
    }
)


def to_records(drawn):
    recs = []
    for i, d in enumerate(drawn):
        n = len(d["steps"])
        horizon = None if d["extra_horizon"] is None or n + d["extra_horizon"] == 0 else n + d["extra_horizon"]
        recs.append(
            TrajectoryRecord(
                trajectory_id=f"t{i}",
                stop_reason=d["stop_reason"],
                outcome=d["outcome"] if d["stop_reason"] == "clean" else None,
                horizon=horizon,
                q_z=d["q_z"] if d["stop_reason"] == "max_steps" else None,
                steps=[{"t": t + 1, "forecasts": f} for t, f in enumerate(d["steps"])],
            )
        )
    # At least one scorable trajectory, as `report` requires.
    recs.append(
        TrajectoryRecord(
            trajectory_id="anchor", stop_reason="clean", outcome=1, steps=[{"forecasts": {"a": 0.7, "b": 0.6}}]
        )
    )
    return recs


def feed(acc, records, resolve_late=False):
    for rec in records:
        for step in rec.steps:
            assert acc.observe(rec.trajectory_id, step.forecasts)
        early = not resolve_late and rec.steps  # a run never observed is unknown until it stops
        if early and rec.outcome is not None:
            assert acc.resolve(rec.trajectory_id, outcome=rec.outcome)
        if early and rec.q_z is not None:
            assert acc.resolve(rec.trajectory_id, q_z=rec.q_z)
        assert acc.stop(rec.trajectory_id, rec.stop_reason, rec.horizon)
        if not early and not resolve_late:
            if rec.outcome is not None:
                assert acc.resolve(rec.trajectory_id, outcome=rec.outcome)
            if rec.q_z is not None:
                assert acc.resolve(rec.trajectory_id, q_z=rec.q_z)
    if resolve_late:
        for rec in reversed(records):
            if rec.outcome is not None:
                assert acc.resolve(rec.trajectory_id, outcome=rec.outcome)
            if rec.q_z is not None:
                assert acc.resolve(rec.trajectory_id, q_z=rec.q_z)


def options(**kw):
    return tt.ReportOptions(rules=RULES, schedules=SCHEDULES, bootstrap=B, **kw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(trajectory, min_size=1, max_size=25), st.booleans())
def test_online_equals_batch_and_the_sink_reproduces_it(tmp_path_factory, drawn, late):
    records = to_records(drawn)
    sink = tmp_path_factory.mktemp("sink") / "runs.jsonl"
    acc = Accumulator(rules=RULES, weights=SCHEDULES, bootstrap=B, sink=sink)
    feed(acc, records, resolve_late=late)
    online = acc.snapshot()
    acc.close()
    assert online["online"]["rejected"] == {}
    assert_same_report(online, tt.evaluate(records, options()))
    assert_same_report(online, tt.evaluate(read_trajectories(sink), options()))


def test_every_mode_rule_and_schedule_is_checked(tmp_path):
    """The example file has censored runs with q_z, so all three censoring modes appear."""
    from tps_tracer.synthetic import example_records

    records = example_records()
    acc = Accumulator(rules=RULES, weights=SCHEDULES, bootstrap=B)
    feed(acc, records)
    online = acc.snapshot()
    modes = {k[3] for k in _scores(online)}
    assert modes == {"complete-only", "simple", "exact"}
    assert len(_scores(online)) == len(records[0].steps[0].forecasts) * 3 * 4 * 3 + 3 * 4 * 3  # + base_rate
    assert_same_report(online, tt.evaluate(records, options()))


def test_policy_override_at_snapshot_matches_batch():
    from tps_tracer.synthetic import example_records

    records = example_records()
    acc = Accumulator(bootstrap=B)
    feed(acc, records)
    policy = CensoringPolicy.treating_as_censored(["parse_error"])
    batch = tt.evaluate(records, tt.ReportOptions(bootstrap=B, policy=policy))
    assert_same_report(acc.snapshot(policy=policy), batch)
    assert acc.snapshot()["audit"]["roles"] != batch["audit"]["roles"]


def _example_subset(n=120):
    from tps_tracer.synthetic import example_records

    return example_records()[:n]


def test_merge_of_four_workers_equals_one_accumulator():
    records = _example_subset(200)
    whole = Accumulator(bootstrap=B)
    feed(whole, records)
    parts = [Accumulator(bootstrap=B) for _ in range(4)]
    for i, rec in enumerate(records):
        feed(parts[i % 4], [rec])
    merged = Accumulator(bootstrap=B)
    for p in parts:
        merged.merge(p)
    a, b = whole.snapshot(), merged.snapshot()
    a.pop("online"), b.pop("online")
    assert a == b  # canonical row order: bitwise identical, not just close


def test_merge_rejects_duplicates_and_mismatched_settings():
    a, b = Accumulator(bootstrap=B), Accumulator(bootstrap=B)
    for acc in (a, b):
        acc.observe("same", {"p": 0.5})
        acc.stop("same", "clean")
    a.merge(b)
    assert a.n_finished == 1 and a.rejected["duplicate_id"] == 1
    with pytest.raises(ValueError, match="different rules"):
        a.merge(Accumulator(rules=("log",)))


def test_late_outcomes_give_the_same_result_as_early_ones():
    records = _example_subset()
    early, late = Accumulator(bootstrap=B), Accumulator(bootstrap=B)
    feed(early, records, resolve_late=False)
    feed(late, records, resolve_late=True)
    a, b = early.snapshot(), late.snapshot()
    a.pop("online"), b.pop("online")
    assert a == b


def test_pending_outcomes_are_counted_not_scored(tmp_path):
    sink = tmp_path / "s.jsonl"
    acc = Accumulator(bootstrap=B, sink=sink)
    for tid, y in (("a", 1), ("b", 0), ("c", None)):
        acc.observe(tid, {"p": 0.6})
        acc.observe(tid, {"p": 0.7})
        acc.stop(tid, "clean")
        if y is not None:
            acc.resolve(tid, outcome=y)
    snap = acc.snapshot()
    assert snap["audit"]["pending_outcome"] == 1 and snap["online"]["pending_outcome"] == 1
    assert snap["audit"]["roles"]["complete"] == 2
    assert _scores(snap)[("p", "log", "linear-front", "complete-only")]["n"] == 2
    assert_same_report(snap, tt.evaluate(read_trajectories(sink), tt.ReportOptions(bootstrap=B)))
    # The grade arrives: scored from then on, and the sink says so too.
    acc.resolve("c", outcome=1)
    snap = acc.snapshot()
    assert snap["audit"]["pending_outcome"] == 0
    assert_same_report(snap, tt.evaluate(read_trajectories(sink), tt.ReportOptions(bootstrap=B)))


def test_snapshot_before_any_graded_run_has_the_audit_and_no_scores():
    acc = Accumulator()
    acc.observe("y", {"p": 0.2})
    acc.stop("y", "clean")  # waiting for its outcome: nothing to score yet
    snap = acc.snapshot()
    assert snap["scores"] == [] and snap["audit"]["pending_outcome"] == 1


def test_budget_stops_before_any_graded_run_get_their_censored_scores():
    acc = Accumulator()
    acc.observe("x", {"p": 0.2})
    acc.stop("x", "max_steps", horizon=5)
    snap = acc.snapshot()
    assert snap["audit"]["roles"]["censored"] == 1
    rows = {(r["predictor"], r["rule"], r["censoring"]): r for r in snap["scores"]}
    # cen-simple: w_1 = 2 * 5 / (5 * 6) on the failure branch log(1 - 0.2); no base rate without an outcome
    assert math.isclose(rows[("p", "log", "simple")]["mean"], math.log(0.8) / 3, rel_tol=0, abs_tol=1e-12)
    assert rows[("p", "log", "complete-only")]["n"] == 0
    assert [s["predictor"] for s in snap["skipped_predictors"]] == ["base_rate"]


def test_64_threads_give_the_serial_result():
    records = _example_subset(256)
    serial = Accumulator(bootstrap=B)
    feed(serial, records)
    threaded = Accumulator(bootstrap=B)
    # Every thread interleaves the steps of its trajectories, and threads run concurrently.
    chunks = [records[i::64] for i in range(64)]
    barrier = threading.Barrier(64)

    def work(chunk, seed):
        rng = random.Random(seed)
        barrier.wait()
        events = []
        for rec in chunk:
            events.append([("obs", rec, s.forecasts) for s in rec.steps] + [("stop", rec, None)])
        while events:
            seq = rng.choice(events)
            kind, rec, fc = seq.pop(0)
            if kind == "obs":
                threaded.observe(rec.trajectory_id, fc)
            else:
                threaded.stop(rec.trajectory_id, rec.stop_reason, rec.horizon)
                if rec.outcome is not None:
                    threaded.resolve(rec.trajectory_id, outcome=rec.outcome)
                if rec.q_z is not None:
                    threaded.resolve(rec.trajectory_id, q_z=rec.q_z)
            if not seq:
                events.remove(seq)

    threads = [threading.Thread(target=work, args=(c, i)) for i, c in enumerate(chunks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = serial.snapshot(), threaded.snapshot()
    a.pop("online"), b.pop("online")
    assert a == b


# ---------------------------------------------------------------- safety and lifecycle


def test_bad_input_is_rejected_and_counted_never_raised():
    acc = Accumulator(predictors=["p"], bootstrap=B)
    assert acc.observe("t", {"p": 0.4})
    assert acc.observe("t", {"p": float("nan")})  # the step is kept, the value is not
    acc.observe("t", {"p": 1.5})
    acc.observe("t", {"p": "high"})
    acc.observe("t", {"q": 0.3})  # not a configured predictor
    assert not acc.observe("", {"p": 0.3})
    assert not acc.observe("t2", [0.3])
    assert acc.stop("t", "clean", horizon=2)  # fewer than the 5 steps: horizon ignored
    assert not acc.stop("t", "clean")
    assert not acc.observe("t", {"p": 0.5})
    assert not acc.resolve("nobody", outcome=1)
    assert not acc.resolve("t", outcome=2)
    assert not acc.resolve("t", q_z=float("nan"))
    assert acc.resolve("t", outcome=1)
    assert acc.resolve("t", outcome=1)  # the same value again is fine
    assert not acc.resolve("t", outcome=0)
    assert acc.stop("u", "exploded")  # unknown reason -> 'other'
    snap = acc.snapshot()
    assert snap["online"]["rejected"] == {
        "invalid_forecast": 3,
        "unconfigured_predictor": 1,
        "invalid_id": 1,
        "invalid_step": 1,
        "invalid_horizon": 1,
        "duplicate_stop": 1,
        "step_after_stop": 1,
        "resolve_unknown": 1,
        "invalid_outcome": 1,
        "invalid_q_z": 1,
        "conflicting_resolution": 1,
        "invalid_stop_reason": 1,
    }
    # 't' had gaps (the rejected values and the step naming only 'q'): carry-forward scores it, gaps counted.
    assert snap["coverage"][0] == {"predictor": "p", "usable": 1, "skipped": {"no_steps": 1}}
    gaps = snap["missing_forecasts"]["predictors"]["p"]
    assert (gaps["missing_steps"], gaps["steps"], gaps["runs_affected"], gaps["runs"]) == (4, 5, 1, 1)
    assert snap["audit"]["stop_reasons"]["other"] == 1


def test_strict_mode_raises_clear_errors():
    acc = Accumulator(strict=True)
    with pytest.raises(AccumulatorError, match="not a number in"):
        acc.observe("t", {"p": float("nan")})
    acc.observe("t", {"p": 0.5})
    acc.stop("t", "clean")
    with pytest.raises(AccumulatorError, match="already stopped"):
        acc.observe("t", {"p": 0.5})
    with pytest.raises(AccumulatorError, match="no live or finished"):
        acc.resolve("ghost", outcome=1)


def test_idle_trajectories_are_abandoned_and_live_memory_is_bounded(tmp_path):
    now = [0.0]
    sink = tmp_path / "s.jsonl"
    acc = Accumulator(idle_timeout=10.0, max_live=3, clock=lambda: now[0], sink=sink, bootstrap=B)
    acc.observe("old", {"p": 0.3})
    now[0] = 5.0
    acc.observe("young", {"p": 0.3})
    now[0] = 12.0
    acc.observe("young", {"p": 0.4})  # sweeps 'old' (idle 12 s), not 'young'
    assert acc.n_live == 1 and acc.n_finished == 1
    for tid in ("a", "b", "c"):  # a 4th live trajectory evicts the least recently active
        acc.observe(tid, {"p": 0.5})
    assert acc.n_live == 3
    snap = acc.snapshot()
    assert snap["online"]["abandoned"] == {"idle": 1, "evicted": 1}
    assert snap["audit"]["stop_reasons"]["capture_lost"] == 2 and snap["audit"]["roles"]["lost"] == 2
    acc.close()
    recs = {r.trajectory_id: r for r in read_trajectories(sink)}
    assert recs["old"].metadata == {"tps_abandoned": "idle"} and recs["young"].metadata == {"tps_abandoned": "evicted"}
    assert recs["a"].metadata == {"tps_abandoned": "closed"} and len(recs) == 5


def test_a_broken_sink_is_reported_and_scores_stay_in_memory(tmp_path):
    sink = JsonlSink(tmp_path / "s.jsonl")
    acc = Accumulator(sink=sink, bootstrap=B)
    sink.close()  # writes now fail
    acc.observe("t", {"p": 0.8})
    assert acc.stop("t", "clean")
    acc.resolve("t", outcome=1)
    snap = acc.snapshot()
    # The record's line failed, so its resolution line is not written either (no orphan line).
    assert snap["online"]["health"]["error"] == {"sink": 1, "sink_resolution_of_lost_record": 1}
    assert snap["online"]["rejected"] == {} and snap["online"]["sink"]["lines_failed"] == 1
    assert _scores(snap)[("p", "log", "linear-front", "complete-only")]["mean"] == pytest.approx(math.log(0.8))


def test_outcome_of_a_budget_stop_is_ignored_and_counted_like_batch(tmp_path):
    sink = tmp_path / "s.jsonl"
    acc = Accumulator(sink=sink, bootstrap=B)
    for tid, reason in (("c", "clean"), ("m", "max_steps")):
        acc.observe(tid, {"p": 0.3})
        acc.stop(tid, reason, horizon=4)
        acc.resolve(tid, outcome=1)
    snap = acc.snapshot()
    assert snap["audit"]["outcome_ignored_on_unscored"] == 1
    assert_same_report(snap, tt.evaluate(read_trajectories(sink), tt.ReportOptions(bootstrap=B)))


def test_reader_applies_resolutions_in_any_order_and_rejects_bad_ones(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text(
        '{"resolves": "a", "outcome": 1}\n'
        '{"trajectory_id": "a", "stop_reason": "clean", "outcome": null, "outcome_pending": true,'
        ' "steps": [{"forecasts": {"p": 0.9}}]}\n'
        '{"trajectory_id": "b", "stop_reason": "max_steps", "horizon": 3, "steps": []}\n'
        '{"resolves": "b", "q_z": 0.25}\n'
    )
    recs = {r.trajectory_id: r for r in read_trajectories(f)}
    assert recs["a"].outcome == 1 and not recs["a"].outcome_pending and recs["b"].q_z == 0.25
    f.write_text(
        '{"trajectory_id": "a", "stop_reason": "clean", "outcome": 0, "steps": []}\n'
        '{"resolves": "a", "outcome": 1}\n{"resolves": "zz", "outcome": 1}\n{"resolves": "a"}\n'
    )
    with pytest.raises(TrajectoryFileError) as err:
        read_trajectories(f, strict=True)  # strict: the orphan resolution is an error too
    text = str(err.value)
    assert "line 2, field 'outcome': 'a' already has outcome 0, not 1" in text
    assert "line 3, field 'resolves': no trajectory 'zz'" in text
    assert "line 4" in text and "needs an outcome or a q_z" in text
    f.write_text('{"trajectory_id": "a", "stop_reason": "clean", "steps": []}\n')
    with pytest.raises(TrajectoryFileError, match="outcome_pending: true"):
        read_trajectories(f)


def test_hand_computed_online_score():
    """Two steps, T = 4 (budget), linear-front: w = (4, 3, 2, 1) / 10, truncated at Z = 2, never renormalised."""
    acc = Accumulator(predictors=["p"], rules=("log",), bootstrap=B, base_rate=False)
    acc.observe("m", {"p": 0.8})
    acc.observe("m", {"p": 0.6})
    acc.stop("m", "max_steps", horizon=4)
    acc.resolve("m", q_z=0.5)
    acc.observe("c", {"p": 0.9})
    acc.stop("c", "clean")
    acc.resolve("c", outcome=1)
    s = _scores(acc.snapshot())
    s1 = 0.4 * math.log(0.8) + 0.3 * math.log(0.6)
    s0 = 0.4 * math.log(0.2) + 0.3 * math.log(0.4)
    assert s[("p", "log", "linear-front", "simple")]["mean"] == pytest.approx((math.log(0.9) + s0) / 2, abs=1e-15)
    assert s[("p", "log", "linear-front", "exact")]["mean"] == pytest.approx(
        (math.log(0.9) + 0.5 * s1 + 0.5 * s0) / 2, abs=1e-15
    )
    assert s[("p", "log", "linear-front", "complete-only")]["mean"] == pytest.approx(math.log(0.9), abs=1e-15)


def test_memory_per_finished_trajectory_does_not_grow_with_length():
    short, long_ = Accumulator(), Accumulator()
    fc = {f"p{i}": 0.5 for i in range(5)}
    for i in range(500):
        for _ in range(2):
            short.observe(f"t{i}", fc)
        for _ in range(200):
            long_.observe(f"t{i}", fc)
        short.stop(f"t{i}", "clean")
        long_.stop(f"t{i}", "clean")
    short.flush(), long_.flush()  # score the last queued batch
    assert short._rows.nbytes() == long_._rows.nbytes()
    assert short._rows.nbytes() / 500 < 2048
    assert np.isfinite(long_._rows.predictors["p0"].pairs[:500]).all()


def test_a_trajectory_that_cannot_be_scored_keeps_its_row_and_spares_the_batch():
    """If scoring a batch fails, trajectories are scored one by one; the bad one stays in the audit."""

    class FragileLog:
        name = "fragile-log"

        def branches(self, p):
            if np.any(p == 0.123):
                raise FloatingPointError("boom")
            return np.log(p), np.log1p(-p)

    acc = Accumulator(rules=[FragileLog()], bootstrap=B, base_rate=False)
    for tid, p in (("good", 0.8), ("bad", 0.123), ("fine", 0.6)):
        acc.observe(tid, {"p": p})
        acc.stop(tid, "clean")
        acc.resolve(tid, outcome=1)
    snap = acc.snapshot()
    assert snap["online"]["health"]["error"] == {"accumulator.score": 2}  # the batch, then the bad one
    assert snap["audit"]["roles"]["complete"] == 3
    assert snap["coverage"][0] == {"predictor": "p", "usable": 2, "skipped": {"missing": 1}}
    row = _scores(snap)[("p", "fragile-log", "linear-front", "complete-only")]
    assert row["n"] == 2 and row["mean"] == pytest.approx((math.log(0.8) + math.log(0.6)) / 2)


def test_strict_errors_leave_the_trajectory_usable():
    acc = Accumulator(strict=True, bootstrap=B)
    acc.observe("t", {"p": 0.5})
    acc.observe("t", {"p": 0.6})
    with pytest.raises(AccumulatorError, match=r"horizon .1. is not an integer in \[2, "):
        acc.stop("t", "max_steps", horizon=1)
    assert acc.n_live == 1
    assert acc.stop("t", "max_steps", horizon=5)
    assert acc.snapshot()["audit"]["roles"]["censored"] == 1


# (id, steps, reason, resolved, stop keywords) of whole runs: repeats, refusals and conflicts
_WHOLE_RUNS = [
    ("a", [{"verbal": 0.8}, {"verbal": 0.6}], "clean", (None, None), {"outcome": 1}),
    ("b", [{"verbal": 1.5}, "not a mapping", {"other": 0.2}], "max_steps", (1, None), {"horizon": 9}),
    ("c", [], "clean", (1, 0.5), {}),  # nothing live to resolve yet: resolve_unknown, as the four calls
    ("d", [{"verbal": 0.3}], "bogus", (0, None), {"outcome": 1, "horizon": 0, "metadata": {"x": float("nan")}}),
    ("a", [{"verbal": 0.4}], "clean", (0, None), {"metadata": "not a mapping"}),  # a repeat of a
    ("a", [{"verbal": 0.5}], "clean", (None, 0.4), {"q_z": 0.4}),  # a repeat again
    ("", [{"verbal": 0.5}], "clean", (1, None), {}),  # an invalid id: refused by each of the calls
    ("é", [{"verbal": 0.5}, {"verbal": 0.1}], "clean", (None, None), {}),
    ("e", [{"verbal": 0.9}], "clean", (None, None), {"q_z": 2.0, "outcome": "yes"}),
]


def test_finished_in_one_lock_hold_equals_the_four_calls(tmp_path):
    """An adapter's finished() (checked first, applied in one hold of the lock) writes the same lines
    and counts the same rejections as begin / observe / resolve / stop, the calls it stands for."""
    outs = []
    for one_hold in (True, False):
        path = tmp_path / f"{one_hold}.jsonl"
        acc = Accumulator(predictors=["verbal"], sink=str(path), batch_size=2, idle_timeout=None)
        if one_hold:
            acc.leave_lifetimes_to("test")
        for tid, steps, reason, resolved, stop in _WHOLE_RUNS:
            acc.finished(tid, steps, reason, resolved=resolved, **stop)
        acc.resolve("a", outcome=1)
        snap = acc.snapshot()
        acc.close()
        outs.append((path.read_text(), snap["online"]["health"], snap["online"]["finished"], snap["scores"]))
    assert outs[0] == outs[1]
    text, health = outs[0][:2]
    assert health["rejected"]["invalid_id"] == 3 and health["set_aside"]["duplicate_id"] == 2
    assert health["rejected"]["resolve_unknown"] == 1 and text.count("\n") == 9
