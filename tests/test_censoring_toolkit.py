"""The censoring toolkit against ground truth: q_Z estimators, exact-minus-simple, the projection
identity, the artificial-censoring decomposition, informative-censoring sensitivity, and the
censored scores' targets (cen-exact proper for q_t; cen-simple elicits m_t = E[Delta Y | H_t])."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tps_tracer.cli.main import main
from tps_tracer.constants import COMPLETE_ONLY, EXACT, SIMPLE
from tps_tracer.evaluation.censoring.checks import (
    artificial_censoring,
    censoring_plan,
    conditional_projection_check,
    exact_vs_simple,
    informative_censoring_shift,
)
from tps_tracer.evaluation.censoring.continuations import attach_q_z, mc_q_z, parse_continuations
from tps_tracer.evaluation.censoring.q_z_model import fit_q_z_model, prefix_features
from tps_tracer.evaluation.pairs import score_matrix
from tps_tracer.records import TrajectoryFileError, read_trajectories, to_arrays, write_trajectories
from tps_tracer.records.arrays import STOP_REASONS, PredictorColumn, TrajectoryArrays
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring import parse_rules, parse_schedules
from tps_tracer.synthetic import World, simulate_continuations, simulate_runs, to_records

RULES = ["log", "brier", "beta(2,4)"]
SCHEDULES = ["linear-front", "uniform", "exponential-front", "linear-back"]


@pytest.fixture(scope="module")
def runs():
    return simulate_runs(3000, seed=11)


@pytest.fixture(scope="module")
def arrays(runs):
    return to_arrays(to_records(runs, seed=11, record_q_z=False))


def _censored_index(runs):
    return [i for i, r in enumerate(runs.stop_reason) if r is StopReason.MAX_STEPS]


# ---------------------------------------------------------------- continuation records


def test_continuation_lines_are_validated_with_line_numbers():
    lines = [
        json.dumps({"source_trajectory_id": "a", "branch": 0, "stop_reason": "clean", "outcome": 1}),
        "{not json",
        json.dumps({"branch": 1, "stop_reason": "clean", "outcome": 1}),
        json.dumps({"source_trajectory_id": "a", "branch": 2, "stop_reason": "clean"}),
        json.dumps({"source_trajectory_id": "a", "branch": 0, "stop_reason": "parse_error"}),
        json.dumps({"source_trajectory_id": "a", "branch": 3, "stop_reason": "exploded"}),
    ]
    with pytest.raises(TrajectoryFileError) as err:
        parse_continuations(lines, "branches.jsonl")
    text = str(err.value)
    assert "5 problem(s)" in text
    for needle in ("line 2", "line 3, field 'source_trajectory_id'", "line 4, field 'outcome'", "duplicate", "line 6"):
        assert needle in text


def test_mc_estimate_counts_exclusions_and_unresolved_policies():
    rows = [("a", "clean", 1), ("a", "clean", 0), ("a", "clean", 1), ("a", "parse_error", None)]
    rows += [("a", "max_steps", None), ("b", "clean", 1), ("b", "parse_error", None)]
    branches = parse_continuations(
        json.dumps({"source_trajectory_id": s, "branch": k, "stop_reason": r, "outcome": y})
        for k, (s, r, y) in enumerate(rows)
    )
    est = mc_q_z(branches, min_valid=2)
    assert est.ids == ["a"] and est.q_hat.tolist() == [2 / 3] and est.n_valid.tolist() == [3]
    assert est.dropped_too_few == ["b"] and est.parse_errors_excluded == {"a": 1, "b": 1}
    assert est.unresolved_branches == {"a": 1}
    assert mc_q_z(branches, 2, "failure").q_hat.tolist() == [2 / 4]
    assert mc_q_z(branches, 2, "success").q_hat.tolist() == [3 / 4]
    s = est.summary()
    assert s["retained"] == 1 and s["dropped_fewer_than_min_valid"] == 1
    assert s["mean_parse_error_branches_excluded"] == 1.0
    with pytest.raises(ValueError, match="unresolved"):
        mc_q_z(branches, 2, "coin-flip")


def test_mc_q_hat_converges_to_the_continuation_probability(runs):
    censored = _censored_index(runs)
    theta = runs.theta[censored]
    errors, est = {}, None
    for m in (10, 100, 1000):
        est = mc_q_z(simulate_continuations(runs, m, seed=m, parse_error_rate=0.05), min_valid=1)
        errors[m] = float(np.mean(np.abs(est.q_hat - theta)))
    assert errors[10] > errors[100] > errors[1000]
    assert errors[1000] < 0.02  # ~ 0.8 sqrt(theta(1-theta)/950) on average
    # Tower property: the mean continuation probability of the prefixes is the mean q_Z.
    q_z = runs.q_z()[censored]
    se = np.std(theta) / np.sqrt(len(censored))
    assert abs(est.q_hat.mean() - q_z.mean()) < 4 * se


def test_attach_q_z_replaces_and_reports_what_it_could_not_use(arrays, runs):
    censored = _censored_index(runs)
    est = {f"sim-{i:05d}": 0.25 for i in censored[:-1]}
    est["nope"] = 0.5
    clean = next(i for i, r in enumerate(runs.stop_reason) if r is StopReason.CLEAN)
    est[f"sim-{clean:05d}"] = 0.5
    out = attach_q_z(arrays, est)
    assert out.attached == len(censored) - 1 and out.censored_without == 1
    assert out.unmatched == ["nope"] and out.not_censored == [f"sim-{clean:05d}"]
    assert np.nansum(out.arrays.q_z) == pytest.approx(0.25 * (len(censored) - 1))


# ---------------------------------------------------------------- exact vs simple


def test_exact_minus_simple_is_q_times_weighted_prefix_log_odds(arrays, runs):
    q_true = {f"sim-{i:05d}": float(runs.q_z()[i]) for i in _censored_index(runs)}
    a = attach_q_z(arrays, q_true).arrays
    rows = exact_vs_simple(a, ["truthful", "overconfident"], RULES, SCHEDULES, n_replicates=100)
    assert len(rows) == 2 * len(RULES) * len(SCHEDULES)
    # Independent: per censored prefix, q * sum_t w_t log(F_t / (1 - F_t)), linear-front.
    col = a.predictors["overconfident"]
    corr = []
    for i in _censored_index(runs):
        f = np.clip(col.values[a.offsets[i] : a.offsets[i + 1]], 1e-6, 1 - 1e-6)
        t, big_t = np.arange(1, f.size + 1), a.horizon[i]
        w = 2 * (big_t - t + 1) / (big_t * (big_t + 1))
        corr.append(a.q_z[i] * np.sum(w * np.log(f / (1 - f))))
    row = next(r for r in rows if (r["predictor"], r["rule"], r["weights"]) == ("overconfident", "log", "linear-front"))
    assert row["delta"] == pytest.approx(np.mean(corr), abs=1e-12)
    assert row["delta"] > 0  # saturated high forecasts: positive prefix log-odds (the paper's raw rows)
    assert row["exact"] - row["simple"] == pytest.approx(row["delta"], abs=1e-12)


def test_conditional_projection_identity_holds_to_machine_precision(arrays, runs):
    est = mc_q_z(simulate_continuations(runs, 10, seed=3, parse_error_rate=0.1), min_valid=5)
    a = attach_q_z(arrays, est.as_mapping()).arrays
    rows = conditional_projection_check(a, est, ["truthful", "overconfident", "noisy"], RULES, SCHEDULES)
    assert len(rows) == 3 * len(RULES) * len(SCHEDULES)
    assert all(r["n"] > 100 for r in rows if r["predictor"] != "noisy")
    assert max(r["max_abs_error"] for r in rows) < 1e-13


# ---------------------------------------------------------------- what the censored scores elicit


def _arrays_from_runs(runs, streams, q_z=None):
    """Flat arrays straight from simulated runs (no records), with the given per-step streams."""
    n = runs.n
    lengths = np.diff(runs.offsets)
    return TrajectoryArrays(
        ids=[f"r{i}" for i in range(n)],
        offsets=runs.offsets,
        horizon=runs.horizon.astype(np.float64),
        stop_code=np.array([STOP_REASONS.index(r) for r in runs.stop_reason], dtype=np.int8),
        outcome=np.where([r is StopReason.CLEAN for r in runs.stop_reason], runs.outcome, np.nan),
        q_z=np.full(n, np.nan) if q_z is None else q_z,
        predictors={k: PredictorColumn(k, v, lengths > 0) for k, v in streams.items()},
    )


def test_cen_exact_is_proper_for_q_t_while_cen_simple_elicits_m_t():
    """Proposition "Target of the simple censored score". With no parse errors, Delta = 1{L <= B},
    L is uniform on 2..14 and independent of the task, and B = 10. Given the run is alive at t
    (L >= t), the cen-simple pseudo-label at step t is Delta*Y, so the target is m_t = q_t pi_t.
    The horizon T (= L, or B if censored) moves w_t with Delta, so the target is the w_t-tilted
    pi_t = E[w_t(T) 1{L <= B} | L >= t] / E[w_t(T) | L >= t]; cen-exact's label has mean q_t for every T."""
    world = World(min_length=2, max_length=14, budget=10, parse_error_rate=0.0)
    runs = simulate_runs(40_000, seed=21, world=world)
    t = np.arange(runs.offsets[-1]) - np.repeat(runs.offsets[:-1], np.diff(runs.offsets)) + 1
    sched = parse_schedules("linear-front")[0]
    lengths = np.arange(world.min_length, world.max_length + 1)
    big_t = np.minimum(lengths, world.budget).astype(np.float64)
    pi_by_t = {}
    for step in range(1, world.budget + 1):
        alive = lengths >= step
        w = sched.step_weights(np.full(alive.sum(), float(step)), big_t[alive])
        pi_by_t[step] = np.sum(w * (lengths[alive] <= world.budget)) / np.sum(w)
    pi = np.array([pi_by_t[k] for k in t])
    q = runs.q
    m = q * pi
    streams = {"q_t": q, "m_t": m, "0.9 m_t": 0.9 * m, "1.1 m_t": np.minimum(1.1 * m, 1.0), "0.9 q_t": 0.9 * q}
    a = _arrays_from_runs(runs, streams, q_z=np.where(runs.horizon == world.budget, runs.q_z(), np.nan))
    sm = score_matrix(a, list(streams), parse_rules("log"), parse_schedules("linear-front"), modes=(SIMPLE, EXACT))
    mean = {(k.predictor, k.censoring): float(np.nanmean(c)) for k, c in zip(sm.keys, sm.columns, strict=True)}
    simple = {p: mean[(p, SIMPLE)] for p in streams}
    exact = {p: mean[(p, EXACT)] for p in streams}
    assert max(simple, key=simple.__getitem__) == "m_t"
    assert max(exact, key=exact.__getitem__) == "q_t"
    assert simple["m_t"] - simple["q_t"] > 0.01 and exact["q_t"] - exact["m_t"] > 0.01


