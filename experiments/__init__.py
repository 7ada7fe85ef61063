"""Studies (`hcjax run`, `hcjax plot`), their statistics and the benchmarks (`hcjax bench`).

    from experiments import Study
    result = Study(envs=["CartPole-v1"], methods=["hypercontroller", "fixed"], seeds=3, iterations=50).run("runs/x")

`Study`, `StudyResult` and `StudyFailed` (experiments/study/api.py) are imported on first use:
`import experiments` stays light.

study/       the engine: the methods table, plans, presets, study files, devices, unit loops,
             checkpoints, populations, tuning-time replay, the study directory
reporting/   statistics, figures and tables of a study directory
benchmarks/  the benchmark scripts and the LGDS demos
deps.py      package versions, devices, dependency API checks (`hcjax info`)
cli.py       the `hcjax` command
"""

import importlib

PUBLIC = {"Study": "experiments.study.api", "StudyResult": "experiments.study.api",
          "StudyFailed": "experiments.study.api"}
__all__ = list(PUBLIC)


def __getattr__(name: str):
    """The public names, imported from their module on first use (JAX and the envs load then)."""
    if name in PUBLIC:
        return getattr(importlib.import_module(PUBLIC[name]), name)
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")
