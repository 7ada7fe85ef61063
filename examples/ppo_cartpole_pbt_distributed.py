"""ppo_cartpole_pbt.py's population on a mesh that spans processes (docs/own-training-loop.md,
"Across processes"): N processes joined by `jax.distributed`, the agent axis sharded over
every process's devices, and three jitted programs that each compile once: `first` (the
population and its agents), `interval` (READY updates, run for every interval) and `explore`
(objective, population step, exploit, between two intervals), whose exploit
(`hcjax.population.exploit_sharded`) moves only the donors' rows between devices and
processes. Every process runs this same script; process 0 alone prints and writes.

    python -m examples.ppo_cartpole_pbt_distributed --coordinator 127.0.0.1:12345 --num-processes 2 --process-id 0
    python -m examples.ppo_cartpole_pbt_distributed --coordinator 127.0.0.1:12345 --num-processes 2 --process-id 1

On a CPU, each process gets several devices with XLA_FLAGS=--xla_force_host_platform_device_count=2
and its collectives go through gloo. Without --num-processes it runs on this process's devices alone.
"""
import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import hcjax
from hcjax.population import agent_mesh, agent_sharding, exploit_sharded, gather_agents, replicate, shard_agents


def run_pbt_sharded(config, seed, n_agents, mesh):
    """run_pbt (ppo_cartpole_pbt.py) with the agents sharded over `mesh` -> (out, history):
    global arrays with the agents on axis 0; history[i] holds interval i's values (n, h) and,
    from interval 1, the parents (n,) and objective (n,) it started from."""
    # Imported here: gymnax starts JAX's backend, and jax.distributed.initialize must come first.
    from examples.ppo_cartpole_pbt import POPULATION, SPACE, make_train

    num_updates = int(config["TOTAL_TIMESTEPS"]) // (config["NUM_STEPS"] * config["NUM_ENVS"])
    config = dict(config, READY=hcjax.population.interval(num_updates, config["READY"]))  # READY divides the run
    (init, train), agents = make_train(config), agent_sharding(mesh)

    def first(rngs, pop_key):  # the population and its agents, before any update
        pop_state, values = POPULATION.init(pop_key, n_agents)  # values: (n_agents, h)
        runner_state = jax.lax.with_sharding_constraint(strong(jax.vmap(init)(rngs)), agents)
        return pop_state, jax.lax.with_sharding_constraint(values, agents), runner_state

    def interval(values, runner_state):  # READY updates: one program for every interval, the first included
        out = jax.vmap(train)(SPACE.as_dict(values), runner_state)
        return jax.lax.with_sharding_constraint(out, agents)

    def explore(pop_state, objective, out, interval_key):  # everything between two intervals
        info = out["metrics"]  # leaves (n_agents, READY, steps, envs)
        now = jax.vmap(hcjax.objectives.mean_return)(info["returned_episode_returns"], info["returned_episode"])
        objective = jnp.where(jnp.isnan(now), objective, now)  # finite: the last mean return of finished episodes
        pop_key, agents_key = jax.random.split(interval_key)
        pop_state, values, parents = POPULATION.step(pop_state, pop_key, objective)  # ranks all n objectives
        # the donors' rows only, over the network: hcjax.exploit would all-gather every agent's state
        train_state, env_state, obsv, _ = exploit_sharded(out["runner_state"], parents, mesh)
        keys = jax.random.split(agents_key, n_agents)  # fresh keys: a copy must not replay its donor
        runner_state = jax.lax.with_sharding_constraint((train_state, env_state, obsv, keys), agents)
        values = jax.lax.with_sharding_constraint(values, agents)
        record = {"values": values, "parents": parents, "objective": objective}
        return pop_state, objective, values, runner_state, record

    rng = jax.random.PRNGKey(seed)
    rng, _rng = jax.random.split(rng)
    rngs = shard_agents(np.asarray(jax.random.split(rng, n_agents)), mesh)  # each process places its rows
    pop_state, values, runner_state = jax.jit(first)(rngs, replicate(np.asarray(_rng), mesh))
    interval, explore = jax.jit(interval, donate_argnums=1), jax.jit(explore)
    out = interval(values, runner_state)
    objective, history = shard_agents(np.zeros(n_agents, np.float32), mesh), [{"values": values}]
    for i in range(1, num_updates // config["READY"]):
        interval_key = replicate(np.asarray(jax.random.fold_in(rng, i)), mesh)
        pop_state, objective, values, runner_state, record = explore(pop_state, objective, out, interval_key)
        out = interval(values, runner_state)
        history.append(record)
    return out, history


def strong(tree):
    """`tree` without weak types: a fresh state's step counters are weakly typed and the
    exploited state's are not, so the input types of `interval` would differ between its first
    call and the next ones and it would compile again; with strong types it compiles once."""
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype), tree)