def test_cen_exact_with_mc_estimates_ranks_the_truthful_stream_first(runs):
    arrays = to_arrays(to_records(runs, seed=11, record_q_z=False))
    est = mc_q_z(simulate_continuations(runs, 20, seed=8), min_valid=5)
    a = attach_q_z(arrays, est.as_mapping()).arrays
    preds = ["truthful", "overconfident", "underconfident", "noisy"]
    sm = score_matrix(a, preds, parse_rules("log"), parse_schedules("linear-front"), modes=(EXACT,))
    means = {k.predictor: float(np.nanmean(c)) for k, c in zip(sm.keys, sm.columns, strict=True)}
    assert max(means, key=means.__getitem__) == "truthful"


# ---------------------------------------------------------------- plug-in and hybrid q_Z


def test_plug_in_model_recovers_q_z_from_an_informative_prefix_feature(arrays, runs):
    res = fit_q_z_model(arrays, ["logit:truthful", "step_share"])
    censored = _censored_index(runs)
    got = np.array([res.q_hat[f"sim-{i:05d}"] for i in censored])
    err = np.mean(np.abs(got - runs.q_z()[censored]))
    blind = fit_q_z_model(arrays, ["step"])
    err_blind = np.mean(np.abs(np.array([blind.q_hat[f"sim-{i:05d}"] for i in censored]) - runs.q_z()[censored]))
    assert err < 0.05 < err_blind
    assert not res.separated_from("truthful") and not res.separated_from("truthful+platt")
    assert res.separated_from("overconfident") and blind.separated_from("truthful")
    # Two fold models, each fitted without the other fold: they differ, and q_hat is their average.
    assert len(res.fold_models) == 2 and res.fold_models[0].a != res.fold_models[1].a
    i = censored[0]
    x = prefix_features(arrays, np.array([i]), arrays.lengths[[i]], res.features)
    assert res.q_hat[f"sim-{i:05d}"] == pytest.approx(np.mean([mdl.predict(x)[0] for mdl in res.fold_models]))


