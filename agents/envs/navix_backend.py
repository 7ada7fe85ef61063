"""NAVIX environments (registry names `navix/Navix-Empty-5x5-v0`, ... and Environment
objects) as JaxEnvs.

NAVIX's own auto-reset is deferred by one call (the step after the last one of an episode
ignores its action and resets); PPO needs the next episode's first observation in the
same step, so the environment is made with `disable_autoreset=True` and stepped through
`backend.auto_reset`. The JaxEnv's state is NAVIX's Timestep; `done` where its step type
is a truncation (its `max_steps`) or a termination. Observations (uint8 grids or images)
are flattened to float32. NAVIX has no action masks.

Options: keyword arguments of `navix.make` (names, e.g. `max_steps=`); an object takes none.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.envs.backend import (
    Backend,
    auto_reset,
    flatten_observation,
    import_module,
    is_instance,
    make_with_options,
    no_options,
    observation_size,
    require,
)
from agents.envs.kinds import JaxEnv

ENVIRONMENT = ("navix.environments.environment", "Environment")


def _registry() -> tuple[str, ...]:
    return tuple(import_module("navix", BACKEND).registry())


def _named(ident: str, **kwargs) -> JaxEnv:
    require(BACKEND)
    return _jax_env(make_with_options(import_module("navix", BACKEND).make, ident, kwargs, "navix"), ident)


def _accepts(obj) -> bool:
    return is_instance(obj, *ENVIRONMENT)


def _from_object(env, **opts) -> JaxEnv:
    name = type(env).__name__
    no_options(name, "a NAVIX Environment object", opts)
    require(BACKEND)
    return _jax_env(env, name)


def _jax_env(env, name: str) -> JaxEnv:
    env = env.replace(disable_autoreset=True)
    first = jax.eval_shape(env.reset, jax.random.PRNGKey(0))

    def reset(key):
        timestep = env.reset(key)
        return timestep, flatten_observation(timestep.observation)

    def step(key, timestep, action):
        del key  # NAVIX's step draws from the key its state carries
        timestep = env.step(timestep, action)
        return timestep, flatten_observation(timestep.observation), jnp.asarray(timestep.reward, jnp.float32), \
            timestep.step_type > 0  # 1: truncation, 2: termination

    return JaxEnv(name=name, obs_size=observation_size(first.observation), action_size=int(env.action_space.n),
                  discrete=True, reset=reset, step=auto_reset(reset, step), max_episode_steps=int(env.max_steps),
                  backend="navix")


BACKEND = Backend(name="navix", package="navix", min_version="4.0.0", host=False, registry=_registry,
                  make_named=_named, accepts=_accepts, make_object=_from_object,
                  described="a NAVIX Environment", bare=False)
