"""Studies (`hcjax run`, `hcjax plot`), their statistics and the benchmarks (`hcjax bench`).

    from experiments import Study
    result = Study(envs=["CartPole-v1"], methods=["hypercontroller", "fixed"], seeds=3, iterations=50).run("runs/x")

`Study`, `StudyResult` and `StudyFailed` (experiments/study/api.py) are imported on first use:
`import experiments` stays light.

study/       the engine: the methods table, plans, presets, study files, devices, unit loops,
             checkpoints, populations, tuning-time replay, schedule replay, the study directory
reporting/   statistics, figures, tables and DataFrames of a study directory
benchmarks/  the benchmark scripts and the LGDS demos
deps.py      package versions, devices, dependency API checks (`hcjax info`)
cli.py       the `hcjax` command

load(directory)                    a study's results as pandas DataFrames (reporting.frames)
replay(directory, unit, seeds)     a finished unit's schedules rerun on new seeds (study.schedules)
verdict(directory)                 does tuning help? the verdict on the test seeds (reporting.verdict)
"""
from __future__ import annotations

import importlib

# {public name: the module that defines it}, imported on first use (PEP 562): `import experiments`
# stays light (a core install's `hcjax info` works without the studies extra; JAX and the
# environments load with the first use).
_LAZY = {
    "Study": "experiments.study.api",
    "StudyResult": "experiments.study.api",
    "StudyFailed": "experiments.study.api",
    "load": "experiments.reporting.frames",
    "Results": "experiments.reporting.frames",
    "replay": "experiments.study.schedules",
    "verdict": "experiments.reporting.verdict",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'experiments' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = sorted(_LAZY)
