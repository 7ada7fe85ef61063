"""Actor and critic MLPs and the action distributions of the PPO agents.

Action bounding (continuous envs): the policy is an *unbounded* diagonal Gaussian
N(mean(obs), exp(log_std)) with a state-independent, learned log_std. Log-probabilities
and the entropy are those of this Gaussian (computed on the unclipped sample); the env
receives the sample clipped to its bounds [low, high] (`clip_action`). Evaluation uses
the clipped mean. Discrete envs use a Categorical over the logits; where the environment
gives a legal-action mask (`JaxEnv.action_mask`), `masked` sets the illegal actions' logits to
the lowest float32, so that sampling, `log_prob`, `entropy` and `mode` of the masked logits
give them probability exactly zero (exp underflows) and no gradient, without the NaN an
infinite logit would put into the entropy (0 x -inf).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from hcjax.gp import platform_batched

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu, "silu": nn.silu}
LOG_2PI = math.log(2.0 * math.pi)


def orthogonal(scale: float):
    """Orthogonal initializer whose vmap over agents is batched on GPU/TPU only.

    Vmapped over agents, flax's orthogonal init becomes a batched LAPACK QR, whose
    parallel batch loop deadlocked XLA's CPU thread pool on 2 cores (vmapped inits of 16
    3x256 networks, every thread parked in ParallelBatchMap). `hcjax.gp.platform_batched`
    keeps the batched QR on GPU/TPU and loops over single QRs on the CPU; the values are
    the same up to float rounding.
    """
    base = nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        return platform_batched(lambda k: base(k, shape, dtype))(key)

    return init


class MLP(nn.Module):
    """(..., in) -> (..., out): hidden Dense layers with `activation`, linear output.

    Orthogonal init (gain sqrt(2) hidden, `out_scale` output), zero biases.
    """

    hidden_sizes: Sequence[int]
    out: int
    activation: str = "tanh"
    out_scale: float = 1.0

    @nn.compact
    def __call__(self, x):
        act = ACTIVATIONS[self.activation]
        for width in self.hidden_sizes:
            x = nn.Dense(width, kernel_init=orthogonal(float(np.sqrt(2.0))),
                         bias_init=nn.initializers.zeros)(x)
            x = act(x)
        return nn.Dense(self.out, kernel_init=orthogonal(self.out_scale),
                        bias_init=nn.initializers.zeros)(x)


class Actor(nn.Module):
    """obs (..., obs_size) -> distribution parameters.

    discrete: logits (..., n); continuous: (mean (..., a), log_std (a,)).
    """

    action_size: int
    discrete: bool
    hidden_sizes: Sequence[int] = (256, 256, 256)
    activation: str = "tanh"
    init_log_std: float = 0.0

    @nn.compact
    def __call__(self, obs):
        out = MLP(self.hidden_sizes, self.action_size, self.activation, out_scale=0.01)(obs)
        if self.discrete:
            return out
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.action_size,))
        return out, log_std


class Critic(nn.Module):
    """obs (..., obs_size) -> value (...,)."""

    hidden_sizes: Sequence[int] = (256, 256, 256)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs):
        return MLP(self.hidden_sizes, 1, self.activation, out_scale=1.0)(obs)[..., 0]


# ---- distributions: pure functions of the actor's output -------------------------------


def masked(logits, mask):
    """logits (..., n) with the illegal actions (mask (..., n) bool, False) at the lowest
    float32: a Categorical over the legal actions only. mask None: logits unchanged."""
    if mask is None:
        return logits
    return jnp.where(mask, logits, jnp.finfo(logits.dtype).min)


def sample(key, dist, discrete: bool):
    """Sample an action: discrete (...,) int32; continuous (..., a) unclipped."""
    if discrete:
        return jax.random.categorical(key, dist).astype(jnp.int32)
    mean, log_std = dist
    return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)


def log_prob(dist, action, discrete: bool):
    """(...,) log-probability of `action` under `dist`."""
    if discrete:
        logp = jax.nn.log_softmax(dist)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]
    mean, log_std = dist
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z * z - log_std - 0.5 * LOG_2PI, axis=-1)


def entropy(dist, discrete: bool):
    """(...,) entropy of `dist`."""
    if discrete:
        logp = jax.nn.log_softmax(dist)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    mean, log_std = dist
    ent = jnp.sum(log_std + 0.5 * (1.0 + LOG_2PI))
    return jnp.broadcast_to(ent, mean.shape[:-1])


def mode(dist, discrete: bool):
    """The deterministic action: argmax of logits, or the Gaussian mean."""
    if discrete:
        return jnp.argmax(dist, axis=-1).astype(jnp.int32)
    return dist[0]


def clip_action(action, low, high):
    """Continuous actions clipped into the env's bounds (low, high: (a,))."""
    return jnp.clip(action, low, high)