def test_prefix_features_match_a_direct_reading():
    a = to_arrays(to_records(simulate_runs(20, seed=1), forecasters=("truthful",), seed=1))
    rows, cuts = np.array([3, 7]), np.array([2, 1])
    x = prefix_features(a, rows, cuts, ["step", "step_share", "forecast:truthful", "forecast_mean:truthful"])
    f = a.predictors["truthful"].values
    o = a.offsets
    assert x[0].tolist() == pytest.approx([2, 2 / a.horizon[3], f[o[3] + 1], (f[o[3]] + f[o[3] + 1]) / 2])
    assert x[1].tolist() == pytest.approx([1, 1 / a.horizon[7], f[o[7]], f[o[7]]])
    with pytest.raises(ValueError, match="unknown q_Z feature"):
        prefix_features(a, rows, cuts, ["forecast:nope"])


def test_a_q_z_feature_on_a_predictor_with_no_forecast_says_so():
    """A handler file whose token_prob is null at every step (a model without logprobs): the docs'
    `--q-z-model step_share,logit:token_prob` failed with "cross-fitting needs training prefixes from
    at least two trajectories per fold", which does not name the cause."""
    a = to_arrays(to_records(simulate_runs(20, seed=1), forecasters=("truthful",), seed=1))
    empty = PredictorColumn("token_prob", np.full(a.predictors["truthful"].values.size, np.nan), a.lengths < 0)
    a = dataclasses.replace(a, predictors={**a.predictors, "token_prob": empty})
    rows, cuts = np.array([3, 7]), np.array([2, 1])
    with pytest.raises(ValueError, match=r"predictor 'token_prob' has no forecast in any of the \d+ steps"):
        prefix_features(a, rows, cuts, ["step_share", "logit:token_prob"])


