"""The Tuner interface every method implements, the registry `make_tuner` looks names up
in (filled by `hcjax.tuners`), and the checks of options and objectives.

A tuner is three pure functions over a pytree state of fixed-shape arrays, in the
style of optax's `GradientTransformation`:

    state = tuner.init(key)                  # pytree of arrays only
    state, values = tuner.ask(state, key)    # values: (h,) float32, natural units, in bounds
    state = tuner.tell(state, objective)     # objective: scalar, higher is better
    values = tuner.values(state)             # (h,) the configuration in effect now
    state, values = tuner.step(state, key, objective, decide)   # tell, then ask if decide

`tell` reports the objective of the configuration currently in effect (the last one
`ask` returned; before the first `ask`, the one `init` chose). `tell` may be called
several times between two `ask`s: every call is one observation of the configuration in
effect. A non-finite objective is never learned from: each method documents what it
does with one, and no state array ever becomes non-finite.

Static configuration (d, s, buffer sizes, ...) lives in the closure, never in the state,
so `jax.jit`, `jax.vmap` over keys and `jax.lax.scan` over decisions work for every method.

The boundary: options are checked by `check_int` / `check_float` (integers: Python,
NumPy or JAX integer scalars; reals: finite and representable in float32; bools
refused), every factory estimates its memory per agent (`Tuner.memory_bytes`) and
refuses above `memory_limit_gib` before allocating anything, and `make_tuner` wraps
`tell` so that a non-scalar objective raises a ValueError when traced.
"""
from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

from hcjax.space import FLOAT32_MAX, Space, integer_scalar, real_scalar

State = Any
DEFAULT_MEMORY_LIMIT_GIB = 4.0
GIB = 2 ** 30
# `Tuner.step` asks with jax.random.fold_in(key, STEP_KEY_TAG): the caller may pass a key
# it also uses for other draws (e.g. the update's own key) without correlating them.
STEP_KEY_TAG = 0x68636A78


def no_values(state: State) -> jax.Array:
    """The `values` of a Tuner built without one: a ValueError when called."""
    raise ValueError("this Tuner was built without a `values` function (Tuner(..., values=fn)); every tuner of "
                     "hcjax.make_tuner has one")


def no_place(state: State, values: jax.Array) -> State:
    """The `place` of a Tuner built without one: a ValueError when called."""
    raise ValueError("this Tuner cannot be started from given values: it was built without a `place` function "
                     "(Tuner(..., place=fn)); every registry tuner but `schedule` has one")


class Tuner(NamedTuple):
    """A hyperparameter tuner: static `name` and `space`, three pure functions, and
    `memory_bytes`: the estimated peak memory of one agent (int bytes: the state, the
    copy a jitted `ask`/`tell` returns, and the largest temporary of `ask`/`tell`,
    e.g. the GP's kernel matrices). n vmapped agents need about n * memory_bytes.

    values(state) -> (h,) float32: the configuration in effect, the one `tell` reports
    on (right after `init`: the one init drew; after an `ask`: the values it returned).
    `step(state, key, objective, decide)`: tell, then ask on deciding iterations only.
    index_bounds: ((state field, exclusive upper bound of its integer entries), ...) for
    the fields that index something (arms, contexts, slots); a bound is an int, or a
    tuple of ints, one per row of the field's first axis (per hyperparameter). What a
    restored state is checked against (`HostTuner.load_state_dict`), since a gather
    would silently clamp an index. Tuples, so that a Tuner stays hashable.
    place(state, values (h,)) -> state with `values` in effect, as if its last `ask` had
    returned them: the next `tell` is an observation of them (HyperController: of the arms
    nearest them); what `make_tuner(..., start=...)` uses (`hcjax.tuners.start`)."""

    name: str
    space: Space
    init: Callable[[jax.Array], State]
    ask: Callable[[State, jax.Array], tuple[State, jax.Array]]
    tell: Callable[[State, jax.Array], State]
    memory_bytes: int
    values: Callable[[State], jax.Array] = no_values
    index_bounds: tuple[tuple[str, int | tuple[int, ...]], ...] = ()
    place: Callable[[State, jax.Array], State] = no_place

    def step(self, state: State, key: jax.Array, objective, decide) -> tuple[State, jax.Array]:
        """Tell `objective`, then ask only if `decide`: one call per training iteration.

        state: this tuner's state; key: a PRNG key, one per iteration (the iteration's
        own key is fine: the ask uses `jax.random.fold_in(key, STEP_KEY_TAG)`); objective:
        scalar, higher is better, NaN to tell nothing useful (it is ignored and counted);
        decide: a Python bool or a bool scalar array (anything else, e.g. "no", None or
        an int, is a ValueError naming `decide`) -> (state, values (h,) float32: the
        configuration in effect for the next iteration, `values(state)`).

        The same numbers as `state = tell(state, objective)` followed, when `decide`, by
        `state, values = ask(state, fold_in(key, STEP_KEY_TAG))`, else `values(state)`.
        Under `jax.vmap`, a ValueError when traced if every agent gets the same key (one
        that does not depend on the vmapped arguments, as a dummy `PRNGKey(0)` that
        replaced the script's rng) or the same state (init from such a key).
        A Python bool decides at trace time; an array runs `jax.lax.cond`. Under
        `jax.vmap` keep `decide` unbatched (computed from the scan's iteration index,
        not from per-agent data): the cond then survives batching and the ask runs on
        deciding iterations only. A batched `decide` still gives the right numbers, but
        vmap turns the cond into a select that computes every ask at every iteration.
        """
        check_decide(self.name, decide)
        check_state(self, state)
        key = check_step_inputs(self, key, state, objective)  # under vmap: a key or state every agent shares
        state = self.tell(state, objective)
        ask_key = jax.random.fold_in(key, STEP_KEY_TAG)
        if isinstance(decide, (bool, np.bool_)):
            return self.ask(state, ask_key) if decide else (state, self.values(state))

        def asked(s):
            s, v = self.ask(s, ask_key)
            return s, jnp.asarray(v, jnp.float32)

        def kept(s):
            return s, jnp.asarray(self.values(s), jnp.float32)

        return jax.lax.cond(jnp.asarray(decide, bool), asked, kept, state)


