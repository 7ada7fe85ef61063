"""Running observation normalisation (masked) and episode-return tracking.

Both are pure functions over small pytrees so they live inside the jitted PPO step
and also serve the host (gymnasium) path unchanged.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ObsStats:
    """Running mean / variance of observations: mean, var (obs_size,); count scalar.

    `count` starts at a tiny epsilon so the first merge is well defined.
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def init_obs_stats(obs_size: int) -> ObsStats:
    """Zero mean, unit variance, count 1e-4."""
    return ObsStats(mean=jnp.zeros((obs_size,), jnp.float32), var=jnp.ones((obs_size,), jnp.float32),
                    count=jnp.asarray(1e-4, jnp.float32))


def update_obs_stats(stats: ObsStats, obs: jax.Array, mask: jax.Array) -> ObsStats:
    """Merge a batch into the statistics; only rows with mask True count.

    obs: (..., obs_size); mask: (...) bool. Parallel (Chan et al.) mean/variance merge;
    a batch with no valid row leaves `stats` unchanged exactly.
    """
    x = obs.reshape(-1, obs.shape[-1]).astype(jnp.float32)
    w = mask.reshape(-1).astype(jnp.float32)
    n = jnp.sum(w)
    safe_n = jnp.maximum(n, 1.0)
    x = jnp.where(w[:, None] > 0, x, 0.0)  # masked rows may hold anything; keep them out
    b_mean = jnp.sum(x * w[:, None], axis=0) / safe_n
    b_var = jnp.sum(w[:, None] * (x - b_mean) ** 2, axis=0) / safe_n
    total = stats.count + n
    delta = b_mean - stats.mean
    new_mean = stats.mean + delta * n / total
    m2 = stats.var * stats.count + b_var * n + delta**2 * stats.count * n / total
    new = ObsStats(mean=new_mean, var=m2 / total, count=total)
    return jax.tree.map(lambda a, b: jnp.where(n > 0, a, b), new, stats)


def normalize_obs(stats: ObsStats, obs: jax.Array, clip: float = 10.0) -> jax.Array:
    """(..., obs_size) -> (..., obs_size) standardised and clipped to [-clip, clip]."""
    z = (obs - stats.mean) / jnp.sqrt(stats.var + 1e-8)
    return jnp.clip(z, -clip, clip)


def track_episodes(running: jax.Array, reward: jax.Array, done: jax.Array, valid: jax.Array):
    """One step of per-env episode-return accounting.

    running, reward, done: (num_envs,); valid: scalar or (num_envs,) bool.
    Returns (new running (num_envs,), finished return (num_envs,) (0 where none),
    finished flag (num_envs,) bool). Invalid steps change nothing and finish nothing.
    """
    acc = running + reward
    finished = done & valid
    new_running = jnp.where(valid, jnp.where(done, 0.0, acc), running)
    return new_running, jnp.where(finished, acc, 0.0), finished
