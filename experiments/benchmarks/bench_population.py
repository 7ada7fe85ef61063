"""Cost of one population step and exploit over a batch of PPO-sized agents, and Ray Tune's PBT.

    python -m experiments.benchmarks.bench_population [--quick] [--agents 64 256 1024] [--no-ray] [--out FILE]

The agent state is what a PBT exploit must copy for the project's PPO on HalfCheetah
(obs 17, action 6): actor and critic 3 x 256 tanh MLPs (flax, `agents.networks`), the
optimiser state of `optax.inject_hyperparams(chain(clip_by_global_norm, adam))` (Adam's
two moments = 2 x params) and the observation statistics, batched over n agents.
Timed, compiled, median of repeats (`block_until_ready`), for n = 64, 256, 1024:

- pbt_step: `make_population("pbt", ppo_space()).step` alone (ranking + explore);
- gather: `hcjax.exploit(state, parents)` alone, every row of every leaf gathered into a
  new buffer (not donated: donating the gather's input made XLA add a full copy, 4x
  slower here);
- in_place: `hcjax.population.exploit_in_place(state, parents)` alone, the state
  donated: only the m = quantile_size(n, 0.25) replaced rows are copied, row by row,
  in place (a scatter of the m rows was 3x slower here: XLA:CPU scatters element by
  element);
- step+gather, step+in_place: the pbt step and the exploit in one jitted call (what a
  training loop runs every `ready` iterations), the state donated for in_place;
- pb2_population step (default options: buffer 1000, 256 candidates) and
  hypercontroller_shared step (d = 10, s = 1), without the gather.

Ray Tune (the `compare` extra, `pip install "ray[tune]"`): the time one PBT
perturbation costs a trial there. (a) The checkpoint round trip of its exploit, alone:
the donor's state (the same arrays, one agent, NumPy) saved to a directory as a
`ray.train.Checkpoint` and loaded back. (b) A real `Tuner` run: 4 trials of a class
Trainable holding that state, `PopulationBasedTraining(perturbation_interval=1)` for
`--ray-iterations` iterations, against the same run under the FIFO scheduler; extra
wall time / perturbations made = seconds per perturbation. Skipped, saying why, when
ray cannot be imported or the run fails.

Prints a table (milliseconds) and writes JSON atomically.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import hcjax
from agents import networks as nets
from agents.wrappers import init_obs_stats
from experiments import deps
from experiments.benchmarks.timing import print_table, time_calls, write_json_atomic
from hcjax.population import exploit_in_place

OBS, ACT, HIDDEN = 17, 6, (256, 256, 256)


def agent_state(key):
    """One PPO agent's params, optimiser state and observation statistics (HalfCheetah sizes)."""
    k_actor, k_critic = jax.random.split(key)
    dummy = jnp.zeros((OBS,), jnp.float32)
    params = {"actor": nets.Actor(ACT, False, HIDDEN).init(k_actor, dummy),
              "critic": nets.Critic(HIDDEN).init(k_critic, dummy)}
    opt = optax.inject_hyperparams(lambda learning_rate: optax.chain(optax.clip_by_global_norm(1.0),
                                                                     optax.adam(learning_rate)))(learning_rate=3e-4)
    opt_state = opt.init(params)
    # Non-zero moments, as after training (Adam's init is zeros).
    opt_state = jax.tree.map(lambda x: x + 1e-3 if x.ndim >= 1 else x, opt_state)
    return {"params": params, "opt_state": opt_state, "obs_stats": init_obs_stats(OBS)}


def make_states(n: int):
    """n agents' states, batched on axis 0."""
    return jax.jit(jax.vmap(agent_state))(jax.random.split(jax.random.key(0), n))


def nbytes(tree) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def timed(fn, args_fn, repeats: int, warmup: int = 2) -> float:
    """Median seconds of fn(*args_fn(previous output)) (`timing.time_calls`)."""
    return statistics.median(time_calls(fn, args_fn, repeats, warmup))


