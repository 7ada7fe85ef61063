"""Bootstrap primitives for few-seed RL comparisons (NumPy only), as rliable computes them:
the interquartile mean, the Mann-Whitney statistic P(X > Y) + 0.5 P(X = Y), percentile
intervals, and the stratified bootstrap's resampling.

A stratum is a set of seeds resampled together (one method on one environment), named by
two strings (env, method). Its draws come from a generator seeded by (seed, env, method),
so they are deterministic and independent of every other stratum and of the order in
which strata are visited. `hcjax.control` reports a tuned batch against its control group
with these; experiments.reporting.stats builds a study's aggregates, probabilities of
improvement and performance profiles on them.
"""
from __future__ import annotations

import threading
import zlib
from collections import OrderedDict

import numpy as np

REPS = 2000  # bootstrap replicates
CONFIDENCE = 0.95


def finite(x) -> np.ndarray:
    """(n,) float64: the finite entries of a per-seed score array, in order."""
    x = np.asarray(x, np.float64).ravel()
    return x[np.isfinite(x)]


def iqm(x, axis: int = -1) -> np.ndarray:
    """Interquartile mean along `axis` (x: (..., n, ...)): scipy.stats.trim_mean(x, 0.25),
    i.e. the mean after dropping the floor(n/4) lowest and highest values. NaN when n = 0."""
    x = np.sort(np.asarray(x, np.float64), axis=axis)
    n = x.shape[axis]
    if n == 0:
        return np.full(np.delete(x.shape, axis % x.ndim), np.nan)[()]
    cut = n // 4
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def stratum_rng(seed: int, env: str, method: str) -> np.random.Generator:
    """The generator of one stratum, from (seed, env, method): independent of the study's
    other strata and of the order in which they are visited."""
    words = [int(seed)] + [zlib.crc32(s.encode()) for s in (env, method)]
    return np.random.default_rng(np.random.SeedSequence(words))


def stratum_indices(n: int, reps: int, seed: int, env: str, method: str) -> np.ndarray:
    """(reps, n) bootstrap draws (seed indices, with replacement) of the stratum (env, method)."""
    return stratum_rng(seed, env, method).integers(0, n, size=(reps, n))


def resample(x: np.ndarray, reps: int, seed: int, env: str, method: str) -> np.ndarray:
    """(reps, n): `reps` bootstrap resamples of the (n,) scores x of the stratum (env, method)."""
    return x[stratum_indices(x.size, reps, seed, env, method)]


COUNTS_CACHE_BYTES = 32 * 2 ** 20  # the most memory `resample_counts` keeps its results in
_counts_cache: OrderedDict = OrderedDict()  # (n, reps, seed, env, method) -> read-only (reps, n)
_counts_lock = threading.Lock()


def resample_counts(n: int, reps: int, seed: int, env: str, method: str) -> np.ndarray:
    """(reps, n) float: how often each of the stratum's n seeds is drawn in each resample (the
    same draws as `resample`), so that a statistic linear in each method's resample is a
    matrix product. Read-only, and kept (the most recently used, up to COUNTS_CACHE_BYTES): a
    verdict or a calibration asks for the same stratum's counts in every comparison it is in
    (tests/test_verdict.py asked 143k times for 226 strata)."""
    key = (int(n), int(reps), int(seed), env, method)
    with _counts_lock:
        if (hit := _counts_cache.get(key)) is not None:
            _counts_cache.move_to_end(key)
            return hit
    idx = stratum_indices(n, reps, seed, env, method)
    flat = (np.arange(reps)[:, None] * n + idx).ravel()
    counts = np.bincount(flat, minlength=reps * n).reshape(reps, n).astype(np.float64)
    counts.flags.writeable = False
    with _counts_lock:
        _counts_cache[key] = counts
        kept = sum(c.nbytes for c in _counts_cache.values())
        while kept > COUNTS_CACHE_BYTES and len(_counts_cache) > 1:
            kept -= _counts_cache.popitem(last=False)[1].nbytes
    return counts


def interval(boot: np.ndarray, confidence: float = CONFIDENCE) -> np.ndarray:
    """boot: (reps, ...) bootstrap values -> (2, ...) percentile interval [low, high]."""
    tail = 50.0 * (1.0 - confidence)
    return np.percentile(boot, [tail, 100.0 - tail], axis=0)


def mann_whitney(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) + 0.5 P(X = Y) over all pairs of the (n,) x and (m,) y."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(np.mean((x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])))


def mann_whitney_boot(x: np.ndarray, y: np.ndarray, reps: int, seed: int, env: str,
                      names: tuple[str, str]) -> np.ndarray:
    """(reps,): `mann_whitney` of x (n,) against y (m,) on each bootstrap replicate, the seeds
    of x resampled as stratum (env, names[0]) and those of y as (env, names[1]), with the
    draws of `resample` (computed from the draw counts: no (reps, n, m) array)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    wins = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])  # (n, m)
    cx = resample_counts(x.size, reps, seed, env, names[0])
    cy = resample_counts(y.size, reps, seed, env, names[1])
    return np.einsum("ri,ij,rj->r", cx, wins, cy) / (x.size * y.size)
