"""Recalibration: cross-fitted Platt (`cross_fit.py`, the paper's Appendix "Calibration Procedure"),
the saved calibrator artifact (`calibrator.py`), `+platt` streams and AUROC deltas (`recalibration.py`),
the logistic fit (`logistic.py`), fixed-rank sensitivity (`fixed_rank.py`) and paired deltas (`paired.py`).

`from tps_tracer.evaluation.calibration import cross_fit_platt` (the module's old flat path) still works.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from tps_tracer.evaluation.calibration import cross_fit

    try:
        return getattr(cross_fit, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
