"""Recalibration: cross-fitted Platt (paper, Appendix "Calibration Procedure"; steps in
docs/calibration.md), the saved calibrator artifact, "<p>+platt" streams, paired raw-vs-recalibrated
deltas and fixed-rank sensitivity."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tps_tracer import output
from tps_tracer.constants import COMPLETE_ONLY, DEFAULT_PENALTY, DEFAULT_REPLICATES, DEFAULT_SEED, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import (
    PairedDelta,
    bootstrap_means,
    delta_from_replicates,
    replicate_weights,
    trajectory_keys,
)
from tps_tracer.evaluation.diagnostics import auprc_failure, aurc, auroc_failure
from tps_tracer.evaluation.pairs import PairTable, pair_table_from_arrays, score_columns
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES
from tps_tracer.evaluation.skipped_predictors import (
    PLATT_SUFFIX,
    as_dicts,
    check_known_predictors,
    check_no_recalibrated_collision,
    nothing_left,
    platt_fit_reason,
    role_masks,
    split_usable,
)
from tps_tracer.output import write_text
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring import FloatArray, ScoreRule, WeightSchedule, get_rule, get_schedule

EPS = 1e-6
SD_FLOOR = 1e-6
_NEWTON_STEPS = 100
ARTIFACT_KIND = "tps-tracer.calibrator"
ARTIFACT_VERSION = 1
# The artifact's keys after kind and version, in file order, and the Calibrator fields they hold.
_ARTIFACT_FIELDS = {k: k for k in ("method", "schedule", "penalty", "eps", "fitted_on", "maps", "cross_fit")}
_ARTIFACT_FIELDS["skipped_predictors"] = "skipped"


def sigmoid(u: FloatArray) -> FloatArray:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * u)), dtype=np.float64)  # overflow-free logistic


def fit_logistic(
    x: FloatArray, y: FloatArray, w: FloatArray, penalty: float, intercept0: float = 0.0
) -> tuple[float, FloatArray]:
    """(a, beta) minimising sum_i w_i [log(1 + e^u_i) - y_i u_i] + (lambda / 2) |beta|^2, u = a + x beta,
    by Newton's method (convex); the intercept is not penalised and labels may be soft (q_Z models)."""
    x = np.asarray(x, dtype=np.float64).reshape(len(y), -1)
    design = np.column_stack([np.ones(len(y)), x])
    ridge = np.full(design.shape[1], float(penalty))
    ridge[0] = 0.0
    theta = np.zeros(design.shape[1])
    theta[0] = intercept0
    for _ in range(_NEWTON_STEPS):
        p = sigmoid(design @ theta)
        grad = design.T @ (w * (p - y)) + ridge * theta
        hess = (design * (w * p * (1.0 - p))[:, None]).T @ design + np.diag(ridge)
        hess[0, 0] += 1e-12  # all-one-label data: the intercept runs off slowly; keep H invertible
        step = np.linalg.solve(hess, grad)
        theta = theta - step
        if np.max(np.abs(step)) < 1e-12:
            break
    return float(theta[0]), theta[1:]


