"""Hyperparameters that live in an optax optimiser state.

Build the optimiser with `optax.inject_hyperparams` so that its hyperparameters are
arrays in the state, then set them from a tuner's values inside the jitted step:

    tx = optax.chain(optax.clip_by_global_norm(0.5),
                     optax.inject_hyperparams(optax.adam)(learning_rate=3e-4, eps=1e-5))
    ...
    opt_state = hcjax.optax.set_hyperparams(opt_state, {"learning_rate": lr})

No optax import: any node of the state with a `hyperparams` dict and `_replace` (optax's
InjectHyperparamsState and InjectStatefulHyperparamsState) is recognised.

Two kinds of hyperparameter cannot take a tuned value, and are refused by name:
a scheduled one (`learning_rate=optax.linear_schedule(...)`: inject_hyperparams
recomputes it from the schedule at every update, overwriting what was set; tune a
multiplier of the schedule instead, `inject_hyperparams(optax.scale)(step_size=1.0)`
chained after the optimiser, see docs/own-training-loop.md) and an integer one (built
from a Python int, `sgd(learning_rate=1)` or `adamw(..., weight_decay=0)`: a tuned
1e-4 would be truncated to 0; build it with a float, `1.0` or `0.0`).

`in_effect(opt_state)` is the learning rate the last update used: the schedule's value
times the tuned multiplier, what a log should show.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _injected(node) -> bool:
    return isinstance(getattr(node, "hyperparams", None), dict) and hasattr(node, "_replace")


def _injected_nodes(opt_state) -> list:
    return [node for node in jax.tree_util.tree_leaves(opt_state, is_leaf=_injected) if _injected(node)]


def hyperparam_names(opt_state) -> tuple[str, ...]:
    """The names of every injected hyperparameter of `opt_state`, sorted."""
    return tuple(sorted({name for node in _injected_nodes(opt_state) for name in node.hyperparams}))


def scheduled_names(opt_state) -> tuple[str, ...]:
    """The injected hyperparameters of `opt_state` that follow a schedule, sorted (optax
    keeps their schedule states in `hyperparams_states`); `set_hyperparams` refuses them."""
    return tuple(sorted({name for node in _injected_nodes(opt_state)
                         for name in (getattr(node, "hyperparams_states", None) or {})}))


def set_hyperparams(opt_state, values: Mapping[str, Any]):
    """opt_state (any pytree holding states of `optax.inject_hyperparams`), values:
    {name: scalar} (e.g. a tuner's `space.as_dict(values)`) -> the same state with the
    hyperparameters it has replaced, in every injected state that has them (cast to the
    dtype and shape stored there: a scalar, or under vmap each agent's scalar). Names
    the optimiser does not have (a clip range, a batch size) are left to the caller.
    Works under jit and vmap.

    ValueError (at trace time) if no name of `values` is an injected hyperparameter
    (naming the ones there: a misspelt learning rate is not silently dropped), for a
    value that is not a scalar, for a non-finite value (NaN, inf; a traced one cannot be
    refused: where it is not finite the hyperparameter keeps its stored value), for a
    hyperparameter that follows a schedule (optax
    would overwrite it at the next update) and for one stored as an integer (built
    from a Python int: the tuned value would be truncated). `hyperparam_names(opt_state)`
    lists them."""
    names = hyperparam_names(opt_state)
    used = {name: value for name, value in values.items() if name in names}
    if not used:
        raise ValueError(f"set_hyperparams: none of {sorted(values)} is an injected hyperparameter of the optimiser "
                         f"state (those are {list(names)}); build the optimiser with "
                         "optax.inject_hyperparams(...)(name=...)")
    for name, value in used.items():
        if jnp.ndim(value) != 0:
            raise ValueError(f"set_hyperparams: {name!r} must be a scalar, got shape {jnp.shape(value)}")
        if not isinstance(value, jax.core.Tracer) and not np.isfinite(np.asarray(value, np.float64)):
            raise ValueError(f"set_hyperparams: {name!r} must be finite, got {value!r} (an optimiser state holding "
                             "it would turn every later update non-finite)")
    scheduled = sorted(set(used) & set(scheduled_names(opt_state)))
    if scheduled:
        raise ValueError(f"set_hyperparams: {scheduled} follow a schedule in this optimiser, and "
                         "optax.inject_hyperparams recomputes them from it at every update (a value set here would "
                         "be overwritten); build the optimiser with a constant, or keep the schedule and tune a "
                         "multiplier: chain optax.inject_hyperparams(optax.scale)(step_size=1.0) after it and tune "
                         "'step_size' (docs/own-training-loop.md, learning-rate schedules)")
    integer = sorted({name for node in _injected_nodes(opt_state) for name, old in node.hyperparams.items()
                      if name in used and not jnp.issubdtype(jnp.result_type(old), jnp.inexact)})
    if integer:
        raise ValueError(f"set_hyperparams: {integer} are stored as integers in the optimiser state (it was built "
                         "with a Python int, e.g. learning_rate=1 or weight_decay=0), so a tuned value would be "
                         "truncated (1e-4 becomes 0); build the optimiser with a float (learning_rate=1.0, "
                         "weight_decay=0.0)")

    def cast(value, old):  # `old` kept where a traced value is not finite (it cannot be refused)
        value = jnp.asarray(value, jnp.result_type(old)).reshape(jnp.shape(old))
        return jnp.where(jnp.isfinite(value), value, old)

    def replace(node):
        if not _injected(node):
            return node
        new = {name: (cast(used[name], old) if name in used else old) for name, old in node.hyperparams.items()}
        return node._replace(hyperparams=new)

    return jax.tree_util.tree_map(replace, opt_state, is_leaf=_injected)


def in_effect(opt_state, name: str = "learning_rate", multiplier: str = "step_size") -> jax.Array:
    """The value of hyperparameter `name` in effect: its injected value times every injected
    `multiplier` (the tuned `inject_hyperparams(optax.scale)(step_size=...)` of the schedule
    recipe; 1 where there is none) -> float32 scalar (one per agent under vmap). Log this,
    not `step_size`: with a schedule it is `step_size * schedule(t)`.

    optax stores a hyperparameter's value of the last update (a scheduled one's value at
    that update's count; before any update, the first update's), so after an update this is
    the rate that update used. ValueError if `name` is not an injected hyperparameter of
    `opt_state`, or if it is in several injected states (say which one to read)."""
    nodes = _injected_nodes(opt_state)
    holders = [node for node in nodes if name in node.hyperparams]
    if len(holders) != 1:
        found = "not an injected hyperparameter" if not holders else f"in {len(holders)} injected states"
        raise ValueError(f"in_effect: {name!r} is {found} of the optimiser state (its injected hyperparameters: "
                         f"{list(hyperparam_names(opt_state))}); name one that one optax.inject_hyperparams "
                         "state holds")
    value = jnp.asarray(holders[0].hyperparams[name], jnp.float32)
    for node in nodes:
        if multiplier in node.hyperparams and node is not holders[0]:
            value = value * jnp.asarray(node.hyperparams[multiplier], jnp.float32)
    return value