def test_hybrid_audit_trains_on_audited_prefixes_and_scores_them_out_of_fold(arrays, runs):
    censored = _censored_index(runs)
    audited = censored[::3]
    mc = mc_q_z(simulate_continuations(runs, 30, seed=4, only=audited), min_valid=5)
    res = fit_q_z_model(arrays, ["logit:truthful"], mc)
    assert set(res.q_hat) == {f"sim-{i:05d}" for i in censored}
    assert res.audit["audited"] == len(audited)
    assert res.audit["mean_abs_difference"] < 0.25 and res.audit["correlation"] > 0.5
    # An audited prefix is predicted by the fold model that did not train on it.
    ids = sorted(f"sim-{i:05d}" for i in audited)
    first, second = ids[0], ids[1]  # folds alternate in id order: fold 0, fold 1
    for tid, fold in ((first, 0), (second, 1)):
        i = arrays.ids.index(tid)
        x = prefix_features(arrays, np.array([i]), arrays.lengths[[i]], res.features)
        assert res.q_hat[tid] == pytest.approx(res.fold_models[fold].predict(x)[0], abs=1e-15)
    # Out-of-audit prefixes use the fold average; the hybrid tracks the truth there too.
    rest = [i for i in censored if i not in set(audited)]
    got = np.array([res.q_hat[f"sim-{i:05d}"] for i in rest])
    assert np.mean(np.abs(got - runs.theta[rest])) < 0.3


