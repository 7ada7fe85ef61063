"""Studies (`hcjax run`, `hcjax plot`), their statistics and the benchmarks (`hcjax bench`).

presets.py    smoke / cpu_learn / gpu / cpu / paper study definitions, validated by `resolve`
studyfile.py  studies as TOML files <-> presets
runner.py     units (env, method) of vmapped, device-sharded seeds; fused methods, population
              methods, checkpoints after every segment
results.py    the study directory: lock, manifest, unit files, checkpoints, corrupt files
stats.py      normalised scores, IQM / mean with bootstrap intervals, probability of improvement
plots.py      Figures 1-2, tables, aggregate figures, lineage figures
progress.py   progress bars on a terminal, plain lines otherwise
deps.py       package versions, devices, dependency API checks (`hcjax info`)
bench.py      runs the benchmark scripts into one report
cli.py        the `hcjax` command
"""
