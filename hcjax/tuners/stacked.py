"""Several tuners behind one Tuner, the method chosen per agent: one compiled program
runs every method of a study.

    tuner = stack([make_tuner("hypercontroller", space), make_tuner("random", space)])
    state = select(tuner.init(key), 1)        # this agent runs "random"
    state, values = tuner.ask(state, key)     # exactly random's ask on its own sub-state

The state holds every method's state (each initialised with the same key, as if that
method ran alone) and `which`, the index of the method in effect. `ask` and `tell`
dispatch with `lax.switch` on `which`: under `vmap` with a different method per agent,
XLA computes every method for every agent and keeps each agent's own (so a program
pays for all the methods at every decision), but it compiles once instead of once per
method, which is what dominates short runs. Each agent's numbers are those of its
method run alone.
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from hcjax import pytree
from hcjax.tuner import Tuner


@pytree.dataclass
class StackedState:
    """states: one state per stacked tuner (their own pytrees); which: int32 index of
    the tuner in effect."""

    states: tuple
    which: jax.Array


def stack(tuners: Sequence[Tuner]) -> Tuner:
    """One Tuner running `tuners[state.which]`; all must share one space (by value)."""
    tuners = tuple(tuners)
    if not tuners or not all(isinstance(t, Tuner) for t in tuners):
        raise ValueError(f"stack: tuners must be a non-empty sequence of Tuners, got {tuners!r}")
    space = tuners[0].space
    if any(t.space.hyperparameters != space.hyperparameters for t in tuners):
        raise ValueError(f"stack: every tuner must have the same space; got {[t.space.names for t in tuners]}")

    def init(key):
        return StackedState(states=tuple(t.init(key) for t in tuners), which=jnp.zeros((), jnp.int32))

    def ask(state, key):
        def branch(i):
            def run(states):
                sub, values = tuners[i].ask(states[i], key)
                return states[:i] + (sub,) + states[i + 1:], jnp.asarray(values, jnp.float32)
            return run

        states, values = jax.lax.switch(state.which, [branch(i) for i in range(len(tuners))], state.states)
        return state.replace(states=states), values

    def tell(state, objective):
        def branch(i):
            def run(states):
                return states[:i] + (tuners[i].tell(states[i], objective),) + states[i + 1:]
            return run

        return state.replace(states=jax.lax.switch(state.which, [branch(i) for i in range(len(tuners))],
                                                   state.states))

    def values(state):
        branches = [lambda states, i=i: jnp.asarray(tuners[i].values(states[i]), jnp.float32)
                    for i in range(len(tuners))]
        return jax.lax.switch(state.which, branches, state.states)

    name = "stack(" + ",".join(t.name for t in tuners) + ")"
    return Tuner(name, space, init, ask, tell, sum(t.memory_bytes for t in tuners), values)


def select(state: StackedState, which) -> StackedState:
    """The same state with tuner `which` (an int or int32 scalar) in effect."""
    return state.replace(which=jnp.asarray(which, jnp.int32))
