"""A study directory's results as pandas DataFrames: `experiments.load(directory)`.

    results = experiments.load("results/population_study")
    results.iterations    # one row per unit, seed and iteration
    results.evaluations   # one row per unit, seed and evaluation
    results.lineage       # one row per population step (empty, with its columns, if none)

The columns are those of `hcjax export` (see experiments.reporting.export): `study`
(the study key), env, method, seed, iteration, frames, total_frames, wall_seconds, the
metrics and `hp_<name>` per hyperparameter (integers as int64, categoricals as their
options). Float metrics keep the unit files' float32. pandas is imported here, when
called (`pip install "hcjax[studies]"`).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

from experiments.reporting import export
from experiments.study.store import StudyDir, UnitResult
from hcjax.extras import require


@dataclasses.dataclass
class Results:
    """The three tables of a study (pandas DataFrames) and its units, in the manifest's order."""

    iterations: object
    evaluations: object
    lineage: object
    units: list[UnitResult]


def frames(units: Iterable[UnitResult]) -> Results:
    """The units' tables as DataFrames (one DataFrame per table, units in the order given)."""
    require("experiments.load (results as DataFrames)", "pandas")
    import pandas as pd

    units = list(units)
    if not units:
        raise ValueError("load: no finished units")
    export.check_units(units)
    tables = {}
    for name, build in export.BUILDERS.items():
        parts = [pd.DataFrame(build(u)) for u in units]
        table = pd.concat(parts, ignore_index=True)
        for column in table.columns:
            if pd.api.types.is_object_dtype(table[column]):  # pandas < 3 keeps text as object
                table[column] = table[column].astype(str)
        tables[name] = table
    return Results(**tables, units=units)


def load(directory: str | os.PathLike) -> Results:
    """The finished units of the study directory as DataFrames (see the module docstring);
    ValueError when it is not a study directory or holds no finished unit."""
    store = StudyDir(directory)
    if not store.path.is_dir():
        raise ValueError(f"load: {store.path} is not a study directory")
    units = store.units()
    if not units:
        raise ValueError(f"load: no finished units in {store.units_dir}")
    return frames(units)
