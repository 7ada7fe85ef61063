"""The two kinds of environment `agents.envs.make` returns, with the same static
description (obs_size, action_size, discrete, bounds): `JaxEnv` (pure single-env
functions, vmapped by PPO) and `HostEnv` (gymnasium, stepped on the host)."""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

# JaxEnv.backend: the JAX libraries of the table, or "custom" (written by hand, or an object of no known library)
JAX_BACKENDS = ("gymnax", "brax", "craftax", "jumanji", "navix", "xminigrid", "pgx", "custom")
HOST_BACKENDS = ("gymnasium",)  # HostEnv.backend


def _bounds(field: str, value, size: int, fill: float, owner: str) -> np.ndarray:
    """(size,) float32 bounds from a scalar or array (None: `fill`), infinities kept."""
    arr = np.full(size, fill, np.float32) if value is None else np.asarray(value, np.float32)
    if arr.size == 1:
        arr = np.full(size, arr.reshape(()), np.float32)
    if arr.size != size:
        raise ValueError(f"{owner}.{field} must have {size} entries (action_size), got shape {arr.shape}")
    arr = arr.reshape(size)
    if np.any(np.isnan(arr)):
        raise ValueError(f"{owner}.{field} must not contain NaN, got {arr}")
    return arr


def _check_fields(env, owner: str, backends: tuple[str, ...]) -> None:
    """Validate and normalise the static description shared by JaxEnv and HostEnv."""
    for field in ("obs_size", "action_size"):
        v = getattr(env, field)
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{owner}.{field} must be an integer >= 1, got {v!r}")
        object.__setattr__(env, field, int(v))
    if not isinstance(env.discrete, bool):
        raise ValueError(f"{owner}.discrete must be True or False, got {env.discrete!r}")
    if env.discrete:
        low = high = np.zeros(0, np.float32)
    else:
        low = _bounds("action_low", env.action_low, env.action_size, -np.inf, owner)
        high = _bounds("action_high", env.action_high, env.action_size, np.inf, owner)
        if np.any(low > high):
            raise ValueError(f"{owner}: action_low must be <= action_high, got {low} and {high}")
    object.__setattr__(env, "action_low", low)
    object.__setattr__(env, "action_high", high)
    steps = env.max_episode_steps
    if steps is not None and (not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1):
        raise ValueError(f"{owner}.max_episode_steps must be an integer >= 1 or None, got {steps!r}")
    if env.backend not in backends:
        raise ValueError(f"{owner}.backend must be one of {backends}, got {env.backend!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class JaxEnv:
    """A jittable single environment (see the module docstring for reset/step shapes).

    action_size: continuous action dims, or the number of discrete actions.
    action_low / action_high: (action_size,) float32 bounds, continuous only (scalars
    broadcast; None: unbounded, -inf / +inf); empty for discrete envs.
    max_episode_steps: the time limit, None if unknown. backend: one of JAX_BACKENDS
    ("custom": written by hand). action_mask: None (every action legal), or, discrete
    environments only, action_mask(state) -> (action_size,) bool, the legal actions in
    `state` (a state reset or step returned: the actions legal for the next step); PPO gives
    illegal actions probability zero when sampling, in the loss and in the evaluation. It must
    allow at least one action (with none, the policy draws from all of them). Fields are
    validated at construction (ValueError).
    """

    name: str
    obs_size: int
    action_size: int
    discrete: bool
    reset: Callable[[jax.Array], tuple[Any, jax.Array]]
    step: Callable[[jax.Array, Any, jax.Array], tuple[Any, jax.Array, jax.Array, jax.Array]]
    action_low: Any = None
    action_high: Any = None
    max_episode_steps: int | None = None
    backend: str = "custom"
    action_mask: Callable[[Any], jax.Array] | None = None
    host: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        _check_fields(self, "JaxEnv", JAX_BACKENDS)
        for field in ("reset", "step"):
            if not callable(getattr(self, field)):
                raise ValueError(f"JaxEnv.{field} must be callable, got {getattr(self, field)!r}")
        if self.action_mask is not None and not callable(self.action_mask):
            raise ValueError(f"JaxEnv.action_mask must be None or callable (state -> (action_size,) bool), "
                             f"got {self.action_mask!r}")
        if self.action_mask is not None and not self.discrete:
            raise ValueError(f"JaxEnv {self.name!r}: action_mask is for discrete actions only (the legal ones of "
                             f"action_size); a continuous environment bounds its actions with action_low/high")


@dataclasses.dataclass(frozen=True, eq=False)
class HostEnv:
    """A gymnasium env stepped on the host. `factory()` returns one gymnasium Env whose
    observations are flat (obs_size,) and whose actions are () ints or flat
    (action_size,) floats (adapting wrappers applied); `vector(n)` / `single()` build
    from it. kwargs: the `gymnasium.make` keyword arguments ({} for a factory)."""

    name: str
    obs_size: int
    action_size: int
    discrete: bool
    factory: Callable[[], Any]
    action_low: Any = None
    action_high: Any = None
    max_episode_steps: int | None = None
    kwargs: dict = dataclasses.field(default_factory=dict)
    backend: str = "gymnasium"
    host: bool = dataclasses.field(default=True, init=False)

    def __post_init__(self):
        _check_fields(self, "HostEnv", HOST_BACKENDS)
        if not callable(self.factory):
            raise ValueError(f"HostEnv.factory must be callable, got {self.factory!r}")

    def vector(self, num_envs: int):
        """A SyncVectorEnv of `num_envs` envs from `factory`, same-step auto-reset:
        observations (num_envs, obs_size)."""
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"HostEnv.vector: num_envs must be an integer >= 1, got {num_envs!r}")
        gym = importlib.import_module("gymnasium")
        return gym.vector.SyncVectorEnv([self.factory] * int(num_envs),
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

    def single(self):
        """One gymnasium env (for evaluation episodes)."""
        return self.factory()
