"""The stratified permutation test of the Mann-Whitney statistic (NumPy only): how likely two
groups of runs drawn from one distribution are to look as different as they do.

Two groups, X and Y, with runs on T tasks: x_t (n_t,) and y_t (m_t,) on task t. The statistic
is the mean over tasks of P(X > Y) + 0.5 P(X = Y) (`hcjax.stats.mann_whitney`), the probability
of improvement the reports print. If on every task the n_t + m_t runs are exchangeable (the
null hypothesis: one distribution), every split of task t's pooled runs into n_t and m_t is
equally likely, independently of the other tasks: the stratified permutation distribution,
conditional on the runs' values (ties included). Its mean is 1/2 on every task, and the
two-sided p-value of an observed s is P(|S - 1/2| >= |s - 1/2|) under it: a test of level
alpha (a false call at most a fraction alpha of the time) at every size, however few runs.

How the distribution is computed (`p_values` says which it used):
- "exact": no split is enumerated. On task t, P_t = (R_t - n_t (n_t + 1) / 2) / (n_t m_t), R_t
  the sum of x_t's midranks in the pooled runs; how many n_t-subsets of the pooled midranks
  have each sum is counted by dynamic programming over the runs (a (n_t + 1, range) table,
  O(N_t n_t range) operations; doubled midranks are integers, so ties are exact), and the
  tasks' distributions are convolved on a common lattice of S. Used whenever it costs at most
  EXACT_BUDGET operations: every size the reports meet (60 + 60 runs on 4 tasks: about 2e8).
- "monte carlo (B splits)": otherwise (many runs on tasks of different sizes, whose lattice is
  too fine), B = SPLITS random splits per task from a generator seeded by `seed`, and
  p = (1 + #{b: |S_b - 1/2| >= |s - 1/2|}) / (1 + B), which is a valid test too.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

EXACT_BUDGET = 3e8  # operations (table updates and convolution products) allowed for the exact distribution
SPLITS = 20000  # random splits per task of the Monte Carlo fallback
_TOL = 1e-6  # on the lattice index (spacing 1): distances that equal the observed one count as "as extreme"


def doubled_midranks(pooled: np.ndarray) -> np.ndarray:
    """pooled: (..., N) values -> (..., N) int64: twice each value's midrank (1-based) in its row,
    so that tied values share the mean of their ranks and every rank is an integer."""
    v = np.asarray(pooled, np.float64)
    order = np.argsort(v, axis=-1)
    s = np.take_along_axis(v, order, -1)
    N = v.shape[-1]
    position = np.broadcast_to(np.arange(N), v.shape)
    new = np.ones(v.shape, bool)
    new[..., 1:] = s[..., 1:] != s[..., :-1]  # a tie group starts here
    first = np.maximum.accumulate(np.where(new, position, 0), axis=-1)
    ends = np.ones(v.shape, bool)
    ends[..., :-1] = new[..., 1:]  # a tie group ends here
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, position, N), -1), axis=-1), -1)
    out = np.empty(v.shape, np.int64)
    np.put_along_axis(out, order, (first + last + 2).astype(np.int64), -1)
    return out


def smallest_p(sizes) -> float:
    """The smallest two-sided p-value the test can return for groups of (n_t, m_t) runs per task
    (no ties): both groups' runs entirely apart on every task, one way or the other."""
    splits = math.prod(math.comb(n + m, n) for n, m in sizes)
    return min(1.0, 2.0 / splits)


def _subset_sums(ranks: bytes, k: int) -> np.ndarray:
    """(J + 1,) probabilities of the sum j of a uniformly random k-subset of the (N,) int64 values
    `ranks` (bytes of a sorted array whose smallest value is 0)."""
    r = np.frombuffer(ranks, np.int64)
    top = int(r[r.size - k:].sum()) if k else 0
    table = np.zeros((k + 1, top + 1))
    table[0, 0] = 1.0
    for i, value in enumerate(r):
        rows = min(i + 1, k)
        if value:
            table[1:rows + 1, value:] += table[:rows, :top + 1 - value]  # numpy buffers the overlap
        else:
            table[1:rows + 1] += table[:rows]
        if i % 500 == 499:  # an entry at most doubles per run: rescale every path alike before float64 overflows
            table /= table.max()
    return table[k] / table[k].sum()


