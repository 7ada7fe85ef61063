"""The Population interface (tuners that act on the whole agent axis) and its registry.

A population method is two pure functions over a pytree state of fixed shapes:

    state, values = population.init(key, n)                       # values: (n, h)
    state, values, parents = population.step(state, key, objectives)
    # objectives: (n,) float, higher is better; values: (n, h); parents: (n,) int32

`parents[i]` is the agent whose network agent i continues from: the training loop
gathers every per-agent array (parameters, optimiser state, observation statistics)
with `hcjax.exploit(tree, parents)` and trains with `values`. Agents that were not
replaced have parents[i] = i and keep their values. The training loop owns the schedule
(PBT's `ready`): it calls `step` every `ready` iterations with each agent's recent
performance (e.g. the mean training reward of those iterations); `interval(updates,
ready)` gives a `ready` that divides the run.

`n` is static (the shapes of the state); options live in the closure, as for `Tuner`.
`jax.vmap` over a leading axis gives independent populations; the agent axis may be
sharded over devices (see `hcjax.population.exploit`).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Registry, check_int, check_memory

State = Any


class Population(NamedTuple):
    """A population-based tuner: static `name` and `space`, two pure functions, and
    `memory_bytes(n) -> int`, the estimated peak bytes of the state and of one `step`
    for n agents (`init` refuses above the factory's `memory_limit_gib`).

    init(key, n) -> (state, values (n, h) float32 natural units, inside bounds);
    step(state, key, objectives (n,)) -> (state, values (n, h), parents (n,) int32).
    """

    name: str
    space: Space
    init: Callable[[jax.Array, int], tuple[State, jax.Array]]
    step: Callable[[State, jax.Array, jax.Array], tuple[State, jax.Array, jax.Array]]
    memory_bytes: Callable[[int], int]


POPULATIONS = Registry("make_population", "population")
register_population = POPULATIONS.register


def populations() -> tuple[str, ...]:
    """Names accepted by `make_population`."""
    return POPULATIONS.names()


def population_options(name: str) -> dict[str, Any]:
    """The keyword options of population method `name` and their defaults."""
    return POPULATIONS.options(name)


def make_population(name: str, space: Space, *, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB,
                    **options) -> Population:
    """Build population method `name` over `space` (see `populations()` and
    `population_options(name)`). An unknown name or option, or an option out of range,
    raises ValueError naming it and the allowed values. `memory_limit_gib`: the most
    memory one population may need (`Population.memory_bytes(n)`), checked by `init`
    before anything is allocated."""
    return POPULATIONS.make(name, space, memory_limit_gib, options)


def check_population_size(name: str, n) -> int:
    """`n` as a Python int >= 1 (static: it sets the state's shapes), else ValueError."""
    return check_int(f"{name}.init: n", n, 1)


def check_population_memory(name: str, nbytes: int, limit_gib: float, n: int, involved: str) -> None:
    """ValueError if `nbytes` for n agents exceeds `limit_gib` GiB (`hcjax.tuner.check_memory`)."""
    check_memory(name, nbytes, limit_gib, f"n={n} agents with {involved}", maker="make_population",
                 what="(state and the largest temporaries of step)")


def check_objectives(name: str, objectives, n: int) -> jax.Array:
    """(n,) float32 objectives, or a ValueError (raised when traced) naming the shape
    expected. Non-finite or huge entries are allowed here: they are invalid objectives
    (`hcjax.tuner.valid_objective`), handled by the methods."""
    shape = tuple(getattr(objectives, "shape", jnp.shape(objectives)))
    dtype = getattr(objectives, "dtype", None)
    if shape != (n,):
        raise ValueError(f"{name}.step: objectives must have shape (n,) = ({n},), one per agent, got shape {shape}")
    if dtype is not None and not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        raise ValueError(f"{name}.step: objectives must be real numbers, got dtype {dtype}")
    return jnp.asarray(objectives, jnp.float32)


class IntervalWarning(UserWarning):
    """`interval` chose another number of iterations between population steps than asked."""


def _divisors(n: int) -> list[int]:
    """Every divisor of `n` >= 1, ascending: the pairs (k, n // k) for k up to the square root of
    n (10**4 trials for n = 10**8, not 10**8)."""
    low = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return low + [n // k for k in reversed(low) if n // k != k]


def interval(updates: int, ready: int) -> int:
    """The number of iterations between two population steps for a run of `updates`
    iterations, so that every interval runs the same `ready` iterations and none is
    dropped: `ready` itself if it divides `updates`; else the divisor of `updates` nearest
    to it (the smaller on a tie), said by an IntervalWarning (once per call site, as
    Python shows warnings). ValueError, naming the divisors on either side of `ready` and
    the nearest run lengths it divides, when that divisor is more than twice or less than
    half of `ready` (e.g. a prime number of updates)."""
    updates = check_int("interval: updates", updates, 1)
    ready = check_int("interval: ready", ready, 1, updates)
    if updates % ready == 0:
        return ready
    divisors = _divisors(updates)
    below = max(k for k in divisors if k < ready)
    above = min(k for k in divisors if k > ready)
    chosen = below if ready - below <= above - ready else above
    if not ready / 2 <= chosen <= 2 * ready:
        shorter, longer = updates // ready * ready, (updates // ready + 1) * ready
        raise ValueError(f"interval: ready={ready} does not divide the run's {updates} updates, and its nearest "
                         f"divisors are {below} and {above}; choose one of them, or a run of {shorter} or {longer} "
                         "updates")
    warnings.warn(f"ready={ready} does not divide the run's {updates} updates: using {chosen} (the divisors nearest "
                  f"{ready} are {below} and {above})", IntervalWarning, stacklevel=2)
    return chosen
