"""Predictor names the evaluation itself creates, which a user's predictor may not take.

- `base_rate`: the constant base-rate reference row of every report and the gate's
  `--vs-base-rate` reference. A user column of that name used to replace the reference
  silently (the disclosure still described the constant), so report, `evaluate` and the
  gate reject it.
- `<p>+platt`: the recalibrated stream of predictor `p` (report --calibrate / --calibrator,
  `tps-tracer calibrate`, plot --calibrate). A user column "verbal+platt" next to "verbal"
  used to be overwritten by the recalibrated stream; recalibration rejects the collision.
  Without recalibration such a name collides with nothing and stays allowed: files that
  already hold recalibrated forecasts (written from `with_calibrator_streams`, say) remain
  readable.

Rejecting, rather than renaming the user's column, keeps every row's name meaning one thing
in the JSON report; the error names the predictor so the file can be fixed (e.g. with jq).
"""

from __future__ import annotations

from collections.abc import Iterable

from tps_tracer.errors import InputError

BASE_RATE = "base_rate"
PLATT_SUFFIX = "+platt"


class ReservedNameError(InputError):
    """A user predictor takes a name the evaluation creates itself."""


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
