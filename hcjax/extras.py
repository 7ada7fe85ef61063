"""The optional extras of the hcjax distribution, and the ImportError that names one.

`pip install hcjax` installs the core: this package (every tuner, population method,
HostTuner, `hcjax.optax`, `hcjax.objectives`) with jax and numpy. The packages beside it
need extras (pyproject.toml lists their requirements; tests/test_packaging.py checks this
table against it):

    agents     PPO (agents/): flax, optax, chex, gymnax
    brax       Brax environments: brax, mujoco, mujoco-mjx
    gymnasium  gymnasium environments (box2d, MuJoCo)
    craftax, jumanji, navix, xminigrid, pgx   one JAX environment library each (Python 3.12+)
    studies    the `hcjax` command (experiments/): agents + figures, progress, TensorBoard, pandas
    export     studies + Parquet tables (pyarrow)
    all        everything the command and its presets use
    peers      rejax, pinned: the benchmark against its PPO (experiments/benchmarks/bench_peers.py)

Usage, where an optional package is first needed (a package's __init__ for what its modules
import at module level):

    require("the agents package (PPO)", "flax", "optax")  # ImportError naming hcjax[agents]
    require_studies()  # experiments.study, .reporting, .benchmarks: ImportError naming hcjax[studies]
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

# {import name: the extra that installs it}: the extra a missing package is named by.
PROVIDED_BY = {
    "flax": "agents", "optax": "agents", "chex": "agents", "gymnax": "agents",
    "brax": "brax", "mujoco": "brax",
    "gymnasium": "gymnasium",
    "craftax": "craftax", "jumanji": "jumanji", "navix": "navix", "xminigrid": "xminigrid", "pgx": "pgx",
    "matplotlib": "studies", "tqdm": "studies", "filelock": "studies", "tensorboardX": "studies",
    "tensorboard": "studies", "pandas": "studies",
    "pyarrow": "export",
    "rejax": "peers",
}


# What the modules of experiments.study, .reporting, .benchmarks and experiments.cli import at
# module level from the studies extra (the others, matplotlib, tqdm, pandas, tensorboardX, when used)
STUDIES_IMPORTS = ("gymnasium", "filelock", "flax", "optax", "chex")


def install_hint(extra: str) -> str:
    return f'pip install "hcjax[{extra}]"'


def missing_extra(error: ImportError, what: str, extra: str | None = None) -> ModuleNotFoundError | None:
    """The ImportError to raise for `error` (raised while importing what `what` needs):
    one naming the extra that installs the missing package (`extra`, default the package's
    own in PROVIDED_BY), or None when `error` is not a missing optional package (a broken
    install or our own bug: re-raise it as it is)."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    if not isinstance(error, ModuleNotFoundError) or name not in PROVIDED_BY:
        return None
    extra = extra or PROVIDED_BY[name]
    return ModuleNotFoundError(f"{what} needs the {extra!r} extra ({name} is not installed): "
                               f"{install_hint(extra)}", name=name)


def require(what: str, *modules: str, extra: str | None = None) -> None:
    """Import each of `modules`; ImportError naming the extra to install if one is missing
    (`extra`: the one that installs all of them, e.g. 'studies' for gymnasium, which gymnax
    brings; default each package's own)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise (missing_extra(err, what, extra) or err) from err


def installed(module: str) -> bool:
    """Whether top-level package `module` can be imported, without importing it (a module set
    to None in sys.modules, as a test blocks one, counts as missing)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def require_studies() -> None:
    """ImportError naming hcjax[studies] when a package of the studies extra that experiments'
    study engine, reports, benchmarks and command import at module level (STUDIES_IMPORTS) is
    missing; found without importing them (reading a study must not import the agents stack).
    Each of those packages calls it first."""
    missing = [m for m in STUDIES_IMPORTS if not installed(m)]
    if missing:
        raise ModuleNotFoundError(f"hcjax's studies (experiments: the study engine, reports, benchmarks and the hcjax "
                                  f"command) need the 'studies' extra ({', '.join(missing)} not installed): "
                                  f"{install_hint('studies')}", name=missing[0])
