"""What a unit is built from: its environment (built once per process) and its tuner or
population, made from the methods table with the study's options."""
from __future__ import annotations

import functools

from agents import envs
from experiments.study import methods
from experiments.study.plan import tuner_options
from experiments.study.presets import Plan
from hcjax import make_population, make_tuner

DEFAULT_MEMORY_LIMIT_GIB = 8.0


@functools.lru_cache(maxsize=64)
def environment(make: str):
    """`agents.envs.make(make)`, built once per process: building a Brax environment takes
    seconds, and `check` and then every unit group of the environment need it."""
    return envs.make(make)


def make_method(plan: Plan, method: str, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB):
    """The Tuner or Population of `method` with this study's options."""
    make = make_population if methods.is_population(method) else make_tuner
    return make(method, plan.space, memory_limit_gib=memory_limit_gib, **tuner_options(plan, method))
