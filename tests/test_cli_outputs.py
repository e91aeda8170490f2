"""What the CLI writes: `censoring --write-records` keeps every q_z it cannot improve on, and
`plot` stays fast and honest on a trajectory of hundreds of thousands of steps."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import numpy as np
import pytest

from tps_tracer.cli.main import main
from tps_tracer.plots import MAX_STEP_BINS, MAX_TRACE_POINTS, step_contributions
from tps_tracer.records import read_trajectories, to_arrays, write_trajectories
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.synthetic import simulate_continuations, simulate_runs, to_records


@pytest.fixture
def censored_file(tmp_path):
    runs = simulate_runs(400, seed=5)
    records = to_records(runs, forecasters=("truthful", "noisy"), seed=5)  # censored runs carry the true q_z
    # A hand-kept q_z on an informative stop (parse_error) must survive as well.
    i_parse = next(i for i, r in enumerate(records) if r.stop_reason is StopReason.PARSE_ERROR)
    records[i_parse] = records[i_parse].model_copy(update={"q_z": 0.125})
    path = tmp_path / "runs.jsonl"
    write_trajectories(records, path)
    censored = [i for i, r in enumerate(runs.stop_reason) if r is StopReason.MAX_STEPS]
    covered = censored[: len(censored) // 3]  # continuations were run for a third of the prefixes only
    branches = simulate_continuations(runs, 8, seed=2, parse_error_rate=0.1, only=covered)
    cont = tmp_path / "branches.jsonl"
    cont.write_text(
        "".join(
            json.dumps(
                {"source_trajectory_id": b.source_trajectory_id, "branch": b.branch, "stop_reason": b.stop_reason.value}
                | ({"outcome": b.outcome} if b.outcome is not None else {})
            )
            + "\n"
            for b in branches
        )
    )
    return path, cont, records


def _mc_by_hand(cont_path, min_valid):
    """q_hat_MC from the branch file, independently: mean outcome of the clean branches."""
    ys = defaultdict(list)
    for line in cont_path.read_text().splitlines():
        b = json.loads(line)
        if b["stop_reason"] == "clean":
            ys[b["source_trajectory_id"]].append(b["outcome"])
    return {k: round(float(np.mean(v)), 9) for k, v in ys.items() if len(v) >= min_valid}


def test_write_records_keeps_q_z_the_continuations_do_not_cover(censored_file, tmp_path, capsys):
    """On main, every censored record without an MC estimate lost its q_z (and so did any q_z on a
    non-clean, non-censored record)."""
    path, cont, original = censored_file
    out = tmp_path / "with_q.jsonl"
    args = ["censoring", str(path), "--continuations", str(cont), "--write-records", str(out), "--bootstrap", "0"]
    assert main([*args, "--json", "--artificial", "none", "--informative", ""]) == 0
    summary = json.loads(capsys.readouterr().out)["q_z"]["records_written"]
    mc = _mc_by_hand(cont, min_valid=5)
    written = {r.trajectory_id: r for r in read_trajectories(out)}
    assert list(written) == [r.trajectory_id for r in original]
    added = replaced = unchanged = kept = 0
    for rec in original:
        got = written[rec.trajectory_id]
        if rec.trajectory_id in mc:
            assert got.q_z == mc[rec.trajectory_id]
            if rec.q_z is None:
                added += 1
            elif rec.q_z == got.q_z:
                unchanged += 1
            else:
                replaced += 1
            assert got.model_copy(update={"q_z": rec.q_z}) == rec  # nothing else changed
        else:
            assert got == rec  # untouched, its q_z included
            kept += rec.q_z is not None
    assert kept > 50 and replaced > 10
    assert summary == {
        "records": len(original),
        "q_z_added": added,
        "q_z_replaced": replaced,
        "q_z_unchanged": unchanged,
        "q_z_kept": kept,
    }
    text_args = [*args, "--artificial", "none", "--informative", ""]
    assert main(text_args) == 0
    assert f"kept as given (not covered by the estimates) {kept}" in capsys.readouterr().out


def test_write_records_from_the_files_own_q_z_changes_nothing(censored_file, tmp_path, capsys):
    path, _, original = censored_file
    out = tmp_path / "same.jsonl"
    assert main(["censoring", str(path), "--write-records", str(out), "--bootstrap", "0", "--artificial", "none"]) == 0
    assert read_trajectories(out) == original


# ---------------------------------------------------------------- plot on a very long trajectory


@pytest.fixture(scope="module")
def long_file(tmp_path_factory):
    rng = np.random.default_rng(3)
    lines = []
    n_long = 100_000
    v = np.round(rng.uniform(0.05, 0.95, n_long), 3).tolist()
    steps = ",".join(f'{{"forecasts": {{"v": {x}}}}}' for x in v)
    lines.append('{"trajectory_id": "long", "stop_reason": "clean", "outcome": 1, "steps": [' + steps + "]}")
    for i in range(40):
        n = int(rng.integers(2, 9))
        stop = "max_steps" if i % 5 == 0 else "clean"
        rec = {
            "trajectory_id": f"s{i}",
            "stop_reason": stop,
            "steps": [{"forecasts": {"v": float(rng.uniform())}} for _ in range(n)],
        }
        if stop == "clean":
            rec["outcome"] = i % 2
        lines.append(json.dumps(rec))
    path = tmp_path_factory.mktemp("long") / "long.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plot_on_a_long_trajectory_bins_and_samples_and_says_so(long_file, tmp_path, capsys):
    out = tmp_path / "plots"
    start = time.process_time()
    assert main(["plot", str(long_file), "-o", str(out), "--traces", "5"]) == 0
    elapsed = time.process_time() - start
    assert elapsed < 120, elapsed  # CPU s: only a guard against the old per-step bars (minutes); see tests/benchmarks
    data = json.loads((out / "plot-data.json").read_text())
    [steps] = data["step_scores"]
    assert len(steps["t"]) <= MAX_STEP_BINS and steps["bin_width"] == -(-100_000 // MAX_STEP_BINS)
    # Binning keeps the sum: the bars still add up to the unbinned per-step decomposition's TPS.
    exact = step_contributions(to_arrays(read_trajectories(long_file)), "v")
    assert steps["tps"] == pytest.approx(exact.total, abs=1e-12)
    assert sum(steps["contribution"]) == pytest.approx(exact.total, abs=1e-9)
    assert sum(steps["reached"]) == int(exact.reached.sum())
    long_trace = next(t for t in data["traces"]["trajectories"] if t["trajectory_id"] == "long")
    assert long_trace["n_steps"] == 100_000 and len(long_trace["t"]) == MAX_TRACE_POINTS
    assert long_trace["t"][0] == 1 and long_trace["t"][-1] == 100_000
    short = next(t for t in data["traces"]["trajectories"] if t["trajectory_id"] != "long")
    assert short["t"] == list(range(1, len(short["forecasts"]) + 1))
    assert "bin_width" in data["drawing"]["note"]
    for name in ("reliability", "traces-v", "step-scores"):
        assert (out / f"{name}.png").stat().st_size > 1000


def test_binned_mean_score_is_the_step_weighted_mean():
    """Checked by hand on a small decomposition: bins of 2 over 5 steps."""
    from tps_tracer.plots import StepContributions

    c = StepContributions(
        "p",
        "log",
        "uniform",
        "simple",
        np.arange(1, 6),
        np.array([0.1, 0.2, 0.3, 0.4, 0.5]),
        np.array([-1.0, -2.0, -3.0, -4.0, -5.0]),
        np.array([4, 2, 2, 1, 0]),
        4,
    )
    b = c.binned(max_bins=3)
    assert b.bin_width == 2 and b.t.tolist() == [1, 3, 5]
    assert b.contribution.tolist() == pytest.approx([0.3, 0.7, 0.5])
    assert b.reached.tolist() == [6, 3, 0]
    assert b.mean_score.tolist() == pytest.approx([(-4 - 4) / 6, (-6 - 4) / 3, 0.0])
