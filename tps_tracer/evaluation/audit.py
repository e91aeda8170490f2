"""The termination audit: how many runs stopped for each reason and what role each plays.

The paper reports it before any score (Section 4.2). It is computed from counts only (per stop
reason: runs, and runs carrying q_Z; clean stops still waiting for their outcome), so the file
report, the gate, the partial states of the chunked and distributed engines and the live
accumulator's snapshot all build it here, from whichever form their data is in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.evaluation.pairs import PairTable
from tps_tracer.records.arrays import STOP_REASONS
from tps_tracer.records.stop_reasons import CensoringPolicy, Role


def _ratio(num: int, den: int) -> float | None:
    """num / den, or None (JSON null) when there is nothing to divide by."""
    if not den:
        return None
    v = num / den
    return v if math.isfinite(v) else None


def audit_of_counts(
    stop_counts: Sequence[int] | NDArray[np.int64],
    q_z_counts: Sequence[int] | NDArray[np.int64],
    pending: int,
    outcome_on_unscored: int,
    policy: CensoringPolicy,
) -> dict[str, Any]:
    """The audit object of the report's JSON; counts are per `STOP_REASONS`."""
    n = int(np.sum(stop_counts))
    by_reason = {r.value: int(stop_counts[i]) for i, r in enumerate(STOP_REASONS)}
    roles = {role.value: 0 for role in Role}
    censored_with_q = 0
    for i, r in enumerate(STOP_REASONS):
        roles[policy.role(r).value] += int(stop_counts[i])
        if policy.role(r) is Role.CENSORED:
            censored_with_q += int(q_z_counts[i])
    roles[Role.COMPLETE.value] -= pending  # clean stops without their outcome are neither scored nor censored
    working = roles[Role.COMPLETE.value] + roles[Role.CENSORED.value]
    return {
        "n_trajectories": n,
        "stop_reasons": by_reason,
        "roles": roles,
        "role_of": {r.value: policy.role(r).value for r in STOP_REASONS},
        "pending_outcome": pending,
        "working_sample": working,
        "censoring_rate": _ratio(roles[Role.CENSORED.value], working),
        "excluded_share": _ratio(roles[Role.EXCLUDED.value], n),
        "censored_with_q_z": censored_with_q,
        "outcome_ignored_on_unscored": outcome_on_unscored,
        "default_policy": policy.is_default,
    }


def audit_of_table(table: PairTable, policy: CensoringPolicy) -> dict[str, Any]:
    """The audit of a pair table's per-trajectory rows (stop-reason codes, q_Z with NaN where not given)."""
    k = len(STOP_REASONS)
    stop_counts = np.bincount(table.stop_code, minlength=k)
    q_z_counts = np.bincount(table.stop_code[~np.isnan(table.q_z)], minlength=k)
    return audit_of_counts(stop_counts, q_z_counts, int(table.pending.sum()), table.outcome_on_unscored, policy)
