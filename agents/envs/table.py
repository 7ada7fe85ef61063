"""The table of backends (one `Backend` record each, in the order bare names resolve),
and what reads it: names, resolution, `make`, backend checks.

The libraries of the base install (gymnax, brax, gymnasium) answer bare names; the optional
JAX libraries (craftax, jumanji, navix, xminigrid, pgx) answer only to their prefix
("jumanji/Snake-v1"), so that a bare name never imports them, and a prefixed name whose
library is not installed is a ValueError naming the extra that installs it."""
from __future__ import annotations

import dataclasses
import difflib
import re

from agents.envs import (
    brax_backend,
    craftax_backend,
    gymnasium_backend,
    gymnax_backend,
    jumanji_backend,
    navix_backend,
    pgx_backend,
    xminigrid_backend,
)
from agents.envs.backend import Backend, import_module, installed_version, is_installed, missing, problem
from agents.envs.checks import check_traced
from agents.envs.kinds import HostEnv, JaxEnv
from agents.envs.known import NAMES as KNOWN
from hcjax.extras import PROVIDED_BY, install_hint

# Objects are offered to the backends in this order: the libraries that recognise their own
# classes first, gymnax's interface (any object with it) next, gymnasium's factories (any
# callable) last.
TABLE: tuple[Backend, ...] = (jumanji_backend.BACKEND, navix_backend.BACKEND, xminigrid_backend.BACKEND,
                              pgx_backend.BACKEND, brax_backend.BACKEND, gymnax_backend.BACKEND,
                              craftax_backend.BACKEND, gymnasium_backend.BACKEND)
BY_NAME = {b.name: b for b in TABLE}
BARE = (gymnax_backend.BACKEND, brax_backend.BACKEND, gymnasium_backend.BACKEND)  # the resolution order of bare names
BACKENDS = tuple(b.name for b in BARE)
PREFIXES = tuple(BY_NAME)  # every prefix "name/" of a registry name
MIN_VERSIONS = {b.package: b.min_version for b in TABLE}
BRAX_BACKENDS = brax_backend.BRAX_BACKENDS
FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")  # "package.module:function", a factory's reference


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
    """Every registry name `make` accepts, as "backend/id": those of the bare-name backends
    installed (BACKENDS, in resolution order) and of the optional libraries installed; with
    `backend` (one of PREFIXES) that backend's only (importing only it; ValueError naming its
    extra when it is not installed)."""
    if backend is not None and backend not in BY_NAME:
        raise ValueError(f"envs.names: backend must be one of {PREFIXES} or None, got {backend!r}")
    if backend is not None:
        _require_installed(BY_NAME[backend], f"{backend}/")
        chosen = (BY_NAME[backend],)
    else:
        chosen = tuple(b for b in BARE if is_installed(b.package)) + \
            tuple(b for b in TABLE if not b.bare and problem(b) is None)
    return tuple(f"{b.name}/{i}" for b in chosen for i in b.registry())


def _require_installed(backend: Backend, name: str) -> None:
    """ValueError naming the extra of an optional library that is missing or too old."""
    if not backend.bare:
        error = missing(backend, name)
        if error is not None:
            raise error


def library_ids(backend: Backend) -> tuple[tuple[str, ...], bool]:
    """(ids, read): the ids of an installed library's own registry (imported now; read True),
    else the names of the version tested (`known.NAMES`; read False): a library not installed,
    or one whose import fails, answers names without being imported."""
    if is_installed(backend.package):
        try:
            return backend.registry(), True
        except ImportError:
            if backend.name not in KNOWN:
                raise
    return KNOWN.get(backend.name, ()), False


def _not_usable(backend: Backend, name: str) -> ValueError:
    """The ValueError for `name` of a library that is missing, too old, or fails to import."""
    why = problem(backend)
    if why is None:
        try:
            import_module(backend.package, backend)
            why = f"{backend.package} cannot read its registry"
        except ImportError as err:
            why = str(err)
    return ValueError(f"envs.make({name!r}): an environment of {backend.name}; {why}")


def _fold(name: str) -> str:
    """Comparison key of a name: lower case, no version suffix, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"-v\d+$", "", name.lower()))


def _ranked(query: str, among: list[str], n: int) -> list[str]:
    """Up to n of `among` ("backend/id") whose id is closest to `query`, best first (ties: order)."""
    folded, scored = _fold(query), []
    for order, full in enumerate(among):
        cand = full.split("/", 1)[1]
        key = difflib.SequenceMatcher(None, folded, _fold(cand)).ratio()
        if key >= 0.6:
            scored.append((-key, -difflib.SequenceMatcher(None, query.lower(), cand.lower()).ratio(), order, full))
    return [full for *_, full in sorted(scored)[:n]]


def _candidates(name: str) -> tuple[str, list[str], list[str]]:
    """(query, names of installed libraries, names of libraries not installed) a name is
    compared with: an optional library's own names when `name` has its prefix, else every
    library's (bare-name backends first, in resolution order)."""
    head, sep, ident = name.partition("/")
    if sep and head in BY_NAME and not BY_NAME[head].bare:
        ids, read = library_ids(BY_NAME[head])
        full = [f"{head}/{i}" for i in ids]
        return ident, full if read else [], [] if read else full
    query = ident if sep and head in BY_NAME else name
    found, absent = [], []
    for backend in BARE + tuple(b for b in TABLE if not b.bare):
        ids, read = library_ids(backend)
        (found if read else absent).extend(f"{backend.name}/{i}" for i in ids)
    return query, found, absent


