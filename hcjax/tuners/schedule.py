"""`schedule`: replay per-iteration hyperparameter schedules (e.g. those a finished run
found) as a fixed, open-loop schedule. Not in the registry: built from arrays.

    tuner = schedule(space, schedules)               # schedules: (n, T, h) tuner values
    state = tuner.init(key).replace(which=i)         # this agent replays schedule i
    state, v = tuner.ask(state, key)                 # ask k returns schedules[i, min(k, T - 1)]

The agent's first ask (the one `agents.ppo` makes at init) gives row 0, its k-th ask row
k: with an ask after every iteration (PPOConfig.tune_every = 1) iteration t runs
`schedules[i, t]` exactly; past the last row the last row is kept. The values are tuner
values (a categorical's option index), clipped to the space. `tell` learns nothing (it
counts invalid objectives, as `fixed` does).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hcjax import pytree
from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, check_memory
from hcjax.tuners.fixed import constant_memory, count_invalid


@pytree.dataclass
class ScheduleState:
    """which: int32 row of the schedules this agent replays; asks: int32 asks so far;
    n_invalid: int32 invalid objectives told."""

    which: jax.Array
    asks: jax.Array
    n_invalid: jax.Array


def schedule(space: Space, schedules, *, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """A Tuner replaying `schedules` ((n, T, h) or (T, h) tuner values, finite) in `space`."""
    if not isinstance(space, Space):
        raise ValueError(f"schedule: space must be an hcjax.Space, got {type(space).__name__}")
    table = np.asarray(schedules, np.float32)
    table = table[None] if table.ndim == 2 else table
    if table.ndim != 3 or table.shape[2] != space.h or 0 in table.shape[:2]:
        raise ValueError(f"schedule: schedules must have shape (n, T, {space.h}) or (T, {space.h}) (one value per "
                         f"hyperparameter {list(space.names)}), got {np.shape(schedules)}")
    if not np.all(np.isfinite(table)):
        raise ValueError("schedule: schedules must be finite")
    n, T, _ = table.shape
    memory = check_memory("schedule", constant_memory(space.h) + table.nbytes, memory_limit_gib,
                          f"{n} schedules of {T} iterations x {space.h} hyperparameters")
    table = jnp.asarray(space.clip(jnp.asarray(table)))

    def row(state, k):
        return table[jnp.clip(state.which, 0, n - 1), jnp.clip(k, 0, T - 1)]

    def init(key):
        del key
        zero = jnp.zeros((), jnp.int32)
        return ScheduleState(which=zero, asks=zero, n_invalid=zero)

    def ask(state, key):
        del key
        return state.replace(asks=state.asks + 1), row(state, state.asks)

    def values(state):
        return row(state, state.asks - 1)

    return Tuner("schedule", space, init, ask, count_invalid, memory, values)
