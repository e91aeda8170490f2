"""The pair table (per trajectory and predictor: branch pairs (s1, s0), summaries, weight mass), its
termination audit and the censoring-mode mixing with eta. Batch and online both build it, so both
give the same report by construction."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import (
    CENSORING_MODES,
    COMPLETE_ONLY,
    DEFAULT_MISSING,
    DROP_RUN,
    EXACT,
    SIMPLE,
    SKIP_RENORMALISE,
)
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES, PRIOR, flat_weights, score_rows
from tps_tracer.evaluation.skipped_predictors import role_masks
from tps_tracer.records.arrays import STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.scoring import BoolArray, FloatArray, IntArray, ScoreRule, WeightSchedule, branches_at, mix

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
    def constant(
        cls,
        n_steps: IntArray,
        weight_mass: FloatArray,
        rules: Sequence[ScoreRule],
        p: float,
        usable: BoolArray,
        n_aggs: int = len(AGGREGATOR_NAMES),
    ) -> PredictorPairs:
        """The forecast p on every step of the `usable` rows: sum_t w_t S(p, y) = S(p, y) times the weight mass."""
        branches = branches_at(rules, p)[None, :, None, :]
        pairs = np.where(usable[:, None, None, None], branches * weight_mass[:, None, :, None], np.nan)
        aggs = np.where(usable[:, None], p, np.nan) * np.ones((n_steps.size, n_aggs))
        return cls(usable, pairs, aggs, skip_counts(usable, n_steps))

    @classmethod
    def never_stated(
        cls, n_steps: IntArray, weight_mass: FloatArray, rules: Sequence[ScoreRule], n_aggs: int, missing: str
    ) -> PredictorPairs:
        """The rows of a predictor that a batch or chunk never mentions: every step is a gap, so under a
        fill policy each row with steps forecasts PRIOR throughout; under skip-renormalise and drop-run
        no row is scored."""
        n = n_steps.size
        has = n_steps > 0
        usable = has if missing not in (SKIP_RENORMALISE, DROP_RUN) else np.zeros(n, dtype=bool)
        gaps = np.zeros((n, 4))
        gaps[:, 0] = n_steps
        gaps[has, 2:] = np.nan
        out = cls.constant(n_steps, weight_mass, rules, PRIOR, usable, n_aggs)
        return dataclasses.replace(out, clipped=np.zeros(n, dtype=np.int64), missing=gaps)

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
        return role_masks(self.stop_code, self.outcome, policy)

    def constant_pairs(self, p: float) -> PredictorPairs:
        """The pairs of the constant forecast p (the base rate) on every row with steps."""
        return PredictorPairs.constant(self.n_steps, self.weight_mass, self.rules, p, self.n_steps > 0)

    def reordered(self, order: IntArray) -> PairTable:
        """The same rows in another order (a permutation of range(n))."""
        idx = np.asarray(order, dtype=np.int64)
        return PairTable(
            **_rows_at(self, idx),
            ids=[self.ids[i] for i in idx.tolist()],
            predictors={name: PredictorPairs(**_rows_at(p, idx)) for name, p in self.predictors.items()},
        )


def _rows_at(obj: PairTable | PredictorPairs, idx: IntArray) -> dict[str, Any]:
    """The fields of `obj` with its per-row arrays taken at `idx` (ids and predictors: the caller's)."""
    out = {}
    for k, v in vars(obj).items():
        if k not in ("ids", "predictors"):
            out[k] = v[idx] if isinstance(v, np.ndarray) else dict(v) if isinstance(v, dict) else v
    return out


def skip_counts(usable: BoolArray, n_steps: IntArray) -> dict[str, int]:
    counts = {"missing": int(np.sum(~usable & (n_steps > 0))), "no_steps": int(np.sum(~usable & (n_steps == 0)))}
    return {k: v for k, v in counts.items() if v}


def pair_table_from_arrays(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    rules: Sequence[ScoreRule],
    schedules: Sequence[WeightSchedule],
    with_summaries: bool = True,
    missing: str = DEFAULT_MISSING,
) -> PairTable:
    """Branch pairs and summaries of every usable (trajectory, predictor), vectorised over flat arrays;
    `with_summaries=False` (the gate) leaves the four scalar summaries out (an (n, 0) array)."""
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


# -- the termination audit (the paper reports it before any score, Section 4.2) -----------------


def audit_of_counts(
    stop_counts: Sequence[int] | IntArray,
    q_z_counts: Sequence[int] | IntArray,
    pending: int,
    outcome_on_unscored: int,
    policy: CensoringPolicy,
) -> dict[str, Any]:
    """The audit object of the report's JSON, from counts per `STOP_REASONS` (runs, runs carrying q_Z)
    and the clean stops still waiting for their outcome: every form of data reduces to these."""
    n = int(np.sum(stop_counts))
    by_reason = {r.value: int(stop_counts[i]) for i, r in enumerate(STOP_REASONS)}
    roles = {role.value: 0 for role in Role}
    for i, r in enumerate(STOP_REASONS):
        roles[policy.role(r).value] += int(stop_counts[i])
    censored_with_q = sum(int(q_z_counts[i]) for i, r in enumerate(STOP_REASONS) if policy.role(r) is Role.CENSORED)
    roles[Role.COMPLETE.value] -= pending  # clean stops without their outcome are neither scored nor censored
    working = roles[Role.COMPLETE.value] + roles[Role.CENSORED.value]
    return {
        "n_trajectories": n,
        "stop_reasons": by_reason,
        "roles": roles,
        "role_of": {r.value: policy.role(r).value for r in STOP_REASONS},
        "pending_outcome": pending,
        "working_sample": working,
        "censoring_rate": roles[Role.CENSORED.value] / working if working else None,
        "excluded_share": roles[Role.EXCLUDED.value] / n if n else None,
        "censored_with_q_z": censored_with_q,
        "outcome_ignored_on_unscored": outcome_on_unscored,
        "default_policy": policy.is_default,
    }


def stop_counts_of(table: PairTable) -> tuple[IntArray, IntArray]:
    """(runs, runs carrying q_Z) per `STOP_REASONS`."""
    k = len(STOP_REASONS)
    q_rows = table.stop_code[~np.isnan(table.q_z)]
    return (
        np.bincount(table.stop_code, minlength=k).astype(np.int64),
        np.bincount(q_rows, minlength=k).astype(np.int64),
    )


def audit_of_table(table: PairTable, policy: CensoringPolicy) -> dict[str, Any]:
    return audit_of_counts(*stop_counts_of(table), int(table.pending.sum()), table.outcome_on_unscored, policy)


# -- censoring-mode mixing: score = eta s1 + (1 - eta) s0 per mode -------------------------------


@dataclass(frozen=True)
class ColumnKey:
    predictor: str
    rule: str
    weights: str
    censoring: str


@dataclass
class ScoreMatrix:
    keys: list[ColumnKey] = field(default_factory=list)
    columns: list[FloatArray] = field(default_factory=list)  # over all n rows, NaN outside the sample
    # Censored trajectories usable for the predictor but lacking q_z (left out of "exact").
    missing_q_z: dict[str, int] = field(default_factory=dict)


def eta_by_mode(
    complete: BoolArray, censored: BoolArray, outcome: FloatArray, q_z: FloatArray
) -> dict[str, tuple[BoolArray, FloatArray]]:
    """The eta table (docs/design.md, "the branch pair"), the one definition: per mode, its rows and eta.

        complete-only   complete rows                  eta = Y
        simple          complete + censored            eta = Y, or 0 if censored   (q_Z ~ 0)
        exact           complete + censored with q_z   eta = Y, or q_z if censored

    A complete row with a NaN outcome is pending: in no mode."""
    has_y = complete & ~np.isnan(outcome)
    has_q = censored & ~np.isnan(q_z)
    y = np.where(has_y, outcome, 0.0)
    return {
        COMPLETE_ONLY: (has_y, y),
        SIMPLE: (has_y | censored, y),
        EXACT: (has_y | has_q, np.where(has_y, y, np.nan_to_num(q_z))),
    }


def score_columns(
    table: PairTable,
    predictors: Sequence[str],
    policy: CensoringPolicy | None = None,
    modes: Sequence[str] = CENSORING_MODES,
) -> ScoreMatrix:
    """Mix each row's branch pairs with its eta per censoring mode, one column per combination."""
    complete, censored = table.role_masks(policy or CensoringPolicy())
    has_q = ~np.isnan(table.q_z)
    eta = eta_by_mode(complete, censored, table.outcome, table.q_z)
    out = ScoreMatrix()
    for name in predictors:
        col = table.predictors[name]
        out.missing_q_z[name] = int(np.sum(col.usable & censored & ~has_q))
        for i, rule in enumerate(table.rules):
            for j, sched in enumerate(table.schedules):
                s1, s0 = col.pairs[:, i, j, 0], col.pairs[:, i, j, 1]
                for mode in modes:
                    member, e = eta[mode]
                    rows = member & col.usable
                    column = np.full(table.n, np.nan)
                    column[rows] = mix(s1[rows], s0[rows], e[rows])
                    out.keys.append(ColumnKey(name, rule.name, sched.name, mode))
                    out.columns.append(column)
    return out


def score_matrix(
    arrays: TrajectoryArrays,
    predictors: Sequence[str],
    rules: Sequence[ScoreRule],
    schedules: Sequence[WeightSchedule],
    policy: CensoringPolicy | None = None,
    modes: Sequence[str] = CENSORING_MODES,
) -> ScoreMatrix:
    return score_columns(pair_table_from_arrays(arrays, predictors, rules, schedules), predictors, policy, modes)