def logit(p: FloatArray) -> FloatArray:
    p = np.clip(p, EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class PlattMap:
    """p = clip(sigmoid(a + b (logit(F) - mu) / sigma)); b = 0 when the fit fell back."""

    a: float
    b: float
    mu: float
    sigma: float
    fallback: bool
    n_steps: int
    n_trajectories: int

    def apply(self, forecasts: FloatArray) -> FloatArray:
        x = (logit(np.asarray(forecasts, dtype=np.float64)) - self.mu) / self.sigma
        return np.clip(sigmoid(self.a + self.b * x), EPS, 1.0 - EPS)

    def as_dict(self) -> dict[str, float | bool | int]:
        return dataclasses.asdict(self)


def fit_platt(
    forecasts: FloatArray,
    labels: FloatArray,
    weights: FloatArray,
    penalty: float = DEFAULT_PENALTY,
    n_trajectories: int = 0,
) -> PlattMap:
    """Weighted, slope-penalised logistic fit on per-step records (steps 2 and 3 above)."""
    f, y, w = (np.asarray(v, dtype=np.float64) for v in (forecasts, labels, weights))
    if f.size == 0 or w.sum() <= 0:
        raise InputError("Platt fit needs at least one weighted step")
    x_raw = logit(f)
    mu = float(np.average(x_raw, weights=w))
    sigma = max(float(math.sqrt(np.average((x_raw - mu) ** 2, weights=w))), SD_FLOOR)
    x = (x_raw - mu) / sigma
    a0 = float(logit(np.array([np.average(y, weights=w)]))[0])  # the intercept of the weighted base rate
    a, slope = fit_logistic(x[:, None], y, w, penalty, intercept0=a0)
    b = float(slope[0])
    if b < 0.0:
        return PlattMap(a0, 0.0, mu, sigma, True, int(f.size), n_trajectories)
    return PlattMap(a, b, mu, sigma, False, int(f.size), n_trajectories)


def split_halves(ids: list[str], outcome: FloatArray, complete: NDArray[np.bool_]) -> NDArray[np.int8]:
    """0/1 half of each trajectory: stratified by Y (and 'no outcome'), alternating in id order."""
    half = np.zeros(len(ids), dtype=np.int8)
    strata = [complete & (outcome == 1), complete & (outcome == 0), ~complete]
    for mask in strata:
        members = sorted(np.flatnonzero(mask), key=lambda i: ids[i])
        half[members] = np.arange(len(members)) % 2
    return half


@dataclass
class CrossFitResult:
    predictor: str
    values: FloatArray  # calibrated flat forecasts (NaN where the raw stream is unusable)
    half: NDArray[np.int8]  # per trajectory
    maps: tuple[PlattMap, PlattMap]  # fitted on half 0, on half 1
    raw: FloatArray  # the raw flat stream (for the value-mapping diagnostics)
    step_half: NDArray[np.int8]  # per step

    def diagnostics(self) -> list[dict[str, Any]]:
        """Per-split rows of the paper's "Platt calibration diagnostics" table (the 3 commonest values mapped)."""
        rows: list[dict[str, Any]] = []
        for h, m in enumerate(self.maps):
            applied = (self.step_half != h) & ~np.isnan(self.values)  # the other half is calibrated by this map
            raw = self.raw[applied]
            uniq, counts = np.unique(raw, return_counts=True)
            common = np.sort(uniq[np.argsort(-counts, kind="stable")[:3]])
            mapped = self.values[applied]
            rows.append(
                {
                    "fit_on_half": h,
                    **m.as_dict(),
                    "sd_floor_active": m.sigma <= SD_FLOOR,
                    "applied_to_trajectories": int(np.sum(self.half != h)),
                    "value_map": [[float(v), float(m.apply(np.array([v]))[0])] for v in common],
                    "value_range": [float(mapped.min()), float(mapped.max())] if mapped.size else [None, None],
                }
            )
        return rows


def step_weights(arrays: TrajectoryArrays, schedule: str | WeightSchedule = "linear-front") -> FloatArray:
    """w_t of every step (normalised over each trajectory's horizon T, truncated at its length Z)."""
    t = (np.arange(arrays.offsets[-1]) - np.repeat(arrays.offsets[:-1], arrays.lengths) + 1).astype(np.float64)
    return get_schedule(schedule).step_weights(t, np.repeat(arrays.horizon, arrays.lengths))


def _fit_on(arrays: TrajectoryArrays, name: str, train: NDArray[np.bool_], w: FloatArray, penalty: float) -> PlattMap:
    """The Platt map of predictor `name` fitted on the steps of the `train` trajectories (labels: their Y)."""
    steps = np.repeat(train, arrays.lengths)
    y = np.repeat(np.nan_to_num(arrays.outcome), arrays.lengths)[steps]
    return fit_platt(arrays.predictors[name].values[steps], y, w[steps], penalty, int(train.sum()))


def cross_fit_platt(
    arrays: TrajectoryArrays,
    predictor: str,
    schedule: str | WeightSchedule = "linear-front",
    penalty: float = DEFAULT_PENALTY,
    trajectory_weights: FloatArray | None = None,
) -> CrossFitResult:
    """Calibrate one predictor's stream by the two cross-fitted maps; `trajectory_weights` (a bootstrap
    replicate's Poisson weights) multiply each trajectory's step weights in the fits."""
    col = arrays.predictors[predictor]
    complete = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())[0] & col.usable
    half = split_halves(arrays.ids, arrays.outcome, complete)
    step_half = np.repeat(half, arrays.lengths)
    w = step_weights(arrays, schedule)
    if trajectory_weights is not None:
        w = w * np.repeat(np.asarray(trajectory_weights, dtype=np.float64), arrays.lengths)
    out = np.full_like(col.values, np.nan)
    usable_steps = np.repeat(col.usable, arrays.lengths)
    maps = []
    for h in (0, 1):
        if not (complete & (half == h)).any():
            raise InputError(f"Platt: half {h} has no complete trajectory with a usable {predictor!r} stream")
        maps.append(_fit_on(arrays, predictor, complete & (half == h), w, penalty))
        target = usable_steps & (step_half != h)  # trajectories of the other half
        out[target] = maps[h].apply(col.values[target])
    return CrossFitResult(predictor, out, half, (maps[0], maps[1]), col.values, step_half)


