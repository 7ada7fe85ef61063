"""Baseline tuners; importing this package registers them with `make_tuner`."""
from hcjax.tuners import fixed, random  # noqa: F401
