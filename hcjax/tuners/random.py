"""`random`: a fresh uniform sample at every `ask` (Bergstra & Bengio's random search,
run online). Uniform in [0, 1] per hyperparameter, decoded: log-uniform on log scales,
rounded on integer ones."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, check_memory, register
from hcjax.tuners.fixed import ConstantState, constant_memory, constant_place, constant_values, count_invalid


def sample(space: Space, key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
    """shape + (h,) uniform random configurations in natural units ((h,): one)."""
    return space.decode(jax.random.uniform(key, shape + (space.h,)))


@register("random")
def random(space: Space, *, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """A fresh uniform sample (log-uniform on log scales, rounded on integers) at every `ask`."""
    memory = check_memory("random", constant_memory(space.h), memory_limit_gib, f"h={space.h} hyperparameters")

    def init(key):
        return ConstantState(values=sample(space, key), n_invalid=jnp.zeros((), jnp.int32))

    def ask(state, key):
        values = sample(space, key)
        return state.replace(values=values), values

    return Tuner("random", space, init, ask, count_invalid, memory, constant_values, place=constant_place(space))
