"""PPO frames per second with each tuner in the loop (1, 4, 16 agents), and agents-per-program scaling.

    python -m experiments.benchmarks.bench_ppo [--quick] [--out FILE]

Brax halfcheetah (spring backend) at the paper's settings: 1000 frames per iteration
(8 envs x 125 steps; max_batch_size 1000, so every method collects and trains on
exactly 1000 frames and the comparison isolates the tuner's cost), 10 epochs of 16
minibatches, actor and critic 3x256 tanh. Per agent count, the programs of all tuners
(TUNERS: fixed, hypercontroller, gp_ucb, pb2, each asking only when deciding) are
compiled first (warm-up call), then timed in interleaved rounds; the best round counts.
Then agents-per-program scaling: one iteration
for 1, 16, 64, 256, 1024 (quick: 1, 32, 1024) vmapped agents with `hypercontroller`, until the device runs
out of memory or an iteration would take longer than `--scaling-budget` seconds (on a
2-core CPU that is after 16 agents, quick: 4; on an H200 all counts ran). Also the gymnasium host
path (HalfCheetah-v4, one agent, env stepped on the host, update and tuner jitted),
first iteration excluded. Writes JSON (default bench_out/ppo.json) atomically.
"""
from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import hcjax
from agents import driver, envs
from agents.ppo import PPOConfig, make_learner
from experiments import deps
from experiments.benchmarks.timing import print_table, write_json_atomic

TUNERS = ("fixed", "hypercontroller", "gp_ucb", "pb2")  # tuners in the loop
SCALING = (1, 16, 64, 256, 1024)  # agents per program, hypercontroller in the loop
QUICK_SCALING = (1, 32, 1024)


def paper_config(num_iterations: int = 1000) -> PPOConfig:
    """The reference code's PPO settings with 1000 frames per iteration."""
    return PPOConfig(num_iterations=num_iterations, num_envs=8, batch_size=1000, max_batch_size=1000,
                     num_minibatches=16, update_epochs=10, hidden_sizes=(256, 256, 256))


def _time_count(env, cfg, n: int, tuners, iters: int, rounds: int) -> list[dict]:
    """Rows for `n` vmapped agents: frames/s of `iters` jitted iterations per tuner
    (see TUNERS).

    Every tuner's program is compiled first (warm-up call, `compile_s`), then all are
    timed in interleaved rounds, so drifts of the machine hit every tuner alike; the
    best round counts. The first iteration's number is passed unbatched, as the study engine
    does, so the tuner asks only on deciding iterations."""
    space = hcjax.ppo_space()
    programs = {}
    for name in tuners:
        learner = make_learner(cfg, env, hcjax.make_tuner(name, space))
        keys = jax.random.split(jax.random.PRNGKey(0), n)
        states = jax.jit(jax.vmap(learner.init))(keys)
        program = jax.jit(jax.vmap(lambda s, start, lr=learner: lr.iterate(s, iters, start), in_axes=(0, None)))
        t0 = time.perf_counter()
        states, metrics = program(states, 0)
        jax.block_until_ready(metrics)
        compile_s = time.perf_counter() - t0
        print(f"agents={n} {name}: compiled + first run {compile_s:.1f} s", flush=True)
        programs[name] = dict(program=program, states=states, best=np.inf, frames=0, compile_s=compile_s, done=iters)
    for _ in range(rounds):
        for p in programs.values():
            t0 = time.perf_counter()
            p["states"], metrics = p["program"](p["states"], p["done"])
            p["done"] += iters
            jax.block_until_ready(metrics)
            p["best"] = min(p["best"], time.perf_counter() - t0)
            p["frames"] = int(np.asarray(metrics["frames"]).sum())
            p["rejected"] = int(np.asarray(metrics["rejected"]).sum())
    rows = [{"env": env.name, "agents": n, "tuner": name, "iterations": iters,
             "frames": p["frames"],
             "seconds": p["best"], "fps": p["frames"] / p["best"], "fps_per_agent": p["frames"] / p["best"] / n,
             "compile_s": p["compile_s"], "rejected": p["rejected"]} for name, p in programs.items()]
    fixed = next((r["fps"] for r in rows if r["tuner"] == "fixed"), None)
    for r in rows:
        if fixed:
            r["ratio_vs_fixed"] = r["fps"] / fixed
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
    return rows


def bench_jax(env, agent_counts, iters: int, rounds: int, tuners=TUNERS) -> list[dict]:
    """One row per (agents, tuner) at the paper's settings (see `_time_count`)."""
    bad = [t for t in tuners if t not in hcjax.available()]
    if bad:
        raise ValueError(f"--tuners {bad}: each must be one of {', '.join(hcjax.available())}")
    cfg = paper_config()
    return [row for n in agent_counts for row in _time_count(env, cfg, n, tuners, iters, rounds)]


