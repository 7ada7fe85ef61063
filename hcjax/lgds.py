"""The paper's synthetic problem: a linear Gaussian dynamical system (LGDS) bandit.

A hidden state z over K configurations evolves as z_{t+1} = Gamma z_t + xi_t,
xi_t ~ N(0, Q); choosing configuration A_t yields X_t = z_t[A_t] + eta_t,
eta_t ~ N(0, sigma^2). Pseudo-regret at t is max_A z_t[A] - z_t[A_t].

The configurations are the product of h per-hyperparameter grids of d arms
(K = d^h, row-major: A = ravel_multi_index(arms, (d,)*h)), so the action space matches
HyperController's; h = 1 gives the plain K-armed variant.

Gamma = rho (alpha I + (1 - alpha) M / ||M||_2), M standard normal: ||Gamma||_2 <= rho < 1,
so Gamma is Schur-stable; alpha sets how persistent each configuration's value is.
Q = q^2 (k(c, c') + 1e-4 I) with k a squared-exponential kernel over the configurations'
unit-grid coordinates c (length scale ell): nearby configurations drift together.
Everything is pure JAX: `make` and `run` jit and vmap over keys, so thousands of
problems run at once. ||M||_2 is an SVD: vmapped on the CPU with jax < 0.11 it runs one
matrix per LAPACK call (`hcjax.gp.platform_batched`), as batched calls can deadlock XLA:CPU
there; Q's Cholesky factor depends on no key and is never batched.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from hcjax import pytree
from hcjax.gp import platform_batched
from hcjax.space import unit_space
from hcjax.tuner import Tuner, check_float, check_int


@pytree.dataclass
class LGDS:
    """gamma: (K, K); noise_chol: (K, K) lower Cholesky factor of Q; sigma: () observation
    noise std; z0: (K,) initial state (after burn-in); h, d: static grid shape."""

    gamma: jax.Array
    noise_chol: jax.Array
    sigma: jax.Array
    z0: jax.Array
    h: int = pytree.static_field()
    d: int = pytree.static_field()


@platform_batched
def _spectral_norm(m: jax.Array) -> jax.Array:
    """(k, k) -> () its largest singular value, by an SVD (`platform_batched`)."""
    return jnp.linalg.norm(m, ord=2)


def config_coordinates(h: int, d: int) -> np.ndarray:
    """(d^h, h) unit-grid coordinates of every configuration, row-major order."""
    axes = [np.linspace(0.0, 1.0, d)] * h
    return np.array(list(itertools.product(*axes)), np.float32).reshape(d**h, h)


def make(key: jax.Array, h: int = 2, d: int = 10, *, rho: float = 0.95, alpha: float = 0.8,
         process_noise: float = 0.3, length_scale: float = 0.3, obs_noise: float = 0.5,
         burn_in: int = 100) -> LGDS:
    """A random Schur-stable LGDS over the d^h configurations of h grids of d arms."""
    h = check_int("lgds.h", h, 1)
    d = check_int("lgds.d", d, 2)
    rho = check_float("lgds.rho", rho, 0.0, 1.0, low_open=True)
    if rho >= 1.0:
        raise ValueError(f"lgds.rho must be in (0, 1) for a Schur-stable Gamma, got {rho}")
    alpha = check_float("lgds.alpha", alpha, 0.0, 1.0)
    process_noise = check_float("lgds.process_noise", process_noise, 0.0)
    length_scale = check_float("lgds.length_scale", length_scale, 0.0, low_open=True)
    obs_noise = check_float("lgds.obs_noise", obs_noise, 0.0)
    check_int("lgds.burn_in", burn_in, 0)
    k = d**h
    k_gamma, k_z = jax.random.split(key)
    m = jax.random.normal(k_gamma, (k, k))
    m = m / _spectral_norm(m)
    gamma = rho * (alpha * jnp.eye(k) + (1.0 - alpha) * m)
    c = jnp.asarray(config_coordinates(h, d))
    sq = jnp.sum((c[:, None, :] - c[None, :, :]) ** 2, axis=-1)
    q = process_noise**2 * (jnp.exp(-0.5 * sq / length_scale**2) + 1e-4 * jnp.eye(k))
    chol = jnp.linalg.cholesky(q)

    def step(z, key):
        return gamma @ z + chol @ jax.random.normal(key, (k,)), None

    z0, _ = jax.lax.scan(step, jnp.zeros(k), jax.random.split(k_z, burn_in))
    return LGDS(gamma=gamma, noise_chol=chol, sigma=jnp.float32(obs_noise), z0=z0, h=h, d=d)


def run(problem: LGDS, tuner: Tuner, key: jax.Array, n: int) -> jax.Array:
    """(n,) per-step pseudo-regret of `tuner` (asked and told every step) over n steps.

    The tuner's values are snapped to the nearest of each hyperparameter's d arms of
    its own space, so continuous methods (random, GP) play the same grid.
    """
    if tuner.space.h != problem.h:
        raise ValueError(f"lgds.run: tuner.space has h={tuner.space.h}, the problem h={problem.h}")
    dims = (problem.d,) * problem.h
    k_init, k_run = jax.random.split(key)

    def step(carry, key):
        z, state = carry
        k_ask, k_obs, k_next = jax.random.split(key, 3)
        state, values = tuner.ask(state, k_ask)
        arm = jnp.ravel_multi_index(tuple(tuner.space.snap(values, problem.d)), dims, mode="clip")
        x = z[arm] + problem.sigma * jax.random.normal(k_obs)
        state = tuner.tell(state, x)
        regret = jnp.max(z) - z[arm]
        z = problem.gamma @ z + problem.noise_chol @ jax.random.normal(k_next, z.shape)
        return (z, state), regret

    _, regret = jax.lax.scan(step, (problem.z0, tuner.init(k_init)), jax.random.split(k_run, n))
    return regret


def regret_table(methods: dict[str, Tuner], key: jax.Array, *, seeds: int = 256, n: int = 1000,
                 h: int = 2, d: int = 10, **problem_opts) -> dict[str, dict[str, float]]:
    """Mean total regret over `seeds` problems (the same problems and keys for every method).

    Returns {method: {"mean": mean total regret, "se": its standard error, "totals": (seeds,) list}}.
    """
    k_problems, k_runs = jax.random.split(key)
    problem_keys = jax.random.split(k_problems, seeds)
    run_keys = jax.random.split(k_runs, seeds)
    out = {}
    for name, tuner in methods.items():
        total = jax.jit(jax.vmap(lambda pk, rk, t=tuner: run(make(pk, h, d, **problem_opts), t, rk, n).sum()))(
            problem_keys, run_keys)
        total = np.asarray(total, np.float64)
        out[name] = {"mean": float(total.mean()), "se": float(total.std(ddof=1) / np.sqrt(seeds)),
                     "totals": total.tolist()}
    return out


def default_space(h: int):
    """The unit space of h hyperparameters that LGDS problems are played on."""
    return unit_space(h)
