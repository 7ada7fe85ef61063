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

Usage, where an optional package is first needed:

    require("the agents package (PPO)", "flax", "optax")  # ImportError naming hcjax[agents]
"""
from __future__ import annotations

import importlib

# {import name: the extra that installs it}: the extra a missing package is named by.
PROVIDED_BY = {
    "flax": "agents", "optax": "agents", "chex": "agents", "gymnax": "agents",
    "brax": "brax", "mujoco": "brax",
    "gymnasium": "gymnasium",
    "craftax": "craftax", "jumanji": "jumanji", "navix": "navix", "xminigrid": "xminigrid", "pgx": "pgx",
    "matplotlib": "studies", "tqdm": "studies", "filelock": "studies", "tensorboardX": "studies",
    "tensorboard": "studies", "pandas": "studies",
    "pyarrow": "export",
}


def install_hint(extra: str) -> str:
    return f'pip install "hcjax[{extra}]"'


def missing_extra(error: ImportError, what: str) -> ModuleNotFoundError | None:
    """The ImportError to raise for `error` (raised while importing what `what` needs):
    one naming the extra that installs the missing package, or None when `error` is not
    a missing optional package (a broken install or our own bug: re-raise it as it is)."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    if not isinstance(error, ModuleNotFoundError) or name not in PROVIDED_BY:
        return None
    extra = PROVIDED_BY[name]
    return ModuleNotFoundError(f"{what} needs the {extra!r} extra ({name} is not installed): "
                               f"{install_hint(extra)}", name=name)


def require(what: str, *modules: str) -> None:
    """Import each of `modules`; ImportError naming the extra to install if one is missing."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise (missing_extra(err, what) or err) from err
