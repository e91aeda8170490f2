"""The pair table: everything the report needs about a set of finished trajectories.

A finished trajectory reduces, per predictor, to its branch pairs (s1, s0) for every
rule x schedule, plus four scalar summaries (Phi_last, Phi_avg, Phi_min, Phi_w) for the
rank/calibration diagnostics, plus the truncated weight mass sum_{t<=Z} w_t per schedule
(which scores any constant forecast, e.g. the base rate, without revisiting the steps).
That is a fixed-size record, whatever the trajectory's length.

Batch evaluation builds the table from flat arrays (`pair_table_from_arrays`); the
online accumulator builds the same table row by row as trajectories stop. The report is
assembled from the table alone, so both paths give the same numbers by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_MISSING, DROP_RUN, SKIP_RENORMALISE
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES, PRIOR, flat_weights, score_rows
from tps_tracer.records.arrays import ROLES, STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.scoring.rules import ScoreRule, WeightSchedule, branches_at

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

__all__ = ["AGGREGATOR_NAMES", "PairTable", "PredictorPairs", "pair_table_from_arrays", "skip_counts"]
_CLEAN = STOP_REASONS.index(StopReason.CLEAN)


@dataclass
class PredictorPairs:
    """One predictor's rows: usable mask, branch pairs (n, R, S, 2) and summaries (n, 4); NaN where unusable."""

    usable: BoolArray
    pairs: FloatArray
    aggregates: FloatArray
    skipped: dict[str, int] = field(default_factory=dict)
    clipped: IntArray | None = None  # (n,) forecasts the log rule clipped per row; None: none counted
    # (n, 4) per row: steps without a forecast, steps with one, and the cost of missingness d1, d0
    # (evaluation/rows.py); None: a table written before it was kept (no gap counted)
    missing: FloatArray | None = None
    no_data = "no trajectory states a forecast"  # a fill scores every run: data means a statement

    @property
    def stated(self) -> BoolArray:
        """Rows with at least one stated forecast: a predictor no row states has no data."""
        return self.usable if self.missing is None else self.usable & (self.missing[:, 1] > 0)

    @classmethod
    def never_stated(
        cls, n_steps: IntArray, weight_mass: FloatArray, rules: Sequence[ScoreRule], n_aggs: int, missing: str
    ) -> PredictorPairs:
        """The rows of a predictor that a batch or chunk never mentions: every step is a gap, so under a
        fill policy each row with steps forecasts PRIOR throughout (sum_t w_t S(PRIOR, y) = S(PRIOR, y)
        times the weight mass); under skip-renormalise and drop-run no row is scored."""
        n = n_steps.size
        has = n_steps > 0
        usable = has if missing not in (SKIP_RENORMALISE, DROP_RUN) else np.zeros(n, dtype=bool)
        branches = branches_at(rules, PRIOR)[None, :, None, :]
        pairs = np.where(usable[:, None, None, None], branches * weight_mass[:, None, :, None], np.nan)
        gaps = np.zeros((n, 4))
        gaps[:, 0] = n_steps
        gaps[has, 2:] = np.nan
        return cls(
            usable,
            pairs,
            np.where(usable[:, None], PRIOR, np.nan) * np.ones((n, n_aggs)),
            skip_counts(usable, n_steps),
            np.zeros(n, dtype=np.int64),
            gaps,
        )

    def clipped_in(self, rows: BoolArray) -> int:
        """Forecasts the log rule clipped in the selected usable rows."""
        return 0 if self.clipped is None else int(self.clipped[rows & self.usable].sum())


