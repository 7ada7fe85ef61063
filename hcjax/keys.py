"""A check of the PRNG keys that start vmapped agents: every agent needs its own.

A script that replaces its rng with a fixed `PRNGKey(0)` (as upstream PureJaxRL's DQN
does) and then initialises every seed's tuner from it starts every agent from the same
configuration, and the seeds are no longer independent samples. Check the keys you pass
to `jax.vmap(train)` (or to `tuner.init`) on the host:

    rngs = jax.random.split(jax.random.PRNGKey(42), 4)
    hcjax.check_keys(rngs)
    out = jax.jit(jax.vmap(train))(rngs)

That check cannot see keys made inside the vmapped function. `Tuner.step` (and
`hcjax.control.assign`) refuse, when the program is traced, a key or a tuner state that
every agent shares because it does not depend on the vmapped arguments: the key of a
script whose rng was replaced by a dummy `PRNGKey(0)`.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.custom_batching import custom_vmap


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


# Under jax.vmap, a value that does not depend on the vmapped arguments stays unbatched: one
# value for every agent. The two checks below see which of their inputs are batched (a
# custom_vmap rule, run when the program is traced) and refuse what makes agents share their
# draws; outside vmap they are the identity and cost nothing.

@custom_vmap
def _step_inputs(key, state, objective):
    return key


@_step_inputs.def_vmap
def _step_inputs_rule(axis_size, in_batched, key, state, objective):
    key_batched, state_batched, objective_batched = in_batched
    state_batched = any(jax.tree_util.tree_leaves(state_batched))
    if not key_batched and (state_batched or objective_batched):
        raise ValueError("step: every agent under jax.vmap got the same key (it does not depend on the vmapped "
                         "arguments, e.g. a key split from a fixed jax.random.PRNGKey(0) that replaced the "
                         "script's rng), so their tuners would ask with the same draws; pass a per-agent key, "
                         "e.g. jax.random.fold_in(seed_key, update_i) with the vmapped function's own key "
                         "argument as seed_key")
    if objective_batched and not state_batched:
        raise ValueError("step: every agent under jax.vmap has the same tuner state (it does not depend on the "
                         "vmapped arguments: TUNER.init got a key shared by every agent, or the state was made "
                         "outside jax.vmap), so every agent starts from the same configuration; initialise it "
                         "inside the vmapped function from the agent's own key, TUNER.init(rng) before any line "
                         "that replaces rng")
    return key, key_batched


def check_step_inputs(key: jax.Array, state, objective) -> jax.Array:
    """key, unchanged. Under jax.vmap, a ValueError when the program is traced if the key
    is the same for every agent while the state or objective differs (their asks would
    share draws), or if the state is the same for every agent while the objective differs
    (every tuner started from one configuration). `Tuner.step` calls it."""
    return _step_inputs(key, state, objective)


@custom_vmap
def _assigned_state(state, per_agent):
    return state


@_assigned_state.def_vmap
def _assigned_state_rule(axis_size, in_batched, state, per_agent):
    state_batched, per_agent_batched = in_batched
    if per_agent_batched and not any(jax.tree_util.tree_leaves(state_batched)):
        raise ValueError("assign: every agent under jax.vmap has the same tuner state (TUNER.init got a key shared "
                         "by every agent, or the state was made outside jax.vmap), so every tuned agent starts from "
                         "the same configuration; initialise it inside the vmapped function from the agent's own "
                         "key, TUNER.init(rng) before any line that replaces rng")
    return state, state_batched


def check_state_per_agent(state, per_agent: jax.Array):
    """state, unchanged. Under jax.vmap, a ValueError when the program is traced if
    `per_agent` (a value that differs between agents, e.g. a control flag) is batched and
    no leaf of `state` is: every agent's tuner would start from one state."""
    return _assigned_state(state, per_agent)
