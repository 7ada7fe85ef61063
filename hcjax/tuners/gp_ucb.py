"""`gp_ucb`: GP-UCB (Srinivas et al., 2010) run online over one training run.

Model: a GP on hyperparameters scaled to [0, 1]^h -> objective, squared-exponential
kernel v exp(-|u - u'|^2 / (2 l^2)) plus noise, over a ring buffer of the last `buffer`
valid observations (every `tell` is one observation of the configuration in effect).
Targets are standardised over the buffer. Kernel hyperparameters are refitted at every
`ask` (see `hcjax.tuners.gp_common`): v profiled, (l, r = noise / v) on the grid
l in {0.1, 0.2, 0.4, 0.8, 1.6} x r in {1e-3, 1e-2, 1e-1, 1}, scored by the log marginal
likelihood of the `fit_points` most recent observations.

Acquisition: mean + sqrt(beta_t) std with Srinivas et al.'s schedule for a finite
decision set D (their Theorem 1), D = the `candidates` random points of this decision:

    beta_t = beta_scale * 2 log(|D| t^2 pi^2 / (6 delta)),   t = valid observations + 1,

beta_scale = 0.2 by default (Srinivas et al. scale beta_t down by 5 in their
experiments; 1 is the theorem's value). The best candidate is refined by `refine_steps`
normalised gradient-ascent steps on the acquisition. Values are decoded from [0, 1],
so always in bounds. Empty buffer: a uniform random configuration.

Invalid objectives are ignored (nothing is written) and counted in `n_invalid`.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from hcjax import gp
from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, check_float, register
from hcjax.tuners.gp_common import LENGTHSCALES, NOISE_RATIOS, GPSpec, check_gp_options, make_gp_tuner, product_grid


@register("gp_ucb")
def gp_ucb(space: Space, *, buffer: int = 1000, candidates: int = 256, refine_steps: int = 10,
           fit_points: int = 128, beta_scale: float = 0.2, delta: float = 0.1,
           memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """GP-UCB over `space` with a ring buffer of `buffer` observations (state O(buffer h))."""
    buffer, candidates, refine_steps, fit_points = check_gp_options("gp_ucb", buffer, candidates, refine_steps,
                                                                    fit_points)
    beta_scale = check_float("gp_ucb.beta_scale", beta_scale, 0.0)
    delta = check_float("gp_ucb.delta", delta, 0.0, 1.0, low_open=True)
    log_const = math.log(math.pi ** 2 / (6.0 * delta))

    def beta(n_obs, n_valid, n_candidates):
        t = n_obs.astype(jnp.float32) + 1.0
        return beta_scale * 2.0 * (math.log(n_candidates) + 2.0 * jnp.log(t) + log_const)

    spec = GPSpec(
        grid=product_grid(lengthscale=LENGTHSCALES, noise=NOISE_RATIOS),
        correlation=lambda za, zb, p: gp.se_kernel(za, zb, p["lengthscale"]),
        context=lambda state: jnp.zeros((0,), jnp.float32),
        targets=gp.standardize,
        beta=beta,
    )
    return make_gp_tuner("gp_ucb", space, spec, buffer=buffer, candidates=candidates, refine_steps=refine_steps,
                         fit_points=fit_points, memory_limit_gib=memory_limit_gib, n_context=0)
