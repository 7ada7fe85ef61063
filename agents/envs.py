"""Any environment, by name or object: `agents.envs.make(env, **opts)`.

Names come from each library's own registry, imported only when needed:

    make("CartPole-v1")            # bare name: gymnax, then brax, then gymnasium
    make("gymnasium/CartPole-v1")  # a prefix gymnax/, brax/, gymnasium/ picks the backend
    make("hopper", backend="generalized", episode_length=500)
    resolve("Hopper-v4")           # EnvSpec(backend="gymnasium", id="Hopper-v4"); builds nothing
    names("brax")                  # ("brax/ant", "brax/fast", ...)

A bare name resolves in the order of `BACKENDS`: JAX backends first, so CartPole-v1 and
Pendulum-v1 (in gymnax and in gymnasium) are gymnax envs; an unknown name raises a
ValueError listing the closest names of every registry. Objects are accepted where a
name is: a gymnax `Environment` (`make(env, params=p)` or `make((env, p))`), a Brax
`Env`, a zero-argument factory returning a gymnasium `Env` (host path), and a
`JaxEnv` / `HostEnv` (returned unchanged).

Two kinds of result, same static description (obs_size, action_size, discrete, bounds),
and `backend` naming the library behind it ("gymnax" | "brax" | "gymnasium" | "custom"):

- `JaxEnv` (gymnax, Brax, or written by hand): pure single-env functions, vmapped by PPO;
      state, obs = env.reset(key)
      state, obs, reward, done = env.step(key, state, action)   # auto-resets when done
  obs (obs_size,) float32 (observations of any shape are flattened), reward float32 and
  done bool scalars; action () int32 (discrete) or (action_size,) float32. After `done`
  the returned obs is the first obs of the next episode. Termination and time-limit
  truncation are both `done`.
- `HostEnv` (gymnasium): built on the host as a `gymnasium.vector.SyncVectorEnv` with
  same-step auto-reset (`vector(num_envs)`), stepped by `agents.driver` while the PPO
  update and the tuner stay jitted.

Spaces: observations must be a Box (any shape, flattened to obs_size); actions a
Discrete (`action_size` = number of actions; gymnasium's `start` offset is added back)
or a Box (any shape, flattened to action_size). Any other space (Dict, Tuple,
MultiDiscrete, MultiBinary, a Discrete observation, ...) raises a ValueError naming the
env and the space. Action bounds `action_low` / `action_high` keep infinities: PPO clips
each action dimension only on the sides where its bound is finite.

Options of `make`:
- gymnax: `params=` (an EnvParams replacing the defaults), any field of the env's
  params as a keyword (e.g. `max_steps_in_episode=100`, applied after `params`), and for
  registry names `env_kwargs=` (constructor arguments for `gymnax.make`).
- Brax: `backend=` (default "spring": about 5x faster than "generalized" on CPU for
  halfcheetah, 11.0k vs 2.3k steps/s in our measurements), `episode_length=` (default
  1000), `env_kwargs=` (constructor arguments). Brax actions lie in [-1, 1].
- gymnasium ids: keyword arguments for `gymnasium.make`. Factories take no options.

`check_backends()` reports missing or too old backends (gymnax>=1.0.1: gymnax 0.0.x's
`step` returns 5 values, not 6) without importing them.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.metadata
import math
import re
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

BACKENDS = ("gymnax", "brax", "gymnasium")  # the resolution order of bare names
BRAX_BACKENDS = ("spring", "generalized", "positional", "mjx")
MIN_VERSIONS = {"gymnax": "1.0.1", "brax": "0.14", "gymnasium": "1.2"}


# ---- names ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """A resolved registry name: `backend` ("gymnax" | "brax" | "gymnasium") and `id`
    (the name in that library's registry). `name` is "backend/id"; `host` is True for
    gymnasium (stepped on the host)."""

    backend: str
    id: str

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.id}"

    @property
    def host(self) -> bool:
        return self.backend == "gymnasium"


def _import(module: str, package: str):
    """importlib.import_module(module), an ImportError naming `package` if that fails."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"agents.envs: the {package} backend cannot be imported ({err}); "
                          f"install it: pip install '{package}>={MIN_VERSIONS[package]}'") from err


def _registry(backend: str) -> tuple[str, ...]:
    """The ids of one backend's registry, read now (runtime registrations included)."""
    if backend == "gymnax":
        return tuple(_import("gymnax", "gymnax").registered_envs)
    if backend == "brax":
        return tuple(_import("brax.envs", "brax")._envs)  # brax keeps its registry in a private dict
    return tuple(_import("gymnasium", "gymnasium").registry)