def closest(name: str, n: int = 8) -> list[str]:
    """Up to n registry names ("backend/id") closest to `name`, best first: among every
    installed library's (bare-name backends first), or among an optional library's when `name`
    has its prefix. Imports the libraries installed; never one that is not."""
    query, found, _ = _candidates(name)
    return _ranked(query, found, n)


def _unknown(name: str, where: str) -> ValueError:
    query, found, absent = _candidates(name)
    near, elsewhere = _ranked(query, found, 8), _ranked(query, absent, 4)
    hint = f"closest: {', '.join(near)}" if near else "no close names"
    if elsewhere:
        extras = sorted({n.split("/")[0] for n in elsewhere})
        hint += (f"; in libraries not installed: {', '.join(elsewhere)} (" +
                 ", ".join(install_hint(PROVIDED_BY[BY_NAME[e].package]) for e in extras) + ")")
    prefixes = ", ".join(f"{b}/" for b in PREFIXES[:-1]) + f" or {PREFIXES[-1]}/"
    factory = (f"; {name!r} looks like a factory (module:function): a study takes your own environments in "
               f"env_factories (hcjax run --env-factory {name}), never among the names in envs"
               if FACTORY.fullmatch(name) else "")
    return ValueError(f"envs.make: unknown environment {name!r} ({where}); {hint}. A prefix {prefixes} "
                      f"chooses the library; envs.names() lists every name{factory}")


def resolve(name: str | EnvSpec, installed: bool = True) -> EnvSpec:
    """Validate an environment name (or EnvSpec) and say which backend serves it; compiles nothing.

    "backend/id" looks only in that backend's registry (importing only it); a bare name
    tries the backends in the order of BACKENDS and stops at the first that has it (a backend
    not installed answers from the names of its version tested, `known.NAMES`, without being
    imported: its name is then a ValueError naming the extra that installs it). An optional
    library's id without its prefix is a ValueError giving the prefixed name. Raises
    ValueError with the closest names of every installed library when none has it.
    installed=False: a name of a library not installed resolves too (its EnvSpec says which
    library serves it; `make` then names the extra): for describing, not making.
    """
    if isinstance(name, EnvSpec):
        if name.backend not in BY_NAME:
            raise ValueError(f"envs.make: EnvSpec backend must be one of {PREFIXES}, got {name.backend!r}")
        _require_installed(BY_NAME[name.backend], name.name)
        if name.id not in BY_NAME[name.backend].registry():
            raise _unknown(name.name, f"{name.backend} has no {name.id!r}")
        return name
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"envs.make: an environment name must be a non-empty string, got {name!r}")
    head, sep, ident = name.partition("/")
    if sep and head in BY_NAME:
        ids, read = library_ids(BY_NAME[head])
        if installed and not read:
            raise _not_usable(BY_NAME[head], name)
        if installed:
            _require_installed(BY_NAME[head], name)
        if ident in ids:
            return EnvSpec(head, ident)
        raise _unknown(name, f"{head} has no {ident!r}")
    for backend in BARE:
        ids, read = library_ids(backend)
        if name in ids:
            if read or not installed:
                return EnvSpec(backend.name, name)
            raise _not_usable(backend, name)
    for backend in (b for b in TABLE if not b.bare):
        ids, read = library_ids(backend)
        if name in ids:
            absent = "" if read else f"; {problem(backend) or 'its import fails'}"
            raise ValueError(f"envs.make: {name!r} is {backend.name}/{name}: the optional libraries answer only to "
                             f"their prefix{absent}")
    raise _unknown(name, f"searched {', '.join(BACKENDS)} in that order")


def check_backends() -> list[str]:
    """Problems with the installed backends of the base install (missing, or older than
    MIN_VERSIONS), one sentence each naming the package, and with the optional libraries that
    are installed but too old; [] when all is well. Reads package metadata only: imports
    nothing."""
    found = [problem(b) for b in BARE]
    found += [problem(b) for b in TABLE if not b.bare and installed_version(b.package) is not None]
    return [p for p in found if p is not None]


def _checked(env: JaxEnv) -> JaxEnv:
    """`env` once its traced reset and step pass `checks.check_traced` (ValueError naming it)."""
    check_traced(env)
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
        built = BY_NAME[spec.backend].make_named(spec.id, **opts)
    else:
        backend = next((b for b in TABLE if b.accepts(env)), None)
        if backend is None:
            raise not_an_environment(env)
        built = backend.make_object(env, **opts)
    return _checked(built) if isinstance(built, JaxEnv) else built


def not_an_environment(obj, where: str = "envs.make", returned: bool = False) -> ValueError:
    """The ValueError for an object no backend takes (returned: one a factory returned): what is
    accepted, and the JaxEnv route for any other library, with the page that shows a worked adapter."""
    described = ", ".join(b.described for b in TABLE if b.described)
    head = f"the factory returned {type(obj).__name__}, not" if returned else f"{type(obj).__name__} is not"
    return ValueError(f"{where}: {head} an environment this package knows; give a registry "
                      f"name, {described}, or a JaxEnv / HostEnv. Any other library's environment runs through a "
                      f"hand-written agents.envs.JaxEnv (reset(key) -> (state, obs), step(key, state, action) -> "
                      f"(state, obs, reward, done), auto-resetting): docs/environment-libraries.md shows one")
