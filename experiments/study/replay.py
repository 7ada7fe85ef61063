"""Tuning time (what the paper's Figure 1 puts on its x-axis, "wall-clock time spent in
hyperparameter search"), measured by replaying a unit's tuner on the host CPU.

Inside the run the tuner is fused into the compiled iteration, so it cannot be timed there.
After a unit finishes, its tuner is replayed on the host CPU with the same number of agents
(vmapped) and the objectives the run actually produced, in the run's order (tell from the
second iteration on, ask every `tune_every` iterations), so its buffers have exactly the
run's fill at every step; each iteration's jitted tell(+ask) call is timed with
`block_until_ready` after a warm-up (compilation excluded). `tuner_time[t]` is that wall
time for all agents of the unit together: per-agent cost is `tuner_time / seeds` on a
device that runs agents in parallel, and at most that times the seed count on a serial one.
A population method's init and steps are replayed the same way.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.study.programs import built_anew


def measure_tuner_time(tuner, objectives: np.ndarray, tune_every: int, seed: int = 0,
                       program: Callable[[Hashable, Callable[[], Any]], Any] = built_anew) -> np.ndarray:
    """(T,) seconds of host ask+tell for all agents at each iteration of the run.

    objectives: (n, T) the objectives the run told (iteration 0 tells nothing, as in
    the PPO loop); asks happen at iterations t with (t + 1) % tune_every == 0, and the
    initial ask is charged to iteration 0. Runs on the CPU device, jitted and vmapped
    over the n agents; compilation is excluded by a warm-up on a copy of the state.
    program: as for `experiments.study.loops.run_jax_unit` (keeps the jitted tuner calls).
    """
    cpu = jax.devices("cpu")[0]
    n, T = objectives.shape
    with jax.default_device(cpu):
        keys = jax.random.split(jax.random.key(seed), (T + 1) * n).reshape(T + 1, n)
        x = jnp.asarray(np.asarray(objectives, np.float32))
        init, ask, tell = program("tuner replay", lambda: tuple(
            jax.jit(jax.vmap(f)) for f in (tuner.init, tuner.ask, tuner.tell)))
        state = init(jax.random.split(jax.random.key(seed + 1), n))
        # warm-up: compile both programs on a throwaway state
        jax.block_until_ready(ask(state, keys[0]))
        jax.block_until_ready(tell(state, x[:, 0]))
        columns = [x[:, t] for t in range(T)]
        jax.block_until_ready(columns)
        times = np.zeros(T)
        t0 = time.perf_counter()
        state, _ = ask(state, keys[0])
        jax.block_until_ready(state)
        times[0] = time.perf_counter() - t0
        for t in range(T):
            do_tell, do_ask = t >= 1, (t + 1) % tune_every == 0
            t0 = time.perf_counter()
            if do_tell:
                state = tell(state, columns[t])
            if do_ask:
                state, _ = ask(state, keys[t + 1])
            jax.block_until_ready(state)
            times[t] += time.perf_counter() - t0
    return times


def measure_population_time(population, iterations: np.ndarray, objectives: np.ndarray, T: int,
                            program: Callable[[Hashable, Callable[[], Any]], Any] = built_anew) -> np.ndarray:
    """(T,) seconds of the population's init (charged to iteration 0) and of each of its
    steps (charged to the iteration it followed), replayed on the host CPU with the
    run's objectives (n, K), jitted, compilation excluded by a warm-up; program: as for
    `measure_tuner_time`."""
    n = objectives.shape[0]
    times = np.zeros(T)
    with jax.default_device(jax.devices("cpu")[0]):
        init, step = program("population replay", lambda: (jax.jit(population.init, static_argnums=1),
                                                           jax.jit(population.step)))
        key = jax.random.PRNGKey(0)
        state, _ = jax.block_until_ready(init(key, n))  # warm-up (compiles)
        cols = [jnp.asarray(objectives[:, k], jnp.float32) for k in range(objectives.shape[1])]
        if cols:
            jax.block_until_ready(step(state, key, cols[0]))
        t0 = time.perf_counter()
        state, _ = jax.block_until_ready(init(key, n))
        times[0] = time.perf_counter() - t0
        for k, it in enumerate(iterations):
            t0 = time.perf_counter()
            state, _, _ = jax.block_until_ready(step(state, jax.random.fold_in(key, int(it)), cols[k]))
            times[min(int(it), T) - 1] += time.perf_counter() - t0
    return times
