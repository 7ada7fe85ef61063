"""A tuner whose first configuration is given: `make_tuner(name, space, start=values)`.

    tuner = make_tuner("hypercontroller", space, start=[1e-4, 0.2])   # or start="default"
    state = tuner.init(key)
    state, values = tuner.ask(state, key)     # values == start (exactly)

The first `ask` asks the tuner itself, so that its own schedule advances as it would
(HyperBand's first candidate, HyperController's first decision), then puts `start` in
effect with the tuner's `place` (the next `tell` is an observation of `start`: a GP
tuner's buffer row holds it, HyperBand scores it as its first candidate, HyperController
learns it as the arms nearest it) and returns `start` itself; `values` returns `start`
until the next ask. From the second ask on the tuner is itself. This is how a study starts
an online tuner from a poor default (`experiments.study.protocol`): the run begins where
a user's poor configuration would, and the tuner has to find its way out.
`random_start` and `fixed` started this way hold `start` for the whole run.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from hcjax import pytree
from hcjax.tuner import Tuner
from hcjax.tuners.fixed import check_values


@pytree.dataclass
class StartState:
    """inner: the tuner's own state; asks: int32 asks so far, saturating at 2 (1: `start`
    is in effect)."""

    inner: Any
    asks: jax.Array


def start_values(space, start) -> jax.Array:
    """(h,) float32 values of make_tuner's `start`: "default" (the space's defaults) or h
    numbers in natural units (a categorical's option index), each inside its bounds;
    ValueError naming `start` otherwise."""
    if isinstance(start, str):
        if start != "default":
            raise ValueError(f"make_tuner: start must be None, 'default' or a list of {space.h} values (one per "
                             f"hyperparameter {list(space.names)}), got {start!r}")
        return jnp.asarray(space.default, jnp.float32)
    try:
        return jnp.asarray(check_values(space, start))
    except ValueError as e:
        raise ValueError(f"make_tuner: start: {str(e).replace('fixed.values', 'start')}") from None


def starting_at(tuner: Tuner, start) -> Tuner:
    """`tuner` whose first ask returns `start` ((h,) natural units or "default"; see the
    module docstring); ValueError if `tuner` cannot place values (`Tuner.place`)."""
    values0 = start_values(tuner.space, start)
    shapes = jax.eval_shape(tuner.init, jax.ShapeDtypeStruct((2,), jnp.uint32))
    jax.eval_shape(tuner.place, shapes, values0)  # a tuner without `place` refuses here, before any run

    def init(key):
        return StartState(inner=tuner.init(key), asks=jnp.zeros((), jnp.int32))

    def ask(state, key):
        inner, values = tuner.ask(state.inner, key)
        first = state.asks == 0
        placed = tuner.place(inner, values0)
        inner = jax.tree.map(lambda a, b: jnp.where(first, a, b), placed, inner)
        values = jnp.where(first, values0, jnp.asarray(values, jnp.float32))
        return StartState(inner=inner, asks=jnp.minimum(state.asks + 1, 2)), values

    def tell(state, objective):
        return state.replace(inner=tuner.tell(state.inner, objective))

    def values(state):
        return jnp.where(state.asks == 1, values0, jnp.asarray(tuner.values(state.inner), jnp.float32))

    def place(state, values):
        return state.replace(inner=tuner.place(state.inner, values))

    bounds = tuple((f"inner.{field}", bound) for field, bound in tuner.index_bounds)
    return Tuner(tuner.name, tuner.space, init, ask, tell, tuner.memory_bytes + 8, values, bounds, place)
