"""A check of the PRNG keys that start vmapped agents: every agent needs its own.

A script that replaces its rng with a fixed `PRNGKey(0)` (as upstream PureJaxRL's DQN
does) and then initialises every seed's tuner from it starts every agent from the same
configuration, and the seeds are no longer independent samples. Check the keys you pass
to `jax.vmap(train)` (or to `tuner.init`) on the host:

    rngs = jax.random.split(jax.random.PRNGKey(42), 4)
    hcjax.check_keys(rngs)
    out = jax.jit(jax.vmap(train))(rngs)

That check cannot see keys made inside the vmapped function. `Tuner.step` refuses, when
the program is traced, a key or a tuner state that every agent shares because it does not
depend on the vmapped arguments: the key of a script whose rng was replaced by a dummy
`PRNGKey(0)` (hcjax.tuner.check_step_inputs).
"""
from __future__ import annotations

import jax
import numpy as np


def check_keys(keys, field: str = "keys") -> None:
    """keys: (n, 2) uint32 raw keys (`jax.random.split(key, n)`) or (n,) typed keys
    (`jax.random.key`), n >= 1, concrete (not traced) -> None; ValueError naming `field`
    and the first two agents whose keys are equal, with what to do (split one key into n,
    or fold the agent index into a shared one)."""
    if isinstance(keys, jax.core.Tracer):
        raise ValueError(f"check_keys: {field} must be concrete (call it outside jit, on the keys you pass to "
                         "jax.vmap), got a traced array")
    arr = keys
    if hasattr(keys, "dtype") and jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key):
        arr = jax.random.key_data(keys)
    arr = np.asarray(arr)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.dtype != np.uint32:
        raise ValueError(f"check_keys: {field} must be a batch of PRNG keys, (n, 2) uint32 or (n,) typed keys, got "
                         f"dtype {arr.dtype} and shape {arr.shape}")
    first = {}
    for agent, row in enumerate(arr):
        seen = first.setdefault(row.tobytes(), agent)
        if seen != agent:
            raise ValueError(f"check_keys: {field}[{seen}] and {field}[{agent}] are the same key, so those agents "
                             "draw the same numbers (their tuners start from the same configuration); give each "
                             "its own: jax.random.split(key, n), or jax.random.fold_in(key, agent_index)")

