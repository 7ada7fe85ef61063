"""Checks of a study before anything is compiled: its PPO settings, space, methods, environments,
and each unit's estimated memory."""
from __future__ import annotations

import dataclasses
import functools

import jax

from agents.ppo import METRIC_KEYS, PPOConfig, check_space, make_learner
from agents.ppo.config import check_batch_options
from experiments.study import build, protocol
from experiments.study.build import DEFAULT_MEMORY_LIMIT_GIB, make_method
from experiments.study.methods import ALL_METHODS, is_population
from experiments.study.plan import EnvChoice, Plan, ppo_options, reads_results, unit_groups, unit_seeds
from hcjax import Space, make_tuner

WORKSPACE_FACTOR = 4  # an iteration's XLA temporaries, relative to the state and trajectory (generous)


def check(plan: Plan, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> None:
    """Validate everything a unit needs without compiling: the PPOConfig, the space
    (tunable fields only), every method's tuner options, every environment (built), and
    each unit's memory: ValueError now rather than after hours of other units, or an
    abort, a hang or a MemoryError later."""
    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    configs = {}
    for env in (None,) + plan.envs:
        ppo = ppo_options(plan, env)
        unknown = sorted(set(ppo) - fields)
        where = f"study {plan.preset.name!r}" + ("" if env is None else f", env_ppo of {env.label}")
        if unknown:
            raise ValueError(f"{where}: unknown PPOConfig field(s) {unknown}; allowed: {', '.join(sorted(fields))}")
        try:
            configs[None if env is None else env.label] = PPOConfig(**ppo)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    space = plan.space
    check_space(space)
    for label, config in configs.items():
        try:
            check_batch_options(config, space)
        except ValueError as e:
            raise ValueError(f"study {plan.preset.name!r}" + ("" if label is None else f", env {label}") +
                             f": {e}") from None
    unknown = sorted(set(plan.preset.tuner) - set(ALL_METHODS))
    if unknown:
        raise ValueError(f"study {plan.preset.name!r}: tuner options for unknown method(s) {unknown}; "
                         f"methods: {', '.join(ALL_METHODS)}")
    made = [m for m in dict.fromkeys(list(plan.methods) + list(plan.preset.tuner))
            if not (reads_results(m) or protocol.kind(m).base == protocol.SWEEP)]
    # per environment: a method's options follow its schedule (HyperBand's budget: its decisions)
    tuners = {(env.label, m): make_method(plan, m, memory_limit_gib, env) for env in plan.envs for m in made}
    populations = [m for m in plan.preset.methods if is_population(m)]
    if populations:
        host = [e.label for e in plan.envs if e.path == "gymnasium"]
        if host:
            raise ValueError(f"population methods {populations} run on JAX environments only (the agent axis is "
                             f"one program); gymnasium environments {host} run on the host")
        for count, what in ((plan.preset.seeds, "seeds"), (len(plan.test_ids), "test_seeds")):
            if count % jax.device_count():
                raise ValueError(f"population methods {populations}: {what} ({count}) must be a multiple of the "
                                 f"device count ({jax.device_count()}): the population is exactly the seeds")
    for env, methods in unit_groups(plan):
        config = configs[env.label]
        base, evaluation = agent_bytes(config, env, space), evaluation_bytes(config, env)
        agents = sum(len(unit_seeds(plan, m)) for m in methods)
        iterations = plan.timing(env).iterations
        if is_population(methods[0]):
            tuner_bytes = tuners[(env.label, methods[0])].memory_bytes(agents) / agents
        elif (env.label, methods[0]) in tuners:  # a fused agent holds every method's state (its test units: the same)
            tuner_bytes = sum(tuners[(env.label, m)].memory_bytes
                              for m in {protocol.kind(m).base: m for m in methods}.values())
        else:  # a schedule: its table is shared by the agents, each holds two counters
            tuner_bytes = 4 * iterations * space.h * len(methods) * plan.preset.seeds / agents
        total = agents * (base + tuner_bytes + evaluation)
        if total > memory_limit_gib * 2**30:
            raise ValueError(
                f"unit {env.label} / {'+'.join(methods)}: estimated {total / 2**30:.3g} GiB ({agents} "
                f"agents x {(base + tuner_bytes) / 2**20:.3g} MiB: networks, optimiser, environments, "
                f"trajectory of the largest batch, {iterations} iterations of metrics, the tuner; "
                f"and x {evaluation / 2**20:.3g} MiB: the evaluation, eval_episodes = {config.eval_episodes} "
                f"episodes at once) exceeds the memory limit of {memory_limit_gib:g} GiB; lower seeds, "
                f"iterations, num_envs, the batch size, hidden_sizes, eval_episodes or the tuner's options, or "
                f"raise --memory-limit-gib")


def study_warnings(plan: Plan) -> list[str]:
    """What a study may run but cannot conclude (said before the work, `StudyRun.execute`): one
    test seed makes every comparison on the test seeds 'not testable' (a stratum of one run)."""
    if len(plan.test_ids) == 1:
        return ["test_seeds gives one test seed: every comparison of the verdict on the test seeds will be 'not "
                "testable' (one run cannot vary); give at least 2 (a count, or a list of seed ids)"]
    return []


def agent_bytes(config, env: EnvChoice, space) -> int:
    """Estimated bytes of one agent, tuner excluded: its learner state (shapes traced with
    jax.eval_shape, nothing allocated), the trajectory of the largest batch, both times
    WORKSPACE_FACTOR, and the metrics kept on the host for every iteration."""
    state_bytes, per_iteration = _learner_bytes(config, env.make, space.hyperparameters)
    metrics = 8 * config.num_iterations * (len(METRIC_KEYS) - 1 + space.h)  # hparams: h columns
    return WORKSPACE_FACTOR * (state_bytes + per_iteration) + metrics


def evaluation_bytes(config, env: EnvChoice) -> int:
    """Estimated bytes of one agent's evaluation: its config.eval_episodes episodes run at once
    (vmapped), each holding its environment state and observation (shapes from jax.eval_shape
    of the reset), the policy's activations and the carried scalars, times WORKSPACE_FACTOR.
    Nothing scales with eval_steps (the step counter is carried by the scan and each step's keys
    drawn from it: XLA's memory analysis of the compiled evaluation is the same at eval_steps
    10**3 and 10**6, tests/test_reliability_round5_leftovers.py). A host
    environment's episodes run one after another on the host: its observation only."""
    episode = _episode_bytes(env.make, tuple(config.hidden_sizes))
    return WORKSPACE_FACTOR * config.eval_episodes * episode


@functools.lru_cache(maxsize=64)
def _episode_bytes(make: str, hidden_sizes: tuple[int, ...]) -> int:
    """Bytes one evaluation episode of `make` holds at a step (see evaluation_bytes); cached."""
    environment = build.environment(make)
    activations = 4 * (2 * environment.obs_size + sum(hidden_sizes) + 2 * max(environment.action_size, 1))
    if environment.host:
        return activations
    env_state, obs = jax.eval_shape(environment.reset, jax.random.PRNGKey(0))
    held = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves((env_state, obs)))
    return 2 * held + activations + 64  # the scan's carry and the step's new state; return, alive, keys


@functools.lru_cache(maxsize=64)
def _learner_bytes(config, make: str, hyperparameters) -> tuple[int, int]:
    """(learner state bytes, trajectory bytes of one iteration) of one agent; cached per process."""
    environment = build.environment(make)
    learner = make_learner(config, environment, make_tuner("fixed", Space(hyperparameters)))
    state = jax.eval_shape(learner.init, jax.random.PRNGKey(0))
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    per_step = 2 * environment.obs_size + max(environment.action_size, 1) + 10  # obs, normalised obs, action, scalars
    return state_bytes, 4 * learner.max_steps * config.num_envs * per_step
