"""Plug-in and hybrid estimators of q_Z (paper, Appendix "q_Z Estimation", strategies 2 and 3): an
L2-penalised logistic g(H_Z, Z) ~ P(Y = 1 | H_Z) on prefix features (docs/censoring.md), cross-fitted
over two trajectory folds so that no prefix is predicted by a model that saw its own trajectory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tps_tracer.constants import DEFAULT_PENALTY
from tps_tracer.errors import InputError
from tps_tracer.evaluation.calibration import EPS, SD_FLOOR, fit_logistic, logit, sigmoid, split_halves
from tps_tracer.evaluation.censoring.continuations import McEstimates
from tps_tracer.evaluation.skipped_predictors import role_masks
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring import FloatArray, IntArray


def _feature_column(arrays: TrajectoryArrays, spec: str, rows: IntArray, cuts: IntArray) -> FloatArray:
    if spec == "step":
        return cuts.astype(np.float64)
    if spec == "step_share":
        return cuts / arrays.horizon[rows]
    kind, _, name = spec.partition(":")
    if name not in arrays.predictors or kind not in ("forecast", "logit", "forecast_mean"):
        known = ", ".join(arrays.predictors)
        raise InputError(
            f"unknown q_Z feature {spec!r} (step, step_share, forecast:P, logit:P, forecast_mean:P; P in {known})"
        )
    values = arrays.predictors[name].values
    if values.size and np.isnan(values).all():  # else the fit fails later with a message about folds
        raise InputError(
            f"q_Z feature {spec!r}: predictor {name!r} has no forecast in any of the {values.size} steps "
            "(every value is missing); choose a predictor the file states"
        )
    at = arrays.offsets[rows] + cuts - 1
    if kind == "forecast":
        return values[at]
    if kind == "logit":
        return logit(values[at])
    start = arrays.offsets[rows]
    csum = np.concatenate(([0.0], np.cumsum(np.nan_to_num(values, nan=0.0))))
    gaps = np.concatenate(([0], np.cumsum(np.isnan(values))))
    mean = (csum[at + 1] - csum[start]) / cuts
    return np.where(gaps[at + 1] - gaps[start] > 0, np.nan, mean)  # a gap in the prefix: no feature


def prefix_features(arrays: TrajectoryArrays, rows: IntArray, cuts: IntArray, features: Sequence[str]) -> FloatArray:
    """(n, k) features of the prefixes H_cut of trajectories `rows`; NaN where a forecast is missing."""
    if not features:
        raise InputError("a q_Z model needs at least one feature")
    return np.column_stack([_feature_column(arrays, f, rows, cuts) for f in features])


@dataclass(frozen=True)
class _FoldModel:
    mu: FloatArray
    sd: FloatArray
    a: float
    beta: FloatArray

    def predict(self, x: FloatArray) -> FloatArray:
        return np.asarray(sigmoid(self.a + ((x - self.mu) / self.sd) @ self.beta), dtype=np.float64)


@dataclass
class PlugInResult:
    source: str  # "plug-in" or "hybrid"
    features: list[str]
    q_hat: dict[str, float]  # censored trajectory id -> estimate
    n_train_prefixes: int
    n_train_trajectories: int
    censored_without_features: list[str] = field(default_factory=list)
    audit: dict[str, Any] | None = None  # hybrid: out-of-fold plug-in vs MC on the audited prefixes
    fold_models: list[_FoldModel] = field(default_factory=list, repr=False)

    def separated_from(self, predictor: str) -> bool:
        """True if `predictor`'s stream is not one of the model's inputs."""
        base = predictor.split("+", 1)[0]  # a recalibrated stream is still the same signal
        return all(f.partition(":")[2].split("+", 1)[0] != base for f in self.features if ":" in f)

    def summary(self) -> dict[str, Any]:
        q = np.array(list(self.q_hat.values()))
        return {
            "source": self.source,
            "features": self.features,
            "train_prefixes": self.n_train_prefixes,
            "train_trajectories": self.n_train_trajectories,
            "estimated": len(self.q_hat),
            "censored_without_features": len(self.censored_without_features),
            "mean_q_hat": float(q.mean()) if q.size else None,
            "audit": self.audit,
        }


def fit_q_z_model(arrays: TrajectoryArrays, features: Sequence[str], mc: McEstimates | None = None) -> PlugInResult:
    """g(H_Z, Z) applied to every censored prefix. Plug-in (no `mc`): trained on every prefix of the
    complete trajectories, label Y. Hybrid: trained on the MC-audited censored prefixes, soft label
    q_hat_MC; an audited prefix gets the prediction of the fold model that did not see it."""
    censored = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())[1] & (arrays.lengths > 0)
    censored_rows = np.flatnonzero(censored)
    if mc is None:
        complete = np.flatnonzero(~np.isnan(arrays.outcome) & (arrays.lengths > 0))
        if complete.size < 4:
            raise InputError("plug-in q_Z needs complete trajectories to learn from (found fewer than 4)")
        lengths = arrays.lengths[complete]
        rows = np.repeat(complete, lengths)
        cuts = np.arange(rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths) + 1
        y = arrays.outcome[rows]
        fold = split_halves(arrays.ids, arrays.outcome, ~np.isnan(arrays.outcome))[rows]
    else:
        index = {tid: i for i, tid in enumerate(arrays.ids)}
        audited = [(tid, index[tid]) for tid in mc.ids if tid in index and censored[index[tid]]]
        if len(audited) < 4:
            raise InputError("hybrid q_Z needs at least 4 audited censored prefixes in the file")
        rows = np.array([i for _, i in audited], dtype=np.int64)
        cuts = arrays.lengths[rows]
        by_id = mc.as_mapping()
        y = np.array([by_id[tid] for tid, _ in audited])
        no_y = np.zeros(len(audited))  # one stratum: alternate in id order
        fold = split_halves([tid for tid, _ in audited], no_y, no_y.astype(bool))
    x = prefix_features(arrays, rows, cuts, features)
    ok = ~np.isnan(x).any(axis=1)
    x, y, fold = x[ok], y[ok], fold[ok]
    models, oof = [], np.full(len(y), np.nan)
    for k in (0, 1):  # each fold predicted by the model fitted on the other
        if not (fold != k).any() or not (fold == k).any():
            raise InputError("q_Z model: cross-fitting needs training prefixes from at least two trajectories per fold")
        xt, yt = x[fold != k], y[fold != k]
        mu, sd = xt.mean(axis=0), np.maximum(xt.std(axis=0), SD_FLOOR)
        ybar = float(np.clip(yt.mean(), EPS, 1 - EPS))
        a, beta = fit_logistic((xt - mu) / sd, yt, np.ones(len(yt)), DEFAULT_PENALTY, float(np.log(ybar / (1 - ybar))))
        models.append(_FoldModel(mu, sd, a, beta))
        oof[fold == k] = models[k].predict(x[fold == k])
    xc = prefix_features(arrays, censored_rows, arrays.lengths[censored_rows], features)
    has = ~np.isnan(xc).any(axis=1)
    pred = np.mean([m.predict(xc[has]) for m in models], axis=0) if has.any() else np.zeros(0)
    q_hat = dict(zip([arrays.ids[i] for i in censored_rows[has]], pred.tolist(), strict=True))
    without = [arrays.ids[i] for i in censored_rows[~has]]
    n_ok, audit = int(ok.sum()), None
    if mc is not None:
        for k, v in zip(np.flatnonzero(ok).tolist(), oof.tolist(), strict=True):
            q_hat[audited[k][0]] = v
        audit = {
            "audited": n_ok,
            "mean_q_mc": float(y.mean()),
            "mean_q_plug_in_out_of_fold": float(oof.mean()),
            "mean_abs_difference": float(np.abs(oof - y).mean()),
            "correlation": float(np.corrcoef(oof, y)[0, 1]) if n_ok > 2 and np.std(y) > 0 else None,
        }
    source = "plug-in" if mc is None else "hybrid"  # a hybrid trains on one prefix per trajectory
    return PlugInResult(source, list(features), q_hat, n_ok, int(np.unique(rows[ok]).size), without, audit, models)