def check_decide(name: str, decide) -> None:
    """ValueError unless `decide` is a Python or NumPy bool, or a bool array of shape ()
    (a tracer too): a string such as "no" would be truthy, None or 0/1 ambiguous."""
    if isinstance(decide, (bool, np.bool_)):
        return
    dtype, shape = getattr(decide, "dtype", None), getattr(decide, "shape", None)
    if dtype is None or dtype != np.bool_ or tuple(shape) != ():
        raise ValueError(f"{name}.step: decide must be a Python bool or a bool scalar array (e.g. "
                         f"`update_i % 4 == 0`), got {decide!r}")


@functools.cache
def state_structure(init: Callable[[jax.Array], State]):
    """The pytree structure of `init(key)`'s state (traced with jax.eval_shape: nothing computed)."""
    return jax.tree_util.tree_structure(jax.eval_shape(init, jax.ShapeDtypeStruct((2,), jnp.uint32)))


def check_state(tuner: Tuner, state) -> None:
    """TypeError naming the `state` argument of `tuner.step` when it is not a state of this
    tuner (its pytree structure is not `init`'s): e.g. the key and the state given swapped."""
    expected, got = state_structure(tuner.init), jax.tree_util.tree_structure(state)
    if got != expected:
        leaves = jax.tree_util.tree_leaves(state)
        what = f"an array of shape {tuple(np.shape(leaves[0]))}" if got.num_leaves == 1 and got.num_nodes == 1 \
            else f"a pytree of {got.num_leaves} leaves"
        raise TypeError(f"{tuner.name}.step(state, key, objective, decide): state must be this tuner's state "
                        f"({tuner.name}.init(key)'s, {expected.num_leaves} arrays), got {what}"
                        + (": were the state and the key swapped?" if got.num_leaves == 1 else ""))


# Under jax.vmap, a value that does not depend on the vmapped arguments stays unbatched: one
# value for every agent. A custom_vmap rule sees which of its inputs are batched when the
# program is traced: `check_step_inputs` refuses what makes agents share their draws, and is
# the identity (free) outside vmap.

@functools.cache
def key_dependent_leaves(init: Callable[[jax.Array], State]) -> tuple[bool, ...]:
    """Per leaf of `init(key)`'s state: whether it depends on the key (found by tracing
    `init` vmapped over two keys, nothing computed); all False for a tuner whose start
    ignores the key (`fixed`)."""
    found = []

    @custom_vmap
    def probe(state):
        return state

    @probe.def_vmap
    def rule(axis_size, in_batched, state):
        found.append(tuple(jax.tree_util.tree_leaves(in_batched[0])))
        return state, in_batched[0]

    shapes = jax.eval_shape(jax.vmap(lambda key: probe(init(key))), jax.ShapeDtypeStruct((2, 2), jnp.uint32))
    return found[0] if found else (False,) * len(jax.tree_util.tree_leaves(shapes))


