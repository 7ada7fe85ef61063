"""The Tuner interface every method implements, and `make_tuner(name, space, **config)`.

A tuner is three pure functions over a pytree state of fixed-shape arrays, in the
style of optax's `GradientTransformation`:

    state = tuner.init(key)                  # pytree of arrays only
    state, values = tuner.ask(state, key)    # values: (h,) float32, natural units, in bounds
    state = tuner.tell(state, objective)     # objective: scalar, higher is better

`tell` reports the objective of the configuration currently in effect (the last one
`ask` returned; before the first `ask`, the one `init` chose). `tell` may be called
several times between two `ask`s: every call is one observation of the configuration in
effect. A non-finite objective is never learned from: each method documents what it
does with one, and no state array ever becomes non-finite.

Static configuration (d, s, buffer sizes, ...) lives in the closure, never in the state,
so `jax.jit`, `jax.vmap` over keys and `jax.lax.scan` over decisions work for every method.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

import jax

from hcjax.space import Space

State = Any


class Tuner(NamedTuple):
    """A hyperparameter tuner: static `name` and `space`, and three pure functions."""

    name: str
    space: Space
    init: Callable[[jax.Array], State]
    ask: Callable[[State, jax.Array], tuple[State, jax.Array]]
    tell: Callable[[State, jax.Array], State]


_REGISTRY: dict[str, Callable[..., Tuner]] = {}


def register(name: str):
    """Decorator: register `factory(space, **config) -> Tuner` under `name`."""

    def wrap(factory):
        _REGISTRY[name] = factory
        return factory

    return wrap


def available() -> tuple[str, ...]:
    """Names accepted by `make_tuner`."""
    _load_all()
    return tuple(sorted(_REGISTRY))


def options(name: str) -> dict[str, Any]:
    """The keyword options of method `name` and their defaults."""
    factory = _factory(name)
    params = list(inspect.signature(factory).parameters.values())[1:]
    return {p.name: p.default for p in params}


def make_tuner(name: str, space: Space, **config) -> Tuner:
    """Build the tuner `name` over `space`; unknown names or options raise `ValueError`."""
    factory = _factory(name)
    if not isinstance(space, Space):
        raise ValueError(f"make_tuner: space must be an hcjax.Space, got {type(space).__name__}")
    allowed = options(name)
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise ValueError(f"make_tuner({name!r}): unknown option(s) {unknown}; allowed: {sorted(allowed)}")
    return factory(space, **config)


def _factory(name: str):
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"make_tuner: unknown tuner name {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def _load_all():
    # Importing the modules registers their factories.
    import hcjax.controller  # noqa: F401
    import hcjax.tuners  # noqa: F401


def check_int(field: str, value, low: int, high: int | None = None) -> int:
    """Validate an integer option: a ValueError naming `field` and its allowed range."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{field} must be an integer {allowed}, got {value!r}")
    return value


def check_float(field: str, value, low: float, high: float | None = None, low_open: bool = False) -> float:
    """Validate a real option: a ValueError naming `field` and its allowed range."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    ok = v == v and (v > low if low_open else v >= low) and (high is None or v <= high)
    if not ok:
        lo = f"> {low}" if low_open else f">= {low}"
        allowed = lo if high is None else f"{lo} and <= {high}"
        raise ValueError(f"{field} must be a number {allowed}, got {value!r}")
    return v


# Objectives of larger magnitude are treated like NaN: squares of them overflow float32.
MAX_ABS_OBJECTIVE = 1e15


def valid_objective(objective: jax.Array) -> jax.Array:
    """bool scalar: the objective is finite and |objective| <= MAX_ABS_OBJECTIVE.

    Every tuner ignores an invalid objective (no learning from it) and counts it.
    """
    import jax.numpy as jnp

    x = jnp.asarray(objective, jnp.float32)
    return jnp.isfinite(x) & (jnp.abs(x) <= MAX_ABS_OBJECTIVE)