def bench_agents(n: int, repeats: int) -> dict:
    """Every timing for n agents (seconds)."""
    space = hcjax.ppo_space()
    states = make_states(n)
    size = nbytes(states)
    pbt = hcjax.make_population("pbt", space)
    pop_state, _ = jax.jit(pbt.init, static_argnums=1)(jax.random.key(1), n)
    m = hcjax.population.quantile_size(n, 0.25)
    objectives = [jax.random.normal(jax.random.key(100 + r), (n,)) for r in range(repeats + 3)]
    counter = iter(range(10 ** 9))

    def obj():
        return objectives[next(counter) % len(objectives)]

    row = {"agents": n, "state_MB": size / 2 ** 20, "MB_per_agent": size / n / 2 ** 20, "replaced": m}
    step = jax.jit(pbt.step)
    row["pbt_step"] = timed(step, lambda out: (pop_state, jax.random.key(2), obj()), repeats)
    _, _, parents = step(pop_state, jax.random.key(2), obj())
    row["gather"] = timed(jax.jit(hcjax.exploit), lambda out: (states, parents), repeats)
    in_place = jax.jit(exploit_in_place, donate_argnums=0)
    row["in_place"] = timed(in_place, lambda out: (states if out is None else out, parents), repeats)
    states = make_states(n)

    def step_gather(ps, s, key, o):
        ps, values, parents = pbt.step(ps, key, o)
        return ps, values, parents, hcjax.exploit(s, parents)

    row["step+gather"] = timed(jax.jit(step_gather), lambda out: (pop_state, states, jax.random.key(3), obj()),
                               repeats)

    def step_in_place(ps, s, key, o):
        ps, values, parents = pbt.step(ps, key, o)
        return ps, values, parents, exploit_in_place(s, parents)

    fused = jax.jit(step_in_place, donate_argnums=(0, 1))
    row["step+in_place"] = timed(
        fused, lambda out: ((pop_state, states) if out is None else (out[0], out[3])) + (jax.random.key(4), obj()),
        repeats)
    states = None  # free the donated buffers before the next methods

    pb2 = hcjax.make_population("pb2_population", space)
    pb2_state, _ = jax.jit(pb2.init, static_argnums=1)(jax.random.key(5), n)
    pb2_step = jax.jit(pb2.step)
    for r in range(3):  # fill the buffer: two steps of data (the first step has no interval change)
        pb2_state, _, _ = pb2_step(pb2_state, jax.random.key(50 + r), obj())
    row["pb2_step"] = timed(pb2_step, lambda out: (pb2_state, jax.random.key(6), obj()), max(3, repeats // 4))
    row["pb2_buffer_valid"] = int(jnp.sum(pb2_state.mask))

    shared = hcjax.make_population("hypercontroller_shared", space)
    sh_state, _ = jax.jit(shared.init, static_argnums=1)(jax.random.key(7), n)
    row["shared_step"] = timed(jax.jit(shared.step), lambda out: (sh_state, jax.random.key(8), obj()), repeats)
    return row


def numpy_agent_state() -> dict[str, np.ndarray]:
    """One agent's state as flat NumPy arrays (what a Ray trainable would checkpoint)."""
    state = jax.jit(agent_state)(jax.random.key(0))
    leaves, _ = jax.tree_util.tree_flatten_with_path(state)
    return {jax.tree_util.keystr(p): np.asarray(x) for p, x in leaves}


def ray_checkpoint_round_trip(repeats: int) -> dict:
    """Seconds to save one agent's state as a ray.train.Checkpoint and load it back."""
    from ray.train import Checkpoint

    arrays = numpy_agent_state()
    times = []
    with tempfile.TemporaryDirectory() as root:
        for r in range(repeats + 1):
            t0 = time.perf_counter()
            d = os.path.join(root, f"ckpt_{r}")
            os.makedirs(d)
            np.savez(os.path.join(d, "state.npz"), **arrays)
            ckpt = Checkpoint.from_directory(d)
            with ckpt.as_directory() as loaded:
                with np.load(os.path.join(loaded, "state.npz")) as f:
                    back = {k: f[k] for k in f.files}
            if r > 0:
                times.append(time.perf_counter() - t0)
    assert all(np.array_equal(back[k], arrays[k]) for k in arrays)
    return {"checkpoint_round_trip_s": statistics.median(times), "state_MB": nbytes(arrays) / 2 ** 20}


def ray_tuner_run(iterations: int, trials: int = 4) -> dict:
    """A Tuner run with PBT against FIFO on a Trainable holding the agent state:
    (wall_pbt - wall_fifo) / perturbations, perturbations = the lines of PBT's lineage log
    (pbt_global.txt: one per exploit); checkpoint loads (exploits, and the pauses and
    resumes PBT makes) counted by the trainables."""
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    arrays = numpy_agent_state()

    def run(scheduler, storage, marks):
        class Holder(tune.Trainable):
            def setup(self, config):
                self.state = {k: v.copy() for k, v in arrays.items()}
                self.score = 0.0

            def step(self):
                self.score += 1.0 - (self.config["x"] - 0.3) ** 2
                return {"score": self.score}

            def save_checkpoint(self, checkpoint_dir):
                np.savez(os.path.join(checkpoint_dir, "state.npz"), score=self.score, **self.state)

            def load_checkpoint(self, checkpoint_dir):
                with np.load(os.path.join(checkpoint_dir, "state.npz")) as f:
                    self.score = float(f["score"])
                    self.state = {k: f[k] for k in f.files if k != "score"}
                with open(marks, "a") as f:
                    f.write("restore\n")

            def reset_config(self, new_config):
                self.config = new_config
                return True

        tuner = tune.Tuner(
            Holder,
            param_space={"x": tune.uniform(0.0, 1.0)},
            tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=trials, scheduler=scheduler,
                                        reuse_actors=True),
            run_config=tune.RunConfig(stop={"training_iteration": iterations}, storage_path=storage, verbose=0),
        )
        t0 = time.perf_counter()
        grid = tuner.fit()
        wall = time.perf_counter() - t0
        if grid.num_errors:
            raise RuntimeError(f"{grid.num_errors} Ray Tune trial(s) failed")
        return wall

    ray.init(num_cpus=trials, include_dashboard=False, log_to_driver=False,  # all trials at once: no pausing
             configure_logging=False)
    try:
        with tempfile.TemporaryDirectory() as storage:
            marks = os.path.join(storage, "restores.txt")
            fifo = run(None, storage, os.path.join(storage, "fifo_restores.txt"))
            pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=1,
                                          hyperparam_mutations={"x": tune.uniform(0.0, 1.0)})
            wall = run(pbt, storage, marks)
            restores = sum(1 for _ in open(marks)) if os.path.exists(marks) else 0
            # PBT's lineage log: one line per exploit (in the experiment's local staging directory).
            try:  # where this Ray version stages experiment files (a private API: best effort)
                session = ray._private.worker._global_node.get_session_dir_path()
            except Exception:  # noqa: BLE001
                session = None
            logs = glob.glob(os.path.join(storage, "**", "pbt_global.txt"), recursive=True)
            if session:
                logs += glob.glob(os.path.join(session, "artifacts", "**", "pbt_global.txt"), recursive=True)
            perturbations = sum(sum(1 for _ in open(f)) for f in set(logs))
    finally:
        ray.shutdown()
    return {"trials": trials, "iterations": iterations, "fifo_s": fifo, "pbt_s": wall,
            "perturbations": perturbations, "checkpoint_restores": restores,
            "s_per_perturbation": (wall - fifo) / perturbations if perturbations else float("nan")}