def names(backend: str | None = None) -> tuple[str, ...]:
    """Every registry name `make` accepts, as "backend/id", in resolution order; with
    `backend` ("gymnax" | "brax" | "gymnasium") that backend's only (importing only it)."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"envs.names: backend must be one of {BACKENDS} or None, got {backend!r}")
    return tuple(f"{b}/{i}" for b in (BACKENDS if backend is None else (backend,)) for i in _registry(b))


def _fold(name: str) -> str:
    """Comparison key of a name: lower case, no version suffix, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"-v\d+$", "", name.lower()))


def closest(name: str, n: int = 8) -> list[str]:
    """Up to n registry names ("backend/id") closest to `name`, best first (all registries)."""
    head, sep, ident = name.partition("/")
    query = ident if sep and head in BACKENDS else name
    folded, scored = _fold(query), []
    for order, full in enumerate(names()):  # ties: resolution order
        cand = full.split("/", 1)[1]
        key = difflib.SequenceMatcher(None, folded, _fold(cand)).ratio()
        if key >= 0.6:
            scored.append((-key, -difflib.SequenceMatcher(None, query.lower(), cand.lower()).ratio(), order, full))
    return [full for *_, full in sorted(scored)[:n]]


def _unknown(name: str, where: str) -> ValueError:
    near = closest(name)
    hint = f"closest: {', '.join(near)}" if near else "no close names"
    return ValueError(f"envs.make: unknown environment {name!r} ({where}); {hint}. A prefix gymnax/, brax/ or "
                      f"gymnasium/ chooses the backend; envs.names() lists every name")


def resolve(name: str | EnvSpec) -> EnvSpec:
    """Validate an environment name and say which backend serves it; compiles nothing.

    "backend/id" looks only in that backend's registry (importing only it); a bare name
    tries gymnax, brax, gymnasium in that order and stops at the first that has it.
    Raises ValueError with the closest names of all registries when none has it.
    """
    if isinstance(name, EnvSpec):
        return name
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"envs.make: an environment name must be a non-empty string, got {name!r}")
    head, sep, ident = name.partition("/")
    if sep and head in BACKENDS:
        if ident in _registry(head):
            return EnvSpec(head, ident)
        raise _unknown(name, f"{head} has no {ident!r}")
    for backend in BACKENDS:
        if name in _registry(backend):
            return EnvSpec(backend, name)
    raise _unknown(name, "searched gymnax, brax, gymnasium in that order")


# ---- backend versions -------------------------------------------------------------------


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_tuple(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def _too_old(installed: str, required: str) -> bool:
    have, need = _version_tuple(installed), _version_tuple(required)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) < need + (0,) * (width - len(need))


def _problem(package: str) -> str | None:
    """One sentence naming `package` if it is missing or older than MIN_VERSIONS, else None."""
    need = MIN_VERSIONS[package]
    have = _installed_version(package)
    if have is None:
        return f"{package} is not installed; agents.envs needs {package}>={need} (pip install '{package}>={need}')"
    if _too_old(have, need):
        why = " (gymnax<1 steps return 5 values; 1.x returns obs, state, reward, terminated, truncated, info)" \
            if package == "gymnax" else ""
        return f"{package} {have} is installed; agents.envs needs {package}>={need}{why}: pip install '{package}>={need}'"
    return None


def check_backends() -> list[str]:
    """Problems with the installed gymnax, brax and gymnasium (missing, or older than
    MIN_VERSIONS), one sentence each naming the package; [] when all is well. Reads
    package metadata only: imports nothing."""
    return [p for p in (_problem(b) for b in BACKENDS) if p is not None]


def _require(package: str) -> None:
    problem = _problem(package)
    if problem is not None:
        raise RuntimeError(problem)


