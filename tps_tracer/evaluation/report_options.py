"""The report's options, checked on construction: a bad field fails at once, by name (the CLI maps
`OptionError.field` back to its flag)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tps_tracer.constants import (
    DEFAULT_ECE_BINS,
    DEFAULT_MISSING,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    MAX_REPLICATES,
    MISSING_POLICIES,
)
from tps_tracer.errors import InputError
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring import ScoreRule, WeightSchedule, get_rule, get_schedule

if TYPE_CHECKING:
    from tps_tracer.evaluation.calibration import Calibrator

CALIBRATION_METHODS = ("platt",)


class OptionError(InputError):
    """A field of `owner` (ReportOptions, or GateCriteria for the gate's subclass) is invalid; `field`
    is its name, `detail` the message without it."""

    owner = "ReportOptions"

    def __init__(self, field: str, message: str):
        self.field = field
        self.detail = message
        super().__init__(f"{self.owner}.{field}: {message}")


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _names(field: str, value: Any, allow_empty: bool) -> None:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise OptionError(field, f"must be a list, got {value!r}")
    if not value and not allow_empty:
        raise OptionError(field, "is empty: give at least one")


@dataclass
class ReportOptions:
    predictors: Sequence[str] | None = None  # None: every predictor in the file
    rules: Sequence[str | ScoreRule] = ("log", "brier", "beta(2,4)")
    schedules: Sequence[str | WeightSchedule] = ("linear-front",)
    bootstrap: int = DEFAULT_REPLICATES
    seed: int = DEFAULT_SEED
    policy: CensoringPolicy = field(default_factory=CensoringPolicy)
    base_rate: bool = True
    ece_bins: int = DEFAULT_ECE_BINS
    calibrate: str | None = None  # "platt": add cross-fitted "<p>+platt" rows and paired deltas
    calibrator: Calibrator | None = None  # or apply a saved calibrator artifact instead
    missing: str = DEFAULT_MISSING  # steps without a forecast (evaluation/rows.py)

    def __post_init__(self) -> None:  # OptionError (a ValueError naming the field)
        if self.predictors is not None:
            _names("predictors", self.predictors, allow_empty=True)  # [] : a live monitor before any forecast
            bad = [p for p in self.predictors if not isinstance(p, str) or not p]
            if bad:
                raise OptionError("predictors", f"names must be non-empty strings, got {bad[0]!r}")
        for name, lookup in (("rules", get_rule), ("schedules", get_schedule)):
            _names(name, getattr(self, name), allow_empty=False)
            for value in getattr(self, name):
                try:
                    lookup(value)
                except ValueError as exc:
                    raise OptionError(name, str(exc)) from None
        if not is_int(self.bootstrap) or self.bootstrap < 0:
            raise OptionError(
                "bootstrap", f"must be an integer >= 0 (0: no confidence intervals), got {self.bootstrap!r}"
            )
        if self.bootstrap > MAX_REPLICATES:
            raise OptionError(
                "bootstrap",
                f"must be at most {MAX_REPLICATES} (memory grows as replicates x score columns), "
                f"got {self.bootstrap!r}",
            )
        if not is_int(self.seed):
            raise OptionError("seed", f"must be an integer, got {self.seed!r}")
        if not isinstance(self.policy, CensoringPolicy):
            raise OptionError("policy", f"must be a CensoringPolicy, got {type(self.policy).__name__}")
        if self.missing not in MISSING_POLICIES:
            raise OptionError("missing", f"unknown policy {self.missing!r} (choose from {', '.join(MISSING_POLICIES)})")
        if not isinstance(self.base_rate, (bool, np.bool_)):
            raise OptionError("base_rate", f"must be true or false, got {self.base_rate!r}")
        if not is_int(self.ece_bins) or self.ece_bins < 1:
            raise OptionError("ece_bins", f"must be an integer >= 1, got {self.ece_bins!r}")
        if self.calibrate is not None and self.calibrate not in CALIBRATION_METHODS:
            raise OptionError(
                "calibrate", f"unknown method {self.calibrate!r} (supported: {', '.join(CALIBRATION_METHODS)})"
            )
        if self.calibrator is not None:
            from tps_tracer.evaluation.calibration import Calibrator

            if not isinstance(self.calibrator, Calibrator):
                raise OptionError("calibrator", f"must be a Calibrator, got {type(self.calibrator).__name__}")
            if self.calibrate is not None:
                raise OptionError("calibrator", "give either calibrate (cross-fitted refit) or calibrator (saved maps)")
