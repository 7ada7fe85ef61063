"""The table of backends (one `Backend` record each, in the order bare names resolve),
and what reads it: names, resolution, `make`, backend checks."""
from __future__ import annotations

import dataclasses
import difflib
import re

import jax

from agents.envs import brax_backend, gymnasium_backend, gymnax_backend
from agents.envs.backend import Backend, check_observation, problem
from agents.envs.kinds import HostEnv, JaxEnv

TABLE: tuple[Backend, ...] = (gymnax_backend.BACKEND, brax_backend.BACKEND, gymnasium_backend.BACKEND)
BY_NAME = {b.name: b for b in TABLE}
BACKENDS = tuple(BY_NAME)  # the resolution order of bare names
MIN_VERSIONS = {b.package: b.min_version for b in TABLE}
BRAX_BACKENDS = brax_backend.BRAX_BACKENDS


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """A resolved registry name: `backend` (a name of BACKENDS) and `id` (the name in that
    library's registry). `name` is "backend/id"; `host` is True for a backend stepped on
    the host (gymnasium)."""

    backend: str
    id: str

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.id}"

    @property
    def host(self) -> bool:
        return BY_NAME[self.backend].host


def names(backend: str | None = None) -> tuple[str, ...]:
    """Every registry name `make` accepts, as "backend/id", in resolution order; with
    `backend` (one of BACKENDS) that backend's only (importing only it)."""
    if backend is not None and backend not in BY_NAME:
        raise ValueError(f"envs.names: backend must be one of {BACKENDS} or None, got {backend!r}")
    chosen = TABLE if backend is None else (BY_NAME[backend],)
    return tuple(f"{b.name}/{i}" for b in chosen for i in b.registry())


def _fold(name: str) -> str:
    """Comparison key of a name: lower case, no version suffix, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"-v\d+$", "", name.lower()))


def closest(name: str, n: int = 8) -> list[str]:
    """Up to n registry names ("backend/id") closest to `name`, best first (all registries)."""
    head, sep, ident = name.partition("/")
    query = ident if sep and head in BY_NAME else name
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
    prefixes = ", ".join(f"{b}/" for b in BACKENDS[:-1]) + f" or {BACKENDS[-1]}/"
    return ValueError(f"envs.make: unknown environment {name!r} ({where}); {hint}. A prefix {prefixes} "
                      f"chooses the backend; envs.names() lists every name")


def resolve(name: str | EnvSpec) -> EnvSpec:
    """Validate an environment name (or EnvSpec) and say which backend serves it; compiles nothing.

    "backend/id" looks only in that backend's registry (importing only it); a bare name
    tries the backends in the order of BACKENDS and stops at the first that has it.
    Raises ValueError with the closest names of all registries when none has it.
    """
    if isinstance(name, EnvSpec):
        if name.backend not in BY_NAME:
            raise ValueError(f"envs.make: EnvSpec backend must be one of {BACKENDS}, got {name.backend!r}")
        if name.id not in BY_NAME[name.backend].registry():
            raise _unknown(name.name, f"{name.backend} has no {name.id!r}")
        return name
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"envs.make: an environment name must be a non-empty string, got {name!r}")
    head, sep, ident = name.partition("/")
    if sep and head in BY_NAME:
        if ident in BY_NAME[head].registry():
            return EnvSpec(head, ident)
        raise _unknown(name, f"{head} has no {ident!r}")
    for backend in TABLE:
        if name in backend.registry():
            return EnvSpec(backend.name, name)
    raise _unknown(name, f"searched {', '.join(BACKENDS)} in that order")


def check_backends() -> list[str]:
    """Problems with the installed backends (missing, or older than MIN_VERSIONS), one
    sentence each naming the package; [] when all is well. Reads package metadata only:
    imports nothing."""
    return [p for p in (problem(b) for b in TABLE) if p is not None]


def _checked(env: JaxEnv) -> JaxEnv:
    """`env` unless its reset's observation (traced, nothing computed) differs in size
    from its obs_size: then a ValueError naming it."""
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[1]
    check_observation(env.name, (env.obs_size,), getattr(obs, "shape", ()))
    return env


def make(env, **opts) -> JaxEnv | HostEnv:
    """A JaxEnv or HostEnv from a name, an EnvSpec or an environment object.

    env: registry name (bare or "backend/id", see `resolve`); an object of one of the
    backends (a gymnax Environment, or an (Environment, params) pair; a Brax Env; a
    zero-argument factory of a gymnasium Env); a JaxEnv / HostEnv (returned unchanged,
    a hand-written JaxEnv once its observation shape is checked; options not allowed). opts: see the
    backend's module. Unknown names, options or unsupported spaces, and observations
    whose shape differs from the declared space, raise ValueError.
    """
    if isinstance(env, (JaxEnv, HostEnv)):
        if opts:
            raise ValueError(f"envs.make: {type(env).__name__} {env.name!r} is already built; "
                             f"got options {sorted(opts)}")
        return _checked(env) if isinstance(env, JaxEnv) and env.backend == "custom" else env
    if isinstance(env, (str, EnvSpec)):
        spec = resolve(env)
        return BY_NAME[spec.backend].make_named(spec.id, **opts)
    for backend in TABLE:
        if backend.accepts(env):
            return backend.make_object(env, **opts)
    described = ", ".join(b.described for b in TABLE)
    raise ValueError(f"envs.make: env must be a registry name, {described}, or a JaxEnv / HostEnv; "
                     f"got {type(env).__name__}")
