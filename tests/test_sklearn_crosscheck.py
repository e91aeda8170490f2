"""Complete-data TPS and rank diagnostics against scikit-learn (a test-only oracle)."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, log_loss, roc_auc_score

from tps_tracer import ReportOptions, evaluate
from tps_tracer.evaluation.diagnostics import auprc_failure, auroc_failure
from tps_tracer.scoring import StepLayout
from tps_tracer.synthetic import World, simulate_runs, to_records


@pytest.fixture(scope="module")
def complete_records():
    runs = simulate_runs(1500, seed=2, world=World(budget=14, parse_error_rate=0.0))
    return to_records(runs, forecasters=("noisy", "overconfident"), seed=2)


@pytest.mark.parametrize("schedule", ["linear-front", "uniform", "exponential-front", "linear-back"])
def test_complete_tps_equals_negative_weighted_sklearn_losses(complete_records, schedule):
    rep = evaluate(complete_records, ReportOptions(rules=["log", "brier"], schedules=[schedule], bootstrap=0))
    for predictor in ("noisy", "overconfident"):
        p, y, w = [], [], []
        for rec in complete_records:
            T = rec.effective_horizon
            layout = StepLayout.from_lengths([rec.n_steps], [T])
            p += [s.forecasts[predictor] for s in rec.steps]
            y += [rec.outcome] * rec.n_steps
            w += list(layout.weights(schedule))
        p, y, w = np.array(p), np.array(y), np.array(w)
        got = {
            r["rule"]: r["mean"]
            for r in rep["scores"]
            if r["predictor"] == predictor and r["censoring"] == "complete-only"
        }
        # Weights sum to 1 per trajectory, so sum(w) = n and the weighted mean loss is -mean TPS.
        assert got["log"] == pytest.approx(-log_loss(y, np.clip(p, 1e-6, 1 - 1e-6), sample_weight=w), rel=1e-10)
        assert got["brier"] == pytest.approx(-brier_score_loss(y, p, sample_weight=w), rel=1e-10)


def test_rank_diagnostics_match_sklearn_with_ties():
    rng = np.random.default_rng(0)
    c = np.round(rng.random(500), 1)  # heavy ties, like saturated verbal confidence
    y = (rng.random(500) < c).astype(float)
    assert auroc_failure(c, y) == pytest.approx(roc_auc_score(1 - y, -c), abs=1e-12)
    assert auprc_failure(c, y) == pytest.approx(average_precision_score(1 - y, -c), abs=1e-12)
