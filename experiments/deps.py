"""What this installation is made of: package versions, devices, and API checks.

`versions()` and `devices()` go into every manifest and `hcjax info`. `check_apis()`
probes the third-party APIs this code relies on and returns one line per problem,
each naming the package, its installed version and what is missing, so that a fresh
install that resolved to an incompatible release fails with a clear message instead
of a traceback deep inside training (gymnasium 1.4 once made pip fall back to gymnax
0.0.9, whose `step` returns five values instead of six).
"""
from __future__ import annotations

import importlib.util
import os
import platform
import sys
from collections.abc import Callable
from importlib import metadata

import jax
import jax.numpy as jnp

import hcjax
from hcjax import gp
from hcjax.extras import PROVIDED_BY, install_hint, missing_extra

try:  # the agents extra: a core install has neither; `hcjax info` then says which extras are missing
    import optax

    from agents import envs
except ImportError as err:
    if missing_extra(err, "experiments.deps") is None:
        raise
    optax = envs = None

# Distribution names, in the order `hcjax info` prints them.
# The environment libraries among them are in every study's manifest ("packages"): the version
# that ran is recorded beside the results.
PACKAGES = ("hcjax", "jax", "jaxlib", "flax", "optax", "chex", "brax", "gymnax", "gymnasium", "mujoco",
            "mujoco-mjx", "craftax", "jumanji", "navix", "xminigrid", "pgx", "numpy", "scipy", "matplotlib",
            "filelock", "tqdm")


def versions() -> dict[str, str | None]:
    """Installed version of every package in PACKAGES (None when not installed); hcjax's is
    `hcjax.__version__` (its one source, also the package metadata's), of the code imported."""
    out = {"hcjax": hcjax.__version__}
    for name in PACKAGES[1:]:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def devices() -> dict:
    """The JAX backend and devices of this process, and the host."""
    devs = jax.devices()
    return {
        "backend": jax.default_backend(),
        "devices": [str(d) for d in devs],
        "device_kind": devs[0].device_kind if devs else None,
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def describe() -> str:
    """`hcjax info`: one line per package, then the devices."""
    lines = [f"{name:12s} {v or 'not installed'}" for name, v in versions().items()]
    d = devices()
    lines.append(f"{'python':12s} {d['python']} ({d['platform']})")
    lines.append(f"{'devices':12s} {d['backend']}: {', '.join(d['devices'])} "
                 f"({d['device_kind']}; {d['process_count']} process(es); host {d['host']}, {d['cpu_count']} CPUs)")
    lines.append(f"{'lapack':12s} {lapack_note()}")
    lines += [f"{'extra ' + extra:12s} {note}" for extra, note in extras().items()]
    return "\n".join(lines)


def info() -> int:
    """`hcjax info`: print `describe()` and one line per unsupported API; exit status 1 if any."""
    print(describe())
    problems = check_apis()
    for p in problems:
        print(f"problem: {p}")
    return 1 if problems else 0


def extras() -> dict[str, str]:
    """{extra: 'installed', or which of its packages are missing and how to install them}."""
    out = {}
    for extra in dict.fromkeys(PROVIDED_BY.values()):
        missing = [m for m, e in PROVIDED_BY.items() if e == extra and importlib.util.find_spec(m) is None]
        out[extra] = f"missing {', '.join(missing)}: {install_hint(extra)}" if missing else "installed"
    return out


def lapack_note() -> str:
    """How vmapped LAPACK calls run with this jax on the CPU (`hcjax.gp.PROTECTED`)."""
    if gp.PROTECTED:
        return f"one matrix at a time on the CPU (protected). {gp.PROTECTION_NOTE}"
    return f"batched on every platform (jax {jax.__version__} >= 0.11: no XLA:CPU LAPACK deadlock protection needed)"


def _probe_jax() -> None:
    for name in ("custom_batching.sequential_vmap", "random.key_data", "lax.platform_dependent", "tree.map",
                 "sharding.NamedSharding", "make_array_from_callback"):
        obj = jax
        for part in name.split("."):
            obj = getattr(obj, part)


def _probe_optax() -> None:
    opt = optax.inject_hyperparams(lambda learning_rate, max_norm: optax.chain(
        optax.clip_by_global_norm(max_norm), optax.adam(learning_rate)))(learning_rate=1e-3, max_norm=1.0)
    state = opt.init({"w": jnp.zeros(2)})
    assert set(state.hyperparams) >= {"learning_rate", "max_norm"}


def _probe_flax() -> None:
    from flax import linen, struct  # noqa: F401 - imported here: a missing API is the probe's finding

    assert callable(struct.dataclass) and hasattr(linen, "Dense")


def _probe_envs() -> list[str]:
    return envs.check_backends()


PROBES: dict[str, Callable[[], object]] = {"jax": _probe_jax, "optax": _probe_optax, "flax": _probe_flax}


def check_apis() -> list[str]:
    """One line per unsupported dependency API (empty when everything is supported); in a
    core install (no agents extra) jax's only."""
    problems = []
    installed = versions()
    for package, probe in PROBES.items():
        if optax is None and package != "jax":
            continue
        try:
            probe()
        except Exception as e:  # noqa: BLE001 - every failure is a problem to name
            problems.append(f"{package} {installed.get(package)}: unsupported API ({type(e).__name__}: {e}); "
                            f"see the bounds in pyproject.toml or install with -c constraints.txt")
    return problems + (_probe_envs() if envs is not None else [])
