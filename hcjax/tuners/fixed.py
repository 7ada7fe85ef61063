"""`fixed`: one given configuration for the whole run (reference curves)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hcjax import pytree
from hcjax.space import Space, real_scalar
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, check_memory, register, valid_objective


@pytree.dataclass
class ConstantState:
    """values: (h,) the configuration in effect; n_invalid: int32 invalid objectives told."""

    values: jax.Array
    n_invalid: jax.Array


def count_invalid(state, objective):
    """`tell` of tuners that learn nothing: count invalid objectives, change nothing else."""
    return state.replace(n_invalid=state.n_invalid + (~valid_objective(objective)).astype(jnp.int32))


def constant_values(state: ConstantState) -> jax.Array:
    """`values` of the tuners with a ConstantState: (h,) the configuration it holds."""
    return state.values


def constant_place(space: Space):
    """`place` of the tuners with a ConstantState: hold `values` (h,) (clipped into the space)."""
    return lambda state, values: state.replace(values=space.clip(jnp.asarray(values, jnp.float32)))


def constant_memory(h: int) -> int:
    """Estimated peak bytes of one `ConstantState` tuner: the state twice (a jitted call
    returns a copy) and the temporaries of one uniform draw (about 12 h bytes + 1 KiB)."""
    return 2 * (4 * h + 4) + 16 * h + 1024


def check_values(space: Space, values) -> np.ndarray:
    """`fixed.values` -> (h,) float32: h real numbers (a sequence or a 1-D array; Python,
    NumPy or JAX scalars, not bools), finite, each inside its hyperparameter's bounds
    (the option index 0..k-1 for a categorical, a whole number, as every tuner's values)."""
    if hasattr(values, "shape") and hasattr(values, "dtype"):
        entries = list(np.asarray(values)) if np.ndim(values) == 1 else None
    else:
        entries = list(values) if isinstance(values, (list, tuple)) else None
    if entries is None or len(entries) != space.h:
        raise ValueError(f"fixed.values must be a list or 1-D array of {space.h} numbers, one per hyperparameter "
                         f"{list(space.names)}, got {values!r}")
    config = np.zeros(space.h, np.float32)
    for i, (p, value) in enumerate(zip(space.hyperparameters, entries)):
        v = real_scalar(value)
        with np.errstate(over="ignore"):
            v32 = np.float32(v if v is not None else np.nan)
        # Compared in float32, where values live: float32(1e-3) is a little above 1e-3.
        if not (np.isfinite(v32) and space.low[i] <= v32 <= space.high[i]):
            raise ValueError(f"fixed.values[{i}] ({p.name!r}) must be a finite number in [{p.low}, {p.high}] (not a "
                             f"bool), got {value!r}")
        if p.options is not None and not float(v32).is_integer():
            raise ValueError(f"fixed.values[{i}] ({p.name!r}) is categorical: an option index, a whole number in "
                             f"[0, {p.n_options - 1}] (options {list(p.options)}), got {value!r}")
        config[i] = v32
    return config


@register("fixed")
def fixed(space: Space, *, values=None, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """Always `values` ((h,) natural units, option indices for categoricals; default: each
    hyperparameter's default, the default option's index for a categorical)."""
    config = space.default if values is None else check_values(space, values)
    memory = check_memory("fixed", constant_memory(space.h), memory_limit_gib, f"h={space.h} hyperparameters")
    config = jnp.asarray(space.clip(jnp.asarray(config)))

    def init(key):
        del key
        return ConstantState(values=config, n_invalid=jnp.zeros((), jnp.int32))

    def ask(state, key):
        del key
        return state, state.values

    return Tuner("fixed", space, init, ask, count_invalid, memory, constant_values, place=constant_place(space))
