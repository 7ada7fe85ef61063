"""gymnasium environments (registry ids and factories) as HostEnvs, stepped on the host.

Options: keyword arguments for `gymnasium.make` (ids); a factory (a zero-argument
callable returning a gymnasium Env) takes none. An Env instance is refused: the host
path builds num_envs copies.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from agents.envs.backend import Backend, check_observation, flat_size, import_module, is_instance, require, unsupported
from agents.envs.kinds import HostEnv

ENV = ("gymnasium.core", "Env")


def _gym():
    return import_module("gymnasium", BACKEND)


def _registry() -> tuple[str, ...]:
    return tuple(_gym().registry)


def _named(ident: str, **kwargs) -> HostEnv:
    require(BACKEND)
    factory = functools.partial(_gym().make, ident, **kwargs)
    try:
        probe = factory()
    except TypeError as err:
        if not kwargs:
            raise
        raise ValueError(f"envs.make({ident!r}): gymnasium.make rejected the options {sorted(kwargs)}: {err}") from err
    return _host_env(factory, probe, ident, dict(kwargs))


def _accepts(obj) -> bool:
    return is_instance(obj, *ENV) or callable(obj)


def _from_object(obj, **opts) -> HostEnv:
    if is_instance(obj, *ENV):
        raise ValueError(f"envs.make: got a gymnasium Env instance ({type(obj).__name__}); the host path builds "
                         f"num_envs copies, so pass a factory (e.g. lambda: MyEnv()) or a registered id")
    label = getattr(obj, "__name__", type(obj).__name__)
    if opts:
        raise ValueError(f"envs.make({label!r}): a factory takes no options (bind them inside it), got {sorted(opts)}")
    require(BACKEND)
    probe = obj()
    if not is_instance(probe, *ENV):
        if callable(getattr(probe, "close", None)):
            probe.close()
        raise ValueError(f"envs.make({label!r}): a factory must return a gymnasium Env, got {type(probe).__name__}")
    name = probe.spec.id if probe.spec is not None else type(probe.unwrapped).__name__
    return _host_env(obj, probe, name, {})


def _host_env(raw_factory: Callable, probe, name: str, kwargs: dict) -> HostEnv:
    """HostEnv of a gymnasium env: checks the spaces of `probe` and the shape of its first
    observation against its observation space (then closes it)."""
    gym = _gym()
    try:
        obs_space, space = probe.observation_space, probe.action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise unsupported(name, "observation", obs_space, "gymnasium Box (any shape)")
        if isinstance(space, gym.spaces.Discrete):
            discrete, n, low, high = True, int(space.n), None, None
            adapt = dict(start=int(space.start))
        elif isinstance(space, gym.spaces.Box):
            discrete, n = False, flat_size(space.shape)
            low, high = np.asarray(space.low, np.float32).reshape(-1), np.asarray(space.high, np.float32).reshape(-1)
            adapt = dict(action_shape=tuple(space.shape))
        else:
            raise unsupported(name, "action", space, "gymnasium Discrete, Box (any shape)")
        check_observation(name, obs_space.shape, np.shape(probe.reset(seed=0)[0]))
        steps = probe.spec.max_episode_steps if probe.spec is not None else None
    finally:
        probe.close()
    factory = functools.partial(_adapted, raw_factory, flatten_obs=len(obs_space.shape) != 1, **adapt)
    return HostEnv(name=name, obs_size=flat_size(obs_space.shape), action_size=n, discrete=discrete,
                   factory=factory, action_low=low, action_high=high, max_episode_steps=steps, kwargs=kwargs)


@functools.cache
def _wrapper_classes():
    """The two action adapters, defined on first use so gymnasium is imported lazily."""
    gym = _gym()

    class FlatBoxAction(gym.ActionWrapper):
        """Takes flat (a,) float actions, steps the env with its own Box shape."""

        def __init__(self, env):
            super().__init__(env)
            box = env.action_space
            self.action_space = gym.spaces.Box(box.low.reshape(-1), box.high.reshape(-1), dtype=box.dtype)

        def action(self, action):
            return np.asarray(action, self.env.action_space.dtype).reshape(self.env.action_space.shape)

    class ShiftedDiscrete(gym.ActionWrapper):
        """Takes 0..n-1, steps the env with start..start+n-1."""

        def __init__(self, env):
            super().__init__(env)
            self.action_space = gym.spaces.Discrete(int(env.action_space.n))

        def action(self, action):
            return int(action) + int(self.env.action_space.start)

    return FlatBoxAction, ShiftedDiscrete


def _adapted(raw_factory: Callable, flatten_obs: bool, start: int = 0, action_shape: tuple | None = None):
    """One env from `raw_factory`, flattened where HostEnv's shapes need it."""
    env = raw_factory()
    flat_box, shifted = _wrapper_classes()
    if flatten_obs:
        env = _gym().wrappers.FlattenObservation(env)
    if action_shape is not None and len(action_shape) != 1:
        env = flat_box(env)
    if start != 0:
        env = shifted(env)
    return env


BACKEND = Backend(name="gymnasium", package="gymnasium", min_version="1.2", host=True, registry=_registry,
                  make_named=_named, accepts=_accepts, make_object=_from_object,
                  described="a factory returning a gymnasium Env")
