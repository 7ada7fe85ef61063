"""`pb2`: single-agent PB2 (Parker-Holder et al., 2020), as the paper's experiments ran it.

Every valid `tell` adds one observation with inputs [time index, reward before,
hyperparameters] and target the told objective (a reward change):

- time index: the number of valid objectives told before this one;
- reward before: the running sum of the valid objectives told before this one (the
  objective is a reward change, so this is the reward level up to a constant);
- hyperparameters: the configuration in effect, in [0, 1]^h.

Time and reward columns are min-max scaled to [0, 1] over the buffer (and the point being
decided); targets are standardised over the buffer and clipped to [-2, 2]. Kernel:

    k = v exp(-|x - x'|^2 / (2 l^2)) (1 - eps)^(|t - t'| / 2),   x = [reward before, hyperparameters]

with v profiled and (l, r = noise / v, eps) fitted at every `ask` on the grid
l in {0.1, 0.2, 0.4, 0.8, 1.6} x r in {1e-3, 1e-2, 1e-1, 1} x eps in {0.01, 0.1, 0.5}
(eps in (0, 0.5] as in the paper), by the log marginal likelihood of the `fit_points`
most recent observations (see `hcjax.tuners.gp_common`).

Acquisition at the next time index and current reward: mean + sqrt(beta_t) std with
beta_t = 0.2 + max(0, log(0.4 N)), N = valid observations in the buffer (Ray Tune's
PB2 multiplies sqrt(beta_t) by the variance; we use the standard deviation, as GP-UCB
does). Maximised over `candidates` random points plus `refine_steps` gradient steps, as
in gp_ucb. Empty buffer: a uniform random configuration. Invalid objectives are
ignored (not written, not added to the reward) and counted in `n_invalid`.
"""
from __future__ import annotations

import jax.numpy as jnp

from hcjax import gp
from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, register
from hcjax.tuners.gp_common import LENGTHSCALES, NOISE_RATIOS, GPSpec, check_gp_options, make_gp_tuner, product_grid

EPSILONS = (0.01, 0.1, 0.5)
GRID_AXES = dict(lengthscale=LENGTHSCALES, noise=NOISE_RATIOS, eps=EPSILONS)  # the kernel grid (also pb2_population's)


def pb2_targets(y, mask):
    """(N,) reward changes -> standardised and clipped to [-2, 2] (0 on masked rows)."""
    return jnp.where(mask, jnp.clip(gp.standardize(y, mask), -2.0, 2.0), 0.0)


def pb2_beta(n_obs, n_valid, n_candidates):
    """beta_t = 0.2 + max(0, log(0.4 N)), N = valid observations in the buffer."""
    del n_obs, n_candidates
    return 0.2 + jnp.maximum(0.0, jnp.log(0.4 * jnp.maximum(n_valid, 1).astype(jnp.float32)))


def pb2_correlation(za, zb, p):
    """(n, 2 + h), (m, 2 + h) with column 0 = scaled time -> (n, m) time-varying SE."""
    return gp.tv_se_kernel(za[:, 0], za[:, 1:], zb[:, 0], zb[:, 1:], p["lengthscale"], p["eps"])


@register("pb2")
def pb2(space: Space, *, buffer: int = 1000, candidates: int = 256, refine_steps: int = 10,
        fit_points: int = 128, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """Single-agent PB2 over `space` with a ring buffer of `buffer` observations."""
    buffer, candidates, refine_steps, fit_points = check_gp_options("pb2", buffer, candidates, refine_steps,
                                                                    fit_points)
    spec = GPSpec(
        grid=product_grid(**GRID_AXES),
        correlation=pb2_correlation,
        context=lambda state: jnp.stack([state.n_obs.astype(jnp.float32), state.reward_sum]),
        targets=pb2_targets,
        beta=pb2_beta,
    )
    return make_gp_tuner("pb2", space, spec, buffer=buffer, candidates=candidates, refine_steps=refine_steps,
                         fit_points=fit_points, memory_limit_gib=memory_limit_gib, n_context=2)
