"""Objectives to `tell`, computed from one training iteration's data inside jit.

Each helper takes the level carried from the previous iteration (a float32 scalar,
start it at NaN: `NO_LEVEL`) and returns (objective, level): tell the objective, carry
the level. NaN objectives are what every tuner ignores (and counts), so "nothing to
learn from yet" costs nothing. Under `jax.vmap` every agent carries its own level.

    level = hcjax.objectives.NO_LEVEL
    objective, level = hcjax.objectives.return_change(level, info["returned_episode_returns"],
                                                      info["returned_episode"])

For a hyperparameter of exploration (an epsilon floor, an entropy bonus) training
episodes reward exploring less, directly: tell the change of greedy evaluation returns
instead, `greedy_returns` (N greedy episodes of a gymnax-style environment, in jit):

    returns = hcjax.objectives.greedy_returns(key, env, env_params, greedy_policy, episodes=8, max_steps=500)
    objective, level = hcjax.objectives.return_change(level, returns)
"""
from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from hcjax.tuner import check_int

NO_LEVEL = np.float32(np.nan)  # the level before any: the first objective is NaN


def mean_return(episode_returns: jax.Array, done: jax.Array | None = None, *, caller: str = "mean_return") -> jax.Array:
    """episode_returns, done: any same shape (e.g. (steps, envs)): the return of the
    episode that ended at each entry, and bool (or 0/1) True where one ended (None:
    every entry is a finished episode's, e.g. `greedy_returns`) -> float32 scalar: the
    mean return of the finished episodes, NaN when none finished. `caller` names the
    public function in the shape error."""
    episode_returns, done = _same_shape(caller, episode_returns, done)
    n = jnp.sum(done)
    total = jnp.sum(jnp.where(done, episode_returns, 0.0))
    return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32)


def return_change(level: jax.Array, episode_returns: jax.Array,
                  done: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The change of the mean return of finished episodes (the paper's objective).

    level: float32 scalar, the mean return of the last iteration in which episodes
    finished (NaN before the first); episode_returns, done: any same shape, as in
    `mean_return` -> (objective, level), float32 scalars: where episodes finished,
    objective = their mean return - level and level = that mean; where none finished,
    objective = NaN and level unchanged. NaN until two iterations with finished
    episodes have been seen (PureJaxRL's LogWrapper gives
    info["returned_episode_returns"] and info["returned_episode"]; `greedy_returns`
    gives finished episodes only: leave `done` out)."""
    now = mean_return(episode_returns, done, caller="return_change")
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


def greedy_returns(key: jax.Array, env, env_params, policy: Callable[[jax.Array], jax.Array], episodes: int,
                   max_steps: int) -> jax.Array:
    """The returns of `episodes` evaluation episodes run side by side inside jit.

    key: a PRNG key; env: a gymnax-style environment (duck-typed, no gymnax import):
    `env.reset(key, env_params) -> (obs, env_state)` and `env.step(key, env_state,
    action, env_params) -> (obs, env_state, reward, terminated, truncated, info)`
    (gymnax >= 1.0) or `(obs, env_state, reward, done, info)` (older); policy: one
    observation -> its action (e.g. the argmax of a Q-network: greedy); episodes,
    max_steps: integers in [1, 2**31 - 1] -> (episodes,) float32: each episode's summed reward,
    up to its first end or `max_steps` steps (set it to the environment's own limit,
    500 for CartPole-v1). A `jax.lax.while_loop` stops when every episode has ended.
    ValueError naming the argument for an out-of-range count and for done flags that are
    not bool or integer (float flags).
    """
    episodes = check_int("greedy_returns.episodes", episodes, 1)
    max_steps = check_int("greedy_returns.max_steps", max_steps, 1, 2**31 - 1)  # the step counter is int32
    reset_key, key = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, episodes), env_params)

    def one_step(carry):
        t, key, obs, env_state, total, alive = carry
        key, step_key = jax.random.split(key)
        action = jax.vmap(policy)(obs)
        out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(step_key, episodes), env_state, action,
                                                          env_params)
        flags = dict(terminated=out[3], truncated=out[4]) if len(out) == 6 else dict(done=out[3])
        done = jnp.zeros(episodes, bool)
        for name, flag in flags.items():
            kind = jnp.result_type(flag)
            if not (jnp.issubdtype(kind, jnp.bool_) or jnp.issubdtype(kind, jnp.integer)):
                raise ValueError(f"greedy_returns: env.step's {name} must be bool (or integer 0/1), got {kind}")
            done = done | jnp.asarray(flag, bool)
        total = total + jnp.where(alive, jnp.asarray(out[2], jnp.float32), 0.0)
        return t + 1, key, out[0], out[1], total, alive & ~done

    def running(carry):
        return (carry[0] < max_steps) & jnp.any(carry[5])

    start = (jnp.int32(0), key, obs, env_state, jnp.zeros(episodes, jnp.float32), jnp.ones(episodes, bool))
    return jax.lax.while_loop(running, one_step, start)[4]


def _same_shape(name: str, episode_returns, done) -> tuple[jax.Array, jax.Array]:
    r = jnp.asarray(episode_returns, jnp.float32)
    d = jnp.ones(r.shape, bool) if done is None else jnp.asarray(done)
    if r.shape != d.shape:
        raise ValueError(f"{name}: episode_returns and done must have the same shape, got {r.shape} and {d.shape}")
    return r, d.astype(bool)
