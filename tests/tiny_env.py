"""A tiny hand-written pure-JAX environment (an `agents.envs.JaxEnv`, no gymnax) for the
subprocess tests whose point is not the environment (kill and resume, processes, Ctrl-C):
a study file names it as `env_factories = ["walk=tests.tiny_env:make_walk"]`, and the
subprocess then neither imports gymnax (with seaborn, pandas, scipy at its import time,
~2.7 CPU s) nor compiles CartPole's dynamics."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.envs import JaxEnv

EPISODE = 4  # steps an episode: at least one ends in every PPO iteration (batch_size >= 16 of 4 envs)
GOAL = 3.0


def _reset(key: jax.Array):
    """-> (state (x (), t ()), obs (2,)): x uniform in [-1, 1], at step 0."""
    state = (jax.random.uniform(key, (), minval=-1.0, maxval=1.0), jnp.int32(0))
    return state, _obs(state)


def _obs(state) -> jax.Array:
    x, _ = state
    return jnp.stack([x, GOAL - x])


def _step(key: jax.Array, state, action: jax.Array):
    """Left (0) or right (1) by 0.5; reward: minus the distance to the goal; after EPISODE
    steps `done`, and the returned state and obs are the next episode's first."""
    x, t = state
    x, t = x + jnp.where(action == 1, 0.5, -0.5), t + 1
    reward, done = -jnp.abs(GOAL - x), t >= EPISODE
    fresh, _ = _reset(key)
    state = jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, (x, t))
    return state, _obs(state), reward, done


def make_walk() -> JaxEnv:
    """A walker on a line towards a goal: obs (2,) float32 (position, distance to the goal),
    2 discrete actions, EPISODE steps an episode."""
    return JaxEnv(name="walk", obs_size=2, action_size=2, discrete=True, reset=_reset, step=_step,
                  max_episode_steps=EPISODE)


def _step_without_reset(key: jax.Array, state, action: jax.Array):
    """The walker's step that forgets to reset: after EPISODE steps every step is `done`."""
    x, t = state
    x, t = x + jnp.where(action == 1, 0.5, -0.5), t + 1
    return (x, t), _obs((x, t)), -jnp.abs(GOAL - x), t >= EPISODE


def make_stuck_walk() -> JaxEnv:
    """The walker with an adapter's mistake: its step never resets (a study must refuse it)."""
    return JaxEnv(name="stuck-walk", obs_size=2, action_size=2, discrete=True, reset=_reset,
                  step=_step_without_reset, max_episode_steps=EPISODE)


def _two_choice_step(key: jax.Array, state, action: jax.Array):
    """Takes two choices at once, action (2,) (left/right, stay/go): a multi-discrete action."""
    x, t = state
    x = x + jnp.where(action[0] == 1, 0.5, -0.5) * action[1]
    return _step(key, (x - 0.0, t), jnp.int32(2))  # 2 is neither left nor right: x unchanged by _step


def make_two_choice_walk() -> JaxEnv:
    """An adapter's mistake: a multi-discrete action (two choices of 2) declared as one Discrete(4)."""
    return JaxEnv(name="two-choice-walk", obs_size=2, action_size=4, discrete=True, reset=_reset,
                  step=_two_choice_step, max_episode_steps=EPISODE)