# ---------------------------------------------------------------- artificial censoring


def test_decomposition_matches_the_direct_difference_for_every_rule_schedule_rate(arrays):
    rows = artificial_censoring(arrays, "truthful", RULES, SCHEDULES, rates=(0.25, 0.5, 0.75), seed=2)
    assert len(rows) == len(RULES) * len(SCHEDULES) * 3
    assert max(r["max_abs_error"] for r in rows) < 1e-12
    assert min(r["min_tail_omission"] for r in rows) >= 0.0
    for r in rows:
        assert r["delta_mean"] == pytest.approx(r["prefix_swap_mean"] + r["tail_omission_mean"], abs=1e-12)
        frac1 = np.mean(arrays.outcome[~np.isnan(arrays.outcome)] == 1)
        assert r["delta_mean"] == pytest.approx(frac1 * r["delta_y1"] + (1 - frac1) * r["delta_y0"], abs=1e-12)
    # The mean shift grows with the censoring rate (roughly linearly, as in the paper).
    log_lf = [r["delta_mean"] for r in rows if (r["rule"], r["weights"]) == ("log", "linear-front")]
    assert abs(log_lf[2]) > abs(log_lf[1]) > abs(log_lf[0])


def test_saturated_forecasts_lose_under_artificial_censoring_on_successes(arrays):
    rows = artificial_censoring(arrays, "overconfident", ["log"], ["linear-front"], rates=(0.75,))
    r = rows[0]
    assert r["delta_y1"] < 0 < r["delta_y0"]  # the paper's StrategyQA regime: prefix-swap on confident successes


def test_censoring_plan_is_length_stratified_and_seeded():
    ids = [f"t{i:03d}" for i in range(200)]
    lengths = np.repeat([1, 3, 6, 9], 50)
    cuts = censoring_plan(ids, lengths, 0.5, seed=1)
    for length in (3, 6, 9):
        sel = lengths == length
        assert np.sum(cuts[sel] > 0) == 25
        assert np.all((cuts[sel][cuts[sel] > 0] >= 1) & (cuts[sel][cuts[sel] > 0] < length))
    assert np.all(cuts[lengths == 1] == 0)
    assert np.array_equal(cuts, censoring_plan(ids, lengths, 0.5, seed=1))
    assert not np.array_equal(cuts, censoring_plan(ids, lengths, 0.5, seed=2))


# ---------------------------------------------------------------- informative censoring


def test_treating_parse_errors_as_censored_reports_the_shift(arrays):
    rows = informative_censoring_shift(arrays, ["truthful", "overconfident"], n_replicates=200)
    parse = np.array([STOP_REASONS[c] is StopReason.PARSE_ERROR for c in arrays.stop_code])
    sm = score_matrix(arrays, ["overconfident"], parse_rules("log"), parse_schedules("linear-front"))
    cols = {k.censoring: c for k, c in zip(sm.keys, sm.columns, strict=True)}
    # By hand: parse-error prefixes scored on their failure branch join the cen-simple sample.
    from tps_tracer.evaluation.pairs import pair_table_from_arrays

    table = pair_table_from_arrays(arrays, ["overconfident"], parse_rules("log"), parse_schedules("linear-front"))
    s0 = table.predictors["overconfident"].pairs[:, 0, 0, 1]
    union = np.concatenate([cols[SIMPLE][~np.isnan(cols[SIMPLE])], s0[parse]])
    r = next(r for r in rows if r["predictor"] == "overconfident")
    assert r["moved_into_sample"] == int(parse.sum()) > 0
    assert r["default"] == pytest.approx(np.nanmean(cols[SIMPLE]), abs=1e-12)
    assert r["sensitivity"] == pytest.approx(union.mean(), abs=1e-12)
    assert r["shift"] == pytest.approx(union.mean() - np.nanmean(cols[SIMPLE]), abs=1e-12)
    assert r["se"] > 0 and COMPLETE_ONLY in cols


