"""Pgx's single-player games (registry names `pgx/2048`, ... and Env objects) as JaxEnvs.

Pgx steps as `init(key) -> State`, `step(state, action, key) -> State` without auto-reset:
the JaxEnv's state is pgx's State, its step is `backend.auto_reset` of pgx's; `done` where
the game is terminated or truncated; the reward is the one player's. The action mask is
pgx's `legal_action_mask` (PPO never plays an illegal move). Observations (boolean planes)
are flattened to float32. Games of two or more players are refused: PPO here trains one
agent per environment (self-play needs an opponent model this package does not have).
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
    no_options,
    observation_size,
    require,
)
from agents.envs.kinds import JaxEnv

ENVIRONMENT = ("pgx.core", "Env")


def _registry() -> tuple[str, ...]:
    return tuple(import_module("pgx", BACKEND).available_envs())


def _named(ident: str, **opts) -> JaxEnv:
    no_options(ident, "a pgx game", opts)
    require(BACKEND)
    return _jax_env(import_module("pgx", BACKEND).make(ident), ident)


def _accepts(obj) -> bool:
    return is_instance(obj, *ENVIRONMENT)


def _from_object(env, **opts) -> JaxEnv:
    name = str(getattr(env, "id", type(env).__name__))
    no_options(name, "a pgx Env object", opts)
    require(BACKEND)
    return _jax_env(env, name)


def _jax_env(env, name: str) -> JaxEnv:
    if env.num_players != 1:
        raise ValueError(f"envs.make({name!r}): a pgx game of {env.num_players} players; PPO here trains one agent "
                         f"per environment: single-player games only (e.g. pgx/2048)")
    first = jax.eval_shape(env.init, jax.random.PRNGKey(0))

    def reset(key):
        state = env.init(key)
        return state, flatten_observation(state.observation)

    def step(key, state, action):
        state = env.step(state, action, key)
        done = jnp.logical_or(state.terminated, state.truncated)
        return state, flatten_observation(state.observation), state.rewards[0].astype(jnp.float32), done

    return JaxEnv(name=name, obs_size=observation_size(first.observation), action_size=int(env.num_actions),
                  discrete=True, reset=reset, step=auto_reset(reset, step), backend="pgx",
                  action_mask=lambda state: state.legal_action_mask)


BACKEND = Backend(name="pgx", package="pgx", min_version="2.6.0", host=False, registry=_registry,
                  make_named=_named, accepts=_accepts, make_object=_from_object,
                  described="a pgx Env (single-player)", bare=False)
