"""Objectives to `tell`, computed from one training iteration's data inside jit.

Each helper takes the level carried from the previous iteration (a float32 scalar,
start it at NaN: `NO_LEVEL`) and returns (objective, level): tell the objective, carry
the level. NaN objectives are what every tuner ignores (and counts), so "nothing to
learn from yet" costs nothing. Under `jax.vmap` every agent carries its own level.

    level = hcjax.objectives.NO_LEVEL
    objective, level = hcjax.objectives.return_change(level, info["returned_episode_returns"],
                                                      info["returned_episode"])
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NO_LEVEL = np.float32(np.nan)  # the level before any: the first objective is NaN


def mean_return(episode_returns: jax.Array, done: jax.Array) -> jax.Array:
    """episode_returns, done: any same shape (e.g. (steps, envs)): the return of the
    episode that ended at each entry, and bool (or 0/1) True where one ended -> float32
    scalar: the mean return of the finished episodes, NaN when none finished."""
    episode_returns, done = _same_shape("mean_return", episode_returns, done)
    n = jnp.sum(done)
    total = jnp.sum(jnp.where(done, episode_returns, 0.0))
    return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32)


def return_change(level: jax.Array, episode_returns: jax.Array, done: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The change of the mean return of finished episodes (the paper's objective).

    level: float32 scalar, the mean return of the last iteration in which episodes
    finished (NaN before the first); episode_returns, done: any same shape, as in
    `mean_return` -> (objective, level), float32 scalars: where episodes finished,
    objective = their mean return - level and level = that mean; where none finished,
    objective = NaN and level unchanged. NaN until two iterations with finished
    episodes have been seen (PureJaxRL's LogWrapper gives
    info["returned_episode_returns"] and info["returned_episode"])."""
    now = mean_return(episode_returns, done)
    level = jnp.asarray(level, jnp.float32)
    finished = ~jnp.isnan(now)
    return jnp.where(finished, now - level, jnp.nan), jnp.where(finished, now, level)


def reward_change(level: jax.Array, rewards: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The change of the mean reward per step: level: float32 scalar (NaN at first);
    rewards: any shape (e.g. (steps, envs)) -> (objective = mean(rewards) - level,
    level = mean(rewards)), float32 scalars. Meaningless where every step earns the
    same reward (CartPole: 1 per step); use `return_change` there."""
    now = jnp.mean(jnp.asarray(rewards, jnp.float32))
    return now - jnp.asarray(level, jnp.float32), now


def _same_shape(name: str, episode_returns, done) -> tuple[jax.Array, jax.Array]:
    r, d = jnp.asarray(episode_returns, jnp.float32), jnp.asarray(done)
    if r.shape != d.shape:
        raise ValueError(f"{name}: episode_returns and done must have the same shape, got {r.shape} and {d.shape}")
    return r, d.astype(bool)
