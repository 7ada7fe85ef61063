"""gymnax environments (registry names and Environment objects) as JaxEnvs.

Options: `params=` (an EnvParams replacing the defaults), any field of the env's params
as a keyword (e.g. `max_steps_in_episode=100`, applied after `params`), and for registry
names `env_kwargs=` (constructor arguments for `gymnax.make`). An object is a gymnax
`Environment` (`make(env, params=p)`) or an `(Environment, params)` pair.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from agents.envs.backend import (
    Backend,
    check_observation,
    flat_size,
    import_module,
    is_instance,
    problem,
    require,
    unsupported,
)
from agents.envs.kinds import JaxEnv

ENVIRONMENT = ("gymnax.environments.environment", "Environment")


def _registry() -> tuple[str, ...]:
    return tuple(import_module("gymnax", BACKEND).registered_envs)


def _named(ident: str, params=None, env_kwargs: dict | None = None, **fields) -> JaxEnv:
    require(BACKEND)
    gymnax = import_module("gymnax", BACKEND)
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise ValueError(f"envs.make({ident!r}): env_kwargs must be a dict, got {env_kwargs!r}")
    env, default = gymnax.make(ident, **(env_kwargs or {}))
    return _jax_env(env, default if params is None else params, ident, **fields)


def _accepts(obj) -> bool:
    pair = isinstance(obj, tuple) and len(obj) == 2 and is_instance(obj[0], *ENVIRONMENT)
    return pair or is_instance(obj, *ENVIRONMENT)


def _from_object(obj, **opts) -> JaxEnv:
    if isinstance(obj, tuple):
        if "params" in opts:
            raise ValueError("envs.make((env, params)): params given twice (in the pair and as params=)")
        return _jax_env(obj[0], obj[1], obj[0].name, **opts)
    return _jax_env(obj, opts.pop("params", None), obj.name, **opts)


def _spaces(env, params, name: str):
    """(discrete, action count or size, low, high, action shape, declared observation
    space or None) of a gymnax env; ValueError for unsupported spaces."""
    spaces = import_module("gymnax.environments.spaces", BACKEND)
    try:
        space = env.action_space(params)
    except NotImplementedError:
        raise ValueError(f"envs.make({name!r}): the gymnax env must implement action_space(params)") from None
    if isinstance(space, spaces.Discrete):
        action = (True, int(space.n), None, None, ())
    elif isinstance(space, spaces.Box):
        a_shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), a_shape).reshape(-1)
        high = np.broadcast_to(np.asarray(space.high, np.float32), a_shape).reshape(-1)
        action = (False, flat_size(a_shape), low, high, a_shape)
    else:
        raise unsupported(name, "action", space, "gymnax Discrete, Box")
    try:
        obs_space = env.observation_space(params)
    except NotImplementedError:
        obs_space = None  # then only the traced reset tells the observation shape
    if obs_space is not None and not isinstance(obs_space, spaces.Box):
        raise unsupported(name, "observation", obs_space, "gymnax Box (any shape)")
    return action + (obs_space,)


def _jax_env(env, params, name: str, **fields) -> JaxEnv:
    """JaxEnv of a gymnax Environment; `fields` override fields of `params`."""
    require(BACKEND)
    if params is None:
        params = env.default_params
    if fields:
        allowed = [f.name for f in dataclasses.fields(params)] if dataclasses.is_dataclass(params) else []
        bad = sorted(set(fields) - set(allowed))
        if bad:
            raise ValueError(f"envs.make({name!r}): unknown option(s) {bad}; a gymnax env takes params=, env_kwargs= "
                             f"(registry names) and the fields of its {type(params).__name__}: {allowed}")
        params = dataclasses.replace(params, **fields)
    discrete, n, low, high, a_shape, obs_space = _spaces(env, params, name)
    obs, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0), params)
    if not isinstance(obs, jax.ShapeDtypeStruct):
        raise ValueError(f"envs.make({name!r}): reset must return one observation array, got {obs}")
    if obs_space is not None:
        check_observation(name, obs_space.shape, obs.shape)

    def reset(key):
        obs, state = env.reset(key, params)
        return state, obs.reshape(-1).astype(jnp.float32)

    def step(key, state, action):
        out = env.step(key, state, action if discrete else action.reshape(a_shape), params)
        if len(out) != 6:  # gymnax<1: (obs, state, reward, done, info)
            raise RuntimeError(problem(BACKEND) or f"envs.make({name!r}): gymnax step returned {len(out)} values; "
                               f"agents.envs needs gymnax>=1.0.1 (obs, state, reward, terminated, truncated, info)")
        obs, state, reward, terminated, truncated, _ = out
        done = jnp.logical_or(jnp.asarray(terminated, bool), jnp.asarray(truncated, bool))
        return state, obs.reshape(-1).astype(jnp.float32), jnp.asarray(reward, jnp.float32), done

    steps = getattr(params, "max_steps_in_episode", None)
    return JaxEnv(name=name, obs_size=flat_size(obs.shape), action_size=n, discrete=discrete, reset=reset,
                  step=step, action_low=low, action_high=high,
                  max_episode_steps=None if steps is None else int(steps), backend="gymnax")


BACKEND = Backend(
    name="gymnax", package="gymnax", min_version="1.0.1", host=False, registry=_registry, make_named=_named,
    accepts=_accepts, make_object=_from_object, described="a gymnax Environment (or (env, params))",
    version_note="gymnax<1 steps return 5 values; 1.x returns obs, state, reward, terminated, truncated, info")