# ---- the two kinds of environment -------------------------------------------------------


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
    max_episode_steps: the time limit, None if unknown. backend: "gymnax" | "brax" |
    "custom" (written by hand). Fields are validated at construction (ValueError).
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
    host: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        _check_fields(self, "JaxEnv", ("gymnax", "brax", "custom"))
        for field in ("reset", "step"):
            if not callable(getattr(self, field)):
                raise ValueError(f"JaxEnv.{field} must be callable, got {getattr(self, field)!r}")


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
        _check_fields(self, "HostEnv", ("gymnasium",))
        if not callable(self.factory):
            raise ValueError(f"HostEnv.factory must be callable, got {self.factory!r}")

    def vector(self, num_envs: int):
        """A SyncVectorEnv of `num_envs` envs from `factory`, same-step auto-reset:
        observations (num_envs, obs_size)."""
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"HostEnv.vector: num_envs must be an integer >= 1, got {num_envs!r}")
        import gymnasium as gym

        return gym.vector.SyncVectorEnv([self.factory] * int(num_envs),
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

    def single(self):
        """One gymnasium env (for evaluation episodes)."""
        return self.factory()


# ---- make -------------------------------------------------------------------------------


def _is(obj, module: str, cls: str) -> bool:
    """isinstance(obj, module.cls) without importing `module` (unimported: False)."""
    mod = sys.modules.get(module)
    return mod is not None and isinstance(obj, getattr(mod, cls))


def make(env, **opts) -> JaxEnv | HostEnv:
    """A JaxEnv or HostEnv from a name, an EnvSpec or an environment object.

    env: registry name (bare or "backend/id", see `resolve`); gymnax Environment, or a
    (Environment, params) pair; Brax Env; zero-argument factory of a gymnasium Env; a
    JaxEnv / HostEnv (returned unchanged; options not allowed). opts: see the module
    docstring. Unknown names, options or unsupported spaces raise ValueError.
    """
    if isinstance(env, (JaxEnv, HostEnv)):
        if opts:
            raise ValueError(f"envs.make: {type(env).__name__} {env.name!r} is already built; got options {sorted(opts)}")
        return env
    if isinstance(env, (str, EnvSpec)):
        spec = resolve(env)
        build = {"gymnax": _gymnax_named, "brax": _brax_named, "gymnasium": _host_named}[spec.backend]
        return build(spec.id, **opts)
    if isinstance(env, tuple) and len(env) == 2 and _is(env[0], "gymnax.environments.environment", "Environment"):
        if "params" in opts:
            raise ValueError("envs.make((env, params)): params given twice (in the pair and as params=)")
        return _gymnax_env(env[0], env[1], env[0].name, **opts)
    if _is(env, "gymnax.environments.environment", "Environment"):
        return _gymnax_env(env, opts.pop("params", None), env.name, **opts)
    if _is(env, "brax.envs.base", "Env"):
        return _brax_object(env, **opts)
    if _is(env, "gymnasium.core", "Env"):
        raise ValueError(f"envs.make: got a gymnasium Env instance ({type(env).__name__}); the host path builds "
                         f"num_envs copies, so pass a factory (e.g. lambda: MyEnv()) or a registered id")
    if callable(env):
        return _host_factory(env, **opts)
    raise ValueError(f"envs.make: env must be a registry name, a gymnax Environment (or (env, params)), a Brax Env, "
                     f"a factory returning a gymnasium Env, or a JaxEnv / HostEnv; got {type(env).__name__}")


def _unsupported(name: str, what: str, space, allowed: str) -> ValueError:
    return ValueError(f"envs.make({name!r}): unsupported {what} space {space!r}; supported: {allowed}")


def _flat_size(shape) -> int:
    return int(math.prod(tuple(shape)))


# -- gymnax --


def _gymnax_named(ident: str, params=None, env_kwargs: dict | None = None, **fields) -> JaxEnv:
    _require("gymnax")
    import gymnax

    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise ValueError(f"envs.make({ident!r}): env_kwargs must be a dict, got {env_kwargs!r}")
    env, default = gymnax.make(ident, **(env_kwargs or {}))
    return _gymnax_env(env, default if params is None else params, ident, **fields)


def _gymnax_env(env, params, name: str, **fields) -> JaxEnv:
    """JaxEnv of a gymnax Environment; `fields` override fields of `params`."""
    _require("gymnax")
    from gymnax.environments import spaces

    if params is None:
        params = env.default_params
    if fields:
        allowed = [f.name for f in dataclasses.fields(params)] if dataclasses.is_dataclass(params) else []
        bad = sorted(set(fields) - set(allowed))
        if bad:
            raise ValueError(f"envs.make({name!r}): unknown option(s) {bad}; a gymnax env takes params=, env_kwargs= "
                             f"(registry names) and the fields of its {type(params).__name__}: {allowed}")
        params = dataclasses.replace(params, **fields)
    try:
        space = env.action_space(params)
    except NotImplementedError:
        raise ValueError(f"envs.make({name!r}): the gymnax env must implement action_space(params)") from None
    if isinstance(space, spaces.Discrete):
        discrete, n, low, high, a_shape = True, int(space.n), None, None, ()
    elif isinstance(space, spaces.Box):
        a_shape = tuple(space.shape)
        n = _flat_size(a_shape)
        discrete = False
        low = np.broadcast_to(np.asarray(space.low, np.float32), a_shape).reshape(-1)
        high = np.broadcast_to(np.asarray(space.high, np.float32), a_shape).reshape(-1)
    else:
        raise _unsupported(name, "action", space, "gymnax Discrete, Box")
    try:
        obs_space = env.observation_space(params)
    except NotImplementedError:
        obs_space = None  # then only the traced reset tells the observation shape
    if obs_space is not None and not isinstance(obs_space, spaces.Box):
        raise _unsupported(name, "observation", obs_space, "gymnax Box (any shape)")
    obs, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0), params)
    if not isinstance(obs, jax.ShapeDtypeStruct):
        raise ValueError(f"envs.make({name!r}): reset must return one observation array, got {obs}")

    def reset(key):
        obs, state = env.reset(key, params)
        return state, obs.reshape(-1).astype(jnp.float32)

    def step(key, state, action):
        out = env.step(key, state, action if discrete else action.reshape(a_shape), params)
        if len(out) != 6:  # gymnax<1: (obs, state, reward, done, info)
            raise RuntimeError(_problem("gymnax") or f"envs.make({name!r}): gymnax step returned {len(out)} values; "
                               f"agents.envs needs gymnax>=1.0.1 (obs, state, reward, terminated, truncated, info)")
        obs, state, reward, terminated, truncated, _ = out
        done = jnp.logical_or(jnp.asarray(terminated, bool), jnp.asarray(truncated, bool))
        return state, obs.reshape(-1).astype(jnp.float32), jnp.asarray(reward, jnp.float32), done

    steps = getattr(params, "max_steps_in_episode", None)
    return JaxEnv(name=name, obs_size=_flat_size(obs.shape), action_size=n, discrete=discrete, reset=reset,
                  step=step, action_low=low, action_high=high,
                  max_episode_steps=None if steps is None else int(steps), backend="gymnax")


