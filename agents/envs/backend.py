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

from hcjax.extras import PROVIDED_BY, install_hint


@dataclasses.dataclass(frozen=True)
class Backend:
    """One environment library.

    name: the prefix of its registry names ("gymnax/...") and `JaxEnv.backend`;
    package: its pip package; min_version (and version_note: why, said when too old);
    host: stepped on the host (a HostEnv) rather than jitted (a JaxEnv);
    registry() -> the ids of its registry (read now); make_named(id, **opts) -> env;
    accepts(obj) -> whether an environment object is one of this library's;
    make_object(obj, **opts) -> env; described: how `make`'s error names such objects.
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


def installed_version(package: str) -> str | None:
    """The installed version of `package` (its metadata only), None if not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


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
    have = installed_version(package)
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