@functools.cache
def _step_check(name: str, key_dependent: tuple[bool, ...]):
    """The identity on (key, state, objective) -> key whose vmap rule refuses, for tuner
    `name`, a key shared by every agent, or a state shared where `init` would draw it from
    the key (`key_dependent`: per leaf of the state)."""

    @custom_vmap
    def check(key, state, objective):
        return key

    @check.def_vmap
    def rule(axis_size, in_batched, key, state, objective):
        key_batched, state_batched, objective_batched = in_batched
        state_batched = jax.tree_util.tree_leaves(state_batched)
        if not key_batched and (any(state_batched) or objective_batched):
            raise ValueError(f"{name}.step: every agent under jax.vmap got the same key (it does not depend on the "
                             "vmapped arguments, e.g. a key split from a fixed jax.random.PRNGKey(0) that replaced "
                             "the script's rng), so their tuners would ask with the same draws; pass a per-agent "
                             "key, e.g. jax.random.fold_in(seed_key, update_i) with the vmapped function's own key "
                             "argument as seed_key")
        shared = len(state_batched) == len(key_dependent) and any(
            drawn and not batched for drawn, batched in zip(key_dependent, state_batched))
        if objective_batched and shared:
            raise ValueError(f"{name}.step: every agent under jax.vmap has the same tuner state (it does not depend "
                             "on the vmapped arguments: TUNER.init got a key shared by every agent, or the state was "
                             "made outside jax.vmap), so every agent starts from the same configuration; initialise "
                             "it inside the vmapped function from the agent's own key, TUNER.init(rng) before any "
                             "line that replaces rng")
        return key, key_batched

    return check


def check_step_inputs(tuner: Tuner, key: jax.Array, state, objective) -> jax.Array:
    """key, unchanged. Under jax.vmap, a ValueError when the program is traced if the key
    is the same for every agent while the state or objective differs (their asks would
    share draws), or if the state is the same for every agent, where `tuner.init` draws
    it from the key, while the objective differs (every tuner started from one
    configuration). `Tuner.step` calls it."""
    return _step_check(tuner.name, key_dependent_leaves(tuner.init))(key, state, objective)

INIT_DOC = """init(key) -> state: key: a PRNG key, one per agent (under jax.vmap give every agent
its own: `hcjax.check_keys(keys)` refuses repeats) -> the tuner's state, a pytree of
fixed-shape arrays; `values(state)` is the configuration it drew, in effect until the
first ask."""
ASK_DOC = """ask(state, key) -> (state, values): key: a PRNG key -> the new state and values (h,)
float32, the next configuration in natural units, inside the space's bounds (integer
hyperparameters rounded); it is in effect until the next ask."""
TELL_DOC = """tell(state, objective) -> state: objective: a real scalar (higher is better) observed
with the configuration in effect, `values(state)`; NaN or |objective| > 1e15 is ignored
and counted. A non-scalar objective is a ValueError when traced."""
VALUES_DOC = """values(state) -> (h,) float32: the configuration in effect, the one `tell` reports
on (right after `init`: the one init drew; after an `ask`: the values it returned)."""


def documented(tuner: Tuner) -> Tuner:
    """`tuner` with its init, ask, tell and values wrapped to carry the interface's
    docstrings (`help(tuner.ask)`); the wrappers only call through (jit, vmap and scan
    see the same functions)."""

    def wrap(fn, doc):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            return fn(*args, **kwargs)

        call.__doc__ = doc
        return call

    return tuner._replace(init=wrap(tuner.init, INIT_DOC), ask=wrap(tuner.ask, ASK_DOC),
                          tell=wrap(tuner.tell, TELL_DOC), values=wrap(tuner.values, VALUES_DOC))


class Registry:
    """Named factories `factory(space, **options, memory_limit_gib=...)`, with the checks
    every `make_*` shares: a known name, an `hcjax.Space`, known options (a factory's
    keyword arguments after `space`) and a valid `memory_limit_gib`. `maker` names the
    public function in messages, `what` the kind of method. The package that imports
    every method's module (hcjax.tuners, hcjax.population) owns the complete registry."""

    def __init__(self, maker: str, what: str):
        self.maker, self.what = maker, what
        self._factories: dict[str, Callable[..., Any]] = {}

    def register(self, name: str):
        """Decorator: register `factory(space, **options) -> method` under `name`."""

        def wrap(factory):
            self._factories[name] = factory
            return factory

        return wrap

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def factory(self, name: str) -> Callable[..., Any]:
        if not isinstance(name, str) or name not in self._factories:
            raise ValueError(f"{self.maker}: unknown {self.what} name {name!r}; known: {sorted(self._factories)}")
        return self._factories[name]

    def options(self, name: str) -> dict[str, Any]:
        """The keyword options of method `name` and their defaults."""
        params = list(inspect.signature(self.factory(name)).parameters.values())[1:]
        return {p.name: p.default for p in params if p.name != "memory_limit_gib"}

    def make(self, name: str, space: Space, memory_limit_gib, options: dict[str, Any]):
        """The checked call of factory `name` (ValueErrors name the field and what is allowed)."""
        factory = self.factory(name)
        if not isinstance(space, Space):
            raise ValueError(f"{self.maker}: space must be an hcjax.Space, got {type(space).__name__}")
        allowed = self.options(name)
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(f"{self.maker}({name!r}): unknown option(s) {unknown}; allowed: {sorted(allowed)}")
        limit = check_float(f"{self.maker}.memory_limit_gib", memory_limit_gib, 0.0, low_open=True)
        return factory(space, **options, memory_limit_gib=limit)


