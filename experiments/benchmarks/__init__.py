"""Benchmarks (`hcjax bench` runs the bench_* scripts into one report) and the LGDS demos.

bench.py             runs the scripts below into one JSON + Markdown report
bench_controller.py  HyperController decisions: vmapped agents and sequential steps
bench_tuners.py      every tuner's ask + tell, GP paths, the host (HostTuner) path
bench_population.py  population steps and Ray Tune's PBT
bench_ppo.py         PPO frames per second with each tuner
lgds_demo.py         regret of every tuner on linear Gaussian dynamical systems
lgds_population.py   population methods on LGDS problems
timing.py            medians of timed calls, tables, JSON output
"""
from hcjax.extras import require_studies

require_studies()  # else an ImportError naming hcjax[studies]
