"""The paper's study (`hcjax run`, `hcjax plot`) and the benchmarks (`hcjax bench`).

presets.py  smoke / cpu / paper study definitions, validated by `resolve`
runner.py   units (env, method) of vmapped, device-sharded seeds; resumable
results.py  per-unit files and the manifest, written atomically
plots.py    Figures 1-2, success and results tables
bench.py    runs the benchmark scripts into one report
cli.py      the `hcjax` command
"""
