"""Poisson bootstrap over trajectories: replicate b weighs trajectory i by W_bi ~ Poisson(1), a
counter-based hash (splitmix64) of (id key, b, seed), so replicates do not depend on order or
process (the accumulator reproduces the report's), and paired deltas share their weights."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tps_tracer.constants import DEFAULT_REPLICATES, DEFAULT_SEED, MAX_REPLICATES
from tps_tracer.errors import InputError
from tps_tracer.scoring import FloatArray

U64 = NDArray[np.uint64]

CI_LEVEL = 0.95
# Hash at most this many (replicate x trajectory) weights at once (2 MB of uint64 state: cache-sized).
_BLOCK_ELEMENTS = 250_000
# Apply weights to the data in GEMMs of this many (replicate x trajectory) weights (64 MB).
_GEMM_ELEMENTS = 8_000_000

_LITTLE_ENDIAN = sys.byteorder == "little"
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Poisson(1) CDF up to k = 24 (the tail beyond is below 1e-25, under float64 resolution of u).
_POISSON1_CDF = np.cumsum(np.exp(-1.0) / np.cumprod(np.concatenate(([1.0], np.arange(1.0, 25.0)))))


def linear_quantile(ordered: FloatArray, count: NDArray[np.int64], q: float) -> FloatArray:
    """np.nanquantile(x, q, axis=0) bit for bit, from `ordered` = np.sort(x, axis=0) (NaN last) and
    `count`, the non-NaN values per column (>= 1); np.quantile would import numpy.ma at start-up."""
    virtual = (count - 1) * q
    below = np.floor(virtual).astype(np.int64)
    above = np.minimum(below + 1, count - 1)
    gamma = virtual - below
    cols = np.arange(ordered.shape[1])
    a, b = ordered[below, cols], ordered[above, cols]
    diff = b - a
    out = a + diff * gamma
    upper = gamma >= 0.5
    out[upper] = (b - diff * (1 - gamma))[upper]
    return out


def _splitmix64(x: U64) -> U64:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def trajectory_key(trajectory_id: str) -> int:
    """A stable 64-bit key for a trajectory id (BLAKE2b); surrogatepass: any str, a lone surrogate too."""
    return int(trajectory_keys([trajectory_id])[0])


def trajectory_keys(ids: Sequence[str]) -> U64:
    """`trajectory_key` of every id, as one array."""
    blake = hashlib.blake2b
    digests = b"".join([blake(i.encode("utf-8", "surrogatepass"), digest_size=8).digest() for i in ids])
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


# Poisson(1) value per bucket j = bits >> 48 of u = (bits >> 11) / 2**53, as uint8 (stays in cache);
# _STRADDLE where a CDF step falls inside the bucket (at most 25 of 65536): elsewhere the exact inverse CDF.
_STRADDLE = 255
_J = np.arange(1 << 16, dtype=np.float64)
_LO = np.searchsorted(_POISSON1_CDF, _J / 65536.0, side="right")
_LUT = np.where(
    _LO != np.searchsorted(_POISSON1_CDF, (_J + 1.0) / 65536.0, side="left"), _STRADDLE, _LO.astype(np.uint8)
).astype(np.uint8)
del _J, _LO


def _weights_into(rep_keys: U64, keys: U64) -> FloatArray:
    """Poisson(1) weights (len(rep_keys), len(keys)), bit for bit the plain definition's: splitmix64's
    last step keeps the top 16 bits, so they index the table before it; only straddling buckets finish
    the hash and take the binary search."""
    z = np.bitwise_xor(rep_keys[:, None], keys[None, :])
    tmp = np.empty_like(z)
    with np.errstate(over="ignore"):
        z += _GOLDEN
        np.right_shift(z, np.uint64(30), out=tmp)
        z ^= tmp
        z *= _MIX1
        np.right_shift(z, np.uint64(27), out=tmp)
        z ^= tmp
        z *= _MIX2
    del tmp
    top16 = z.view(np.uint16)[:, 3::4] if _LITTLE_ENDIAN else z.view(np.uint16)[:, 0::4]
    small = np.take(_LUT, top16, mode="clip")  # (a uint16 index cannot leave the table: no bounds check)
    odd = np.flatnonzero(small == _STRADDLE)
    out = small.astype(np.float64)
    if odd.size:
        bits = z.ravel()[odd]
        bits ^= bits >> np.uint64(31)
        u = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
        out.ravel()[odd] = np.searchsorted(_POISSON1_CDF, u, side="right")
    return out


def _rep_keys(replicates: Sequence[int] | NDArray[np.int64], seed: int) -> U64:
    reps = np.asarray(replicates, dtype=np.uint64)
    seed_key = _splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    return _splitmix64(seed_key ^ _splitmix64(reps))  # one stream per (seed, replicate)


def replicate_weights(keys: U64, replicates: Sequence[int] | NDArray[np.int64], seed: int = DEFAULT_SEED) -> FloatArray:
    """Poisson(1) weights, shape (len(replicates), len(keys)), a pure function of (key, replicate, seed)."""
    return _weights_into(_rep_keys(replicates, seed), np.asarray(keys, dtype=np.uint64))


def replicate_sums(x: FloatArray, keys: U64, n_replicates: int, seed: int = DEFAULT_SEED) -> FloatArray:
    """sum_i W_bi x_ik for every replicate b and column k: the (B, K) mergeable core (sums of
    disjoint row sets add up). Weights are made in cache-sized pieces, applied in one GEMM per buffer."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros((n_replicates, x.shape[1]))
    n = x.shape[0]
    if n_replicates <= 0 or n == 0 or x.shape[1] == 0:
        return out
    rep_keys = _rep_keys(np.arange(n_replicates, dtype=np.int64), seed)
    gemm_block = max(1, min(n, _GEMM_ELEMENTS // n_replicates))
    piece = max(1, min(gemm_block, _BLOCK_ELEMENTS // n_replicates))
    buf = np.empty((n_replicates, gemm_block))
    for g0 in range(0, n, gemm_block):
        g1 = min(n, g0 + gemm_block)
        for i0 in range(g0, g1, piece):
            i1 = min(g1, i0 + piece)
            buf[:, i0 - g0 : i1 - g0] = _weights_into(rep_keys, keys[i0:i1])
        out += buf[:, : g1 - g0] @ x[g0:g1]
    return out


@dataclass
class BootstrapResult:
    """Replicate means of K columns; point estimates are the plain sample means."""

    point: FloatArray  # (K,)
    n: NDArray[np.int64]  # (K,) trajectories in each column
    replicates: FloatArray  # (B, K); NaN where a replicate drew no trajectory of the column

    def se(self) -> FloatArray:
        reps = self.replicates
        out = np.full(reps.shape[1], np.nan)
        cols = np.sum(~np.isnan(reps), axis=0) >= 2
        if cols.any():
            out[cols] = np.nanstd(reps[:, cols], axis=0, ddof=1)
        return out

    def ci(self, level: float = CI_LEVEL) -> tuple[FloatArray, FloatArray]:
        return percentile_ci(self.replicates, level)


def percentile_ci(reps: FloatArray, level: float = CI_LEVEL) -> tuple[FloatArray, FloatArray]:
    """Percentile interval of replicate statistics, column-wise (NaN replicates ignored)."""
    alpha = (1.0 - level) / 2.0
    out = np.full((2, reps.shape[1]), np.nan)
    cols = np.any(~np.isnan(reps), axis=0)
    if cols.any():
        ordered = np.sort(reps[:, cols], axis=0)  # NaN sort last
        count = np.sum(~np.isnan(ordered), axis=0)
        for i, q in enumerate((alpha, 1.0 - alpha)):
            out[i, cols] = linear_quantile(ordered, count, q)
    return out[0], out[1]


@dataclass(frozen=True)
class PairedDelta:
    statistic: str
    a: float
    b: float
    delta: float  # b - a
    se: float
    ci_low: float
    ci_high: float
    n: int

    @property
    def z(self) -> float:
        return self.delta / self.se if self.se > 0 else float("nan")

    def as_dict(self) -> dict[str, float | str | int]:
        return {k: getattr(self, k) for k in ("statistic", "a", "b", "delta", "se", "z", "ci_low", "ci_high", "n")}


def delta_from_replicates(name: str, a: float, b: float, reps: FloatArray, n: int) -> PairedDelta:
    """b - a with the SE and percentile CI of given replicates of the difference (NaN: left out)."""
    se = float(np.nanstd(reps, ddof=1)) if np.sum(~np.isnan(reps)) >= 2 else float("nan")
    lo, hi = percentile_ci(reps[:, None])
    return PairedDelta(name, a, b, b - a, se, float(lo[0]), float(hi[0]), n)


def replicate_means(sums: FloatArray, dens: FloatArray) -> FloatArray:
    """Replicate means from replicate sums; NaN where a replicate drew no trajectory of the column."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(dens > 0, sums / np.where(dens > 0, dens, 1.0), np.nan)


def bootstrap_means(
    columns: FloatArray,
    keys: U64,
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> BootstrapResult:
    """Bootstrap the column means of an (n, K) matrix (NaN: not in the column's sample); columns share
    the weights, so differences of replicate columns are paired replicates of the difference."""
    if not 0 <= n_replicates <= MAX_REPLICATES:  # the replicate matrix is n_replicates x K floats
        raise InputError(f"n_replicates must lie in [0, {MAX_REPLICATES}], got {n_replicates!r}")
    x = np.asarray(columns, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != keys.shape[0]:
        raise InputError("columns must be (n_trajectories, K) with one key per trajectory")
    present = ~np.isnan(x)
    x0 = np.where(present, x, 0.0)
    counts = present.sum(axis=0).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = x0.sum(axis=0) / counts
    # Replicate sums and counts in one pass, the counts once per presence pattern.
    k = x.shape[1]
    first: dict[bytes, int] = {}
    which = [first.setdefault(np.packbits(present[:, j]).tobytes(), j) for j in range(k)]
    distinct = sorted(set(which))
    slot = {j: i for i, j in enumerate(distinct)}
    both = replicate_sums(np.hstack([x0, present[:, distinct].astype(np.float64)]), keys, n_replicates, seed)
    reps_mean = replicate_means(both[:, :k], both[:, k:][:, [slot[j] for j in which]])
    return BootstrapResult(point=point, n=counts, replicates=reps_mean)
