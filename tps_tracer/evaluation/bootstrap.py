"""Bootstrap over trajectories with replicate weights derived from the trajectory id.

We use the Poisson bootstrap: replicate b gives trajectory i the weight
W_bi ~ Poisson(1), and the replicate mean of a column is sum_i W_bi x_i / sum_i W_bi.
W_bi is not drawn from a stateful RNG but computed from (trajectory id, b, seed) by a
counter-based hash (splitmix64), so

- the result does not depend on file order, and a trajectory's weights are the same
  wherever it is scored: the online accumulator (which only ever sees one trajectory
  at a time, on many workers) reproduces the batch report's replicates exactly;
- paired deltas (cen-simple minus complete-only, raw minus recalibrated) come for free:
  both columns see the same weights in every replicate.

The Poisson bootstrap approximates the multinomial one (Hanley & MacGibbon 2006;
Chamandy et al. 2012) and is the standard choice for streaming, mergeable estimates.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
U64 = NDArray[np.uint64]

DEFAULT_REPLICATES = 1000
DEFAULT_SEED = 0
CI_LEVEL = 0.95
# Work on at most this many (replicate x trajectory) weights at once (~32 MB as float64).
_BLOCK_ELEMENTS = 4_000_000

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Poisson(1) CDF up to k = 24 (the tail beyond is below 1e-25, under float64 resolution of u).
_POISSON1_CDF = np.cumsum(np.exp(-1.0) / np.cumprod(np.concatenate(([1.0], np.arange(1.0, 25.0)))))


def _splitmix64(x: U64) -> U64:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def trajectory_key(trajectory_id: str) -> int:
    """A stable 64-bit key for a trajectory id (BLAKE2b), independent of process and platform."""
    # surrogatepass: ids are any str (a lone surrogate included); valid text encodes as plain UTF-8.
    data = trajectory_id.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def trajectory_keys(ids: Sequence[str]) -> U64:
    return np.fromiter(map(trajectory_key, ids), dtype=np.uint64, count=len(ids))


def replicate_weights(keys: U64, replicates: Sequence[int] | NDArray[np.int64], seed: int = DEFAULT_SEED) -> FloatArray:
    """Poisson(1) weights, shape (len(replicates), len(keys)), a pure function of (key, replicate, seed)."""
    reps = np.asarray(replicates, dtype=np.uint64)
    seed_key = _splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    rep_keys = _splitmix64(seed_key ^ _splitmix64(reps))  # one stream per (seed, replicate)
    bits = _splitmix64(rep_keys[:, None] ^ keys[None, :])
    u = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)  # [0, 1)
    return np.searchsorted(_POISSON1_CDF, u, side="right").astype(np.float64)


@dataclass
class BootstrapResult:
    """Replicate means of K columns; point estimates are the plain sample means."""

    point: FloatArray  # (K,)
    n: NDArray[np.int64]  # (K,) trajectories in each column
    replicates: FloatArray  # (B, K); NaN where a replicate drew no trajectory of the column

    def se(self) -> FloatArray:
        return _nanstd(self.replicates)

    def ci(self, level: float = CI_LEVEL) -> tuple[FloatArray, FloatArray]:
        return percentile_ci(self.replicates, level)


def _nanstd(reps: FloatArray) -> FloatArray:
    ok = np.sum(~np.isnan(reps), axis=0)
    out = np.full(reps.shape[1], np.nan)
    cols = ok >= 2
    if cols.any():
        out[cols] = np.nanstd(reps[:, cols], axis=0, ddof=1)
    return out


def percentile_ci(reps: FloatArray, level: float = CI_LEVEL) -> tuple[FloatArray, FloatArray]:
    """Percentile interval of replicate statistics, column-wise (NaN replicates ignored)."""
    alpha = (1.0 - level) / 2.0
    out_lo = np.full(reps.shape[1], np.nan)
    out_hi = np.full(reps.shape[1], np.nan)
    cols = np.any(~np.isnan(reps), axis=0)
    if cols.any():
        lo, hi = np.nanquantile(reps[:, cols], [alpha, 1.0 - alpha], axis=0)
        out_lo[cols], out_hi[cols] = lo, hi
    return out_lo, out_hi


def bootstrap_means(
    columns: FloatArray,
    keys: U64,
    n_replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> BootstrapResult:
    """Bootstrap the means of the columns of an (n, K) matrix; NaN marks 'not in this column's sample'.

    All columns share the replicate weights, so differences of replicate columns are
    paired bootstrap replicates of the difference of means.
    """
    x = np.asarray(columns, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != keys.shape[0]:
        raise ValueError("columns must be (n_trajectories, K) with one key per trajectory")
    present = ~np.isnan(x)
    x0 = np.where(present, x, 0.0)
    m = present.astype(np.float64)
    n_traj = x.shape[0]
    counts = present.sum(axis=0).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = x0.sum(axis=0) / counts
    sums = np.zeros((n_replicates, x.shape[1]))
    dens = np.zeros((n_replicates, x.shape[1]))
    if n_replicates > 0 and n_traj > 0:
        block_reps = max(1, min(n_replicates, _BLOCK_ELEMENTS // n_traj))
        block_traj = min(n_traj, _BLOCK_ELEMENTS // block_reps)
        for r0 in range(0, n_replicates, block_reps):
            reps = np.arange(r0, min(n_replicates, r0 + block_reps), dtype=np.int64)
            for i0 in range(0, n_traj, block_traj):
                sl = slice(i0, i0 + block_traj)
                w = replicate_weights(keys[sl], reps, seed)
                sums[reps] += w @ x0[sl]
                dens[reps] += w @ m[sl]
    with np.errstate(invalid="ignore", divide="ignore"):
        reps_mean = np.where(dens > 0, sums / np.where(dens > 0, dens, 1.0), np.nan)
    return BootstrapResult(point=point, n=counts, replicates=reps_mean)