@dataclass
class PairTable:
    ids: list[str]
    stop_code: NDArray[np.int8]
    outcome: FloatArray  # NaN where unobserved (pending, or not a clean stop)
    q_z: FloatArray  # NaN where not given
    n_steps: IntArray
    horizon: FloatArray
    rules: list[ScoreRule]
    schedules: list[WeightSchedule]
    weight_mass: FloatArray  # (n, S): sum_{t<=Z} w_t
    predictors: dict[str, PredictorPairs]
    outcome_on_unscored: int = 0

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def pending(self) -> BoolArray:
        """Clean stops still waiting for their outcome: neither scored nor in the working sample."""
        return (self.stop_code == _CLEAN) & np.isnan(self.outcome)

    def role_masks(self, policy: CensoringPolicy) -> tuple[BoolArray, BoolArray]:
        """(complete, censored) under the policy; pending clean stops are in neither."""
        table = np.array([ROLES.index(policy.role(r)) for r in STOP_REASONS], dtype=np.int8)
        roles = table[self.stop_code]
        complete = (roles == ROLES.index(Role.COMPLETE)) & ~np.isnan(self.outcome)
        return complete, roles == ROLES.index(Role.CENSORED)

    def reordered(self, order: IntArray) -> PairTable:
        """The same rows in another order (a permutation of range(n))."""
        idx = np.asarray(order, dtype=np.int64)
        return PairTable(
            ids=[self.ids[i] for i in idx.tolist()],
            stop_code=self.stop_code[idx],
            outcome=self.outcome[idx],
            q_z=self.q_z[idx],
            n_steps=self.n_steps[idx],
            horizon=self.horizon[idx],
            rules=self.rules,
            schedules=self.schedules,
            weight_mass=self.weight_mass[idx],
            predictors={
                name: PredictorPairs(
                    p.usable[idx],
                    p.pairs[idx],
                    p.aggregates[idx],
                    dict(p.skipped),
                    None if p.clipped is None else p.clipped[idx],
                    None if p.missing is None else p.missing[idx],
                )
                for name, p in self.predictors.items()
            },
            outcome_on_unscored=self.outcome_on_unscored,
        )


def skip_counts(usable: BoolArray, n_steps: IntArray) -> dict[str, int]:
    out = {}
    missing = int(np.sum(~usable & (n_steps > 0)))
    empty = int(np.sum(~usable & (n_steps == 0)))
    if missing:
        out["missing"] = missing
    if empty:
        out["no_steps"] = empty
    return out


def pair_table_from_arrays(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    rules: Sequence[ScoreRule],
    schedules: Sequence[WeightSchedule],
    with_summaries: bool = True,
    missing: str = DEFAULT_MISSING,
) -> PairTable:
    """Branch pairs and summaries of every usable (trajectory, predictor), vectorised over flat arrays.

    `with_summaries=False` leaves the four scalar summaries out (an (n, 0) array): for callers
    without rank diagnostics (the gate). `missing`: the policy for steps without a forecast."""
    lengths = arrays.lengths
    has_steps = lengths > 0
    cols = [arrays.predictors[name] for name in predictors]
    rows = score_rows(
        [c.values for c in cols],
        lengths,
        flat_weights(lengths[has_steps], arrays.horizon[has_steps], schedules),
        rules,
        len(schedules),
        with_summaries=with_summaries,
        missing=missing,
    )
    out = {
        name: PredictorPairs(
            rows.usable[p],
            rows.pairs[p],
            rows.aggregates[p],
            # drop-run keeps the reader's reasons (missing / non_numeric); the fills skip only empty runs
            dict(cols[p].skipped) if missing == DROP_RUN else skip_counts(rows.usable[p], lengths),
            rows.clipped[p],
            rows.missing[p],
        )
        for p, name in enumerate(predictors)
    }
    return PairTable(
        ids=list(arrays.ids),
        stop_code=arrays.stop_code,
        outcome=arrays.outcome,
        q_z=arrays.q_z,
        n_steps=lengths.astype(np.int64),
        horizon=arrays.horizon,
        rules=list(rules),
        schedules=list(schedules),
        weight_mass=rows.weight_mass,
        predictors=out,
        outcome_on_unscored=arrays.outcome_on_unscored,
    )
