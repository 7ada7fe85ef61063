"""The own-training-loop guide's example: tuned vs untuned wall time, 4 seeds vmapped.

    python -m experiments.benchmarks.bench_own_loop [--quick] [--out FILE]

examples/ppo_cartpole.py (untuned) and examples/ppo_cartpole_tuned.py (a HyperController
per seed tuning the learning rate and the clip range, deciding every 4 updates) at the
guide's settings (4 envs x 128 steps per update, 4 epochs of 4 minibatches), 4 seeds
vmapped in one jitted program each. Both are compiled first (warm-up call), then timed
in interleaved rounds (untuned, tuned, untuned, ...; the order alternates between
rounds), each round one whole run of each. Reported: per-round times, and the median
and range of the per-round ratio tuned / untuned (target <= 1.02), with the machine's
load average before and after. Writes JSON (default bench_out/own_loop.json) atomically.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import time
from pathlib import Path
from types import ModuleType

import jax

from experiments.benchmarks.timing import print_table, write_json_atomic

TARGET_RATIO = 1.02
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # scripts of the source checkout, not a package


def load_example(name: str) -> ModuleType:
    """examples/<name>.py of the source checkout, loaded by path (they are scripts a user
    copies, not installed modules); FileNotFoundError outside a checkout."""
    path = EXAMPLES / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"bench_own_loop needs the examples of a source checkout: {path} is missing")
    spec = importlib.util.spec_from_file_location(f"hcjax_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn, rngs) -> float:
    """Seconds of one blocked call."""
    start = time.perf_counter()
    jax.block_until_ready(fn(rngs))
    return time.perf_counter() - start


def measure(config: dict, seeds: int, rounds: int) -> dict:
    """Interleaved rounds of the untuned and tuned programs -> per-round times and ratios."""
    untuned, tuned = load_example("ppo_cartpole"), load_example("ppo_cartpole_tuned")
    programs = {"untuned": jax.jit(jax.vmap(untuned.make_train(config))),
                "tuned": jax.jit(jax.vmap(tuned.make_train(config)))}
    rngs = jax.random.split(jax.random.PRNGKey(0), seeds)
    compile_s = {name: timed(fn, rngs) for name, fn in programs.items()}  # compile + first run
    times = {name: [] for name in programs}
    for r in range(rounds):
        order = list(programs) if r % 2 == 0 else list(programs)[::-1]
        for name in order:
            times[name].append(timed(programs[name], rngs))
    ratios = [t / u for t, u in zip(times["tuned"], times["untuned"])]
    return {"times_s": times, "first_call_s": compile_s, "ratios": ratios,
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2.5e4 steps per seed, 5 rounds")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 9; quick 5)")
    parser.add_argument("--timesteps", type=float, default=None, help="steps per seed (default 2e5; quick 2.56e4)")
    parser.add_argument("--out", default="bench_out/own_loop.json")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 9)
    timesteps = args.timesteps or (25600 if args.quick else 2e5)
    config = dict(load_example("ppo_cartpole").CONFIG, TOTAL_TIMESTEPS=timesteps)
    load_before = os.getloadavg()
    result = measure(config, args.seeds, rounds)
    load_after = os.getloadavg()
    rows = [{"program": name, "median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
             "first_call_s": result["first_call_s"][name]} for name, ts in result["times_s"].items()]
    rows.append({"program": "ratio tuned/untuned", "median_s": result["ratio_median"], "min_s": result["ratio_min"],
                 "max_s": result["ratio_max"]})
    print_table(rows, ["program", "median_s", "min_s", "max_s", "first_call_s"])
    print(f"ratio median {result['ratio_median']:.3f} (range {result['ratio_min']:.3f}-{result['ratio_max']:.3f}), "
          f"target <= {TARGET_RATIO}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after, "
          f"{os.cpu_count()} CPUs, {jax.devices()[0].platform}")
    report = {"seeds": args.seeds, "rounds": rounds, "timesteps_per_seed": timesteps, "config": config,
              "target_ratio": TARGET_RATIO, "load_average_before": load_before, "load_average_after": load_after,
              "cpu_count": os.cpu_count(), "device": str(jax.devices()[0]), "machine": platform.platform(),
              "jax": jax.__version__, **result}
    write_json_atomic(args.out, report)
    return report


if __name__ == "__main__":
    main()
