"""`pbt`: population-based training (Jaderberg et al., 2017) with Ray Tune's defaults,
as one compiled step over the agent axis.

Each `step`: exploit by `hcjax.population.exploit.select` (the bottom quantile, and every
agent with an invalid objective, continue from a donor drawn uniformly from the top
quantile), then explore: each replaced agent takes its donor's values and, per
hyperparameter independently,

- with probability `resample_probability`: a fresh uniform sample on the
  hyperparameter's scale (log-uniform on log scales, rounded on integer ones);
- otherwise: the donor's value times one of `perturbation_factors` drawn uniformly
  (Ray Tune's rule, in natural units: on a log scale this is a step of log(factor)).
  The product is rounded on integer hyperparameters; when rounding gives back the
  donor's value (e.g. 2 x 1.2 = 2.4 -> 2) it moves one unit in the factor's direction
  (away from 0 for factors > 1, towards 0 for factors < 1; from 0: up for factors > 1,
  down for < 1), so small integers are not stuck. Then every value is clipped into its bounds (Ray
  Tune does not clip). A linear value of exactly 0 stays 0 under any factor; only
  resampling moves it.

Categorical hyperparameters (values hold option indices) are never multiplied: with
probability `resample_probability` a fresh uniform option, otherwise the donor's option.

With `min_gap` (a float >= 0; None by default, Ray Tune's rule) a valid agent is
replaced only if its donor's objective exceeds its own by more than min_gap: with
min_gap=0 ties never cause a copy (`hcjax.population.exploit.select`).

Agents not replaced keep their values. Randomness: key -> (k_select, k_explore) =
jax.random.split(key); k_explore -> (k_resample, k_factor, k_uniform) =
jax.random.split(k_explore, 3); draws of shape (n, h) from each.

State: values (n, h), t (steps done), n_invalid (invalid objectives seen, all time),
n_replaced (agents replaced, all time). `step` is O(n log n + n h); memory is the state.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from hcjax import pytree
from hcjax.population.base import (
    Population,
    check_objectives,
    check_population_memory,
    check_population_size,
    register_population,
)
from hcjax.population.exploit import quantile_size, select
from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, check_float, valid_objective
from hcjax.tuners.random import sample


@pytree.dataclass
class PBTState:
    """values: (n, h) float32 configurations in effect (natural units); t: int32 steps
    done; n_invalid: int32 invalid objectives seen; n_replaced: int32 agents replaced.
    Leading batch axes (vmap over populations) are allowed."""

    values: jax.Array
    t: jax.Array
    n_invalid: jax.Array
    n_replaced: jax.Array


def check_quantile(name: str, quantile) -> float:
    """The quantile fraction q in (0, 0.5], or a ValueError naming the field."""
    return check_float(f"{name}.quantile", quantile, 0.0, 0.5, low_open=True)


def check_factors(name: str, factors) -> tuple[float, ...]:
    """A non-empty sequence of positive finite factors, or a ValueError naming the field."""
    field = f"{name}.perturbation_factors"
    if not isinstance(factors, (tuple, list)) or not factors:
        raise ValueError(f"{field} must be a non-empty tuple of numbers > 0, got {factors!r}")
    return tuple(check_float(f"{field}[{i}]", f, 0.0, low_open=True) for i, f in enumerate(factors))


def perturb(space: Space, key: jax.Array, values: jax.Array, resample_probability: float,
            factors: tuple[float, ...]) -> jax.Array:
    """(n, h) donors' values -> (n, h) explored values (module docstring), in bounds."""
    k_resample, k_factor, k_uniform = jax.random.split(key, 3)
    shape = values.shape
    resample = jax.random.uniform(k_resample, shape) < resample_probability
    factor = jnp.asarray(factors, jnp.float32)[jax.random.randint(k_factor, shape, 0, len(factors))]
    scaled = values * factor
    rounded = jnp.round(scaled)
    stuck = (rounded == values) & (factor != 1.0)
    step = jnp.sign(factor - 1.0) * jnp.where(values < 0, -1.0, 1.0)
    integer_value = jnp.where(stuck, values + step, rounded)
    moved = jnp.where(space.is_integer, integer_value, scaled)
    if space.is_categorical.any():
        moved = jnp.where(space.is_categorical, values, moved)
    fresh = sample(space, k_uniform, shape[:-1])
    return space.clip(jnp.where(resample, fresh, moved))


@register_population("pbt")
def pbt(space: Space, *, quantile: float = 0.25, resample_probability: float = 0.25,
        perturbation_factors: tuple = (0.8, 1.2), min_gap: float | None = None,
        memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Population:
    """PBT over `space`: quantile q in (0, 0.5], resample_probability in [0, 1],
    perturbation_factors: non-empty tuple of factors > 0, min_gap: None or a float >= 0
    (module docstring)."""
    quantile = check_quantile("pbt", quantile)
    if min_gap is not None:
        min_gap = check_float("pbt.min_gap", min_gap, 0.0)
    resample_probability = check_float("pbt.resample_probability", resample_probability, 0.0, 1.0)
    factors = check_factors("pbt", perturbation_factors)
    h = space.h

    def memory_bytes(n: int) -> int:
        """State, its copy, and the (n, h) temporaries of explore: about 40 n h bytes."""
        return 4 * (2 * (n * h + 3) + 8 * n * h + 8 * n) + 4096

    def init(key, n):
        n = check_population_size("pbt", n)
        check_population_memory("pbt", memory_bytes(n), memory_limit_gib, n, f"h={h}")
        zero = jnp.zeros((), jnp.int32)
        values = sample(space, key, (n,))
        return PBTState(values=values, t=zero, n_invalid=zero, n_replaced=zero), values

    def step(state, key, objectives):
        n = state.values.shape[0]
        objectives = check_objectives("pbt", objectives, n)
        k_select, k_explore = jax.random.split(key)
        replaced, parents = select(k_select, objectives, quantile_size(n, quantile), min_gap)
        explored = perturb(space, k_explore, state.values[parents], resample_probability, factors)
        values = jnp.where(replaced[:, None], explored, state.values)
        state = state.replace(values=values, t=state.t + 1,
                              n_invalid=state.n_invalid + jnp.sum(~valid_objective(objectives)).astype(jnp.int32),
                              n_replaced=state.n_replaced + jnp.sum(replaced).astype(jnp.int32))
        return state, values, parents

    return Population("pbt", space, init, step, memory_bytes)
