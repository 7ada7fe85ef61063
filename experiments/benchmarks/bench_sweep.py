"""The sweep's cost: seconds per configuration and seed per 1e5 CartPole steps, one vmapped program.

    python -m experiments.benchmarks.bench_sweep [--quick] [--out FILE]

A study's `sweep` (experiments/study/protocol.py) trains N static configurations x k seeds as
one vmapped program of PPO with the `schedule` tuner. Here: gymnax CartPole-v1 at ARLBench's
PPO settings for it (examples/configs of github.com/automl/arlbench: 8 envs x 128 steps = 1024
frames per iteration, 10 epochs of minibatches of 64, i.e. 16, a 2x64 tanh network), the
configurations drawn from the `cpu_learn` space but its batch size (fixed at 1024 here). Per
agent count n (quick: 1 and 16; else 1, 16 and 96 = ARLBench's 32 configurations x 3 seeds),
the segment program is compiled (a first
call of `iterations` iterations), then timed over `rounds` calls (the median counts): the row's
`s_per_run_1e5` is the segment's seconds / n x 1e5 / (iterations x 1024), the seconds one
configuration on one seed costs per 1e5 environment steps inside the batch (compilation
excluded; `compile_s` beside it). ARLBench reports about 5.5 s per configuration for its JAX
PPO on CartPole (1e5 steps). Writes JSON (default bench_out/sweep.json) atomically.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from agents.ppo import PPOConfig, make_learner
from experiments import deps
from experiments.benchmarks.timing import print_table, write_json_atomic
from experiments.study.plan import make_hyperparameter
from experiments.study.presets import LEARNING_SPACE
from hcjax import Space
from hcjax.tuners.schedule import schedule
from hcjax.tuners.stacked import select

FRAMES = 8 * 128  # per iteration: ARLBench's 8 envs x 128 steps
STEPS = 100_000


def measure(n: int, iterations: int, rounds: int) -> dict:
    """One row: n agents, each its own configuration of the space (row i of a schedule)."""
    space = Space(make_hyperparameter(entry) for entry in LEARNING_SPACE if entry["name"] != "batch_size")
    config = PPOConfig(num_envs=8, batch_size=FRAMES, max_batch_size=FRAMES, num_minibatches=FRAMES // 64,
                       update_epochs=10, hidden_sizes=(64, 64), ent_coef=0.0, max_grad_norm=0.5)
    tuner = schedule(space, space.sample(n, 0)[:, None, :])
    learner = make_learner(config, "CartPole-v1", tuner)

    def init(key, row):
        return learner.init(key, select(tuner.init(key), row))

    states = jax.jit(jax.vmap(init))(jax.random.split(jax.random.PRNGKey(0), n), jnp.arange(n, dtype=jnp.int32))
    segment = jax.jit(jax.vmap(lambda s: learner.iterate(s, iterations, 0)))
    t0 = time.perf_counter()
    states, metrics = jax.block_until_ready(segment(states))
    compile_s = time.perf_counter() - t0
    seconds = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        states, metrics = jax.block_until_ready(segment(states))
        seconds.append(time.perf_counter() - t0)
    frames = int(np.asarray(metrics["frames"]).sum())
    assert frames == n * iterations * FRAMES, frames
    median = statistics.median(seconds)
    return {"agents": n, "iterations": iterations, "seconds": median, "compile_s": compile_s,
            "fps": frames / median, "s_per_run_1e5": median / n * STEPS / (iterations * FRAMES)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 and 16 agents, 5 iterations, 3 rounds")
    parser.add_argument("--out", default="bench_out/sweep.json")
    args = parser.parse_args(argv)
    counts, iterations, rounds = ((1, 16), 5, 3) if args.quick else ((1, 16, 96), 10, 3)
    t0 = time.perf_counter()
    rows = [measure(n, iterations, rounds) for n in counts]
    print_table(rows, ["agents", "iterations", "seconds", "fps", "s_per_run_1e5", "compile_s"])
    report = {"benchmark": "sweep", "device": deps.devices(), "quick": args.quick, "rows": rows,
              "arlbench_reported_s_per_configuration": 5.5, "load": os.getloadavg()[0],
              "wall_s": time.perf_counter() - t0}
    write_json_atomic(args.out, report)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