# ---------------------------------------------------------------- the `censoring` command


def _write_branches(path, branches):
    with open(path, "w") as fh:
        for b in branches:
            obj = {"source_trajectory_id": b.source_trajectory_id, "branch": b.branch}
            fh.write(json.dumps({**obj, "stop_reason": b.stop_reason.value, "outcome": b.outcome}) + "\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("censoring")
    runs = simulate_runs(800, seed=3)
    write_trajectories(to_records(runs, seed=3, record_q_z=False), d / "runs.jsonl")
    branches = simulate_continuations(runs, 10, seed=1, parse_error_rate=0.05, unresolved_rate=0.05)
    _write_branches(d / "branches.jsonl", branches)
    return d, runs, branches


def test_censoring_cli_mc_source_writes_records_that_report_scores_exactly(files, capsys):
    d, _runs, branches = files
    out = d / "with_q.jsonl"
    args = ["censoring", str(d / "runs.jsonl"), "--continuations", str(d / "branches.jsonl")]
    args += ["--write-records", str(out), "--bootstrap", "50", "--rules", "log,brier", "--weights", "all", "--json"]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    est = mc_q_z(branches)
    assert rep["q_z"]["retained"] == len(est.ids) and rep["q_z"]["attached"] == len(est.ids)
    assert max(r["max_abs_error"] for r in rep["projection_identity"]) < 1e-13
    assert len(rep["projection_identity"]) == 4 * 2 * 4  # predictors x rules x schedules
    assert max(r["max_abs_error"] for r in rep["artificial"]) < 1e-12
    assert {r["treated_as_censored"][0] for r in rep["informative"]} == {"parse_error"}
    written = {r.trajectory_id: r.q_z for r in read_trajectories(out)}
    for tid, q in est.as_mapping().items():
        assert written[tid] == pytest.approx(q, abs=1e-9)
    # The written file feeds `report`: its cen-exact rows now exist for every censored run.
    assert main(["report", str(out), "--rules", "log", "--bootstrap", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["audit"]["censored_with_q_z"] == len(est.ids)


def test_censoring_cli_plug_in_flags_unseparated_predictors(files, capsys):
    d, _, _ = files
    args = ["censoring", str(d / "runs.jsonl"), "--q-z-model", "logit:truthful,step", "--artificial", "none"]
    assert main([*args, "--bootstrap", "20", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    flags = {r["predictor"]: r["separated_from_q_z_model"] for r in rep["exact_vs_simple"]}
    assert flags == {"truthful": False, "overconfident": True, "underconfident": True, "noisy": True}
    assert rep["q_z"]["source"] == "plug-in" and "projection_identity" not in rep
    assert main([*args, "--bootstrap", "20"]) == 0
    assert "(*) this predictor's stream is a q_Z model feature" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--hybrid"], "--hybrid needs both"),
        (["--continuations", "BAD"], "line 1"),
        (["--q-z-model", "forecast:nope"], "unknown q_Z feature"),
        (["--predictors", "nope"], "nope"),
    ],
)
def test_censoring_cli_bad_input_exits_2(files, capsys, extra, message):
    d, _, _ = files
    (d / "bad.jsonl").write_text('{"source_trajectory_id": "x", "stop_reason": "clean"}\n')
    extra = [str(d / "bad.jsonl") if e == "BAD" else e for e in extra]
    assert main(["censoring", str(d / "runs.jsonl"), *extra, "--artificial", "none"]) == 2
    assert message in capsys.readouterr().err
