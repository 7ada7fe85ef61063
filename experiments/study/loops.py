"""The loops that train one unit's agents: `run_jax_unit` (JAX environments: one vmapped
program sharded over every device) and `run_host_unit` (gymnasium environments, stepped on
the host through `agents.driver`, unsharded).

Within a unit all seeds are one vmapped program: `learner.init` and segments of
`eval_every` iterations (`learner.iterate`) are `jax.jit(jax.vmap(...))` over an agent
axis sharded across devices (see `experiments.study.devices`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from agents import driver
from agents.population import PopulationLoop
from agents.ppo.learner import eval_key
from experiments.study.checkpoints import Checkpoint, Record
from experiments.study.devices import host_seed_keys, seed_keys, to_host
from experiments.study.plan import segments
from experiments.study.programs import built_anew
from hcjax.population.sharding import agent_mesh
from hcjax.tuners.stacked import select


def compiled(jitted, *args, fast: bool = False):
    """Ahead-of-time compile `jitted` for `args`; fast: XLA backend optimisation level 0."""
    lowered = jitted.lower(*args)
    return lowered.compile(compiler_options={"xla_backend_optimization_level": 0}) if fast else lowered.compile()


class Evaluated(NamedTuple):
    """What an evaluation reads of a learner state (`agents.ppo.learner.mode`): the same
    pytree whatever the tuner, so every method's units share one evaluation program."""

    params: Any
    obs_stats: Any
    hparams: jax.Array


def evaluated(state) -> Evaluated:
    """The Evaluated part of a learner state."""
    return Evaluated(state.params, state.obs_stats, state.hparams)


def run_jax_unit(learner, seed_ids: np.ndarray, iterations: int, eval_every: int,
                 on_segment: Callable[[int], None] = lambda k: None, fast_compile: bool = False,
                 checkpoint: Checkpoint | None = None, which: np.ndarray | None = None,
                 population: PopulationLoop | None = None,
                 on_record: Callable[[Record], None] = lambda record: None,
                 program: Callable[[Hashable, Callable[[], Any]], Any] = built_anew,
                 shared: Callable[[Hashable, Callable[[], Any]], Any] = built_anew) -> dict[str, np.ndarray]:
    """Train len(seed_ids) agents as one vmapped program sharded over every device,
    in segments with an evaluation after every `eval_every` iterations and the last.

    Returns per-iteration metrics (n, T[, h]), eval_iteration (E,), eval_reward (n, E),
    for the n = padded agents (callers drop the padding), and timings. fast_compile:
    compile the training segments with XLA's backend optimisation off (much shorter
    compilation, slower steps: for tiny runs). checkpoint: saved after every segment and
    resumed from when present, so a killed unit continues from its last segment with
    bit-identical results. which: (n,) int32 method of every agent when the learner's
    tuner is stacked (hcjax.tuners.stacked), None otherwise. population: a population
    method stepped every `population.ready` iterations (the lineage lands in the
    returned "lineage_*" arrays). on_record: called with the Record when the loop starts
    (resumed or empty) and after every segment, before its checkpoint is saved (e.g. live
    TensorBoard scalars: written first, a kill between the two leaves no gap). program:
    program(name, build) -> the program kept under name for this learner and agent count
    (`experiments.study.programs.UnitPrograms.program`: a rerun compiles nothing), by
    default every program built anew; shared: the same for the evaluation, which no tuner
    changes (`experiments.study.programs.evaluation_programs`: kept across methods).
    """
    mesh = agent_mesh()
    agents = NamedSharding(mesh, P("agent"))
    scalar = NamedSharding(mesh, P())
    keys = seed_keys(seed_ids, agents)

    if which is None:
        def init_one(k):
            return learner.init(jax.random.fold_in(k, 0))

        init_args = (keys,)
    else:
        def init_one(k, w):
            k = jax.random.fold_in(k, 0)
            return learner.init(k, select(learner.tuner.init(learner.tuner_key(k)), w))

        init_args = (keys, jax.make_array_from_callback(which.shape, agents, lambda index: np.asarray(which)[index]))
    init = program("init", lambda: jax.jit(jax.vmap(init_one), in_shardings=(agents,) * len(init_args),
                                           out_shardings=agents))

    def evaluate_one(state: Evaluated, k, it):
        return learner.evaluate(state, eval_key(k, it))

    def start_state():
        # runs once per unit: optimising it is not worth its compile time
        state = program("init compiled", lambda: compiled(init, *init_args, fast=True))(*init_args)
        return state if population is None else population.init(state)

    t0 = time.perf_counter()
    like = jax.eval_shape(init, *init_args)  # the learner state, or (learner state, population state):
    like = like if population is None else jax.eval_shape(population.init, like)
    resumed = checkpoint.load(like) if checkpoint is not None else None
    if resumed is None:
        tree = start_state()
        record = Record()
    else:
        leaves, record = resumed
        n_agent_leaves = len(jax.tree.leaves(like if population is None else like[0]))
        shardings = [agents] * n_agent_leaves + [scalar] * (len(leaves) - n_agent_leaves)  # population: replicated
        tree = jax.tree.unflatten(jax.tree.structure(like), [
            jax.make_array_from_callback(leaf.shape, sh, lambda index, leaf=leaf: leaf[index])
            for leaf, sh in zip(leaves, shardings)])
        on_segment(record.done)
    state, pop_state = (tree, None) if population is None else tree
    on_record(record)
    an_int = jax.device_put(jnp.asarray(0, jnp.int32), scalar)  # shape and sharding of the int arguments
    evaluate = shared(("evaluate", len(seed_ids)), lambda: compiled(
        jax.jit(jax.vmap(evaluate_one, in_axes=(0, 0, None)), in_shardings=(agents, agents, scalar),
                out_shardings=agents), evaluated(state), keys, an_int, fast=fast_compile))

    def segment(length):
        def build():  # the first iteration's number is unbatched: asks only when deciding
            iterate = jax.jit(jax.vmap(lambda s, start: learner.iterate(s, length, start), in_axes=(0, None)),
                              in_shardings=(agents, scalar), out_shardings=agents, donate_argnums=0)
            return compiled(iterate, state, an_int, fast=fast_compile)

        return program(("segment", length), build)

    ready = population.ready if population is not None else None
    for length in segments(iterations, eval_every, ready)[len(record.seg_times):]:
        ts = time.perf_counter()
        start = jax.device_put(jnp.asarray(record.done, jnp.int32), scalar)
        state, metrics = segment(length)(state, start)
        metrics = {k: to_host(v) for k, v in metrics.items()}
        done = record.done + length
        reward = None
        if done % eval_every == 0 or done == iterations:
            reward = to_host(evaluate(evaluated(state), keys, jax.device_put(jnp.asarray(done, jnp.int32), scalar)))
        record.add(length, metrics, reward, 0.0)
        if population is not None and population.due(done, iterations):
            state, pop_state, parents, objectives = population.advance(state, pop_state, done, record.metrics())
            record.lineage.append((done, to_host(parents), objectives))
        record.seg_times[-1] = time.perf_counter() - ts
        on_record(record)  # before the checkpoint: a kill between the two leaves no gap in the scalars
        if checkpoint is not None:
            checkpoint.save(state if population is None else (state, pop_state), record)
        on_segment(length)
    out = record.result(t0)
    out["segment_seconds"] = np.asarray(record.seg_times)
    return out


