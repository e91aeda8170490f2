"""One mergeable partial state per chunk of trajectories (docs/design.md, "Scale"): fixed-size sums
plus the per-trajectory scalars of the rank diagnostics; states merge in any order."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import CENSORING_MODES, COMPLETE_ONLY, DEFAULT_MISSING, DROP_RUN, SIMPLE, SKIP_RENORMALISE
from tps_tracer.errors import InputError
from tps_tracer.evaluation.bootstrap import replicate_sums, trajectory_keys
from tps_tracer.evaluation.pairs import (
    PairTable,
    PredictorPairs,
    audit_of_counts,
    eta_by_mode,
    pair_table_from_arrays,
    score_columns,
    stop_counts_of,
)
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.evaluation.rows import AGGREGATOR_NAMES, PRIOR
from tps_tracer.records.arrays import SKIP_REASONS, STOP_REASONS, TrajectoryArrays
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.scoring import (
    BoolArray,
    FloatArray,
    IntArray,
    ScoreRule,
    WeightSchedule,
    branches_at,
    get_rule,
    get_schedule,
)

STATE_VERSION = 1
_M = len(CENSORING_MODES)  # all three are kept; exact is shown if any run carries q_z
# Per predictor, over the working sample's runs with steps: how much is missing and what it costs.
# cost_*: carry-forward minus skip-renormalise (first rule x schedule, simple censoring eta).
GAP_STATS = tuple(
    "steps missing_steps runs runs_affected runs_stated complete_affected success_affected complete_unaffected"
    " success_unaffected cost_sum cost_n".split()
)


@dataclass(frozen=True)
class StateSpec:
    """What a state is computed for; only states of equal specs merge."""

    rules: tuple[ScoreRule, ...]
    schedules: tuple[WeightSchedule, ...]
    policy: CensoringPolicy = field(default_factory=CensoringPolicy)
    bootstrap: int = 1000
    seed: int = 0
    predictors: tuple[str, ...] | None = None  # None: every predictor met
    missing: str = DEFAULT_MISSING  # the policy for steps without a forecast

    @classmethod
    def from_options(
        cls, opts: ReportOptions, rules: Sequence[ScoreRule] = (), schedules: Sequence[WeightSchedule] = ()
    ) -> StateSpec:
        """The spec of report options; `rules`, `schedules` (a table's) replace the options' when given."""
        return cls(
            rules=tuple(rules or (get_rule(r) for r in opts.rules)),
            schedules=tuple(schedules or (get_schedule(s) for s in opts.schedules)),
            policy=opts.policy,
            bootstrap=opts.bootstrap,
            seed=opts.seed,
            predictors=None if opts.predictors is None else tuple(opts.predictors),
            missing=opts.missing,
        )

    def signature(self) -> dict[str, Any]:
        """The spec as plain JSON (rules and schedules by name): states of equal signatures merge."""
        return {
            "rules": [r.name for r in self.rules],
            "schedules": [s.name for s in self.schedules],
            "roles": {r.value: self.policy.role(r).value for r in STOP_REASONS},
            "bootstrap": self.bootstrap,
            "seed": self.seed,
            "predictors": None if self.predictors is None else list(self.predictors),
            "missing": self.missing,
        }


_COMPLETE = CENSORING_MODES.index(COMPLETE_ONLY)
_G = {name: i for i, name in enumerate(GAP_STATS)}


def gap_summary(g: FloatArray) -> dict[str, Any]:
    """What report and gate show per predictor about steps without a forecast."""

    def share(a: str, b: str) -> float | None:
        return float(g[_G[a]] / g[_G[b]]) if g[_G[b]] else None

    return {
        "missing_steps": int(g[_G["missing_steps"]]),
        "steps": int(g[_G["steps"]]),
        "missing_step_share": share("missing_steps", "steps"),
        "runs_affected": int(g[_G["runs_affected"]]),
        "runs": int(g[_G["runs"]]),
        "runs_affected_share": share("runs_affected", "runs"),
        "runs_silent": int(g[_G["runs"]] - g[_G["runs_stated"]]),
        "cost": share("cost_sum", "cost_n"),
        "success_rate_affected": share("success_affected", "complete_affected"),
        "success_rate_unaffected": share("success_unaffected", "complete_unaffected"),
    }


def states_nothing(g: FloatArray) -> bool:
    """The working sample has runs and none states the predictor once."""
    return bool(g[_G["runs"]] > 0 and g[_G["runs_stated"]] == 0)


def gap_stats(col: PredictorPairs, table: PairTable, complete: BoolArray, censored: BoolArray) -> FloatArray:
    if col.missing is None:
        return np.zeros(len(GAP_STATS))
    has = table.n_steps > 0
    work = (complete | censored) & has
    gaps, stated = col.missing[:, 0], col.missing[:, 1]
    hit = gaps > 0
    y = np.where(complete, table.outcome, 0.0)
    cost = y * col.missing[:, 2] + (1.0 - y) * col.missing[:, 3]
    costed = work & np.isfinite(cost)
    c_hit, c_clean = complete & has & hit, complete & has & ~hit
    values = [
        table.n_steps[work].sum(),
        gaps[work].sum(),
        work.sum(),
        (work & hit).sum(),
        (work & (stated > 0)).sum(),
        c_hit.sum(),
        y[c_hit].sum(),
        c_clean.sum(),
        y[c_clean].sum(),
        cost[costed].sum(),
        costed.sum(),
    ]
    return np.array(values, dtype=float)


@dataclass
class PredictorState:
    """One predictor's sums (shapes: R rules, S schedules, M modes, B replicates)."""

    usable: int
    skipped: dict[str, int]
    missing_q_z: int
    count: IntArray  # (R, S, M) trajectories in each column
    total: FloatArray  # (R, S, M) sum of the scores
    rep_total: FloatArray  # (B, R, S, M) sum_i W_bi x_i
    rep_count: FloatArray  # (B, M) sum_i W_bi over the column's trajectories
    summaries: FloatArray  # (m, 4) Phi summaries of the complete usable trajectories
    outcomes: FloatArray  # (m,) their outcomes
    clipped: int = 0  # forecasts the log rule clipped, in the working sample's usable trajectories
    gaps: FloatArray = field(default_factory=lambda: np.zeros(len(GAP_STATS)))  # GAP_STATS

    @classmethod
    def absent(cls, spec: StateSpec, n: int, n_empty: int, base: BaseRateState) -> PredictorState:
        """A predictor a chunk never mentions (as `PredictorPairs.never_stated`): under a fill policy
        every run forecasts PRIOR throughout, otherwise all its runs are skipped."""
        runs, complete = int(base.count[CENSORING_MODES.index(SIMPLE)]), int(base.count[_COMPLETE])
        gaps = np.array([base.steps, base.steps, runs, runs, 0, complete, base.outcomes.sum(), 0, 0, 0, 0], dtype=float)
        st = dataclasses.replace(cls.constant(spec, base, n, n_empty, PRIOR), gaps=gaps)
        if spec.missing not in (SKIP_RENORMALISE, DROP_RUN):
            return st
        return dataclasses.replace(
            st,
            usable=0,
            skipped={k: v for k, v in (("missing", n - n_empty), ("no_steps", n_empty)) if v},
            missing_q_z=0,
            **{k: np.zeros_like(getattr(st, k)) for k in ("count", "total", "rep_total", "rep_count")},
            summaries=np.zeros((0, len(AGGREGATOR_NAMES))),
            outcomes=np.zeros(0),
        )

    @classmethod
    def constant(cls, spec: StateSpec, base: BaseRateState, n: int, n_empty: int, p: float) -> PredictorState:
        """The forecast p on every step of every run with steps: S(p,1) sum eta m + S(p,0) sum (1-eta) m."""
        branches = branches_at(spec.rules, p)
        s1, s0 = branches[:, 0, None, None], branches[:, 1, None, None]
        return cls(
            usable=n - n_empty,
            skipped={"no_steps": n_empty} if n_empty else {},
            missing_q_z=base.missing_q_z,
            count=np.broadcast_to(base.count, (len(spec.rules), len(spec.schedules), _M)).astype(np.int64),
            total=s1 * base.eta_mass[None] + s0 * base.rest_mass[None],
            rep_total=s1[None] * base.rep_eta_mass[:, None] + s0[None] * base.rep_rest_mass[:, None],
            rep_count=base.rep_count.copy(),
            summaries=np.full((base.outcomes.size, len(AGGREGATOR_NAMES)), p),
            outcomes=base.outcomes.copy(),
        )


@dataclass
class BaseRateState:
    """Sums that score the constant base-rate forecast once its value is known."""

    count: IntArray  # (M,) trajectories with steps in each mode's sample
    eta_mass: FloatArray  # (S, M) sum eta * m
    rest_mass: FloatArray  # (S, M) sum (1 - eta) * m
    rep_eta_mass: FloatArray  # (B, S, M)
    rep_rest_mass: FloatArray  # (B, S, M)
    rep_count: FloatArray  # (B, M)
    outcomes: FloatArray  # outcomes of the complete trajectories with steps (its diagnostics)
    missing_q_z: int = 0  # censored trajectories with steps but without q_z
    steps: int = 0  # steps of the working sample's trajectories (a predictor never met misses them all)


_ROWS = ("summaries", "outcomes")  # per-trajectory arrays: concatenated; every other field is a sum
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (PredictorState, BaseRateState)}


