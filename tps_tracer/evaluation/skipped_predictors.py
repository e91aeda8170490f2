"""Which predictors a command scores: names asked for must exist, predictors without usable data
are skipped with a reason, and the evaluation's own names (`base_rate`, `<p>+platt`) are reserved."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.records.arrays import ROLES, STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy, Role
from tps_tracer.scoring import BoolArray

BASE_RATE = "base_rate"
PLATT_SUFFIX = "+platt"


class ReservedNameError(InputError):
    pass


def check_no_base_rate(names: Iterable[str]) -> None:
    if BASE_RATE in names:
        raise ReservedNameError(
            f"predictor {BASE_RATE!r}: the name is reserved for the constant base-rate reference "
            "that every report and gate adds; rename the predictor in the file"
        )


def check_no_recalibrated_collision(names: Iterable[str], recalibrating: Iterable[str]) -> None:
    existing = set(names)
    for name in recalibrating:
        if name + PLATT_SUFFIX in existing:
            raise ReservedNameError(
                f"predictor {name + PLATT_SUFFIX!r}: the name is reserved for the recalibrated stream of "
                f"{name!r} ('{PLATT_SUFFIX}' suffix); rename the predictor in the file, or recalibrate "
                f"without {name!r} (--predictors)"
            )


# Cross-fitted Platt splits each outcome class into two halves, and each half's fit needs
# both classes (a one-class fit has no finite intercept), so 2 of each class are needed.
MIN_PER_CLASS_FOR_PLATT = 2


@dataclass(frozen=True)
class Skipped:
    predictor: str
    reason: str


class HasCoverage(Protocol):  # PredictorColumn, or PredictorPairs of a pair table (no import: pairs imports this)
    @property
    def skipped(self) -> dict[str, int]: ...

    @property
    def stated(self) -> BoolArray: ...  # rows with data for the command

    @property
    def no_data(self) -> str: ...  # what "no row has data" means for it


def skip_detail(skipped: dict[str, int]) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in skipped.items() if v)
    return f" (trajectories skipped: {counts})" if counts else ""


def role_masks(
    stop_code: NDArray[np.int8], outcome: NDArray[np.float64], policy: CensoringPolicy
) -> tuple[BoolArray, BoolArray]:
    """(complete, censored) per trajectory under `policy`; pending clean stops are in neither."""
    table = np.array([ROLES.index(policy.role(r)) for r in STOP_REASONS], dtype=np.int8)
    roles = table[np.asarray(stop_code)]
    return (roles == ROLES.index(Role.COMPLETE)) & ~np.isnan(outcome), roles == ROLES.index(Role.CENSORED)


def no_data_reason(col: HasCoverage, sample: BoolArray, sample_name: str = "working sample") -> str | None:
    """Why `col` has no usable trajectory in `sample` (None if it has one)."""
    if (np.asarray(col.stated) & sample).any():
        return None
    if not np.asarray(col.stated).any():
        return col.no_data + skip_detail(col.skipped)
    return f"no usable trajectory in the {sample_name}" + skip_detail(col.skipped)


def platt_fit_reason(arrays: TrajectoryArrays, predictor: str) -> str | None:
    """Why cross-fitted Platt cannot be fitted for `predictor` (None if it can)."""
    col = arrays.predictors[predictor]
    train = role_masks(arrays.stop_code, arrays.outcome, CensoringPolicy())[0] & col.usable
    reason = no_data_reason(col, train, "complete trajectories")
    if reason:
        return reason
    n1, n0 = (int(np.sum(arrays.outcome[train] == y)) for y in (1, 0))
    if min(n0, n1) < MIN_PER_CLASS_FOR_PLATT:
        return (
            f"cross-fitted Platt needs at least {MIN_PER_CLASS_FOR_PLATT} complete trajectories of each outcome "
            f"with a usable stream; has {n1} with Y=1 and {n0} with Y=0"
        )
    return None


def split_usable(names: Sequence[str], reason_of: Callable[[str], str | None]) -> tuple[list[str], list[Skipped]]:
    """(kept names, skipped with reasons), in the given order."""
    reasons = [(name, reason_of(name)) for name in names]
    return [n for n, r in reasons if r is None], [Skipped(n, r) for n, r in reasons if r is not None]


# Report and gate fail on a file without any forecast rather than score the base rate alone.
NO_PREDICTOR = (
    "no predictor in the file: no step has a forecast under 'forecasts' "
    "(is the key misspelled, e.g. 'forecast'? see the JSON Lines format in docs/records.md)"
)


class UnknownPredictorError(InputError):
    pass


def check_known_predictors(wanted: Iterable[str], known: Iterable[str], option: str = "") -> None:
    """The one check of predictors asked for by name; `option` prefixes the message with the flag that asked."""
    names = list(known)
    unknown = [p for p in wanted if p not in names]
    if unknown:
        raise UnknownPredictorError(
            f"{option}unknown predictor(s): {', '.join(unknown)}; found: {', '.join(names) or 'none'}"
        )


def nothing_left(what: str, skipped: Sequence[Skipped]) -> InputError:
    reasons = "; ".join(f"{s.predictor}: {s.reason}" for s in skipped) or NO_PREDICTOR
    return InputError(f"no predictor to {what}: {reasons}")


def as_dicts(skipped: Sequence[Skipped]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in skipped]
