"""What a unit is built from: its environment (built once per process) and its tuner or
population, made from the methods table with the study's options."""
from __future__ import annotations

import functools

from agents import envs
from experiments.study import methods, own_envs, protocol
from experiments.study.plan import Plan, tuner_options
from hcjax import make_population, make_tuner

DEFAULT_MEMORY_LIMIT_GIB = 8.0


def environment(make: str):
    """The environment of an EnvChoice's `make`: your own one as given in this process
    (`own_envs.built`), else `agents.envs.make(make)` of the registry name, built once per
    process (building a Brax environment takes seconds, and `check` and then every unit
    group of the environment need it)."""
    return own_envs.built(make) if own_envs.is_own(make) else _registry_environment(make)


@functools.lru_cache(maxsize=64)
def _registry_environment(name: str):
    return envs.make(name)


def make_method(plan: Plan, method: str, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB):
    """The Tuner or Population of a unit's `method` (its base's, `protocol.kind`; a poor default
    is `fixed` at its values) with this study's options."""
    name = protocol.tuner_method(protocol.kind(method).base)
    make = make_population if methods.is_population(name) else make_tuner
    return make(name, plan.space, memory_limit_gib=memory_limit_gib, **tuner_options(plan, method))
