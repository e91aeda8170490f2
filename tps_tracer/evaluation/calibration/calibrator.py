"""The calibrator artifact: Platt maps fitted on all complete trajectories, saved as JSON.

Users fit it once (`tps-tracer calibrate runs.jsonl -o calibrator.json`), keep it with the
agent, and apply it to new forecasts, e.g. live through the LangChain handler:

    cal = Calibrator.load("calibrator.json")
    handler = TPSCallbackHandler(acc, calibration=cal.hooks())   # emits "verbal+cal"

The maps are fitted with the step weights of one TPS schedule (the paper's procedure). A
calibrator fitted under one schedule and used to evaluate under another is not the map the
paper's procedure would produce: `check_schedule` warns, or raises when asked to be strict.
The artifact also records the cross-fitted evaluation of the same procedure on the fitting
data (the honest estimate of what the map buys; the full-data map itself is not evaluated
on the data it was fitted on).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tps_tracer import output
from tps_tracer.errors import InputError
from tps_tracer.evaluation.calibration.cross_fit import DEFAULT_PENALTY, EPS, PlattMap, fit_platt, step_weights
from tps_tracer.evaluation.skipped_predictors import (
    as_dicts,
    check_known_predictors,
    nothing_left,
    platt_fit_reason,
    split_usable,
)
from tps_tracer.output import write_text
from tps_tracer.records.arrays import STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring.rules import WeightSchedule, get_schedule

ARTIFACT_KIND = "tps-tracer.calibrator"
ARTIFACT_VERSION = 1


class ScheduleMismatch(UserWarning):
    """The calibrator was fitted with step weights of another schedule than the evaluation uses."""


@dataclass
class Calibrator:
    schedule: str
    penalty: float
    maps: dict[str, PlattMap]
    method: str = "platt"
    eps: float = EPS
    fitted_on: dict[str, Any] = field(default_factory=dict)
    cross_fit: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)  # [{"predictor", "reason"}]: not fitted

    def apply(self, predictor: str, forecasts: ArrayLike) -> np.ndarray:
        """Calibrated probabilities for raw forecasts of `predictor` (clipped to [eps, 1 - eps]).

        One rule for `apply` and `hooks`: an invalid forecast (NaN, outside [0, 1], a bool, a
        string or anything else that is not a real number) never becomes a calibrated
        probability. `apply` (batch) raises ValueError naming the predictor; a hook (live)
        returns NaN, so the live pipeline rejects and counts that one value as it does the raw
        one, and the step's other forecasts are kept.
        """
        if predictor not in self.maps:
            raise KeyError(f"calibrator has no map for {predictor!r}; it has: {', '.join(self.maps)}")
        f, problem = _probabilities(forecasts)
        if problem is not None:
            raise InputError(f"{predictor!r}: forecasts must be probabilities in [0, 1]; got {problem}")
        return self.maps[predictor].apply(f)

    def hooks(self) -> dict[str, Callable[[float], float]]:
        """{predictor: float -> float} for live use (the handler's `calibration=`); an invalid
        forecast maps to NaN (see `apply`)."""
        return {name: _scalar_map(m) for name, m in self.maps.items()}

    def check_schedule(self, schedule: str | WeightSchedule, strict: bool = False) -> bool:
        """True if fitted with `schedule`; otherwise warn (or raise ValueError when strict)."""
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
        return {
            "kind": ARTIFACT_KIND,
            "version": ARTIFACT_VERSION,
            "method": self.method,
            "schedule": self.schedule,
            "penalty": self.penalty,
            "eps": self.eps,
            "fitted_on": self.fitted_on,
            "maps": {name: m.as_dict() for name, m in self.maps.items()},
            "cross_fit": self.cross_fit,
            "skipped_predictors": self.skipped,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the artifact as strict JSON (undefined statistics as null), atomically: a failure
        leaves the previous file, or none, never a truncated one."""
        text = output.dumps(self.as_dict())  # serialise fully before touching the file
        write_text(path, text)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibrator:
        if data.get("kind") != ARTIFACT_KIND:
            raise InputError(f"not a tps-tracer calibrator (kind={data.get('kind')!r})")
        if data.get("version") != ARTIFACT_VERSION or data.get("method") != "platt":
            raise InputError(f"unsupported calibrator version/method: {data.get('version')!r}/{data.get('method')!r}")
        try:
            maps = {
                name: PlattMap(
                    a=float(m["a"]),
                    b=float(m["b"]),
                    mu=float(m["mu"]),
                    sigma=float(m["sigma"]),
                    fallback=bool(m["fallback"]),
                    n_steps=int(m["n_steps"]),
                    n_trajectories=int(m["n_trajectories"]),
                )
                for name, m in data["maps"].items()
            }
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
        """Read an artifact (OSError if the file cannot be opened; ValueError if it is not one)."""
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
            return float("nan")  # passed on as invalid: rejected and counted downstream (see Calibrator.apply)
        return float(m.apply(f.reshape(1))[0])

    return apply


def fit_calibrator(
    arrays: TrajectoryArrays,
    predictors: Sequence[str] | None = None,
    schedule: str | WeightSchedule = "linear-front",
    penalty: float = DEFAULT_PENALTY,
    source: str = "",
) -> Calibrator:
    """Fit one Platt map per predictor on every complete trajectory's steps (weights w_t of `schedule`).

    A predictor whose data cannot be fitted (no usable complete trajectory, or fewer than two
    of either outcome: see `platt_fit_reason`) is skipped and listed in `Calibrator.skipped`;
    ValueError only when no predictor can be fitted.
    """
    sched = get_schedule(schedule)
    clean = np.asarray(arrays.stop_code) == STOP_REASONS.index(StopReason.CLEAN)
    complete = clean & ~np.isnan(arrays.outcome)
    w = step_weights(arrays, sched)
    step_y = np.repeat(np.nan_to_num(arrays.outcome), arrays.lengths)
    names = list(predictors) if predictors is not None else list(arrays.predictors)
    check_known_predictors(names, arrays.predictors)
    fittable, skipped = split_usable(names, lambda p: platt_fit_reason(arrays, p))
    if not fittable:
        raise nothing_left("calibrate", skipped)
    maps = {}
    for name in fittable:
        col = arrays.predictors[name]
        train_traj = complete & col.usable
        train = np.repeat(train_traj, arrays.lengths)
        maps[name] = fit_platt(col.values[train], step_y[train], w[train], penalty, int(train_traj.sum()))
        m = maps[name]
        if not np.isfinite([m.a, m.b, m.mu, m.sigma]).all():  # never write a map that cannot be applied
            raise InputError(f"the Platt fit of {name!r} did not converge to finite parameters")
    fitted_on = {"source": source, "n_trajectories": arrays.n, "n_complete": int(complete.sum())}
    return Calibrator(schedule=sched.name, penalty=penalty, maps=maps, fitted_on=fitted_on, skipped=as_dicts(skipped))