def _merged(a: Any, b: Any) -> Any:
    out: dict[str, Any] = {}
    for name in _FIELDS[type(a)]:
        x, y = getattr(a, name), getattr(b, name)
        if name in _ROWS:
            out[name] = concat_rows(x, y)
        elif name == "skipped":
            out[name] = {k: v for k in SKIP_REASONS if (v := x.get(k, 0) + y.get(k, 0))}
        else:
            out[name] = x + y
    return type(a)(**out)


def _per_stop_reason(counts: Sequence[int]) -> IntArray:
    """Counts per STOP_REASONS; a state saved before a stop reason was added lacks its (zero) count."""
    out = np.zeros(len(STOP_REASONS), dtype=np.int64)
    values = np.asarray(counts, dtype=np.int64)
    if values.ndim != 1 or len(values) > len(STOP_REASONS):
        raise InputError(
            f"a partial state holds {len(values)} stop-reason counts, this tps-tracer knows {len(STOP_REASONS)}"
        )
    out[: len(values)] = values
    return out


_COUNTS = ("n", "n_empty", "pending", "outcome_on_unscored", "n_complete", "outcome_sum")  # outcome_sum last
_PER_REASON = ("stop_counts", "q_z_counts")  # arrays over STOP_REASONS


@dataclass
class PartialState:
    """The mergeable summary of a set of trajectories."""

    spec: StateSpec
    n: int
    n_empty: int  # trajectories without steps
    stop_counts: IntArray  # per STOP_REASONS
    q_z_counts: IntArray  # trajectories carrying q_z, per STOP_REASONS
    pending: int
    outcome_on_unscored: int
    n_complete: int
    outcome_sum: float  # over complete trajectories: the base rate is outcome_sum / n_complete
    # Predictor name -> where it was first met (sortable), so merged states list predictors in
    # first-seen order whatever the merge order; the chunk reader passes (shard, byte offset).
    first_seen: dict[str, tuple[Any, ...]]
    predictors: dict[str, PredictorState]
    base: BaseRateState

    @classmethod
    def from_arrays(
        cls,
        arrays: TrajectoryArrays,
        spec: StateSpec,
        origin: tuple[Any, ...] = (),
        keys: NDArray[np.uint64] | None = None,
    ) -> PartialState:
        """The state of flat arrays (one chunk); `origin` orders predictors first met in this chunk."""
        names = list(arrays.predictors) if spec.predictors is None else list(spec.predictors)
        present = [p for p in names if p in arrays.predictors]
        table = pair_table_from_arrays(arrays, present, spec.rules, spec.schedules, missing=spec.missing)
        first_seen = {p: (*origin, i) for i, p in enumerate(arrays.predictors)}
        return cls.from_table(table, spec, first_seen, keys)

    @classmethod
    def from_table(
        cls,
        table: PairTable,
        spec: StateSpec,
        first_seen: dict[str, tuple[Any, ...]] | None = None,
        keys: NDArray[np.uint64] | None = None,
    ) -> PartialState:
        """The state of a pair table (the form the online accumulator builds row by row)."""
        if [r.name for r in table.rules] != [r.name for r in spec.rules] or [s.name for s in table.schedules] != [
            s.name for s in spec.schedules
        ]:
            raise InputError("the pair table's rules and schedules differ from the state's spec")
        if first_seen is None:
            first_seen = {p: (i,) for i, p in enumerate(table.predictors)}
        keys = trajectory_keys(table.ids) if keys is None else keys
        n, r_n, s_n, b = table.n, len(spec.rules), len(spec.schedules), spec.bootstrap
        complete, censored = table.role_masks(spec.policy)
        has_steps = table.n_steps > 0
        eta_table = eta_by_mode(complete, censored, table.outcome, table.q_z)
        members, etas = zip(*(eta_table[mode] for mode in CENSORING_MODES), strict=True)

        wanted = table.predictors if spec.predictors is None else spec.predictors
        scored = [p for p in wanted if p in table.predictors]
        sm = score_columns(table, scored, spec.policy, CENSORING_MODES)
        # Every score column, the base-rate mass columns and the presence patterns, with their mode.
        value_cols = [np.where(np.isnan(column), 0.0, column) for column in sm.columns]
        mode_of = [c % _M for c in range(len(value_cols))]
        for j in range(s_n):
            mass = table.weight_mass[:, j]
            for m, (member, eta) in enumerate(zip(members, etas, strict=True)):
                sel = member & has_steps
                value_cols.extend([np.where(sel, eta * mass, 0.0), np.where(sel, (1.0 - eta) * mass, 0.0)])
                mode_of.extend([m, m])
        masks = [*(table.predictors[name].usable for name in scored), has_steps]
        present_cols = [member & mask for mask in masks for member in members]
        mode_of.extend(list(range(_M)) * (len(scored) + 1))
        k_scores, k_values = len(sm.columns), len(value_cols)
        x = np.column_stack(value_cols + [p.astype(np.float64) for p in present_cols])
        totals = x.sum(axis=0)
        reps = _mode_split_replicate_sums(x, np.array(mode_of), complete, censored, keys, b, spec.seed)

        predictors: dict[str, PredictorState] = {}
        shape = (r_n, s_n, _M)
        for i, name in enumerate(scored):
            col = table.predictors[name]
            cols = slice(i * r_n * s_n * _M, (i + 1) * r_n * s_n * _M)
            counts = np.array([int(np.sum(~np.isnan(c))) for c in sm.columns[cols]], dtype=np.int64)
            pres = slice(k_values + i * _M, k_values + (i + 1) * _M)
            sel = complete & col.usable
            predictors[name] = PredictorState(
                usable=int(col.usable.sum()),
                skipped=dict(col.skipped),
                missing_q_z=sm.missing_q_z[name],
                count=counts.reshape(shape),
                total=totals[cols].reshape(shape),
                rep_total=reps[:, cols].reshape((b, *shape)),
                rep_count=reps[:, pres],
                summaries=col.aggregates[sel].copy(),
                outcomes=table.outcome[sel].copy(),
                clipped=col.clipped_in(complete | censored),
                gaps=gap_stats(col, table, complete, censored),
            )
        base_cols = slice(k_scores, k_values)
        base_tot = totals[base_cols].reshape(s_n, _M, 2)
        base_rep = reps[:, base_cols].reshape(b, s_n, _M, 2)
        base_pres = slice(k_values + len(scored) * _M, k_values + (len(scored) + 1) * _M)
        base = BaseRateState(
            count=np.array([int(np.sum(m & has_steps)) for m in members], dtype=np.int64),
            eta_mass=base_tot[..., 0].copy(),
            rest_mass=base_tot[..., 1].copy(),
            rep_eta_mass=base_rep[..., 0].copy(),
            rep_rest_mass=base_rep[..., 1].copy(),
            rep_count=reps[:, base_pres],
            outcomes=table.outcome[complete & has_steps].copy(),
            missing_q_z=int(np.sum(has_steps & censored & np.isnan(table.q_z))),
            steps=int(table.n_steps[(complete | censored) & has_steps].sum()),
        )
        stop_counts, q_z_counts = stop_counts_of(table)
        state = cls(
            spec=spec,
            n=n,
            n_empty=int(np.sum(~has_steps)),
            stop_counts=stop_counts,
            q_z_counts=q_z_counts,
            pending=int(table.pending.sum()),
            outcome_on_unscored=table.outcome_on_unscored,
            n_complete=int(complete.sum()),
            outcome_sum=float(np.sum(table.outcome[complete])),
            first_seen=dict(first_seen),
            predictors=predictors,
            base=base,
        )
        if spec.predictors is not None:  # asked-for predictors this chunk lacks: all skipped here
            for name in spec.predictors:
                state.predictors.setdefault(name, PredictorState.absent(spec, n, state.n_empty, base))
        return state

    def merge(self, other: PartialState) -> PartialState:
        """The state of both sets of trajectories (they must be disjoint; ids are not checked here)."""
        if self.spec.signature() != other.spec.signature():
            raise InputError("cannot merge partial states computed with different settings")
        first_seen = dict(self.first_seen)
        for name, where in other.first_seen.items():
            first_seen[name] = min(first_seen.get(name, where), where)
        predictors = {}
        for name in dict.fromkeys([*self.predictors, *other.predictors]):
            a = self.predictors.get(name) or PredictorState.absent(self.spec, self.n, self.n_empty, self.base)
            b = other.predictors.get(name) or PredictorState.absent(other.spec, other.n, other.n_empty, other.base)
            predictors[name] = _merged(a, b)
        return PartialState(
            spec=self.spec,
            **{k: getattr(self, k) + getattr(other, k) for k in (*_COUNTS, *_PER_REASON)},
            first_seen=first_seen,
            predictors=predictors,
            base=_merged(self.base, other.base),
        )

    def audit(self) -> dict[str, Any]:
        return audit_of_counts(
            self.stop_counts, self.q_z_counts, self.pending, self.outcome_on_unscored, self.spec.policy
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and numbers; rules and schedules by name (custom schedules do not round-trip)."""
        return {
            "version": STATE_VERSION,
            "spec": self.spec.signature(),
            "counts": {k: getattr(self, k) for k in _COUNTS},
            **{k: getattr(self, k).tolist() for k in _PER_REASON},
            "first_seen": {k: list(v) for k, v in self.first_seen.items()},
            "predictors": {k: _encode(v) for k, v in self.predictors.items()},
            "base": _encode(self.base),
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> PartialState:
        if obj.get("version") != STATE_VERSION:
            raise InputError(f"unsupported partial state version {obj.get('version')!r}")
        s, c = obj["spec"], obj["counts"]
        spec = StateSpec(
            rules=tuple(get_rule(r) for r in s["rules"]),
            schedules=tuple(get_schedule(x) for x in s["schedules"]),
            policy=CensoringPolicy({StopReason(k): Role(v) for k, v in s["roles"].items()}),
            bootstrap=int(s["bootstrap"]),
            seed=int(s["seed"]),
            predictors=None if s["predictors"] is None else tuple(s["predictors"]),
            missing=s.get("missing", DROP_RUN),  # a state written before the policy: runs with a gap dropped
        )
        return cls(
            spec=spec,
            **{k: int(c[k]) for k in _COUNTS[:-1]},
            outcome_sum=float(c["outcome_sum"]),
            stop_counts=_per_stop_reason(obj["stop_counts"]),
            q_z_counts=_per_stop_reason(obj["q_z_counts"]),
            first_seen={k: tuple(v) for k, v in obj["first_seen"].items()},
            predictors={k: _decode(PredictorState, v) for k, v in obj["predictors"].items()},
            base=_decode(BaseRateState, obj["base"]),
        )


def _encode(obj: PredictorState | BaseRateState) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = {"shape": list(v.shape), "data": v.ravel().tolist()} if isinstance(v, np.ndarray) else v
    return out


def _decode(cls: Any, d: dict[str, Any]) -> Any:
    """A PredictorState or BaseRateState of `_encode`'s dict; a field a state was written without
    (`clipped`, `gaps`, `steps`: added later) takes its default."""
    kw: dict[str, Any] = {}
    for name in [n for n in _FIELDS[cls] if n in d]:
        v = d[name]
        if name == "skipped":
            kw[name] = {k: int(x) for k, x in v.items()}
        elif isinstance(v, dict):
            dtype = np.int64 if name == "count" else np.float64
            kw[name] = np.asarray(v["data"], dtype=dtype).reshape(v["shape"])
        else:
            kw[name] = int(v)
    return cls(**kw)


def _mode_split_replicate_sums(
    x: FloatArray,
    mode_of: IntArray,
    complete: NDArray[np.bool_],
    censored: NDArray[np.bool_],
    keys: NDArray[np.uint64],
    n_replicates: int,
    seed: int,
) -> FloatArray:
    """replicate_sums(x) for columns in aligned censoring-mode groups, on a fraction of the work: on
    complete trajectories the three modes agree (summed once), on censored ones complete-only is zero."""
    groups = [np.flatnonzero(mode_of == m) for m in range(_M)]
    out = np.zeros((n_replicates, x.shape[1]))
    from_complete = replicate_sums(x[np.ix_(complete, groups[0])], keys[complete], n_replicates, seed)
    cens_cols = np.concatenate(groups[1:])
    from_censored = replicate_sums(x[np.ix_(censored, cens_cols)], keys[censored], n_replicates, seed)
    out[:, groups[0]] = from_complete
    out[:, cens_cols] = from_censored
    out[:, groups[1]] += from_complete
    out[:, groups[2]] += from_complete
    return out


def merge_states(states: Iterable[PartialState]) -> PartialState:
    """Merge any number of states (at least one), in any order."""
    parts = list(states)
    if not parts:
        raise InputError("no partial state to merge")
    return functools.reduce(PartialState.merge, parts)


# -- appending in place -------------------------------------------------------------------------
# `concat_rows(a, b)` is `np.concatenate([a, b])` as a read-only view of a buffer with spare room:
# when `a` is the newest prefix of such a buffer, b's rows are written after it (O(len(b)), capacity
# grown by half when full), so merging chunk after chunk is not quadratic. `a` never changes; a
# second append onto the same `a` finds the tail taken and copies.

GROWTH = 1.5  # capacity factor when a buffer is full: at most a third of a buffer is slack
MIN_CAPACITY = 64
COPY_SLICE_BYTES = 1 << 21  # ~0.3 ms of copying between two chances for other threads to run


@dataclass(slots=True)
class _Tail:
    """How many rows of a buffer are handed out (rows below are immutable, rows above are free)."""

    buffer: weakref.ref[NDArray[Any]]
    used: int


_lock = threading.RLock()  # guards the tails (re-entrant: a buffer freed by GC inside it calls _forget)
_tails: dict[int, _Tail] = {}  # id(buffer) -> its tail; entries leave with their buffer


def _view(buf: NDArray[Any], n: int) -> NDArray[Any]:
    out = buf[:n]
    out.flags.writeable = False  # shared with longer prefixes: nobody may write into it
    return out


def _forget(key: int) -> None:
    with _lock:
        _tails.pop(key, None)


def _copy_yielding(buf: NDArray[Any], a: NDArray[Any]) -> None:
    """buf[:len(a)] = a in slices, releasing the GIL between them: a 10M-row copy (~100 ms) would
    otherwise stall the host agent's threads."""
    m = a.shape[0]
    step = max(1, COPY_SLICE_BYTES // max(1, a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))))
    for i in range(0, m, step):
        buf[i : min(m, i + step)] = a[i : i + step]
        if i + step < m:
            time.sleep(0)  # let a thread waiting for the GIL run now, not after the 5 ms switch interval


def concat_rows(a: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
    """`np.concatenate([a, b])` along the first axis, appending in place when `a` allows it."""
    if a.shape[1:] != b.shape[1:] or a.ndim == 0:
        return np.concatenate([a, b])  # raises as concatenate does
    m, k = a.shape[0], b.shape[0]
    dtype = np.result_type(a, b)
    buf = a.base
    with _lock:
        tail = _tails.get(id(buf))
        if (
            isinstance(buf, np.ndarray)
            and tail is not None
            and tail.buffer() is buf
            and tail.used == m
            and m + k <= buf.shape[0]
            and a.dtype == buf.dtype == dtype
            and a.shape[1:] == buf.shape[1:]
            and a.strides == buf.strides
            and (not a.size or a.ctypes.data == buf.ctypes.data)
        ):
            buf[m : m + k] = b
            tail.used = m + k
            return _view(buf, m + k)
    # A new buffer with room: private until registered, so copied without the lock.
    buf = np.empty((max(MIN_CAPACITY, int((m + k) * GROWTH)), *a.shape[1:]), dtype=dtype)
    _copy_yielding(buf, a)
    buf[m : m + k] = b
    with _lock:
        _tails[id(buf)] = _Tail(weakref.ref(buf), m + k)
    weakref.finalize(buf, _forget, id(buf))
    return _view(buf, m + k)
