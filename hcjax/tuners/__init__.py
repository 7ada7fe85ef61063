"""Baseline tuners; importing this package registers them with `make_tuner`."""
from hcjax.tuners import fixed, gp_ucb, hyperband, pb2, random, random_start  # noqa: F401
