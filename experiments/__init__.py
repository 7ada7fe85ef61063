"""Studies (`hcjax run`, `hcjax plot`), their statistics and the benchmarks (`hcjax bench`).

study/       the engine: the methods table, plans, presets, study files, devices, unit loops,
             checkpoints, populations, tuning-time replay, the study directory
reporting/   statistics, figures and tables of a study directory
benchmarks/  the benchmark scripts and the LGDS demos
deps.py      package versions, devices, dependency API checks (`hcjax info`)
cli.py       the `hcjax` command
"""
