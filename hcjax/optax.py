"""Hyperparameters that live in an optax optimiser state.

Build the optimiser with `optax.inject_hyperparams` so that its hyperparameters are
arrays in the state, then set them from a tuner's values inside the jitted step:

    tx = optax.chain(optax.clip_by_global_norm(0.5),
                     optax.inject_hyperparams(optax.adam)(learning_rate=3e-4, eps=1e-5))
    ...
    opt_state = hcjax.optax.set_hyperparams(opt_state, {"learning_rate": lr})

No optax import: any node of the state with a `hyperparams` dict and `_replace` (optax's
InjectHyperparamsState and InjectStatefulHyperparamsState) is recognised.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp


def _injected(node) -> bool:
    return isinstance(getattr(node, "hyperparams", None), dict) and hasattr(node, "_replace")


def hyperparam_names(opt_state) -> tuple[str, ...]:
    """The names of every injected hyperparameter of `opt_state`, sorted."""
    nodes = jax.tree_util.tree_leaves(opt_state, is_leaf=_injected)
    return tuple(sorted({name for node in nodes if _injected(node) for name in node.hyperparams}))


def set_hyperparams(opt_state, values: Mapping[str, Any]):
    """opt_state (any pytree holding states of `optax.inject_hyperparams`), values:
    {name: scalar} (e.g. a tuner's `space.as_dict(values)`) -> the same state with the
    hyperparameters it has replaced, in every injected state that has them (cast to the
    dtype and shape stored there: a scalar, or under vmap each agent's scalar). Names
    the optimiser does not have (a clip range, a batch size) are left to the caller.
    Works under jit and vmap.

    ValueError (at trace time) if no name of `values` is an injected hyperparameter
    (naming the ones there: a misspelt learning rate is not silently dropped), or for
    a value that is not a scalar. `hyperparam_names(opt_state)` lists them."""
    names = hyperparam_names(opt_state)
    used = {name: value for name, value in values.items() if name in names}
    if not used:
        raise ValueError(f"set_hyperparams: none of {sorted(values)} is an injected hyperparameter of the optimiser "
                         f"state (those are {list(names)}); build the optimiser with "
                         "optax.inject_hyperparams(...)(name=...)")
    for name, value in used.items():
        if jnp.ndim(value) != 0:
            raise ValueError(f"set_hyperparams: {name!r} must be a scalar, got shape {jnp.shape(value)}")

    def replace(node):
        if not _injected(node):
            return node
        new = {name: (jnp.asarray(used[name], jnp.result_type(old)).reshape(jnp.shape(old))
                      if name in used else old) for name, old in node.hyperparams.items()}
        return node._replace(hyperparams=new)

    return jax.tree_util.tree_map(replace, opt_state, is_leaf=_injected)