def run_host_unit(learner, tuner, seed_ids: np.ndarray, eval_every: int,
                  on_segment: Callable[[int], None] = lambda k: None,
                  checkpoint: Checkpoint | None = None,
                  on_record: Callable[[Record], None] = lambda record: None) -> dict[str, np.ndarray]:
    """Gymnasium envs: `agents.driver` steps one vector env per agent on the host, with the
    policy, the PPO update and the tuner jitted and vmapped (not sharded). With a
    checkpoint, the learner state and the Record are saved after every segment; a resumed
    unit continues from there with new environments (gymnasium envs cannot be saved:
    the episodes in flight at the kill start over, so a resumed host unit is not
    bit-identical to an uninterrupted one). on_record: as for `run_jax_unit`."""
    keys = host_seed_keys(seed_ids)
    t0 = time.perf_counter()
    states, record = None, Record()
    if checkpoint is not None:
        like = jax.eval_shape(jax.vmap(learner.init), keys)
        resumed = checkpoint.load(like)
        if resumed is not None:
            leaves, record = resumed
            states = jax.tree.unflatten(jax.tree.structure(like), [jax.numpy.asarray(x) for x in leaves])
            on_segment(record.done)
    on_record(record)
    last = [time.perf_counter()]

    def callback(info):
        length = info.iteration - record.done
        now = time.perf_counter()
        record.add(length, info.metrics, info.eval_returns, now - last[0])
        last[0] = now
        on_record(record)  # before the checkpoint, as in run_jax_unit
        if checkpoint is not None:
            checkpoint.save(info.states, record)
        on_segment(length)

    driver.run(learner.config, learner.env, tuner, keys, eval_every=eval_every, callback=callback, states=states)
    out = record.result(t0)
    out["segment_seconds"] = np.asarray(record.seg_times)
    return out
