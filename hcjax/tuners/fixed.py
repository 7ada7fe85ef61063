"""`fixed`: one given configuration for the whole run (reference curves)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from hcjax.space import Space
from hcjax.tuner import Tuner, register, valid_objective


@struct.dataclass
class ConstantState:
    """values: (h,) the configuration in effect; n_invalid: int32 invalid objectives told."""

    values: jax.Array
    n_invalid: jax.Array


def count_invalid(state, objective):
    """`tell` of tuners that learn nothing: count invalid objectives, change nothing else."""
    return state.replace(n_invalid=state.n_invalid + (~valid_objective(objective)).astype(jnp.int32))


@register("fixed")
def fixed(space: Space, *, values=None) -> Tuner:
    """Always `values` ((h,) natural units; default: each hyperparameter's default)."""
    if values is None:
        config = space.default
    else:
        config = np.asarray(values, np.float32).reshape(-1)
        if config.shape != (space.h,) or not np.all(np.isfinite(config)):
            raise ValueError(f"fixed.values must be {space.h} finite numbers, got {values!r}")
        bad = [n for n, v, lo, hi in zip(space.names, config, space.low, space.high) if not lo <= v <= hi]
        if bad:
            raise ValueError(f"fixed.values: {bad} outside their bounds {space.names} low={space.low} high={space.high}")
    config = jnp.asarray(space.clip(jnp.asarray(config)))

    def init(key):
        del key
        return ConstantState(values=config, n_invalid=jnp.zeros((), jnp.int32))

    def ask(state, key):
        del key
        return state, state.values

    return Tuner("fixed", space, init, ask, count_invalid)