def _out_of_memory(err: Exception) -> bool:
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def bench_scaling(env, counts, budget_s: float, measured=()) -> tuple[list[dict], str]:
    """Agents-per-program scaling with `hypercontroller` in the loop: one jitted iteration
    for n vmapped agents, n in `counts` (ascending). Rows already `measured` (same tuner
    and settings, from `bench_jax`) are reused. Stops before a count whose predicted time
    (last time x count ratio, compilation excluded) exceeds `budget_s`, or when the device
    runs out of memory; returns (rows, why it stopped)."""
    cfg = paper_config()
    known = {r["agents"]: r for r in measured if r["tuner"] == "hypercontroller"}
    rows, last, stop = [], None, f"all counts up to {max(counts)} ran"
    for n in sorted(set(counts) | set(known)):
        if last is not None and last["seconds_per_iteration"] * n / last["agents"] > budget_s:
            stop = f"stopped before {n} agents: predicted over the {budget_s:.0f} s budget per iteration"
            break
        if n in known:
            row = known[n]
        else:
            try:
                row = _time_count(env, cfg, n, ("hypercontroller",), 1, 1)[0]
            except Exception as err:  # noqa: BLE001 - only out-of-memory ends the scan quietly
                if not _out_of_memory(err):
                    raise
                stop = f"out of device memory at {n} agents"
                break
        rows.append({"agents": n, "frames_per_iteration": row["frames"] // row["iterations"],
                     "seconds_per_iteration": row["seconds"] / row["iterations"], "fps": row["fps"],
                     "fps_per_agent": row["fps_per_agent"], "compile_s": row["compile_s"]})
        last = rows[-1]
    return rows, stop


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
    parser.add_argument("--scaling", type=int, nargs="*", default=None,
                        help="agent counts of the scaling scan, hypercontroller only (default 1 16 64 256 1024; "
                             "quick 1 32 1024; none to skip)")
    parser.add_argument("--scaling-budget", type=float, default=None,
                        help="seconds one scaling iteration may take (default 60; quick 30)")
    args = parser.parse_args(argv)
    agent_counts = tuple(args.agents) if args.agents else ((1, 4) if args.quick else (1, 4, 16))
    iters, rounds, host_iters = (2, 2, 3) if args.quick else (5, 3, 6)
    t0 = time.perf_counter()
    env = envs.make("halfcheetah", backend=args.backend)
    rows = bench_jax(env, agent_counts, iters, rounds, tuple(args.tuners))
    columns = ["env", "agents", "tuner", "frames", "seconds", "fps", "fps_per_agent", "ratio_vs_fixed",
               "compile_s"]
    print_table(rows, columns)
    ratios = {r["agents"]: r["ratio_vs_fixed"] for r in rows
              if r["tuner"] == "hypercontroller" and "ratio_vs_fixed" in r}
    for n, ratio in ratios.items():
        print(f"agents={n}: hypercontroller/fixed frames/s = {ratio:.3f} (target >= 0.98: "
              f"{'met' if ratio >= 0.98 else 'NOT met'})")
    budget = args.scaling_budget or (30.0 if args.quick else 60.0)
    counts = args.scaling if args.scaling is not None else (QUICK_SCALING if args.quick else SCALING)
    scaling, scaling_stop = bench_scaling(env, counts, budget, rows) if counts else ([], "skipped")
    if scaling:
        print_table(scaling, ["agents", "frames_per_iteration", "seconds_per_iteration", "fps", "fps_per_agent",
                              "compile_s"])
        print(f"scaling: {scaling_stop}")
    host = None if args.skip_host else bench_host("HalfCheetah-v4", host_iters)
    if host is not None:
        print_table([host], ["env", "path", "agents", "tuner", "frames", "seconds", "fps"])
    report = {"benchmark": "ppo", "device": deps.devices(), "quick": args.quick,
              "settings": {"frames_per_iteration": 1000, "num_envs": 8, "update_epochs": 10, "num_minibatches": 16,
                           "hidden_sizes": [256, 256, 256], "brax_backend": args.backend, "iterations_timed": iters,
                           "rounds": rounds},
              "rows": rows, "scaling": scaling, "scaling_stop": scaling_stop, "host": [host] if host else [],
              "hypercontroller_over_fixed": {str(k): v for k, v in ratios.items()},
              "wall_s": time.perf_counter() - t0}
    write_json_atomic(args.out, report)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