def summary(out, history) -> dict:
    """The run's results as NumPy arrays, on every process (collectives: every process calls it):
    returns (n,) the mean return of the episodes finished in the last interval, params_<i>
    each parameter leaf (n, ...), values (intervals, n, h), parents and objective
    (intervals - 1, n)."""
    info = out["metrics"]  # leaves (n_agents, READY, steps, envs)
    returns = jax.jit(jax.vmap(hcjax.objectives.mean_return))(info["returned_episode_returns"],
                                                             info["returned_episode"])
    host = gather_agents({"returns": returns, "params": jax.tree.leaves(out["runner_state"][0].params),
                          "history": history})
    n, later = host["returns"].shape[0], host["history"][1:]  # no exploit in a one-interval run
    result = {"returns": host["returns"], "values": np.stack([h["values"] for h in host["history"]]),
              "parents": np.asarray([h["parents"] for h in later], np.int32).reshape(-1, n),
              "objective": np.asarray([h["objective"] for h in later], np.float32).reshape(-1, n)}
    result.update({f"params_{i}": leaf for i, leaf in enumerate(host["params"])})
    return result


def save_npz_atomic(path: str, arrays: dict) -> None:
    """Write `arrays` to `path` (.npz) through a temporary file and a rename: never half written."""
    tmp = f"{path}.tmp{os.getpid()}.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def parse_args(argv):
    parser = argparse.ArgumentParser(description="PPO + PBT on CartPole, the agents sharded over every process")
    parser.add_argument("--coordinator", help="host:port of process 0 (with --num-processes and --process-id)")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--agents", type=int, default=4, help="population size: a multiple of the device count")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a CONFIG entry of ppo_cartpole_pbt.py (and READY, default 10)")
    parser.add_argument("--out", help="write the results (.npz) here, from process 0")
    args = parser.parse_args(argv)
    given = [args.coordinator, args.num_processes, args.process_id]
    if any(v is not None for v in given) and not all(v is not None for v in given):
        parser.error("--coordinator, --num-processes and --process-id go together")
    if args.num_processes is not None and not 0 <= args.process_id < args.num_processes:
        parser.error(f"--process-id must be in [0, {args.num_processes}), got {args.process_id}")
    return args


def config_from(pairs, base: dict) -> dict:
    """`base` with KEY=VALUE overrides (numbers); ValueError naming an unknown key or a malformed pair."""
    config = dict(base, READY=10)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in config:
            raise ValueError(f"--set {pair!r}: expected KEY=VALUE with KEY one of {', '.join(config)}")
        config[key] = type(config[key])(float(value)) if isinstance(config[key], int) else float(value)
    return config


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.num_processes is not None:  # before anything starts a JAX backend
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
        jax.distributed.initialize(args.coordinator, num_processes=args.num_processes, process_id=args.process_id)
    from examples.ppo_cartpole_pbt import CONFIG

    try:
        config = config_from(args.set, CONFIG)
        out, history = run_pbt_sharded(config, args.seed, args.agents, agent_mesh())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = summary(out, history)
    if jax.process_index() == 0:
        print(f"{jax.process_count()} process(es), {jax.device_count()} devices, {args.agents} agents")
        print("mean return of the episodes finished in the last interval, per agent:",
              np.round(result["returns"], 1))
        if args.out:
            save_npz_atomic(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
