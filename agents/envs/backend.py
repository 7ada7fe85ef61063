"""What every backend shares: its record (`Backend`, one per library, gathered in
`agents.envs.table.TABLE`), the checks of its installed version, its lazy import, and
the checks of the spaces and observation shapes it reports."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import math
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from hcjax.extras import PROVIDED_BY, install_hint, installed


@dataclasses.dataclass(frozen=True)
class Backend:
    """One environment library.

    name: the prefix of its registry names ("gymnax/...") and `JaxEnv.backend`;
    package: its pip package; min_version (and version_note: why, said when too old);
    host: stepped on the host (a HostEnv) rather than jitted (a JaxEnv);
    registry() -> the ids of its registry (read now); make_named(id, **opts) -> env;
    accepts(obj) -> whether an environment object is one of this library's;
    make_object(obj, **opts) -> env; described: how `make`'s error names such objects;
    bare: whether a name without a prefix is looked up in its registry (the libraries of
    the base install: gymnax, brax, gymnasium; the others answer to their prefix only, so
    that a bare name never imports an optional library).
    """

    name: str
    package: str
    min_version: str
    host: bool
    registry: Callable[[], tuple[str, ...]]
    make_named: Callable[..., Any]
    accepts: Callable[[Any], bool]
    make_object: Callable[..., Any]
    described: str
    version_note: str = ""
    bare: bool = True


def installed_version(package: str) -> str | None:
    """The installed version of `package` (its metadata only), None if not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_installed(package: str) -> bool:
    """Whether `package` (its import name is its package name) is installed and can be found,
    without importing it: its metadata, and a module spec (a module a test blocks by setting
    sys.modules[package] = None counts as missing)."""
    return installed_version(package) is not None and installed(package)


def _version_tuple(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def too_old(installed: str, required: str) -> bool:
    have, need = _version_tuple(installed), _version_tuple(required)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) < need + (0,) * (width - len(need))


def problem(backend: Backend) -> str | None:
    """One sentence naming the backend's package if it is missing or older than its
    min_version, else None. Reads package metadata only."""
    package, need = backend.package, backend.min_version
    have = installed_version(package) if installed(package) else None
    if have is None:
        return (f"{package} is not installed; agents.envs needs {package}>={need} "
                f"({install_hint(PROVIDED_BY[package])}, or pip install '{package}>={need}')")
    if too_old(have, need):
        why = f" ({backend.version_note})" if backend.version_note else ""
        return (f"{package} {have} is installed; agents.envs needs {package}>={need}{why}: "
                f"pip install '{package}>={need}'")
    return None


def require(backend: Backend) -> None:
    """RuntimeError (`problem`) unless the backend's package is installed and recent enough."""
    message = problem(backend)
    if message is not None:
        raise RuntimeError(message)


def import_module(module: str, backend: Backend):
    """importlib.import_module(module) (a backend is imported only when used), an
    ImportError naming the backend's package if that fails."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"agents.envs: the {backend.package} backend cannot be imported ({err}); install it: "
                          f"{install_hint(PROVIDED_BY[backend.package])}, or pip install "
                          f"'{backend.package}>={backend.min_version}'") from err


def is_instance(obj, module: str, cls: str) -> bool:
    """isinstance(obj, module.cls) without importing `module` (unimported: False)."""
    mod = sys.modules.get(module)
    return mod is not None and isinstance(obj, getattr(mod, cls))


def no_options(name: str, what: str, opts: dict) -> None:
    """ValueError naming the environment when options were given to `what` (an object of a
    library that builds its environments itself), which takes none."""
    if opts:
        raise ValueError(f"envs.make({name!r}): {what} takes no options, got {sorted(opts)}")


def make_with_options(make: Callable, ident: str, kwargs: dict, library: str):
    """`make(ident, **kwargs)`, a library's own maker; a TypeError (options it does not take)
    becomes a ValueError naming them."""
    try:
        return make(ident, **kwargs)
    except TypeError as err:
        raise ValueError(f"envs.make({ident!r}): {library}.make rejected the options {sorted(kwargs)}: {err}") from None


def flat_size(shape) -> int:
    return int(math.prod(tuple(shape)))


def unsupported(name: str, what: str, space, allowed: str) -> ValueError:
    return ValueError(f"envs.make({name!r}): unsupported {what} space {space!r}; supported: {allowed}")


def check_observation(name: str, declared, actual) -> None:
    """ValueError naming the environment if its observations (shape `actual`) do not
    have the size of its declared observation space (shape `declared`)."""
    if flat_size(declared) != flat_size(actual):
        raise ValueError(f"envs.make({name!r}): the environment's observations have shape {tuple(actual)} but its "
                         f"observation space declares shape {tuple(declared)}; they must have the same size")


def observation_size(obs) -> int:
    """The size of `obs` flattened (`flatten_observation`): the sum of its leaves' sizes
    (arrays or ShapeDtypeStructs; a pytree or a dict of them)."""
    return sum(flat_size(leaf.shape) for leaf in jax.tree.leaves(obs))


def flatten_observation(obs) -> jax.Array:
    """One (n,) float32 vector of an observation of any shape or pytree: every leaf
    flattened (row-major) and cast to float32, concatenated in `jax.tree.leaves` order (a
    dict by sorted key, a namedtuple or dataclass by field order). A library's action mask,
    where it is part of the observation, stays in it: it tells the policy what is legal."""
    leaves = jax.tree.leaves(obs)
    flat = [jnp.asarray(leaf).reshape(-1).astype(jnp.float32) for leaf in leaves]
    return flat[0] if len(flat) == 1 else jnp.concatenate(flat)


def auto_reset(reset: Callable, step: Callable) -> Callable:
    """A step that resets where its episode ends: reset(key) -> (state, obs); step(key, state,
    action) -> (state, obs, reward, done) without resets. The returned step splits `key` into
    a step key and a reset key and, where `done`, returns the state and observation of a fresh
    reset (the reward and `done` of the step that ended the episode are kept): the same-step
    auto-reset PPO needs (gymnax's, Brax's). It computes a reset every step (selected where
    done), as gymnax does."""
    def stepped(key, state, action):
        k_step, k_reset = jax.random.split(key)
        state, obs, reward, done = step(k_step, state, action)
        fresh_state, fresh_obs = reset(k_reset)
        done = jnp.asarray(done, bool)
        pick = lambda new, old: jnp.where(done, new, old).astype(jnp.result_type(old))
        return jax.tree.map(pick, fresh_state, state), jax.tree.map(pick, fresh_obs, obs), reward, done

    return stepped


def missing(backend: Backend, name: str) -> ValueError | None:
    """The ValueError for environment `name` of `backend` when the backend's package is
    missing or too old (naming the extra that installs it), else None."""
    message = problem(backend)
    return None if message is None else ValueError(f"envs.make({name!r}): {message}")


def with_fields(params, fields: dict, name: str, library: str):
    """`params` (a dataclass of environment parameters) with `fields` replaced; ValueError
    naming the unknown ones and the allowed options of `library`'s environments."""
    if not fields:
        return params
    allowed = [f.name for f in dataclasses.fields(params)] if dataclasses.is_dataclass(params) else []
    bad = sorted(set(fields) - set(allowed))
    if bad:
        raise ValueError(f"envs.make({name!r}): unknown option(s) {bad}; a {library} env takes params=, env_kwargs= "
                         f"(registry names) and the fields of its {type(params).__name__}: {allowed}")
    return dataclasses.replace(params, **fields)