# -- the saved artifact --------------------------------------------------------------------------


class ScheduleMismatch(UserWarning):
    """The calibrator was fitted with step weights of another schedule than the evaluation uses."""


@dataclass
class Calibrator:
    """Platt maps fitted on all complete trajectories under one schedule's step weights, saved as JSON
    (`tps-tracer calibrate`); `cross_fit` holds the honest cross-fitted evaluation of the procedure."""

    schedule: str
    penalty: float
    maps: dict[str, PlattMap]
    method: str = "platt"
    eps: float = EPS
    fitted_on: dict[str, Any] = field(default_factory=dict)
    cross_fit: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)  # [{"predictor", "reason"}]: not fitted

    def apply(self, predictor: str, forecasts: ArrayLike) -> np.ndarray:
        """Calibrated probabilities; an invalid forecast (NaN, outside [0, 1], not a real number)
        raises here, while a hook (live) returns NaN so the pipeline rejects and counts that value."""
        if predictor not in self.maps:
            raise KeyError(f"calibrator has no map for {predictor!r}; it has: {', '.join(self.maps)}")
        f, problem = _probabilities(forecasts)
        if problem is not None:
            raise InputError(f"{predictor!r}: forecasts must be probabilities in [0, 1]; got {problem}")
        return self.maps[predictor].apply(f)

    def hooks(self) -> dict[str, Callable[[float], float]]:
        """{predictor: float -> float} for the handler's `calibration=`; an invalid forecast maps to NaN."""
        return {name: _scalar_map(m) for name, m in self.maps.items()}

    def check_schedule(self, schedule: str | WeightSchedule, strict: bool = False) -> bool:
        """True if fitted with `schedule`; otherwise warn (or raise when strict)."""
        name = get_schedule(schedule).name
        if name == self.schedule:
            return True
        msg = (
            f"calibrator was fitted with {self.schedule!r} step weights but the evaluation uses {name!r}; "
            f"refit with `tps-tracer calibrate --weights {name}` for the paper's procedure"
        )
        if strict:
            raise InputError(msg)
        warnings.warn(msg, ScheduleMismatch, stacklevel=2)
        return False

    def as_dict(self) -> dict[str, Any]:
        out = {"kind": ARTIFACT_KIND, "version": ARTIFACT_VERSION}
        out.update({key: getattr(self, name) for key, name in _ARTIFACT_FIELDS.items()})
        out["maps"] = {name: m.as_dict() for name, m in self.maps.items()}
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Strict JSON, written atomically: a failure leaves the previous file, never a truncated one."""
        write_text(path, output.dumps(self.as_dict()))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibrator:
        if data.get("kind") != ARTIFACT_KIND:
            raise InputError(f"not a tps-tracer calibrator (kind={data.get('kind')!r})")
        if data.get("version") != ARTIFACT_VERSION or data.get("method") != "platt":
            raise InputError(f"unsupported calibrator version/method: {data.get('version')!r}/{data.get('method')!r}")
        try:
            maps = {name: _platt_map(m) for name, m in data["maps"].items()}
            bad = [n for n, m in maps.items() if not (np.isfinite([m.a, m.b, m.mu]).all() and m.sigma > 0 and m.b >= 0)]
            if bad:
                raise InputError(f"invalid map parameters for {', '.join(bad)}")
            return cls(
                schedule=get_schedule(str(data["schedule"])).name,
                penalty=float(data["penalty"]),
                maps=maps,
                eps=float(data.get("eps", EPS)),
                fitted_on=dict(data.get("fitted_on", {})),
                cross_fit=dict(data.get("cross_fit", {})),
                skipped=list(data.get("skipped_predictors", [])),
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"malformed calibrator: missing or invalid field {exc}") from exc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Calibrator:
        """Read an artifact (OSError if the file cannot be opened; InputError if it is not one)."""
        with open(path, encoding="utf-8-sig") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: not valid JSON ({exc})") from exc
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from exc
        if not isinstance(data, dict):
            raise InputError(f"{path}: not a tps-tracer calibrator (a JSON object is expected)")
        try:
            return cls.from_dict(data)
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from exc


def _platt_map(m: dict[str, Any]) -> PlattMap:
    a, b, mu, sigma = (float(m[k]) for k in ("a", "b", "mu", "sigma"))
    return PlattMap(a, b, mu, sigma, bool(m["fallback"]), int(m["n_steps"]), int(m["n_trajectories"]))


def _probabilities(forecasts: ArrayLike) -> tuple[np.ndarray, str | None]:
    """(forecasts as float64, None) when every value is a real number in [0, 1], else (_, what is wrong)."""
    raw = np.asarray(forecasts)
    if raw.dtype.kind not in "iuf":  # bools, strings ("0.5"), None, objects: not forecasts
        return np.empty(0), f"values of type {raw.dtype} (e.g. {raw.flat[0]!r})" if raw.size else None
    f = raw.astype(np.float64)
    bad = ~((f >= 0.0) & (f <= 1.0))  # NaN too
    if bad.any():
        return f, f"{int(bad.sum())} invalid value(s), e.g. {float(f[bad].flat[0])!r}"
    return f, None


def _scalar_map(m: PlattMap) -> Callable[[float], float]:
    def apply(p: float) -> float:
        f, problem = _probabilities(p)
        if problem is not None or f.ndim != 0:
            return float("nan")  # passed on as invalid: rejected and counted downstream
        return float(m.apply(f.reshape(1))[0])

    return apply


def fit_calibrator(
    arrays: TrajectoryArrays,
    predictors: Sequence[str] | None = None,
    schedule: str | WeightSchedule = "linear-front",
    penalty: float = DEFAULT_PENALTY,
    source: str = "",
) -> Calibrator:
    """One Platt map per predictor on every complete trajectory's steps; a predictor that cannot be
    fitted (`platt_fit_reason`) is listed in `Calibrator.skipped`, and InputError only if none can."""
    sched = get_schedule(schedule)
    complete, _ = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())
    w = step_weights(arrays, sched)
    names = list(predictors) if predictors is not None else list(arrays.predictors)
    check_known_predictors(names, arrays.predictors)
    fittable, skipped = split_usable(names, lambda p: platt_fit_reason(arrays, p))
    if not fittable:
        raise nothing_left("calibrate", skipped)
    maps = {}
    for name in fittable:
        maps[name] = m = _fit_on(arrays, name, complete & arrays.predictors[name].usable, w, penalty)
        if not np.isfinite([m.a, m.b, m.mu, m.sigma]).all():  # never write a map that cannot be applied
            raise InputError(f"the Platt fit of {name!r} did not converge to finite parameters")
    fitted_on = {"source": source, "n_trajectories": arrays.n, "n_complete": int(complete.sum())}
    return Calibrator(schedule=sched.name, penalty=penalty, maps=maps, fitted_on=fitted_on, skipped=as_dicts(skipped))


# -- recalibrated streams ------------------------------------------------------------------------


def with_platt_streams(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    schedule: str | WeightSchedule = "linear-front",
    penalty: float = DEFAULT_PENALTY,
) -> tuple[TrajectoryArrays, dict[str, CrossFitResult]]:
    """Arrays with a cross-fitted "<p>+platt" column per predictor, and each predictor's fit."""
    check_no_recalibrated_collision(arrays.predictors, predictors)  # never overwrite a user's column
    fits: dict[str, CrossFitResult] = {}
    for name in predictors:
        fits[name] = cross_fit_platt(arrays, name, schedule, penalty)
        arrays = arrays.with_predictor(name + PLATT_SUFFIX, fits[name].values)
    return arrays, fits


