"""A unit group's learner, tuners and compiled programs, kept in this process: a second run of
the same unit configuration (a resume, a rerun after a failure, the same study again in a
notebook) traces and compiles nothing.

    kept = unit_programs(plan, env, methods, memory_limit_gib)   # built, or the one kept
    kept.learner, kept.tuners, kept.population                   # as engine.run_units uses them
    kept.program(("segment", 2), build)                          # build() once, then the same program

The key is everything the programs are built from: the environment object (a registry
environment is built once per process; your own environment is the object built when it was
given, so a changed or re-given environment never meets an old program), the methods, the
PPO configuration with the environment's overrides, every method's options, the space, the
seed count, fast_compile, the memory limit, the devices and the JAX settings that change a
program (KEY_SETTINGS). Not in it: the output directory and what only changes the inputs
(the seeds' values); the segment lengths (eval_every) name programs within one.

A method's tuner-time replay programs (`replay.measure_tuner_time`, the tuner alone) are kept
per tuner configuration instead (`tuner_programs`): every unit group of the method, on each
environment, fused or alone, compiles them once in the process. The evaluation program reads
only the networks, observation statistics and hyperparameters of an agent, so it is kept per
environment, PPO configuration and space (`evaluation_programs`): the units of every method on
an environment share one compilation per agent count.

At most MAX_KEPT configurations (and MAX_KEPT tuner configurations) are kept, the least recently
used dropped first; `clear()` drops them all (their compiled programs' memory is freed with them).
"""
from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import jax

from agents.population import PopulationLoop, population_objective
from agents.ppo import PPOConfig, make_learner
from experiments.study import build, protocol
from experiments.study.keys import config_key
from experiments.study.methods import is_population
from experiments.study.plan import (
    EnvChoice,
    Plan,
    default_values,
    ppo_options,
    reads_results,
    tuner_options,
    unit_config,
    unit_seeds,
)
from hcjax.population.sharding import agent_mesh
from hcjax.tuners.schedule import schedule
from hcjax.tuners.stacked import stack

MAX_KEPT = 16
KEY_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_disable_most_optimizations",
                "jax_optimization_level")  # jax.config values a kept program was built under


@dataclasses.dataclass
class UnitPrograms:
    """What a unit group trains with: its `environment`, `learner` (one tuner, a stacked
    tuner of several methods, a population method's, or a `schedule` of static configurations:
    the sweep's, or the replayed schedules of `plan.reads_results` units), `tuners` (one per
    unit: the tuner it runs, None for a schedule), `branches` (per unit, its tuner's index in the
    stacked tuner, or None when the learner's tuner is not stacked), `population` (a
    PopulationLoop over the seeds, or None) and the programs built so far (`program`)."""

    environment: Any
    learner: Any
    tuners: list
    branches: list[int] | None
    population: PopulationLoop | None
    programs: dict = dataclasses.field(default_factory=dict)

    def program(self, name: Hashable, build: Callable[[], Any]):
        """The program kept under `name`; `build()` makes it the first time."""
        return _program(self.programs, name, build)


def _program(programs: dict, name: Hashable, build: Callable[[], Any]):
    """programs[name], made by `build()` the first time."""
    if name not in programs:
        programs[name] = build()
    return programs[name]


def _keep(kept: OrderedDict, key, make: Callable[[], Any]):
    """kept[key], made by `make()` the first time; the most recently used last, the least
    recently used dropped beyond MAX_KEPT."""
    if key in kept:
        kept.move_to_end(key)
        return kept[key]
    value = kept[key] = make()
    while len(kept) > MAX_KEPT:
        kept.popitem(last=False)
    return value


_KEPT: OrderedDict[tuple, UnitPrograms] = OrderedDict()
_TUNER_KEPT: OrderedDict[str, dict] = OrderedDict()  # tuner configuration key -> {name: program}
# (environment id, evaluation configuration key) -> (the environment, {name: program})
_EVAL_KEPT: OrderedDict[tuple, tuple[Any, dict]] = OrderedDict()


def _settings() -> dict:
    return {k: jax.config.values.get(k) for k in KEY_SETTINGS}


def _environment_config(plan: Plan, env: EnvChoice) -> dict:
    """What every program of `env` is built from whatever the methods: the PPO configuration,
    the space, fast_compile, the processes, devices and JAX settings."""
    p = plan.preset
    return dict(ppo=ppo_options(plan, env), space=[dict(h) for h in p.space], fast_compile=bool(p.fast_compile),
                processes=jax.process_count(), devices=[str(d) for d in jax.devices()], settings=_settings())


def program_key(plan: Plan, env: EnvChoice, methods: list[str], memory_limit_gib: float) -> str:
    """The hash of everything but the environment object that the programs of (env, methods) are
    built from (a replayed schedule's: its source unit's configuration key)."""
    p = plan.preset
    sources = [unit_config(plan, env, m)["unit"].get("source") if reads_results(m) else None for m in methods]
    return config_key(dict(_environment_config(plan, env), methods=list(methods),
                           tuner={m: tuner_options(plan, m, env) for m in methods}, seeds=p.seeds,
                           agents=[len(unit_seeds(plan, m)) for m in methods], sources=sources,
                           tune_every=plan.timing(env).tune_every, memory_limit_gib=float(memory_limit_gib)))