TUNERS = Registry("make_tuner", "tuner")  # filled by hcjax.tuners, which holds make_tuner
register = TUNERS.register


def check_objective(name: str, objective) -> None:
    """ValueError unless `objective` is one real number: a Python int or float, a NumPy
    or JAX scalar, or a 0-d array (a tracer too) of integer or floating dtype."""
    if isinstance(objective, (int, float)) and not isinstance(objective, bool):
        return
    shape, dtype = getattr(objective, "shape", None), getattr(objective, "dtype", None)
    if isinstance(objective, (list, tuple)):
        shape = _nested_shape(objective)
    if shape is not None and tuple(shape) != ():
        raise ValueError(f"{name}.tell: objective must be a scalar (shape ()), got a {type(objective).__name__} of "
                         f"shape {tuple(shape)}; tell one objective per call (under jax.vmap, each agent's objective "
                         "is a scalar)")
    real = dtype is not None and (jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating))
    if not real:
        raise ValueError(f"{name}.tell: objective must be a real number (Python, NumPy or JAX scalar, not a bool), "
                         f"got {objective!r}")


def _nested_shape(x) -> tuple[int, ...]:
    """Shape of a nested list/tuple of scalars or arrays (tracers too), from first entries."""
    if isinstance(x, (list, tuple)):
        return (len(x),) + (_nested_shape(x[0]) if x else ())
    return tuple(getattr(x, "shape", ()))


def scalar_objective_tell(name: str, tell: Callable[[State, jax.Array], State]) -> Callable[[State, jax.Array], State]:
    """`tell` preceded by `check_objective` (a trace-time check: free once compiled)."""

    @functools.wraps(tell)
    def checked(state, objective):
        check_objective(name, objective)
        return tell(state, objective)

    return checked


def check_int(field: str, value, low: int, high: int | None = None) -> int:
    """Validate an integer option (Python, NumPy or JAX integer scalar; not a bool, not
    a float) -> Python int; a ValueError naming `field` and its allowed range."""
    v = integer_scalar(value)
    if v is None or v < low or (high is not None and v > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{field} must be an integer {allowed}, got {value!r}")
    return v


def check_float(field: str, value, low: float, high: float | None = None, low_open: bool = False) -> float:
    """Validate a real option -> Python float; a ValueError naming `field` and its range.

    Accepted: Python, NumPy or JAX real scalars (not bools), finite, |x| <= FLOAT32_MAX,
    inside the range both as given and rounded to float32 (tuners compute in float32:
    ridge=1e-50 is 0 there, so it is refused for ridge > 0).
    """
    v = real_scalar(value)

    def inside(x):
        return (x > low if low_open else x >= low) and (high is None or x <= high)

    if v is None or not math.isfinite(v) or abs(v) > FLOAT32_MAX or not inside(v) or not inside(float(np.float32(v))):
        lo = f"> {low}" if low_open else f">= {low}"
        allowed = lo if high is None else f"{lo} and <= {high}"
        raise ValueError(f"{field} must be a finite number {allowed}, representable in float32 "
                         f"(|x| <= {FLOAT32_MAX:.8g}), got {value!r}")
    return v


def check_memory(name: str, nbytes: int, limit_gib: float, involved: str, *, maker: str = "make_tuner",
                 what: str = "per agent (state and the largest temporary of ask/tell)") -> int:
    """`nbytes` (`what`: per agent for a tuner) if it is within `limit_gib` GiB, else a
    ValueError naming the options `involved`, the estimate, the limit and how to raise it
    (with `maker`, the function that took `memory_limit_gib`)."""
    if nbytes > limit_gib * GIB:
        gib = nbytes / GIB if nbytes < 2 ** 1000 else math.inf
        raise ValueError(
            f"{name}: {involved} need an estimated {gib:.4g} GiB {what}, above memory_limit_gib={limit_gib:g}; use "
            f"smaller values, or raise the limit: {maker}({name!r}, space, memory_limit_gib=..., ...)")
    return int(nbytes)


# Objectives of larger magnitude are treated like NaN: squares of them overflow float32.
MAX_ABS_OBJECTIVE = 1e15


def valid_objective(objective: jax.Array) -> jax.Array:
    """bool scalar: the objective is finite and |objective| <= MAX_ABS_OBJECTIVE.

    Every tuner ignores an invalid objective (no learning from it) and counts it.
    """
    x = jnp.asarray(objective, jnp.float32)
    return jnp.isfinite(x) & (jnp.abs(x) <= MAX_ABS_OBJECTIVE)