def with_calibrator_streams(
    arrays: TrajectoryArrays, calibrator: Calibrator, predictors: Sequence[str] | None = None
) -> TrajectoryArrays:
    """Arrays with the saved maps applied: one "<p>+platt" column per predictor the calibrator knows."""
    names = [p for p in (predictors or arrays.predictors) if p in calibrator.maps]
    check_no_recalibrated_collision(arrays.predictors, names)  # never overwrite a user's column
    for name in names:
        col = arrays.predictors[name]
        usable_steps = np.repeat(col.usable, arrays.lengths)
        values = np.full_like(col.values, np.nan)
        values[usable_steps] = calibrator.apply(name, col.values[usable_steps])
        arrays = arrays.with_predictor(name + PLATT_SUFFIX, values)
    return arrays


# -- paired comparisons on the same Poisson replicates (Delta / SE: the paper's paired effect size) --


def paired_mean_delta(
    a: FloatArray,
    b: FloatArray,
    ids: list[str],
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    statistic: str = "mean",
) -> PairedDelta:
    """mean(b) - mean(a) over per-trajectory scores (NaN: not in that column's sample)."""
    boot = bootstrap_means(np.column_stack([a, b]), trajectory_keys(ids), n_replicates, seed)
    reps = boot.replicates[:, 1] - boot.replicates[:, 0]
    both = int(np.sum(~np.isnan(a) & ~np.isnan(b)))
    return delta_from_replicates(statistic, float(boot.point[0]), float(boot.point[1]), reps, both)