# -- brax --


def _brax_named(ident: str, **opts) -> JaxEnv:
    allowed = ("backend", "episode_length", "env_kwargs")
    bad = sorted(set(opts) - set(allowed))
    if bad:
        raise ValueError(f"envs.make({ident!r}): unknown option(s) {bad} for a Brax env; allowed: {allowed}")
    backend, episode_length = opts.get("backend", "spring"), opts.get("episode_length", 1000)
    env_kwargs = opts.get("env_kwargs") or {}
    if backend not in BRAX_BACKENDS:
        raise ValueError(f"envs.make({ident!r}): backend must be one of {BRAX_BACKENDS}, got {backend!r}")
    _check_episode_length(ident, episode_length)
    if not isinstance(env_kwargs, dict) or "backend" in env_kwargs:
        raise ValueError(f"envs.make({ident!r}): env_kwargs must be a dict of constructor arguments other than "
                         f"backend (use backend=), got {env_kwargs!r}")
    _require("brax")
    from brax import envs as brax_envs

    env = brax_envs.create(ident, episode_length=episode_length, auto_reset=True, backend=backend, **env_kwargs)
    return _brax_env(env, ident, episode_length)


def _check_episode_length(name: str, episode_length) -> None:
    if not isinstance(episode_length, int) or isinstance(episode_length, bool) or episode_length < 1:
        raise ValueError(f"envs.make({name!r}): episode_length must be an integer >= 1, got {episode_length!r}")


def _brax_object(env, episode_length: int | None = None, **opts) -> JaxEnv:
    """A Brax Env object: wrapped in EpisodeWrapper(episode_length, default 1000) and
    AutoResetWrapper unless it already is; a VmapWrapper (batched env) is refused."""
    from brax.envs import Wrapper
    from brax.envs.wrappers import training

    name = type(env.unwrapped).__name__
    if opts:
        raise ValueError(f"envs.make({name!r}): a Brax Env object takes only episode_length=, got {sorted(opts)} "
                         f"(its backend is fixed when it is built: {env.backend!r})")
    chain, inner = [env], env
    while isinstance(inner, Wrapper):
        inner = inner.env
        chain.append(inner)
    if any(isinstance(w, training.VmapWrapper) for w in chain):
        raise ValueError(f"envs.make({name!r}): pass an unbatched Brax Env (no VmapWrapper); PPO vmaps it itself")
    episode = next((w for w in chain if isinstance(w, training.EpisodeWrapper)), None)
    auto = any(isinstance(w, training.AutoResetWrapper) for w in chain)
    if episode is not None and episode_length is not None:
        raise ValueError(f"envs.make({name!r}): the env already has an EpisodeWrapper "
                         f"(episode_length={episode.episode_length}); do not pass episode_length")
    steps = episode.episode_length if episode is not None else None
    if episode is None and not auto:
        steps = 1000 if episode_length is None else episode_length
        _check_episode_length(name, steps)
        env = training.EpisodeWrapper(env, steps, 1)
    if not auto:
        env = training.AutoResetWrapper(env)
    return _brax_env(env, name, steps)


