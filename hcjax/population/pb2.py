"""`pb2_population`: population-based bandits (Parker-Holder et al., 2020) over the agent
axis: PBT's exploit, and the replaced agents' new configurations chosen as a batch by a
time-varying GP-UCB fitted to the whole population's data.

Data. At every `step`, each agent with a valid objective and a known starting level
gives one observation: inputs (time index, its configuration in [0, 1]^h), target the
change of its objective over the interval, objective - level it started the interval
from (its own previous objective, or its donor's if it was replaced: the network it
trained). Time index = the number of steps before the interval began. Observations go
into a ring buffer of `buffer` rows with a validity mask (invalid ones take no row);
with more agents than rows, a uniform random subset of the valid ones is written.

Model (as `hcjax.tuners.pb2`, without its reward-before column: the paper's inputs).
Time min-max scaled to [0, 1] over the buffer and the time being decided; targets
standardised over the buffer and clipped to [-2, 2]; kernel
v exp(-|x - x'|^2 / (2 l^2)) (1 - eps)^(|t - t'| / 2) with v profiled and (l, r = noise
/ v, eps) the best point of the grid l in {0.1, 0.2, 0.4, 0.8, 1.6} x r in {1e-3, 1e-2,
1e-1, 1} x eps in {0.01, 0.1, 0.5} by log marginal likelihood of the `fit_points` newest
rows (`hcjax.gp`). beta_t = 0.2 + max(0, log(0.4 N_valid)).

Batch selection (GP-BUCB, Desautels et al. 2014). The candidates are `candidates`
uniform points plus the configurations of the m best agents; UCB = mean +
sqrt(beta_t) std of the posterior at the next time index. The replaced agents are served
in index order: the k-th takes the candidate with the largest UCB, then that candidate
is added as a pseudo-observation equal to its posterior mean (the mean does not move;
the covariance takes the rank-1 update S - S[:, j] S[j, :] / (S[j, j] + v r)), which
lowers the UCB around it before the next choice. Ties: the first candidate within
1e-4 (1 + |max|) of the maximum. With no valid data yet (the first step): uniform
random configurations.

Exploit: `hcjax.population.exploit.select`. Randomness: key -> (k_write, k_select,
k_candidates, k_random) = jax.random.split(key, 4). Cost of one step: O(G F^3 + N^3 +
N^2 M + N M^2 + r M^2), N = buffer, F = min(fit_points, N), G = 60 grid points, M =
candidates + m, r agents replaced.

Categorical hyperparameters: the GP sees each option as the centre (i + 0.5) / k of its
bin in [0, 1] (`hcjax.space`), an ordinal encoding: adjacent options are treated as
similar, so order the options accordingly.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from hcjax import gp, pytree
from hcjax.population.base import (
    Population,
    check_objectives,
    check_population_memory,
    check_population_size,
    register_population,
)
from hcjax.population.exploit import quantile_size, select
from hcjax.population.pbt import check_quantile
from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, check_int, valid_objective
from hcjax.tuners.gp_common import first_max, fit_kernel, product_grid
from hcjax.tuners.pb2 import GRID_AXES, pb2_beta, pb2_correlation, pb2_targets
from hcjax.tuners.random import sample


@pytree.dataclass
class PB2PopulationState:
    """values: (n, h) configurations in effect; ring buffer of N observations: x (N, h)
    in [0, 1], time (N,) float32 time index, y (N,) objective changes, mask (N,) bool,
    ptr int32 next row; before: (n,) objective level each agent started its interval
    from; has_before: (n,) bool that level is known and valid; t: int32 steps done;
    n_invalid, n_replaced: int32 counts (all time)."""

    values: jax.Array
    x: jax.Array
    time: jax.Array
    y: jax.Array
    mask: jax.Array
    ptr: jax.Array
    before: jax.Array
    has_before: jax.Array
    t: jax.Array
    n_invalid: jax.Array
    n_replaced: jax.Array


def batch_ucb(mean: jax.Array, cov: jax.Array, noise_var, root_beta, count, size: int
              ) -> tuple[jax.Array, jax.Array]:
    """GP-BUCB over M candidates: mean (M,), posterior covariance (M, M), observation
    noise variance, sqrt(beta), number of choices `count` (traced, <= size) -> (size,)
    int32 chosen candidate indices (the first `count` meaningful, 0 after) and the
    final covariance.

    Choice k: argmax of mean + root_beta sqrt(diag cov) (first within tolerance); then
    cov <- cov - cov[:, j] cov[j, :] / (cov[j, j] + noise_var)."""
    def body(carry):
        k, cov, chosen = carry
        acq = mean + root_beta * jnp.sqrt(jnp.maximum(jnp.diagonal(cov), 0.0) + 1e-12)
        j = first_max(acq).astype(jnp.int32)
        col = cov[:, j]
        cov = cov - jnp.outer(col, col) / (col[j] + noise_var)
        return k + 1, cov, chosen.at[k].set(j)

    _, cov, chosen = jax.lax.while_loop(lambda c: c[0] < count, body,
                                        (jnp.zeros((), jnp.int32), cov, jnp.zeros((size,), jnp.int32)))
    return chosen, cov


def pb2_population_memory(n: int, h: int, buffer: int, candidates: int, fit_points: int, m: int) -> int:
    """Estimated peak bytes of one population step (float32): the state twice plus the
    grid fit (G kernel matrices of F x F and their factors), the posterior (4 N^2), the
    data-candidate kernel and its solve (3 N M) and the candidate covariance (3 M^2)."""
    N, F, M, G = buffer, min(fit_points, buffer), candidates + m, math.prod(map(len, GRID_AXES.values()))
    state = 4 * (N * (h + 3) + n * (h + 2) + 6)
    return 2 * state + 4 * (4 * G * F * F + 4 * N * N + 3 * N * M + 3 * M * M + 4 * n * h) + 16 * 1024


@register_population("pb2_population")
def pb2_population(space: Space, *, quantile: float = 0.25, buffer: int = 1000, candidates: int = 256,
                   fit_points: int = 128, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Population:
    """PB2 over the population: PBT's exploit with quantile q in (0, 0.5]; GP ring buffer
    of `buffer` observations (>= 2); `candidates` uniform candidates (>= 1) plus the top
    quantile's configurations; kernel fit on the `fit_points` newest rows (>= 2)."""
    name = "pb2_population"
    quantile = check_quantile(name, quantile)
    N = check_int(f"{name}.buffer", buffer, 2, 2 ** 31 - 1)
    C = check_int(f"{name}.candidates", candidates, 1)
    F = min(check_int(f"{name}.fit_points", fit_points, 2), N)
    h = space.h
    grid = product_grid(**GRID_AXES)

    def memory_bytes(n: int) -> int:
        return pb2_population_memory(n, h, N, C, F, quantile_size(n, quantile))

    def init(key, n):
        n = check_population_size(name, n)
        check_population_memory(name, memory_bytes(n), memory_limit_gib, n,
                                f"buffer={N}, candidates={C}, fit_points={F}, h={h}")
        values = sample(space, key, (n,))
        zero = jnp.zeros((), jnp.int32)
        state = PB2PopulationState(
            values=values, x=jnp.zeros((N, h), jnp.float32), time=jnp.zeros((N,), jnp.float32),
            y=jnp.zeros((N,), jnp.float32), mask=jnp.zeros((N,), bool), ptr=zero,
            before=jnp.zeros((n,), jnp.float32), has_before=jnp.zeros((n,), bool), t=zero, n_invalid=zero,
            n_replaced=zero)
        return state, values

    def record(state, key, objectives, valid):
        """Write this interval's valid observations into the ring buffer."""
        n = objectives.shape[0]
        change = objectives - state.before
        ok = valid & state.has_before & valid_objective(change)
        # Valid observations first, in random order (a uniform subset when n > N).
        priority = ok.astype(jnp.float32) + jax.random.uniform(key, (n,), maxval=0.5)
        src = jnp.argsort(-priority)[:min(n, N)]
        count = jnp.minimum(jnp.sum(ok), N).astype(jnp.int32)
        j = jnp.arange(src.shape[0], dtype=jnp.int32)
        rows = (state.ptr + j) % N
        write = j < count

        def put(buf, new):
            old = buf[rows]
            keep = write.reshape(write.shape + (1,) * (new.ndim - 1))
            return buf.at[rows].set(jnp.where(keep, new, old))

        return state.replace(
            x=put(state.x, space.encode(state.values)[src]),
            time=put(state.time, jnp.broadcast_to(state.t.astype(jnp.float32), src.shape)),
            y=put(state.y, jnp.where(ok, change, 0.0)[src]),
            mask=put(state.mask, jnp.ones(src.shape, bool)),
            ptr=(state.ptr + count) % N,
        )

    def explore(state, key, objectives, valid, replaced, m):
        """(n, h) unit configurations: GP-BUCB choices for the replaced agents, random elsewhere."""
        n = objectives.shape[0]
        k_cand, k_random = jax.random.split(key)
        y = pb2_targets(state.y, state.mask)
        now = (state.t + 1).astype(jnp.float32)
        ctx, now_s = gp.minmax_scale(state.time[:, None], state.mask, jnp.reshape(now, (1, 1)))
        Z = jnp.concatenate([ctx, state.x], 1)
        p = fit_kernel(pb2_correlation, grid, Z, y, state.mask, state.ptr, F)
        post = gp.condition(pb2_correlation(Z, Z, p), y, state.mask, p["noise"])
        _, top = jax.lax.top_k(jnp.where(valid, objectives, -jnp.inf), max(m, 1))
        U = jnp.concatenate([jax.random.uniform(k_cand, (C, h)), space.encode(state.values[top])], 0)
        Zc = jnp.concatenate([jnp.broadcast_to(now_s, (U.shape[0], 1)), U], 1)
        Kdc = jnp.where(state.mask[:, None], pb2_correlation(Z, Zc, p), 0.0)
        mean = Kdc.T @ post.alpha
        W = gp.solve_lower(post.L, Kdc, post.inverses)
        cov = post.variance * (pb2_correlation(Zc, Zc, p) - W.T @ W)
        n_valid = jnp.sum(state.mask)
        root_beta = jnp.sqrt(pb2_beta(None, n_valid, None))
        count = jnp.sum(replaced).astype(jnp.int32)
        chosen, _ = batch_ucb(mean, cov, post.variance * p["noise"], root_beta, count, n)
        # The k-th replaced agent (in index order) takes the k-th choice.
        slot = jnp.clip(jnp.cumsum(replaced) - 1, 0, n - 1)
        picked = U[chosen[slot]]
        random_u = jax.random.uniform(k_random, (n, h))
        use = (n_valid > 0) & jnp.all(jnp.isfinite(picked), axis=1, keepdims=True)
        return jnp.where(use, picked, random_u)

    def step(state, key, objectives):
        n = state.values.shape[0]
        objectives = check_objectives(name, objectives, n)
        k_write, k_select, k_explore = jax.random.split(key, 3)
        valid = valid_objective(objectives)
        m = quantile_size(n, quantile)
        state = record(state, k_write, objectives, valid)
        replaced, parents = select(k_select, objectives, m)
        if m > 0:
            unit = explore(state, k_explore, objectives, valid, replaced, m)
            values = jnp.where(replaced[:, None], space.decode(unit), state.values)
        else:
            values = state.values
        level = jnp.where(valid, objectives, 0.0)
        state = state.replace(
            values=values, before=level[parents], has_before=valid[parents], t=state.t + 1,
            n_invalid=state.n_invalid + jnp.sum(~valid).astype(jnp.int32),
            n_replaced=state.n_replaced + jnp.sum(replaced).astype(jnp.int32))
        return state, values, parents

    return Population(name, space, init, step, memory_bytes)
