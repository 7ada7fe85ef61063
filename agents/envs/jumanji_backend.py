"""Jumanji environments (registry names `jumanji/Snake-v1`, ... and Environment objects) as
JaxEnvs.

Jumanji speaks dm_env: `reset(key) -> (state, TimeStep)`, `step(state, action) -> (state,
TimeStep)` with no key and no auto-reset. The JaxEnv's state is (jumanji state,
observation); its step is `backend.auto_reset` of jumanji's (a fresh `reset` where the
TimeStep is the last of its episode: termination and jumanji's own time limit alike are
`done`). Observations (a namedtuple of arrays) are flattened, every field (the action mask
and the step count included); an observation with an `action_mask` field of shape
(number of actions,) gives the JaxEnv's `action_mask`.

Options: keyword arguments of `jumanji.make` (names); an object takes none. Actions: a
DiscreteArray (PPO's discrete actions) or a float BoundedArray (continuous, flattened);
a MultiDiscreteArray is refused (flatten it into one discrete action in your own JaxEnv:
docs/environment-libraries.md).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from agents.envs.backend import (
    Backend,
    auto_reset,
    flat_size,
    flatten_observation,
    import_module,
    is_instance,
    make_with_options,
    no_options,
    observation_size,
    require,
    unsupported,
)
from agents.envs.kinds import JaxEnv

ENVIRONMENT = ("jumanji.env", "Environment")


def _registry() -> tuple[str, ...]:
    return tuple(sorted(import_module("jumanji", BACKEND).registered_environments()))


def _named(ident: str, **kwargs) -> JaxEnv:
    require(BACKEND)
    return _jax_env(make_with_options(import_module("jumanji", BACKEND).make, ident, kwargs, "jumanji"), ident)


def _accepts(obj) -> bool:
    return is_instance(obj, *ENVIRONMENT)


def _from_object(env, **opts) -> JaxEnv:
    name = type(env.unwrapped).__name__ if hasattr(env, "unwrapped") else type(env).__name__
    no_options(name, "a jumanji Environment object", opts)
    require(BACKEND)
    return _jax_env(env, name)


def _action(spec, name: str):
    """(discrete, action_size, low, high, shape) of a jumanji action spec."""
    specs = import_module("jumanji.specs", BACKEND)
    if isinstance(spec, specs.MultiDiscreteArray):
        raise unsupported(name, "action", spec, "jumanji DiscreteArray, or a float BoundedArray; a multi-discrete "
                          "action is several choices at once: flatten it into one DiscreteArray of their product "
                          "in your own JaxEnv (docs/environment-libraries.md)")
    if isinstance(spec, specs.DiscreteArray):
        return True, int(spec.num_values), None, None, ()
    if isinstance(spec, specs.BoundedArray) and np.issubdtype(spec.dtype, np.floating):
        shape = tuple(spec.shape)
        low = np.broadcast_to(np.asarray(spec.minimum, np.float32), shape).reshape(-1)
        high = np.broadcast_to(np.asarray(spec.maximum, np.float32), shape).reshape(-1)
        return False, flat_size(shape), low, high, shape
    raise unsupported(name, "action", spec, "jumanji DiscreteArray, or a float BoundedArray")


def _jax_env(env, name: str) -> JaxEnv:
    discrete, n, low, high, shape = _action(env.action_spec, name)
    _, first = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    mask = getattr(first.observation, "action_mask", None)
    masked = discrete and mask is not None and tuple(mask.shape) == (n,)

    def reset(key):
        state, timestep = env.reset(key)
        return (state, timestep.observation), flatten_observation(timestep.observation)

    def step(key, carry, action):
        del key  # jumanji's step draws from the key its state carries
        state, timestep = env.step(carry[0], action if discrete else action.reshape(shape))
        done = timestep.step_type == 2  # dm_env's LAST: a termination or jumanji's time limit
        return (state, timestep.observation), flatten_observation(timestep.observation), \
            jnp.asarray(timestep.reward, jnp.float32).reshape(()), done

    limit = getattr(env, "time_limit", None)
    return JaxEnv(name=name, obs_size=observation_size(first.observation), action_size=n, discrete=discrete,
                  reset=reset, step=auto_reset(reset, step), action_low=low, action_high=high,
                  max_episode_steps=int(limit) if isinstance(limit, (int, np.integer)) else None, backend="jumanji",
                  action_mask=(lambda carry: carry[1].action_mask) if masked else None)


BACKEND = Backend(name="jumanji", package="jumanji", min_version="1.1.2", host=False, registry=_registry,
                  make_named=_named, accepts=_accepts, make_object=_from_object,
                  described="a jumanji Environment", bare=False)
