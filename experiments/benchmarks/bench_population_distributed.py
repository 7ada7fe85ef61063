"""One population step with exploit over a sharded agent axis: one process of 2 devices
against 2 processes of 1 device each (jax.distributed, gloo on the CPU).

    python -m experiments.benchmarks.bench_population_distributed [--quick] [--agents 64 256 1024]
        [--rounds 3] [--repeats 5] [--gather-max 256] [--out FILE]

The agents are bench_population's HalfCheetah-sized PPO agents (3.1 MB each: params,
Adam's state, observation statistics), their agent axis sharded over the mesh of every
process's devices (`hcjax.population.agent_mesh`). Timed per call, compiled, for each n:

- step+exploit_sharded: `make_population("pbt", ppo_space()).step` and
  `hcjax.population.exploit_sharded(state, parents, mesh, donors=m)` in one jitted call,
  the state donated (m = quantile_size(n, 0.25) agents replaced; the donors' rows move by
  one all-reduce of m rows);
- step+gather (n <= --gather-max): the step and `hcjax.exploit`, the result constrained
  to the agent sharding; XLA all-gathers every agent's rows to every device, so a device
  holds the whole population (at 1024 agents, 3.2 GB per device: more than this benchmark
  may take on a shared 24 GiB machine).

Rounds are interleaved: each round starts the one-process run and the two-process run
(the order alternating), each a fresh set of processes that times every n `--repeats`
times after two warm-up calls. Reported per n and layout: the median and range (ms) of
every timed call of every round, and ms per replaced agent, beside Ray Tune's measured cost
of one PBT perturbation (1.1 s, docs/benchmarks.md "Population steps"; not rerun here).
The load (`os.getloadavg`) is recorded before and after. Prints a table and writes JSON
atomically.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

import hcjax
from experiments import deps
from experiments.benchmarks.bench_population import agent_state, nbytes
from experiments.benchmarks.timing import print_table, time_calls, write_json_atomic
from hcjax.population import agent_mesh, agent_sharding, exploit_sharded, quantile_size, replicate, shard_agents

RAY_PERTURBATION_S = 1.1  # docs/benchmarks.md "Population steps": Ray Tune 2.60, 4 trials, this machine
LAYOUTS = {"1 process x 2 devices": (1, 2), "2 processes x 1 device": (2, 1)}
ROOT = Path(__file__).resolve().parents[2]


def time_agents(n: int, repeats: int, gather_max: int, mesh) -> dict:
    """Seconds of each timed call for n agents on this process's share of `mesh`."""
    sharded, pbt, m = agent_sharding(mesh), hcjax.make_population("pbt", hcjax.ppo_space()), quantile_size(n, 0.25)
    keys = shard_agents(np.asarray(jax.random.split(jax.random.PRNGKey(0), n)), mesh)
    make_states = jax.jit(jax.vmap(agent_state), out_shardings=sharded)
    pop_state, _ = jax.jit(pbt.init, static_argnums=1)(replicate(np.asarray(jax.random.PRNGKey(1)), mesh), n)
    rng = np.random.default_rng(n)
    objectives = [shard_agents(rng.normal(size=n).astype(np.float32), mesh) for _ in range(4)]
    step_keys = [replicate(np.asarray(jax.random.PRNGKey(10 + i)), mesh) for i in range(4)]
    calls = iter(range(10 ** 9))

    def step_args(state):
        i = next(calls) % 4
        return pop_state, state, step_keys[i], objectives[i]

    def step_exploit(ps, s, key, o):
        ps, values, parents = pbt.step(ps, key, o)
        return ps, values, parents, exploit_sharded(s, parents, mesh, donors=m)

    def step_gather(ps, s, key, o):
        ps, values, parents = pbt.step(ps, key, o)
        return ps, values, parents, jax.lax.with_sharding_constraint(hcjax.exploit(s, parents), sharded)

    first = make_states(keys)
    row = {"agents": n, "state_MB": nbytes(first) / 2 ** 20, "replaced": m}
    fused = jax.jit(step_exploit, donate_argnums=1)  # each call continues from the last one's state
    row["step+exploit_sharded"] = time_calls(fused, lambda out: step_args(first if out is None else out[3]), repeats)
    if n <= gather_max:
        first = make_states(keys)
        row["step+gather"] = time_calls(jax.jit(step_gather), lambda out: step_args(first), repeats)
    return row


