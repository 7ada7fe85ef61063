"""PPO frames per second with each tuner in the loop, for 1, 4 and 16 vmapped agents.

    python -m experiments.bench_ppo [--quick] [--out FILE]

Brax halfcheetah (spring backend) at the paper's settings: 1000 frames per iteration
(8 envs x 125 steps; max_batch_size 1000, so every method collects and trains on
exactly 1000 frames and the comparison isolates the tuner's cost), 10 epochs of 16
minibatches, actor and critic 3x256 tanh. Per agent count, the programs of all tuners
(`fixed`, `hypercontroller`, `gp_ucb`) are compiled first (warm-up call), then timed in
interleaved rounds; the best round counts. Also the gymnasium host path (HalfCheetah-v4,
one agent, env stepped on the host, update and tuner jitted), first iteration excluded.
Writes JSON (default bench_out/ppo.json) atomically.
"""
from __future__ import annotations

import argparse
import os
import time

# Defensive on small CPU hosts: XLA's CPU runtime has been seen to wedge (all threads
# idle) on vmapped programs; single-threaded Eigen and synchronous dispatch are the known
# workarounds (the wedge we hit, a batched LAPACK QR in vmapped orthogonal init, is fixed
# in agents.networks). The flag only acts if JAX has not initialised its backend yet.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import numpy as np

import hcjax  # noqa: E402
from agents import driver, envs
from agents.ppo import PPOConfig, make_learner
from experiments.timing import device_description, print_table, write_json_atomic

TUNERS = ("fixed", "hypercontroller", "gp_ucb")


def paper_config(num_iterations: int = 1000) -> PPOConfig:
    """The reference code's PPO settings with 1000 frames per iteration."""
    return PPOConfig(num_iterations=num_iterations, num_envs=8, batch_size=1000, max_batch_size=1000,
                     num_minibatches=16, update_epochs=10, hidden_sizes=(256, 256, 256))


def bench_jax(env_name: str, agent_counts, iters: int, rounds: int, backend: str, tuners=TUNERS) -> list[dict]:
    """One row per (agents, tuner): frames/s of `iters` jitted iterations for all agents."""
    env = envs.make(env_name, backend=backend)
    cfg = paper_config()
    space = hcjax.ppo_space()
    available = hcjax.available()
    rows = []
    for n in agent_counts:
        programs = {}
        for name in tuners:
            if name not in available:
                print(f"skip {name}: not registered with hcjax.make_tuner (available: {list(available)})")
                continue
            learner = make_learner(cfg, env, hcjax.make_tuner(name, space))
            keys = jax.random.split(jax.random.PRNGKey(0), n)
            states = jax.jit(jax.vmap(learner.init))(keys)
            program = jax.jit(jax.vmap(lambda s, lr=learner: lr.iterate(s, iters)))
            t0 = time.perf_counter()
            states, metrics = program(states)
            jax.block_until_ready(metrics)
            compile_s = time.perf_counter() - t0
            print(f"agents={n} {name}: compiled + first run {compile_s:.1f} s", flush=True)
            programs[name] = dict(program=program, states=states, best=np.inf, frames=0, compile_s=compile_s)
        for _ in range(rounds):  # interleaved, so drifts of the machine hit every tuner alike
            for name, p in programs.items():
                t0 = time.perf_counter()
                p["states"], metrics = p["program"](p["states"])
                jax.block_until_ready(metrics)
                sec = time.perf_counter() - t0
                p["best"] = min(p["best"], sec)
                p["frames"] = int(np.asarray(metrics["frames"]).sum())
                p["rejected"] = int(np.asarray(metrics["rejected"]).sum())
        for name, p in programs.items():
            rows.append({"env": env_name, "agents": n, "tuner": name, "iterations": iters,
                         "frames": p["frames"], "seconds": p["best"], "fps": p["frames"] / p["best"],
                         "fps_per_agent": p["frames"] / p["best"] / n, "compile_s": p["compile_s"],
                         "rejected": p["rejected"]})
        fixed = next((r["fps"] for r in rows if r["agents"] == n and r["tuner"] == "fixed"), None)
        for r in rows:
            if r["agents"] == n and fixed:
                r["ratio_vs_fixed"] = r["fps"] / fixed
        for r in rows:
            if r["agents"] == n:
                print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
    return rows


def bench_host(env_name: str, iters: int, tuner_name: str = "hypercontroller") -> dict:
    """Frames/s of the gymnasium host path, one agent, iterations 2..iters (1 = compile)."""
    env = envs.make(env_name)
    cfg = paper_config(num_iterations=iters)
    tuner = hcjax.make_tuner(tuner_name, hcjax.ppo_space())
    marks = []
    res = driver.run(cfg, env, tuner, jax.random.split(jax.random.PRNGKey(0), 1), eval_every=0, segment=1,
                     callback=lambda info: marks.append(time.perf_counter()))
    frames = int(res.metrics["frames"][0, 1:].sum())
    sec = marks[-1] - marks[0]
    return {"env": env_name, "path": "gymnasium host", "agents": 1, "tuner": tuner_name, "iterations": iters - 1,
            "frames": frames, "seconds": sec, "fps": frames / sec}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 and 4 agents, fewer iterations")
    parser.add_argument("--out", default="bench_out/ppo.json")
    parser.add_argument("--backend", default="spring", help="Brax backend (default spring)")
    parser.add_argument("--agents", type=int, nargs="+", default=None, help="agent counts (default 1 4 16; quick 1 4)")
    parser.add_argument("--tuners", nargs="+", default=list(TUNERS), help="tuners in the loop")
    parser.add_argument("--skip-host", action="store_true", help="skip the gymnasium host path")
    args = parser.parse_args(argv)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    agent_counts = tuple(args.agents) if args.agents else ((1, 4) if args.quick else (1, 4, 16))
    iters, rounds, host_iters = (2, 2, 3) if args.quick else (5, 3, 6)
    t0 = time.perf_counter()
    rows = bench_jax("halfcheetah", agent_counts, iters, rounds, args.backend, tuple(args.tuners))
    columns = ["env", "agents", "tuner", "frames", "seconds", "fps", "fps_per_agent", "ratio_vs_fixed", "compile_s"]
    print_table(rows, columns)
    ratios = {r["agents"]: r["ratio_vs_fixed"] for r in rows if r["tuner"] == "hypercontroller" and "ratio_vs_fixed" in r}
    for n, ratio in ratios.items():
        print(f"agents={n}: hypercontroller/fixed frames/s = {ratio:.3f} (target >= 0.98: "
              f"{'met' if ratio >= 0.98 else 'NOT met'})")
    host = None if args.skip_host else bench_host("HalfCheetah-v4", host_iters)
    if host is not None:
        print_table([host], ["env", "path", "agents", "tuner", "frames", "seconds", "fps"])
    report = {"benchmark": "ppo", "device": device_description(), "quick": args.quick,
              "settings": {"frames_per_iteration": 1000, "num_envs": 8, "update_epochs": 10, "num_minibatches": 16,
                           "hidden_sizes": [256, 256, 256], "brax_backend": args.backend, "iterations_timed": iters,
                           "rounds": rounds},
              "rows": rows, "host": [host] if host else [],
              "hypercontroller_over_fixed": {str(k): v for k, v in ratios.items()},
              "wall_s": time.perf_counter() - t0}
    write_json_atomic(args.out, report)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
