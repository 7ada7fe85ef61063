"""gymnax environments (registry names and Environment objects) as JaxEnvs, and any
object with gymnax's interface.

Options: `params=` (an EnvParams replacing the defaults), any field of the env's params
as a keyword (e.g. `max_steps_in_episode=100`, applied after `params`), and for registry
names `env_kwargs=` (constructor arguments for `gymnax.make`). An object is a gymnax
`Environment` (`make(env, params=p)`) or an `(Environment, params)` pair.

Gymnax's interface without its base class (craftax's environments, for one) is accepted
the same way: an object with `reset(key, params) -> (obs, state)`, `step(key, state,
action, params)` -> (obs, state, reward, done, info) or gymnax 1.x's (obs, state, reward,
terminated, truncated, info), `default_params`, and `action_space(params)` /
`observation_space(params)` returning gymnax-like spaces (a Discrete has `n`; a Box has
`low`, `high` and `shape`). Its observations may be any pytree (flattened,
`backend.flatten_observation`). Its `JaxEnv.backend` names the library its class comes
from when that is one of the table's (e.g. "craftax"), else "custom". Whether its `step`
resets after `done` cannot be seen from its interface: a study checks it by running it
(`agents.envs.probe`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from agents.envs.backend import (
    Backend,
    check_observation,
    flat_size,
    flatten_observation,
    import_module,
    is_instance,
    observation_size,
    problem,
    require,
    unsupported,
    with_fields,
)
from agents.envs.kinds import JAX_BACKENDS, JaxEnv

ENVIRONMENT = ("gymnax.environments.environment", "Environment")
INTERFACE = ("reset", "step", "action_space", "observation_space")  # methods of gymnax's interface


def _registry() -> tuple[str, ...]:
    return tuple(import_module("gymnax", BACKEND).registered_envs)


def _named(ident: str, params=None, env_kwargs: dict | None = None, **fields) -> JaxEnv:
    require(BACKEND)
    gymnax = import_module("gymnax", BACKEND)
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise ValueError(f"envs.make({ident!r}): env_kwargs must be a dict, got {env_kwargs!r}")
    env, default = gymnax.make(ident, **(env_kwargs or {}))
    return from_gymnax_like(env, default if params is None else params, ident, **fields)


def gymnax_like(obj) -> bool:
    """Whether `obj` has gymnax's interface (a gymnax Environment, or any object with its
    methods and `default_params`)."""
    if is_instance(obj, *ENVIRONMENT):
        return True
    return not isinstance(obj, type) and all(callable(getattr(obj, m, None)) for m in INTERFACE) and \
        hasattr(obj, "default_params")


def _accepts(obj) -> bool:
    return gymnax_like(obj[0]) if isinstance(obj, tuple) and len(obj) == 2 else gymnax_like(obj)


def library_of(obj) -> str:
    """The backend name of the library an object's class comes from: "gymnax" for a gymnax
    Environment, a library of JAX_BACKENDS by its top-level module (e.g. "craftax"), else
    "custom"."""
    if is_instance(obj, *ENVIRONMENT):
        return "gymnax"
    top = (type(obj).__module__ or "").split(".")[0]
    return top if top in JAX_BACKENDS else "custom"


def _name_of(obj) -> str:
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) and name else type(obj).__name__


def _from_object(obj, **opts) -> JaxEnv:
    if isinstance(obj, tuple):
        if "params" in opts:
            raise ValueError("envs.make((env, params)): params given twice (in the pair and as params=)")
        return from_gymnax_like(obj[0], obj[1], _name_of(obj[0]), **opts)
    return from_gymnax_like(obj, opts.pop("params", None), _name_of(obj), **opts)


def _spaces(env, params, name: str):
    """(discrete, action count or size, low, high, action shape, declared observation
    space or None) of a gymnax env; ValueError for unsupported spaces."""
    try:
        space = env.action_space(params)
    except NotImplementedError:
        raise ValueError(f"envs.make({name!r}): the gymnax env must implement action_space(params)") from None
    if _discrete(space):
        action = (True, int(space.n), None, None, ())
    elif _box(space):
        a_shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), a_shape).reshape(-1)
        high = np.broadcast_to(np.asarray(space.high, np.float32), a_shape).reshape(-1)
        action = (False, flat_size(a_shape), low, high, a_shape)
    else:
        raise unsupported(name, "action", space, "gymnax Discrete, Box (a multi-discrete action: see "
                          "docs/environment-libraries.md, flatten it into one Discrete)")
    try:
        obs_space = env.observation_space(params)
    except NotImplementedError:
        obs_space = None  # then only the traced reset tells the observation shape
    if _discrete(obs_space):  # an index, not a vector of features: one-hot it in an adapter
        raise unsupported(name, "observation", obs_space, "gymnax Box (any shape), Dict or Tuple of them (flattened)")
    return action + (obs_space if _box(obs_space) else None,)  # a Dict or Tuple space: flattened as it comes


def _discrete(space) -> bool:
    """A gymnax-like Discrete: an integer `n` and a scalar shape."""
    return isinstance(getattr(space, "n", None), (int, np.integer)) and tuple(getattr(space, "shape", ())) == ()


def _box(space) -> bool:
    """A gymnax-like Box: `low`, `high` and a `shape`."""
    return space is not None and all(hasattr(space, a) for a in ("low", "high", "shape")) and not _discrete(space)


def from_gymnax_like(env, params, name: str, **fields) -> JaxEnv:
    """JaxEnv of a gymnax Environment or an object with its interface (`gymnax_like`);
    params: None (its default_params) or its params; `fields` override fields of them."""
    require(BACKEND)
    if params is None:
        params = env.default_params
    params = with_fields(params, fields, name, "gymnax")
    discrete, n, low, high, a_shape, obs_space = _spaces(env, params, name)
    obs, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0), params)
    if obs_space is not None and isinstance(obs, jax.ShapeDtypeStruct):
        check_observation(name, obs_space.shape, obs.shape)
    library = library_of(env)
    real = library == "gymnax"  # gymnax's own step returns six values from 1.0 on; an imitation may return five

    def reset(key):
        obs, state = env.reset(key, params)
        return state, flatten_observation(obs)

    def step(key, state, action):
        out = env.step(key, state, action if discrete else action.reshape(a_shape), params)
        n = len(out) if isinstance(out, tuple) else None
        if n == 5 and not real:  # gymnax 0.0.x's form, which craftax keeps: (obs, state, reward, done, info)
            obs, state, reward, done, _ = out
            done = jnp.asarray(done, bool)
        elif n == 6:
            obs, state, reward, terminated, truncated, _ = out
            done = jnp.logical_or(jnp.asarray(terminated, bool), jnp.asarray(truncated, bool))
        elif not real:  # your own object with gymnax's interface: its step is the mistake, not gymnax's version
            raise ValueError(f"envs.make({name!r}): your object's step(key, state, action, params) returned "
                             f"{f'{n} values' if n else 'one value, not a tuple'}; it must return (obs, state, "
                             f"reward, done, info) or gymnax 1.x's (obs, state, reward, terminated, truncated, info)")
        else:  # gymnax<1: (obs, state, reward, done, info)
            raise RuntimeError(problem(BACKEND) or f"envs.make({name!r}): gymnax step returned {len(out)} values; "
                               f"agents.envs needs gymnax>=1.0.1 (obs, state, reward, terminated, truncated, info)")
        return state, flatten_observation(obs), jnp.asarray(reward, jnp.float32), done

    steps = getattr(params, "max_steps_in_episode", None) or getattr(params, "max_timesteps", None)
    return JaxEnv(name=name, obs_size=observation_size(obs), action_size=n, discrete=discrete, reset=reset,
                  step=step, action_low=low, action_high=high,
                  max_episode_steps=None if steps is None else int(steps), backend=library)


BACKEND = Backend(
    name="gymnax", package="gymnax", min_version="1.0.1", host=False, registry=_registry, make_named=_named,
    accepts=_accepts, make_object=_from_object,
    described="a gymnax Environment or an object with its interface (or (env, params))",
    version_note="gymnax<1 steps return 5 values; 1.x returns obs, state, reward, terminated, truncated, info")
