"""What a unit is built from: its environment (built once per process) and its tuner or
population, made from the methods table with the study's options; and the probe of an
environment whose cost the estimate's model does not know (`probe`)."""
from __future__ import annotations

import functools

from agents import envs
from agents.ppo import PPOConfig
from experiments.study import methods, own_envs, protocol
from experiments.study.plan import EnvChoice, Plan, ppo_options, tuner_options, unit_groups, unit_seeds
from hcjax import make_population, make_tuner

DEFAULT_MEMORY_LIMIT_GIB = 8.0
CALIBRATED = ("gymnax", "brax")  # registry environments whose cost the estimate's model was calibrated on
PROBE_STEPS = (16, 64)  # a probe's steps: the time limit + 3 (to see it end), within these bounds


def environment(make: str):
    """The environment of an EnvChoice's `make`: your own one as given in this process
    (`own_envs.built`), else `agents.envs.make(make)` of the registry name, built once per
    process (building a Brax environment takes seconds, and `check` and then every unit
    group of the environment need it)."""
    return own_envs.built(make) if own_envs.is_own(make) else _registry_environment(make)


@functools.lru_cache(maxsize=64)
def _registry_environment(name: str):
    return envs.make(name)


def make_method(plan: Plan, method: str, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB,
                env: EnvChoice | None = None):
    """The Tuner or Population of a unit's `method` (its base's, `protocol.kind`; a poor default
    is `fixed` at its values) with this study's options on `env` (`tuner_options`)."""
    name = protocol.tuner_method(protocol.kind(method).base)
    make = make_population if methods.is_population(name) else make_tuner
    return make(name, plan.space, memory_limit_gib=memory_limit_gib, **tuner_options(plan, method, env))


def measured(env: EnvChoice) -> bool:
    """Whether a study probes `env` before its work (`probe`): every own environment (code the
    estimate's model knows nothing of) and every registry environment outside CALIBRATED (the
    optional libraries: craftax's compilation alone takes tens of seconds); never a host
    (gymnasium) environment, which no JAX program steps."""
    return env.path != "gymnasium" and (own_envs.is_own(env.make) or env.path not in CALIBRATED)


def probe_batch(plan: Plan, env: EnvChoice) -> int:
    """The environment copies one program of `env` steps at once: agents x num_envs of its
    largest unit group (agents: its units' rows)."""
    agents = max(sum(len(unit_seeds(plan, m)) for m in methods) for e, methods in unit_groups(plan)
                 if e.label == env.label)
    return agents * PPOConfig(**ppo_options(plan, env)).num_envs


def probe(plan: Plan, env: EnvChoice) -> envs.Probe:
    """`agents.envs.probe` of `env` with `probe_batch` copies for its time limit + 3 steps
    (PROBE_STEPS bounds), run once per process: its compilation and step cost (the estimate
    charges them) and whether it resets after done (`Study.check` refuses one that does not)."""
    built = environment(env.make)
    low, high = PROBE_STEPS
    steps = high if built.max_episode_steps is None else min(max(built.max_episode_steps + 3, low), high)
    return _probe(env.make, probe_batch(plan, env), steps)


@functools.lru_cache(maxsize=64)
def _probe(make: str, batch: int, steps: int) -> envs.Probe:
    return envs.probe(environment(make), batch=batch, steps=steps)