@lru_cache(maxsize=256)
def _stratum(ranks: bytes, n: int) -> tuple[int, int, np.ndarray]:
    """(offset, step, (J + 1,) probs): the doubled rank sum of a random n-subset of the task's
    pooled doubled midranks `ranks` (bytes of a sorted int64 array) is offset + step * j with
    probability probs[j]."""
    r = np.frombuffer(ranks, np.int64)
    low = int(r[0])
    step = math.gcd(*(int(v) for v in r - low)) or 1
    shifted = ((r - low) // step).astype(np.int64)
    k = min(n, r.size - n)  # count the smaller side; the other's sum is the total minus it
    probs = _subset_sums(shifted.tobytes(), k)
    if k != n:
        probs = probs[::-1]  # j of the n-subset = total - j of its complement
        top = int(shifted.sum()) - (probs.size - 1)
        return n * low + step * top, step, probs
    return n * low, step, probs


@lru_cache(maxsize=64)
def _null(ranks: tuple[bytes, ...], sizes: tuple[tuple[int, int], ...], budget: float) -> _Null:
    """The null distribution of one tie pattern (each task's sorted doubled midranks, as bytes),
    exact within `budget` operations; cached."""
    return _Null([np.frombuffer(r, np.int64) for r in ranks], list(sizes), budget)


class _Null:
    """The null distribution of S on one tie pattern: S = base + unit * L, L = sum_t stride_t j_t.
    exact: (L + 1,) probabilities over the lattice; else None (draw splits)."""

    def __init__(self, ranks: list[np.ndarray], sizes: list[tuple[int, int]], budget: float):
        self.ranks, self.sizes, self.T = ranks, sizes, len(sizes)
        self.strata = [_stratum(r.tobytes(), n) for r, (n, _) in zip(ranks, sizes)]
        # task t adds (offset_t + step_t j - n_t (n_t + 1)) / (2 n_t m_t T) to S
        slopes = [Fraction(step, 2 * n * m * self.T) for (_, step, _), (n, m) in zip(self.strata, sizes)]
        self.unit = Fraction(math.gcd(*(s.numerator for s in slopes)), math.lcm(*(s.denominator for s in slopes)))
        self.stride = [int(s / self.unit) for s in slopes]
        self.base = sum(Fraction(off - n * (n + 1), 2 * n * m * self.T)
                        for (off, _, _), (n, m) in zip(self.strata, sizes))
        lengths = np.cumsum([k * (p.size - 1) for k, (_, _, p) in zip(self.stride, self.strata)]) + 1
        cost = sum(a * p.size for a, (_, _, p) in zip(lengths, self.strata))
        self.exact = self._convolve() if cost <= budget else None

    def _convolve(self) -> np.ndarray:
        out = np.ones(1)
        for k, (_, _, p) in zip(self.stride, self.strata):
            spread = np.zeros(k * (p.size - 1) + 1)
            spread[::k] = p
            out = np.convolve(out, spread)
        return out

    def lattice(self, stat: np.ndarray) -> np.ndarray:
        """(B,) observed S -> (B,) their distance from 1/2 in lattice units."""
        return np.abs(np.asarray(stat) - 0.5) / float(self.unit)

    def p_values(self, stat: np.ndarray, seed: int) -> np.ndarray:
        """(B,) observed S (on this tie pattern) -> (B,) two-sided p-values."""
        d_obs = self.lattice(stat)
        if self.exact is not None:
            centre = float((Fraction(1, 2) - self.base) / self.unit)
            d = np.abs(np.arange(self.exact.size) - centre)
            order = np.argsort(-d, kind="stable")
            tail = np.cumsum(self.exact[order])  # P(distance >= d[order[i]])
            i = np.searchsorted(-d[order], -(d_obs - _TOL), side="right") - 1
            return np.where(i >= 0, tail[np.maximum(i, 0)], 0.0).clip(0.0, 1.0)
        return self._monte_carlo(d_obs, seed)

    def _monte_carlo(self, d_obs: np.ndarray, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        stat = np.zeros(SPLITS)
        for r, (n, m) in zip(self.ranks, self.sizes):
            pick = np.argsort(rng.random((SPLITS, n + m)), axis=1)[:, :n]
            stat += (np.asarray(r)[pick].sum(1) - n * (n + 1)) / (2 * n * m * self.T)
        d = np.sort(self.lattice(stat))
        as_extreme = d.size - np.searchsorted(d, d_obs - _TOL, side="left")
        return (1.0 + as_extreme) / (1.0 + SPLITS)


def p_values(xs, ys, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """xs, ys: T per-task arrays, x_t (..., n_t) and y_t (..., m_t) with one batch shape (...):
    each batch element is one comparison of two groups. Every n_t, m_t >= 1. -> (stat (...),
    the mean over tasks of P(X > Y) + 0.5 P(X = Y); p (...), two-sided p-values; how: 'exact' or
    'monte carlo (B splits)', the latter if any element needed it). The distribution is
    computed once per tie pattern (once for the whole batch when no run ties another)."""
    xs = [np.asarray(x, np.float64) for x in xs]
    ys = [np.asarray(y, np.float64) for y in ys]
    if not xs or len(xs) != len(ys):
        raise ValueError(f"p_values: xs and ys must name the same tasks (one array each), got {len(xs)} and {len(ys)}")
    batch = xs[0].shape[:-1]
    if any(a.shape[:-1] != batch or a.shape[-1] < 1 for a in xs + ys):
        raise ValueError("p_values: every task's runs must share one batch shape (...) and have a run in each group; "
                         f"got shapes {[a.shape for a in xs]} and {[a.shape for a in ys]}")
    sizes = [(x.shape[-1], y.shape[-1]) for x, y in zip(xs, ys)]
    T = len(sizes)
    ranks = [doubled_midranks(np.concatenate([x, y], -1)).reshape(-1, n + m) for x, y, (n, m) in zip(xs, ys, sizes)]
    stat = sum((r[:, :n].sum(1) - n * (n + 1)) / (2 * n * m * T) for r, (n, m) in zip(ranks, sizes))
    patterns = np.concatenate([np.sort(r, 1) for r in ranks], 1)
    if (patterns == patterns[:1]).all():  # no run ties another (or every row ties alike): one distribution
        first, which = np.zeros(1, int), np.zeros(len(patterns), int)
    else:
        _, first, which = np.unique(patterns, axis=0, return_index=True, return_inverse=True)
    p, how = np.empty(stat.shape), "exact"
    for g, row in enumerate(first):
        null = _null(tuple(np.sort(r[row]).tobytes() for r in ranks), tuple(sizes), EXACT_BUDGET)
        mine = which.ravel() == g
        p[mine] = null.p_values(stat[mine], seed)
        how = how if null.exact is not None else f"monte carlo ({SPLITS} splits)"
    return stat.reshape(batch), p.reshape(batch), how
