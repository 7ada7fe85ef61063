"""The own-training-loop guide's examples: tuned vs untuned wall time, 4 seeds vmapped.

    python -m experiments.benchmarks.bench_own_loop [--quick] [--examples ppo dqn] [--out FILE]

Two pairs of scripts (docs/own-training-loop.md), each at the guide's settings:
- ppo: examples/ppo_cartpole.py (untuned) and examples/ppo_cartpole_tuned.py (a
  HyperController per seed tuning the learning rate and the clip range, deciding every 4
  updates; 4 envs x 128 steps per update, 4 epochs of 4 minibatches), 2e5 steps per seed;
- dqn: examples/dqn_cartpole.py (untuned, a greedy evaluation every 500 updates) and
  examples/dqn_cartpole_tuned.py (a HyperController per seed tuning the learning rate and
  the exploration floor, telling the greedy return's change and deciding at each
  evaluation, inside a lax.cond), 5e4 steps per seed.
Each program has 4 seeds vmapped in one jitted call; the tuned scripts take a control flag per
seed (hcjax.control), all False here: every seed tuned, the flag batched as in the scripts' runs.
Both of a pair are compiled first (warm-up call), then timed in interleaved rounds (untuned,
tuned, untuned, ...; the order alternates between rounds), each round one whole run of each. Reported per pair:
per-round times, and the median and range of the per-round ratio tuned / untuned
(target <= 1.02) and of the process CPU time (all threads: the work done, less
sensitive to a shared machine's load), with the load average before and after. Writes JSON
(default bench_out/own_loop.json) atomically.
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
import numpy as np

from experiments.benchmarks.timing import print_table, write_json_atomic

TARGET_RATIO = 1.02
# pair name -> (untuned script, tuned script, steps per seed, steps per seed with --quick)
PAIRS = {"ppo": ("ppo_cartpole", "ppo_cartpole_tuned", 2e5, 25600),
         "dqn": ("dqn_cartpole", "dqn_cartpole_tuned", 5e4, 1e4)}
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


def timed(fn, rngs) -> tuple[float, float]:
    """(wall seconds, process CPU seconds: every thread of this process) of one blocked call.
    On a shared CPU the CPU time counts this program's work, not the time it waited."""
    start, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn(rngs))
    return time.perf_counter() - start, time.process_time() - cpu


def measure(pair: str, config: dict, seeds: int, rounds: int) -> dict:
    """Interleaved rounds of the untuned and tuned programs of `pair` -> per-round times and ratios."""
    untuned, tuned = (load_example(name) for name in PAIRS[pair][:2])
    tuned_train = tuned.make_train(config)  # train(rng, control): every seed tuned here, none a control
    tuned_agents = np.zeros(seeds, bool)  # batched, as in the scripts' own runs with a control group
    tuned_program = jax.jit(jax.vmap(tuned_train))  # the flags an argument, as the scripts (and tests) call it
    programs = {"untuned": jax.jit(jax.vmap(untuned.make_train(config))),
                "tuned": lambda rngs: tuned_program(rngs, tuned_agents)}
    rngs = jax.random.split(jax.random.PRNGKey(0), seeds)
    compile_s = {name: timed(fn, rngs)[0] for name, fn in programs.items()}  # compile + first run
    times, cpu_times = {name: [] for name in programs}, {name: [] for name in programs}
    for r in range(rounds):
        order = list(programs) if r % 2 == 0 else list(programs)[::-1]
        for name in order:
            wall, cpu = timed(programs[name], rngs)
            times[name].append(wall)
            cpu_times[name].append(cpu)
    ratios = [t / u for t, u in zip(times["tuned"], times["untuned"])]
    cpu_ratios = [t / u for t, u in zip(cpu_times["tuned"], cpu_times["untuned"])]
    return {"times_s": times, "cpu_times_s": cpu_times, "first_call_s": compile_s, "ratios": ratios,
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "cpu_ratios": cpu_ratios, "cpu_ratio_median": statistics.median(cpu_ratios),
            "cpu_ratio_min": min(cpu_ratios), "cpu_ratio_max": max(cpu_ratios)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (ppo 2.56e4, dqn 1e4 per seed), 5 rounds")
    parser.add_argument("--examples", nargs="+", choices=sorted(PAIRS), default=list(PAIRS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 9; quick 5)")
    parser.add_argument("--timesteps", type=float, default=None,
                        help="steps per seed for every pair (default ppo 2e5, dqn 5e4; quick 2.56e4, 1e4)")
    parser.add_argument("--out", default="bench_out/own_loop.json")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 9)
    report = {"seeds": args.seeds, "rounds": rounds, "target_ratio": TARGET_RATIO, "cpu_count": os.cpu_count(),
              "device": str(jax.devices()[0]), "machine": platform.platform(), "jax": jax.__version__, "examples": {}}
    rows = []
    for pair in args.examples:
        untuned_name, _, steps, quick_steps = PAIRS[pair]
        timesteps = args.timesteps or (quick_steps if args.quick else steps)
        config = dict(load_example(untuned_name).CONFIG, TOTAL_TIMESTEPS=timesteps)
        load_before = os.getloadavg()
        result = measure(pair, config, args.seeds, rounds)
        load_after = os.getloadavg()
        rows += [{"program": f"{pair} {name}", "median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
                  "first_call_s": result["first_call_s"][name]} for name, ts in result["times_s"].items()]
        rows.append({"program": f"{pair} ratio tuned/untuned", "median_s": result["ratio_median"],
                     "min_s": result["ratio_min"], "max_s": result["ratio_max"]})
        rows.append({"program": f"{pair} CPU-time ratio", "median_s": result["cpu_ratio_median"],
                     "min_s": result["cpu_ratio_min"], "max_s": result["cpu_ratio_max"]})
        report["examples"][pair] = {"timesteps_per_seed": timesteps, "config": config, "load_average_before":
                                    load_before, "load_average_after": load_after, **result}
    print_table(rows, ["program", "median_s", "min_s", "max_s", "first_call_s"])
    for pair, result in report["examples"].items():
        print(f"{pair}: ratio median {result['ratio_median']:.3f} (range {result['ratio_min']:.3f}-"
              f"{result['ratio_max']:.3f}), target <= {TARGET_RATIO}; CPU-time ratio median "
              f"{result['cpu_ratio_median']:.3f} ({result['cpu_ratio_min']:.3f}-{result['cpu_ratio_max']:.3f}); "
              "load average "
              f"{result['load_average_before'][0]:.2f} before, {result['load_average_after'][0]:.2f} after, "
              f"{os.cpu_count()} CPUs, {jax.devices()[0].platform}")
    write_json_atomic(args.out, report)
    return report

if __name__ == "__main__":
    main()