def worker(agents: list[int], repeats: int, gather_max: int) -> dict:
    """Time every n on this process's share of the mesh (after jax.distributed, if any)."""
    rows = [time_agents(n, repeats, gather_max, agent_mesh()) for n in agents]
    return {"rows": rows, "process_count": jax.process_count(), "device_count": jax.device_count()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_layout(processes: int, devices: int, args, out: Path, timeout: float) -> dict:
    """Start the worker as `processes` processes of `devices` CPU devices each; every process is
    killed (its session) if one fails or time runs out. -> process 0's result."""
    port = free_port()
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    base = [sys.executable, "-m", "experiments.benchmarks.bench_population_distributed", "--worker", str(out),
            "--agents", *map(str, args.agents), "--repeats", str(args.repeats), "--gather-max", str(args.gather_max)]
    procs = []
    try:
        for i in range(processes):
            extra = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(processes), "--process-id",
                     str(i)] if processes > 1 else []
            procs.append(subprocess.Popen(base + extra, cwd=ROOT, env=env, start_new_session=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    finally:
        logs = communicate_all(procs, timeout)
    for p, log in zip(procs, logs):
        if p.returncode != 0:
            raise RuntimeError(f"a worker exited with status {p.returncode}:\n{log[-3000:]}")
    return json.loads(out.read_text())


def communicate_all(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """The output of every process (each started with start_new_session=True and its output
    piped), waiting at most `timeout` seconds for each; if one is still running after that,
    or anything fails, every process still running is killed with its whole session before
    this returns or raises. Nothing outlives the call."""
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()


def summarise(rounds: list[dict]) -> list[dict]:
    """Per n and layout: the median and range (ms) of every timed call of every round."""
    table = []
    for i, n in enumerate(rounds[0][next(iter(LAYOUTS))]["rows"]):
        row = {"agents": n["agents"], "state_MB": n["state_MB"], "replaced": n["replaced"]}
        for layout in LAYOUTS:
            for timed in ("step+exploit_sharded", "step+gather"):
                calls = [t * 1e3 for r in rounds for t in r[layout]["rows"][i].get(timed, [])]
                if calls:
                    row[f"{layout}: {timed} ms"] = statistics.median(calls)
                    row[f"{layout}: {timed} range"] = f"{min(calls):.0f}-{max(calls):.0f}"
            row[f"{layout}: ms per replaced agent"] = row[f"{layout}: step+exploit_sharded ms"] / n["replaced"]
        row["Ray Tune ms per perturbation"] = RAY_PERTURBATION_S * 1e3
        table.append(row)
    return table


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 and 256 agents, one round of 3 calls")
    parser.add_argument("--agents", type=int, nargs="+", default=None, help="default 64 256 1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gather-max", type=int, default=256, help="time hcjax.exploit's gather up to this n")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one layout's run")
    parser.add_argument("--out", default="bench_out/population_distributed.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run as a worker, write here
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.repeats = 1, 3
    args.agents = args.agents or ([64, 256] if args.quick else [64, 256, 1024])
    if any(n % 2 for n in args.agents):
        parser.error(f"--agents must be even (sharded over 2 devices), got {args.agents}")
    if args.worker:
        if args.num_processes:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(args.coordinator, num_processes=args.num_processes,
                                       process_id=args.process_id)
        result = worker(args.agents, args.repeats, args.gather_max)
        if jax.process_index() == 0:
            write_json_atomic(args.worker, result)
        return None

    load_before, rounds = os.getloadavg(), []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(LAYOUTS) if r % 2 == 0 else list(reversed(LAYOUTS))  # interleaved, alternating
            result = {}
            for layout in order:
                processes, devices = LAYOUTS[layout]
                result[layout] = run_layout(processes, devices, args, Path(tmp) / f"{r}_{processes}.json",
                                            args.timeout)
                print(f"round {r + 1}/{args.rounds}: {layout} done", flush=True)
            rounds.append(result)
    load_after = os.getloadavg()
    table = summarise(rounds)
    columns = ["agents", "state_MB", "replaced"] + [f"{layout}: {c}" for layout in LAYOUTS for c in
                                                    ("step+exploit_sharded ms", "step+exploit_sharded range",
                                                     "step+gather ms", "ms per replaced agent")]
    print_table(table, columns + ["Ray Tune ms per perturbation"])
    print(f"load average (1, 5, 15 min) before {load_before}, after {load_after}")
    payload = {"rows": table, "rounds": rounds, "load_before": load_before, "load_after": load_after,
               "ray_perturbation_s": RAY_PERTURBATION_S, "versions": deps.versions(), "args": vars(args)}
    write_json_atomic(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