def unit_programs(plan: Plan, env: EnvChoice, methods: list[str], memory_limit_gib: float,
                  schedules=None) -> UnitPrograms:
    """The UnitPrograms of (env, methods) under `plan`: the one kept for this configuration,
    or a new one (kept, dropping the least recently used beyond MAX_KEPT). schedules: the
    (R, T, h) tuner values a group of `reads_results` units replays (its rows: the sources'
    schedules, named by their configuration keys in the program key)."""
    environment = build.environment(env.make)
    # the entry holds the environment: its id names no other object while kept
    key = (id(environment), program_key(plan, env, methods, memory_limit_gib))
    return _keep(_KEPT, key, lambda: _new_unit_programs(plan, env, methods, memory_limit_gib, environment,
                                                        schedules))


def _new_unit_programs(plan: Plan, env: EnvChoice, methods: list[str], memory_limit_gib: float,
                       environment, schedules) -> UnitPrograms:
    """A new UnitPrograms of (env, methods) under `plan`, built on `environment` (no program yet)."""
    config = PPOConfig(**ppo_options(plan, env))
    if reads_results(methods[0]):  # replayed schedules: a value every iteration, so an ask after each one
        tuner = schedule(plan.space, schedules, memory_limit_gib=memory_limit_gib)
        learner = make_learner(dataclasses.replace(config, tune_every=1), environment, tuner)
        return UnitPrograms(environment, learner, [None] * len(methods), None, None)
    if methods == [protocol.SWEEP]:  # the sweep: one schedule row per configuration, constant in time
        configurations = protocol.sweep_configurations(plan.space, tuner_options(plan, protocol.SWEEP),
                                                       default_values(plan))
        tuner = schedule(plan.space, configurations[:, None, :], memory_limit_gib=memory_limit_gib)
        return UnitPrograms(environment, make_learner(config, environment, tuner), [None], None, None)
    if is_population(methods[0]):  # a population method runs alone: the unit's seeds are its population
        tuners = [build.make_method(plan, methods[0], memory_limit_gib, env)]
        learner = make_learner(config, environment, tuners[0])
        population = PopulationLoop(learner, tuners[0], config.tune_every,
                                    population_objective(protocol.kind(methods[0]).base, config.objective,
                                                         config.tune_every),
                                    mesh=agent_mesh())  # the mesh of run_jax_unit: agents over every device
        return UnitPrograms(environment, learner, tuners, None, population)
    bases = list(dict.fromkeys(protocol.kind(m).base for m in methods))  # a method's tuning and test units: one tuner
    stacked = [build.make_method(plan, base, memory_limit_gib, env) for base in bases]
    branches = [bases.index(protocol.kind(m).base) for m in methods]
    learner = make_learner(config, environment, stacked[0] if len(bases) == 1 else stack(stacked))
    return UnitPrograms(environment, learner, [stacked[b] for b in branches], branches if len(bases) > 1 else None,
                        None)


def tuner_programs(plan: Plan, method: str, memory_limit_gib: float,
                   env: EnvChoice | None = None) -> Callable[[Hashable, Callable[[], Any]], Any]:
    """A `program(name, build)` for the programs of `method`'s tuner alone (the replay that
    times it), kept per tuner configuration: the method, its options (on `env`), the space, the
    memory limit and the JAX settings (not the environment, the PPO or the methods fused with it)."""
    key = config_key(dict(method=method, tuner=tuner_options(plan, method, env),
                          space=[dict(h) for h in plan.preset.space],
                          memory_limit_gib=float(memory_limit_gib), settings=_settings()))
    return functools.partial(_program, _keep(_TUNER_KEPT, key, dict))


def evaluation_programs(plan: Plan, env: EnvChoice, environment) -> Callable[[Hashable, Callable[[], Any]], Any]:
    """A `program(name, build)` for the programs of (env, `environment`) that no method changes
    (the evaluation), kept per environment object, PPO configuration, space, fast_compile,
    devices and JAX settings: not the methods, their options or the seed count (name them by
    the agent count)."""
    key = (id(environment), config_key(_environment_config(plan, env)))
    # the entry holds the environment: its id names no other object while kept
    return functools.partial(_program, _keep(_EVAL_KEPT, key, lambda: (environment, {}))[1])


def announced(program: Callable[[Hashable, Callable[[], Any]], Any],
              say: Callable[[str], None]) -> Callable[[Hashable, Callable[[], Any]], Any]:
    """`program` (a `program(name, build)`) that says "compiling ..." (`say`) before each
    program it has to build (a kept one is said nothing of): compilation is silent minutes
    on a busy CPU otherwise."""
    def kept(name: Hashable, build: Callable[[], Any]):
        def build_said():
            if name != "init":  # a jax.jit object: it compiles as "init compiled"
                say(f"compiling {_described(name)}")
            return build()

        return program(name, build_said)

    return kept


def _described(name: Hashable) -> str:
    """What a program's name means, in words."""
    if isinstance(name, tuple) and name[0] == "segment":
        return f"the training segment ({name[1]} iteration(s))"
    if isinstance(name, tuple) and name[0] == "evaluate":
        return "the evaluation"
    return {"init compiled": "the initial state"}.get(name, str(name))


def built_anew(name: Hashable, build: Callable[[], Any]):
    """A `program(name, build)` that keeps nothing: every program built anew (the default of
    `loops.run_jax_unit` and of the `replay` measures)."""
    return build()


def clear() -> None:
    """Drop every kept configuration (the next run of each builds and compiles anew)."""
    _KEPT.clear()
    _TUNER_KEPT.clear()
    _EVAL_KEPT.clear()
