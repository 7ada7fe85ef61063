"""The machinery `gp_ucb` and `pb2` share: a ring buffer of observations with a validity
mask, kernel hyperparameters fitted on a grid, a UCB acquisition maximised over random
candidates and refined by gradient steps.

One decision (`ask`) with buffer size N, F = min(fit_points, N), G grid points and
C candidates costs O(G F^3) (fit) + O(N^3) (one Cholesky of the whole buffer, the honest
GP cost) + O(N^2 C) (posterior variance at the candidates) + O(refine_steps N^2).
`tell` is O(h): it writes one row of the ring buffer. Memory (`gp_memory`): the fit
materialises G kernel matrices of F x F at once (the grid is vmapped), the posterior a
few N x N matrices, the prediction two N x C ones.

Kernel hyperparameters, fitted at every `ask`: the signal variance v is profiled out
(its maximum-likelihood value given the rest, `hcjax.gp.condition`); the length scale l,
the noise ratio r = noise / v (and, for PB2, eps) are the point of a fixed grid with the
largest log marginal likelihood of the F most recent valid observations (the first in
grid order among those within 1e-3 of the maximum).

Categorical hyperparameters: the GP sees each option as the centre (i + 0.5) / k of its
bin in [0, 1] (`hcjax.space`), an ordinal encoding: adjacent options are treated as
similar, so order the options accordingly.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hcjax import gp, pytree
from hcjax.space import Space
from hcjax.tuner import Tuner, check_int, check_memory, valid_objective

LENGTHSCALES = (0.1, 0.2, 0.4, 0.8, 1.6)
NOISE_RATIOS = (1e-3, 1e-2, 1e-1, 1.0)


@pytree.dataclass
class GPTunerState:
    """Ring buffer of N observations and the configuration in effect.

    x: (N, h) unit-cube hyperparameters; ctx: (N, c) raw context columns (PB2: time
    index, reward before; gp_ucb: c = 0); y: (N,) objectives; mask: (N,) bool valid
    rows; ptr: int32 next row to write; n_obs: int32 valid objectives told (all time);
    reward_sum: float32 sum of valid objectives told; current: (h,) unit-cube
    configuration in effect; n_invalid: int32 invalid objectives ignored.
    """

    x: jax.Array
    ctx: jax.Array
    y: jax.Array
    mask: jax.Array
    ptr: jax.Array
    n_obs: jax.Array
    reward_sum: jax.Array
    current: jax.Array
    n_invalid: jax.Array


class GPSpec(NamedTuple):
    """What distinguishes one GP tuner from another (static).

    grid: dict name -> (G,) float32 kernel parameters, must hold "lengthscale", "noise";
    correlation(za, zb, p): (n, c + h), (m, c + h), params -> (n, m) unit-variance kernel;
    context(state): (c,) raw context of the next observation;
    targets(y, mask): (N,) -> (N,) targets the GP models;
    beta(n_obs, n_valid, n_candidates): scalar UCB weight (acquisition mean + sqrt(beta) std).
    """

    grid: dict
    correlation: Callable
    context: Callable
    targets: Callable
    beta: Callable


def check_gp_options(name, buffer, candidates, refine_steps, fit_points) -> tuple[int, int, int, int]:
    """Validate the options both GP tuners share (ValueError naming the field) -> the
    same as Python ints."""
    return (check_int(f"{name}.buffer", buffer, 2, 2 ** 31 - 1), check_int(f"{name}.candidates", candidates, 1),
            check_int(f"{name}.refine_steps", refine_steps, 0), check_int(f"{name}.fit_points", fit_points, 2))


def gp_memory(h: int, n_context: int, n_grid: int, buffer: int, candidates: int, fit_points: int) -> int:
    """Estimated peak bytes of one GP tuner (float32): the state twice ((N, h + c + 1)
    buffer and (N,) mask), plus ask's temporaries: 4 G F^2 (the grid search builds G
    F x F kernel matrices and their factors at once), 5 N^2 (the posterior's kernel,
    factor, block inverses, and the copy a batched factorisation makes: 4.4 N^2 measured
    with jax 0.11's batched CPU path, N = 400) and 2 N C (data-candidate kernel and its
    solve), F = min(fit_points, N). Calibrated against XLA's buffer assignment on the CPU
    (`compile().memory_analysis()`), which it bounds from above (tests/test_baselines.py)."""
    N, F = buffer, min(fit_points, buffer)
    state = 4 * N * (h + n_context + 1) + N + 4 * h + 20
    return 2 * state + 4 * (4 * n_grid * F * F + 5 * N * N + 2 * N * candidates) + 16 * 1024


def product_grid(**axes) -> dict:
    """Cartesian product of named 1-D value lists -> dict of (G,) float32 arrays."""
    mesh = np.meshgrid(*[np.asarray(v, np.float64) for v in axes.values()], indexing="ij")
    return {k: jnp.asarray(m.reshape(-1), jnp.float32) for k, m in zip(axes, mesh)}


def tie_tolerance(top: jax.Array) -> jax.Array:
    """1e-4 (1 + |top|) (1e-4 for a non-finite top): scores this close to the maximum are ties."""
    return 1e-4 * (1.0 + jnp.where(jnp.isfinite(top), jnp.abs(top), 0.0))


def first_max(scores: jax.Array) -> jax.Array:
    """Index of the first of (m,) scores within `tie_tolerance` of the maximum (non-finite
    scores count as -inf): far from the data the acquisition is flat up to rounding, and
    ties must not be broken by rounding noise (which differs between vmapped and separate runs)."""
    scores = jnp.where(jnp.isfinite(scores), scores, -jnp.inf)
    return jnp.argmax(scores >= jnp.max(scores) - tie_tolerance(jnp.max(scores)))


def fit_kernel(correlation: Callable, grid: dict, Z: jax.Array, y: jax.Array, mask: jax.Array, ptr: jax.Array,
               F: int) -> dict:
    """Grid search of the kernel parameters on the F newest rows of a ring buffer (Z (N, c),
    y (N,), mask (N,), ptr the next row written): the grid point with the largest
    profiled log likelihood, the first within 1e-3 of it (near-ties, e.g. eps barely
    changing the likelihood, resolve the same way whatever the float rounding)."""
    rows = (ptr - 1 - jnp.arange(F)) % y.shape[0]
    Zf, yf, mf = Z[rows], y[rows], mask[rows]

    def lml(p):
        return gp.profile_log_likelihood(correlation(Zf, Zf, p), yf, mf, p["noise"])

    scores = jax.vmap(lml)(grid)
    scores = jnp.where(jnp.isfinite(scores), scores, -jnp.inf)
    best = jnp.argmax(scores >= jnp.max(scores) - 1e-3)
    return {k: v[best] for k, v in grid.items()}


def make_gp_tuner(name: str, space: Space, spec: GPSpec, *, buffer: int, candidates: int, refine_steps: int,
                  fit_points: int, n_context: int, memory_limit_gib: float) -> Tuner:
    """Build a GP-UCB-style tuner from `spec` (see `GPSpec`); options validated by the
    caller, memory checked here (`gp_memory`) before anything is allocated."""
    h, N = space.h, buffer
    F = min(fit_points, N)
    gp.warn_if_protected(f"{name} on the CPU")
    n_grid = len(next(iter(spec.grid.values())))
    memory = check_memory(name, gp_memory(h, n_context, n_grid, N, candidates, fit_points), memory_limit_gib,
                          f"buffer={N}, fit_points={fit_points}, candidates={candidates} (a grid of {n_grid} "
                          f"kernel parameters, h={h} hyperparameters)")

    def init(key):
        return GPTunerState(
            x=jnp.zeros((N, h), jnp.float32),
            ctx=jnp.zeros((N, n_context), jnp.float32),
            y=jnp.zeros((N,), jnp.float32),
            mask=jnp.zeros((N,), bool),
            ptr=jnp.zeros((), jnp.int32),
            n_obs=jnp.zeros((), jnp.int32),
            reward_sum=jnp.zeros((), jnp.float32),
            current=jax.random.uniform(key, (h,)),
            n_invalid=jnp.zeros((), jnp.int32),
        )

    def inputs(state):
        """(N, c + h) scaled training inputs, (c,) scaled context of the next observation."""
        now = spec.context(state)
        if n_context == 0:
            return state.x, now
        ctx, now_s = gp.minmax_scale(state.ctx, state.mask, now[None])
        return jnp.concatenate([ctx, state.x], 1), now_s[0]

    def ask(state, key):
        k_cand, k_rand = jax.random.split(key)
        y = spec.targets(state.y, state.mask)
        Z, now = inputs(state)
        p = fit_kernel(spec.correlation, spec.grid, Z, y, state.mask, state.ptr, F)
        post = gp.condition(spec.correlation(Z, Z, p), y, state.mask, p["noise"])
        n_valid = jnp.sum(state.mask)
        root_beta = jnp.sqrt(spec.beta(state.n_obs, n_valid, candidates))

        def ucb(U):
            """(m, h) unit candidates -> (m,) acquisition."""
            Zc = jnp.concatenate([jnp.broadcast_to(now, (U.shape[0], n_context)), U], 1)
            mean, var = gp.predict(post, spec.correlation(Z, Zc, p))
            return mean + root_beta * jnp.sqrt(var + 1e-12)

        U = jax.random.uniform(k_cand, (candidates, h))
        acq = ucb(U)
        acq = jnp.where(jnp.isfinite(acq), acq, -jnp.inf)
        # The first candidate within `tol` of the best; refinement steps must gain more than `tol`.
        tol = tie_tolerance(jnp.max(acq))
        i = first_max(acq)
        u, best = U[i], acq[i]

        def step(k, carry):
            # Normalised gradient ascent, step 0.1 * 0.7^k; keep the best point seen.
            u, best_u, best = carry
            a, g = jax.value_and_grad(lambda v: ucb(v[None])[0])(u)
            better = jnp.isfinite(a) & (a > best + tol)
            best_u, best = jnp.where(better, u, best_u), jnp.where(better, a, best)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            norm = jnp.linalg.norm(g)
            u = jnp.where(norm > 1e-6, jnp.clip(u + 0.1 * 0.7 ** k * g / jnp.maximum(norm, 1e-6), 0.0, 1.0), u)
            return u, best_u, best

        if refine_steps > 0:
            _, u, _ = jax.lax.fori_loop(0, refine_steps, step, (u, u, best))
        random_u = jax.random.uniform(k_rand, (h,))
        use = (n_valid > 0) & jnp.all(jnp.isfinite(u))
        u = jnp.clip(jnp.where(use, u, random_u), 0.0, 1.0)
        # Store the unit coordinates of the values actually applied (integers rounded);
        # the values returned are those coordinates decoded, exactly what `values` gives.
        state = state.replace(current=space.encode(space.decode(u)))
        return state, values(state)

    def tell(state, objective):
        x = jnp.asarray(objective, jnp.float32)
        valid = valid_objective(x)
        x = jnp.where(valid, x, 0.0)
        i = state.ptr

        def put(buf, row):
            return buf.at[i].set(jnp.where(valid, row, buf[i]))

        return state.replace(
            x=put(state.x, state.current),
            ctx=put(state.ctx, spec.context(state)),
            y=put(state.y, x),
            mask=put(state.mask, True),
            ptr=jnp.where(valid, (i + 1) % N, i).astype(jnp.int32),
            n_obs=state.n_obs + valid.astype(jnp.int32),
            reward_sum=state.reward_sum + x,
            n_invalid=state.n_invalid + (~valid).astype(jnp.int32),
        )

    def values(state):
        """(h,) the configuration in effect: `current` decoded."""
        return space.decode(state.current)

    def place(state, values):
        """`values` (h,) in effect: its unit coordinates are the next observation's inputs."""
        return state.replace(current=space.encode(space.clip(jnp.asarray(values, jnp.float32))))

    return Tuner(name, space, init, ask, tell, memory, values, index_bounds=(("ptr", N),), place=place)


__all__ = ["GPSpec", "GPTunerState", "LENGTHSCALES", "NOISE_RATIOS", "check_gp_options", "gp_memory",
           "make_gp_tuner", "product_grid"]
