"""Raw-vs-Platt TPS deltas whose CI covers the population effect of Platt scaling.

The paired Delta of `calibrate` and `report --calibrate` reuses the fitted maps in every
bootstrap replicate, so its CI is conditional on the fit: it covers the effect of these
maps, and undercovers the effect of the procedure (fit cross-fitted maps on a sample of this
size, then apply them), most at small N. Here each replicate refits both cross-fitted maps
on its resample (the same Poisson weights, `cross_fit_platt(trajectory_weights=...)`),
recalibrates, rescores and takes the weighted mean difference: the CI of the procedure.
It costs one cross-fit and one scoring pass per replicate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tps_tracer.constants import COMPLETE_ONLY, SIMPLE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import replicate_weights, trajectory_keys
from tps_tracer.evaluation.calibration.cross_fit import DEFAULT_PENALTY, cross_fit_platt
from tps_tracer.evaluation.calibration.paired import PairedDelta, delta_from_replicates
from tps_tracer.evaluation.censoring_mix import score_columns
from tps_tracer.evaluation.pairs import pair_table_from_arrays
from tps_tracer.records.arrays import TrajectoryArrays
from tps_tracer.scoring.rules import get_rule, get_schedule

_REFIT = "+refit"


def _scores(arrays: TrajectoryArrays, name: str, schedule: str, modes: Sequence[str]) -> dict[str, np.ndarray]:
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
    """TPS_log(Platt) - TPS_log(raw) per censoring mode, the maps refitted in every replicate.

    The point estimate is the cross-fitted one (as the conditional Delta); a replicate whose
    resample leaves a half without a weighted complete trajectory cannot be refitted and is
    NaN (left out of the CI, as a replicate that drew no trajectory).
    """
    raw = _scores(arrays, predictor, schedule, modes)
    fit = cross_fit_platt(arrays, predictor, schedule, penalty)
    recal = _scores(arrays.with_predictor(predictor + _REFIT, fit.values), predictor + _REFIT, schedule, modes)
    keys = trajectory_keys(arrays.ids)
    reps = np.full((n_replicates, len(modes)), np.nan)
    for b in range(n_replicates):
        w = replicate_weights(keys, [b], seed)[0]  # replicate b of the conditional bootstrap's resamples
        try:
            refit = cross_fit_platt(arrays, predictor, schedule, penalty, trajectory_weights=w)
        except InputError:  # a half without a weighted complete trajectory: no fit on this resample
            continue
        scored = _scores(arrays.with_predictor(predictor + _REFIT, refit.values), predictor + _REFIT, schedule, modes)
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
