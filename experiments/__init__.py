"""Studies (`hcjax run`, `hcjax plot`), their statistics and the benchmarks (`hcjax bench`).

study/       the engine: the methods table, plans, presets, study files, devices, unit loops,
             checkpoints, populations, tuning-time replay, schedule replay, the study directory
reporting/   statistics, figures, tables and DataFrames of a study directory
benchmarks/  the benchmark scripts and the LGDS demos
deps.py      package versions, devices, dependency API checks (`hcjax info`)
cli.py       the `hcjax` command

load(directory)                    a study's results as pandas DataFrames (reporting.frames)
replay(directory, unit, seeds)     a finished unit's schedules rerun on new seeds (study.schedules)
"""


def load(directory):
    """`experiments.reporting.frames.load` (imported when called: it needs the studies extra)."""
    from experiments.reporting import frames

    return frames.load(directory)


def replay(source, unit, seeds, out=None, on_segment=lambda k: None):
    """`experiments.study.schedules.replay` (imported when called: it needs JAX)."""
    from experiments.study import schedules

    return schedules.replay(source, unit, seeds, out=out, on_segment=on_segment)


__all__ = ["load", "replay"]
