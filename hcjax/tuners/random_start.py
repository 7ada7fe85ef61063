"""`random_start`: one uniform random configuration drawn at `init`, kept for the whole run."""
from __future__ import annotations

import jax.numpy as jnp

from hcjax.space import Space
from hcjax.tuner import Tuner, register
from hcjax.tuners.fixed import ConstantState, count_invalid
from hcjax.tuners.random import sample


@register("random_start")
def random_start(space: Space) -> Tuner:
    """Sample (h,) values at `init` (log-uniform on log scales, rounded on integers); `ask` returns them."""

    def init(key):
        return ConstantState(values=sample(space, key), n_invalid=jnp.zeros((), jnp.int32))

    def ask(state, key):
        del key
        return state, state.values

    return Tuner("random_start", space, init, ask, count_invalid)