TIMED = ("pbt_step", "gather", "in_place", "step+gather", "step+in_place", "pb2_step", "shared_step")
COLUMNS = ["agents", "state_MB"] + [k + "_ms" for k in TIMED]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 64 and 256 agents")
    parser.add_argument("--agents", type=int, nargs="+", default=None)
    parser.add_argument("--no-ray", action="store_true", help="skip Ray Tune")
    parser.add_argument("--ray-iterations", type=int, default=20)
    parser.add_argument("--out", default="bench_out/population.json")
    args = parser.parse_args(argv)
    agents = args.agents or ([64, 256] if args.quick else [64, 256, 1024])
    repeats = 5 if args.quick else 15
    rows = []
    for n in agents:
        row = bench_agents(n, repeats)
        for k in TIMED:
            row[k + "_ms"] = row[k] * 1e3
        rows.append(row)
        print(f"n={n}: pbt step + in-place exploit {row['step+in_place_ms']:.2f} ms, with the gather "
              f"{row['step+gather_ms']:.2f} ms ({row['state_MB']:.0f} MB of agents)", flush=True)
    print_table(rows, COLUMNS)
    ray_result, ray_note = {}, None
    if args.no_ray:
        ray_note = "skipped (--no-ray)"
    else:
        try:
            ray_result.update(ray_checkpoint_round_trip(5 if args.quick else 20))
            ray_result.update(ray_tuner_run(5 if args.quick else args.ray_iterations))
        except ImportError as e:
            ray_note = f"not measured: ray[tune] (the `compare` extra) cannot be imported ({e})"
        except Exception as e:  # noqa: BLE001 - any failure of the Ray run is reported, not fatal
            ray_note = f"not measured: the Ray Tune run failed ({type(e).__name__}: {e})"
    if ray_result:
        print(f"Ray Tune: checkpoint round trip of one agent ({ray_result.get('state_MB', 0):.1f} MB): "
              f"{ray_result.get('checkpoint_round_trip_s', float('nan')) * 1e3:.1f} ms")
        if "s_per_perturbation" in ray_result:
            print(f"Ray Tune PBT run ({ray_result['trials']} trials, {ray_result['iterations']} iterations): "
                  f"{ray_result['perturbations']} perturbations, {ray_result['pbt_s']:.1f} s vs FIFO "
                  f"{ray_result['fifo_s']:.1f} s: {ray_result['s_per_perturbation'] * 1e3:.0f} ms per perturbation")
    if ray_note:
        print("Ray Tune: " + ray_note)
    payload = {"rows": rows, "ray": ray_result, "ray_note": ray_note, "devices": deps.devices(),
               "versions": deps.versions(), "args": vars(args)}
    write_json_atomic(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
