"""Fixed-rank sensitivity (paper Appendix "Fixed-Rank Sensitivity Analysis").

Rank metrics are computed once from one fixed trajectory scalar r_i = Phi(F_raw) of the raw
stream and reused in every row; only the per-step stream scored by TPS is transformed
(identity, affine 0.4 + 0.2x, sqrt, square, and the cross-fitted Platt map). AUROC, AUPRC
and AURC are therefore identical across rows by construction while TPS moves: the gap is
structural to rank-based evaluation, not a property of a particular calibrator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.evaluation.calibration.cross_fit import cross_fit_platt
from tps_tracer.evaluation.censoring_mix import COMPLETE_ONLY, score_columns
from tps_tracer.evaluation.diagnostics import auprc_failure, aurc, auroc_failure
from tps_tracer.evaluation.pairs import AGGREGATOR_NAMES, pair_table_from_arrays
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule, get_rule, get_schedule

FloatArray = NDArray[np.float64]

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
    aggregator: str = "phi_w",
    platt: bool = True,
) -> list[dict[str, Any]]:
    """One row per transform: complete-only TPS of the transformed stream, rank metrics of the fixed raw scalar."""
    rule_, sched = get_rule(rule), get_schedule(schedule)
    raw = pair_table_from_arrays(arrays, [predictor], [rule_], [sched])
    complete, _ = raw.role_masks(CensoringPolicy())
    sel = complete & raw.predictors[predictor].usable
    if not sel.any():
        raise InputError(f"no complete trajectory with a usable {predictor!r} stream")
    r = raw.predictors[predictor].aggregates[sel, AGGREGATOR_NAMES.index(aggregator)]
    y = raw.outcome[sel]
    ranks = {"auroc": auroc_failure(r, y), "auprc": auprc_failure(r, y), "aurc": aurc(r, y)}

    col = arrays.predictors[predictor]
    streams = {name: fn(col.values) for name, fn in FIXED_TRANSFORMS.items()}
    if platt:
        streams[PLATT] = cross_fit_platt(arrays, predictor, sched).values
    rows = []
    for name, values in streams.items():
        table = pair_table_from_arrays(arrays.with_predictor("transformed", values), ["transformed"], [rule_], [sched])
        tps = score_columns(table, ["transformed"], modes=(COMPLETE_ONLY,)).columns[0][sel]
        rows.append({"transform": name, "tps": float(np.mean(tps)), "n": int(sel.sum()), **ranks})
    return rows