def _brax_env(env, name: str, steps: int | None) -> JaxEnv:
    """JaxEnv of an auto-resetting Brax Env."""
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
    if not isinstance(obs, jax.ShapeDtypeStruct):
        raise _unsupported(name, "observation", obs, "one array (Brax dict observations are not supported)")

    def reset(key):
        state = env.reset(key)
        return state, state.obs.reshape(-1).astype(jnp.float32)

    def step(key, state, action):
        del key  # Brax dynamics are deterministic; resets return each env's first state.
        state = env.step(state, action)
        return state, state.obs.reshape(-1).astype(jnp.float32), state.reward.astype(jnp.float32), state.done > 0.5

    a = int(env.action_size)
    return JaxEnv(name=name, obs_size=_flat_size(obs.shape), action_size=a, discrete=False, reset=reset, step=step,
                  action_low=-np.ones(a, np.float32), action_high=np.ones(a, np.float32),
                  max_episode_steps=None if steps is None else int(steps), backend="brax")


# -- gymnasium (host) --


def _host_named(ident: str, **kwargs) -> HostEnv:
    _require("gymnasium")
    import gymnasium as gym

    factory = functools.partial(gym.make, ident, **kwargs)
    try:
        probe = factory()
    except TypeError as err:
        if not kwargs:
            raise
        raise ValueError(f"envs.make({ident!r}): gymnasium.make rejected the options {sorted(kwargs)}: {err}") from err
    return _host_env(factory, probe, ident, dict(kwargs))


def _host_factory(factory: Callable, **opts) -> HostEnv:
    label = getattr(factory, "__name__", type(factory).__name__)
    if opts:
        raise ValueError(f"envs.make({label!r}): a factory takes no options (bind them inside it), got {sorted(opts)}")
    _require("gymnasium")
    probe = factory()
    if not _is(probe, "gymnasium.core", "Env"):
        if callable(getattr(probe, "close", None)):
            probe.close()
        raise ValueError(f"envs.make({label!r}): a factory must return a gymnasium Env, got {type(probe).__name__}")
    name = probe.spec.id if probe.spec is not None else type(probe.unwrapped).__name__
    return _host_env(factory, probe, name, {})


def _host_env(raw_factory: Callable, probe, name: str, kwargs: dict) -> HostEnv:
    """HostEnv of a gymnasium env: checks the spaces of `probe` (then closes it)."""
    import gymnasium as gym

    try:
        obs_space, space = probe.observation_space, probe.action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise _unsupported(name, "observation", obs_space, "gymnasium Box (any shape)")
        if isinstance(space, gym.spaces.Discrete):
            discrete, n, low, high = True, int(space.n), None, None
            adapt = dict(start=int(space.start))
        elif isinstance(space, gym.spaces.Box):
            discrete, n = False, _flat_size(space.shape)
            low, high = np.asarray(space.low, np.float32).reshape(-1), np.asarray(space.high, np.float32).reshape(-1)
            adapt = dict(action_shape=tuple(space.shape))
        else:
            raise _unsupported(name, "action", space, "gymnasium Discrete, Box (any shape)")
        steps = probe.spec.max_episode_steps if probe.spec is not None else None
    finally:
        probe.close()
    factory = functools.partial(_adapted, raw_factory, flatten_obs=len(obs_space.shape) != 1, **adapt)
    return HostEnv(name=name, obs_size=_flat_size(obs_space.shape), action_size=n, discrete=discrete,
                   factory=factory, action_low=low, action_high=high, max_episode_steps=steps, kwargs=kwargs)


@functools.cache
def _wrapper_classes():
    """The two action adapters, defined on first use so gymnasium is imported lazily."""
    import gymnasium as gym

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
    import gymnasium as gym

    env = raw_factory()
    flat_box, shifted = _wrapper_classes()
    if flatten_obs:
        env = gym.wrappers.FlattenObservation(env)
    if action_shape is not None and len(action_shape) != 1:
        env = flat_box(env)
    if start != 0:
        env = shifted(env)
    return env
