"""Studies (`hcjax run`, `hcjax plot`), their statistics and the benchmarks (`hcjax bench`).

study/       the engine: the methods table, plans, presets, study files, devices, unit loops,
             checkpoints, populations, tuning-time replay, the study directory
reporting/   statistics, figures, tables and DataFrames of a study directory
benchmarks/  the benchmark scripts and the LGDS demos
deps.py      package versions, devices, dependency API checks (`hcjax info`)
cli.py       the `hcjax` command

load(directory)   a study's results as pandas DataFrames (experiments.reporting.frames)
"""
from experiments.reporting.frames import Results, load

__all__ = ["Results", "load"]