def paired_auroc_delta(
    a: FloatArray,
    b: FloatArray,
    y: FloatArray,
    ids: list[str],
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> PairedDelta:
    """AUROC(b) - AUROC(a) for trajectory-level confidences with outcomes y (complete runs only)."""
    keep = ~np.isnan(a) & ~np.isnan(b) & ~np.isnan(y)
    a, b, y = a[keep], b[keep], y[keep]
    w = replicate_weights(trajectory_keys(ids)[keep], np.arange(n_replicates), seed)
    reps = np.array([auroc_failure(b, y, wr) - auroc_failure(a, y, wr) for wr in w])
    return delta_from_replicates("auroc", auroc_failure(a, y), auroc_failure(b, y), reps, int(keep.sum()))


def auroc_deltas(
    table: PairTable,
    pairs: Sequence[tuple[str, str]],
    policy: CensoringPolicy,
    n_replicates: int,
    seed: int,
) -> dict[tuple[str, str], PairedDelta]:
    """AUROC(recalibrated) - AUROC(raw) on the Phi_w summaries of complete trajectories, paired."""
    complete, _ = table.role_masks(policy)
    w = AGGREGATOR_NAMES.index("phi_w")
    out = {}
    for raw, cal in pairs:
        a = np.where(complete, table.predictors[raw].aggregates[:, w], np.nan)
        b = np.where(complete, table.predictors[cal].aggregates[:, w], np.nan)
        out[(raw, cal)] = paired_auroc_delta(a, b, table.outcome, table.ids, max(n_replicates, 2), seed)
    return out


def _log_scores(arrays: TrajectoryArrays, name: str, schedule: str, modes: Sequence[str]) -> dict[str, np.ndarray]:
    table = pair_table_from_arrays(arrays, [name], [get_rule("log")], [get_schedule(schedule)], with_summaries=False)
    sm = score_columns(table, [name], modes=modes)
    return {k.censoring: c for k, c in zip(sm.keys, sm.columns, strict=True)}


def refit_tps_deltas(
    arrays: TrajectoryArrays,
    predictor: str,
    schedule: str = "linear-front",
    penalty: float = DEFAULT_PENALTY,
    n_replicates: int = 200,
    seed: int = 0,
    modes: Sequence[str] = (COMPLETE_ONLY, SIMPLE),
) -> dict[str, PairedDelta]:
    """TPS_log(Platt) - TPS_log(raw) per censoring mode, both maps refitted in every replicate (reused
    maps give a CI conditional on the fit, which undercovers at small N); a replicate that leaves a half
    without a weighted complete trajectory is NaN (left out of the CI)."""

    def platt_scores(w: FloatArray | None = None) -> dict[str, np.ndarray]:
        fit = cross_fit_platt(arrays, predictor, schedule, penalty, trajectory_weights=w)
        return _log_scores(
            arrays.with_predictor(predictor + "+refit", fit.values), predictor + "+refit", schedule, modes
        )

    raw, recal = _log_scores(arrays, predictor, schedule, modes), platt_scores()
    keys = trajectory_keys(arrays.ids)
    reps = np.full((n_replicates, len(modes)), np.nan)
    for b in range(n_replicates):
        w = replicate_weights(keys, [b], seed)[0]  # replicate b of the conditional bootstrap's resamples
        try:
            scored = platt_scores(w)
        except InputError:  # a half without a weighted complete trajectory: no fit on this resample
            continue
        for k, mode in enumerate(modes):
            d = scored[mode] - raw[mode]
            ok = ~np.isnan(d)
            if w[ok].sum() > 0:
                reps[b, k] = float(np.sum(w[ok] * d[ok]) / np.sum(w[ok]))
    out = {}
    for k, mode in enumerate(modes):
        both = ~np.isnan(raw[mode]) & ~np.isnan(recal[mode])
        a, c = float(np.mean(raw[mode][both])), float(np.mean(recal[mode][both]))
        name = f"tps_log {mode} (maps refitted per replicate)"
        out[mode] = delta_from_replicates(name, a, c, reps[:, k], int(both.sum()))
    return out


# -- fixed-rank sensitivity (paper, Appendix "Fixed-Rank Sensitivity Analysis") ------------------

FIXED_TRANSFORMS: dict[str, Callable[[FloatArray], FloatArray]] = {
    "identity": lambda x: x,
    "affine 0.4+0.2x": lambda x: 0.4 + 0.2 * x,
    "sqrt": np.sqrt,
    "square": np.square,
}
PLATT = "platt (cross-fitted)"


def fixed_rank_sensitivity(
    arrays: TrajectoryArrays,
    predictor: str,
    rule: str | ScoreRule = "log",
    schedule: str | WeightSchedule = "linear-front",
) -> list[dict[str, Any]]:
    """One row per transform of the scored stream (cross-fitted Platt last): its complete-only TPS, and
    the rank metrics of the fixed raw Phi_w scalar (equal in every row by construction, while TPS moves)."""
    rule_, sched = get_rule(rule), get_schedule(schedule)
    raw = pair_table_from_arrays(arrays, [predictor], [rule_], [sched])
    complete, _ = raw.role_masks(CensoringPolicy())
    sel = complete & raw.predictors[predictor].usable
    if not sel.any():
        raise InputError(f"no complete trajectory with a usable {predictor!r} stream")
    r = raw.predictors[predictor].aggregates[sel, AGGREGATOR_NAMES.index("phi_w")]
    y = raw.outcome[sel]
    ranks = {"auroc": auroc_failure(r, y), "auprc": auprc_failure(r, y), "aurc": aurc(r, y)}
    col = arrays.predictors[predictor]
    streams = {name: fn(col.values) for name, fn in FIXED_TRANSFORMS.items()}
    streams[PLATT] = cross_fit_platt(arrays, predictor, sched).values
    rows = []
    for name, values in streams.items():
        table = pair_table_from_arrays(arrays.with_predictor("transformed", values), ["transformed"], [rule_], [sched])
        tps = score_columns(table, ["transformed"], modes=(COMPLETE_ONLY,)).columns[0][sel]
        rows.append({"transform": name, "tps": float(np.mean(tps)), "n": int(sel.sum()), **ranks})
    return rows
