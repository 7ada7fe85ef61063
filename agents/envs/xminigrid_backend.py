"""XLand-MiniGrid environments (registry names `xminigrid/MiniGrid-Empty-5x5`, ... and
(Environment, EnvParams) pairs) as JaxEnvs.

XLand-MiniGrid steps as `reset(params, key) -> TimeStep`, `step(params, timestep, action)
-> TimeStep` without auto-reset: the JaxEnv's state is the TimeStep, its step is
`backend.auto_reset` of xminigrid's; `done` where the TimeStep is the last of its episode
(the goal reached, or `params.max_steps`). Observations (uint8 grids) are flattened to
float32. XLand-MiniGrid has no action masks.

The XLand-MiniGrid-R* tasks are played under a ruleset (a goal, rules, the tiles placed):
give one as the option `ruleset=` (a `xminigrid.types.RuleSet`, e.g.
`xminigrid.load_benchmark("trivial-21k").get_ruleset(0)`, a benchmark xminigrid downloads
once) or in the params (`params=`, or an (env, params) pair with `params.replace(ruleset=...)`).
Without one (their default params hold the empty ruleset: no goal, every reward 0) they are
refused, naming how to give it; by name in a study, through a factory that returns the pair.

Options: `params=` (replacing the defaults) and any field of its EnvParams as a keyword
(e.g. `max_steps=50`); keyword arguments of `xminigrid.make` go in `env_kwargs=`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from agents.envs.backend import (
    Backend,
    auto_reset,
    flatten_observation,
    import_module,
    is_instance,
    observation_size,
    require,
    with_fields,
)
from agents.envs.kinds import JaxEnv

ENVIRONMENT = ("xminigrid.environment", "Environment")


def _registry() -> tuple[str, ...]:
    return tuple(import_module("xminigrid", BACKEND).registered_environments())


def _named(ident: str, params=None, env_kwargs: dict | None = None, **fields) -> JaxEnv:
    require(BACKEND)
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise ValueError(f"envs.make({ident!r}): env_kwargs must be a dict, got {env_kwargs!r}")
    env, default = import_module("xminigrid", BACKEND).make(ident, **(env_kwargs or {}))
    return _jax_env(env, default if params is None else params, ident, **fields)


def _accepts(obj) -> bool:
    pair = isinstance(obj, tuple) and len(obj) == 2 and is_instance(obj[0], *ENVIRONMENT)
    return pair or is_instance(obj, *ENVIRONMENT)


def _from_object(obj, **opts) -> JaxEnv:
    require(BACKEND)
    if isinstance(obj, tuple):
        if "params" in opts:
            raise ValueError("envs.make((env, params)): params given twice (in the pair and as params=)")
        return _jax_env(obj[0], obj[1], type(obj[0]).__name__, **opts)
    return _jax_env(obj, opts.pop("params", None) or obj.default_params(), type(obj).__name__, **opts)


def _jax_env(env, params, name: str, **fields) -> JaxEnv:
    params = with_fields(params, fields, name, "xminigrid")
    ruleset = getattr(params, "ruleset", None)
    if ruleset is not None and not np.asarray(ruleset.goal).any():  # xminigrid's EmptyGoal encodes as zeros
        raise ValueError(f"envs.make({name!r}): an XLand-MiniGrid task needs a ruleset, and its params hold the "
                         f"empty one (no goal: every reward 0). Give ruleset= (an xminigrid RuleSet, e.g. "
                         f"xminigrid.load_benchmark('trivial-21k').get_ruleset(0)), or params / an (env, params) "
                         f"pair with params.replace(ruleset=...); in a study by name, a factory returning that pair "
                         f"(docs/environment-libraries.md)")
    first = jax.eval_shape(env.reset, params, jax.random.PRNGKey(0))

    def reset(key):
        timestep = env.reset(params, key)
        return timestep, flatten_observation(timestep.observation)

    def step(key, timestep, action):
        del key  # xminigrid's dynamics take no key
        timestep = env.step(params, timestep, action)
        return timestep, flatten_observation(timestep.observation), jnp.asarray(timestep.reward, jnp.float32), \
            timestep.last()

    return JaxEnv(name=name, obs_size=observation_size(first.observation), action_size=int(env.num_actions(params)),
                  discrete=True, reset=reset, step=auto_reset(reset, step), max_episode_steps=int(params.max_steps),
                  backend="xminigrid")


BACKEND = Backend(name="xminigrid", package="xminigrid", min_version="0.9.3", host=False, registry=_registry,
                  make_named=_named, accepts=_accepts, make_object=_from_object,
                  described="an xminigrid Environment (or (env, params))", bare=False)
