"""`random_start`: one uniform random configuration drawn at `init`, kept for the whole run."""
from __future__ import annotations

import jax.numpy as jnp

from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, check_memory, register
from hcjax.tuners.fixed import ConstantState, constant_memory, constant_place, constant_values, count_invalid
from hcjax.tuners.random import sample


@register("random_start")
def random_start(space: Space, *, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """Sample (h,) values at `init` (log-uniform on log scales, rounded on integers); `ask` returns them."""
    memory = check_memory("random_start", constant_memory(space.h), memory_limit_gib,
                          f"h={space.h} hyperparameters")

    def init(key):
        return ConstantState(values=sample(space, key), n_invalid=jnp.zeros((), jnp.int32))

    def ask(state, key):
        del key
        return state, state.values

    return Tuner("random_start", space, init, ask, count_invalid, memory, constant_values,
                 place=constant_place(space))
