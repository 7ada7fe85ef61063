"""Run a study: every (environment, method) unit over the same seeds, resumable.

Within a unit all seeds are one vmapped program: `learner.init` and segments of
`eval_every` iterations (`learner.iterate`) are `jax.jit(jax.vmap(...))` over an agent
axis that is sharded across devices with `jax.sharding`: a 1-D `Mesh` named "agent"
over the local devices (every device of every process under `jax.distributed`) and
`NamedSharding(mesh, P("agent"))` on every array of the learner state, so each device
trains its own slice of agents and no communication is needed. The number of agents
is padded up to a multiple of the device count with extra seeds (ids after the real
ones) whose results are dropped, so any seed count works on any device count; with a
count that divides evenly nothing is wasted. Seed i of every method uses the key
PRNGKey(i): the same seeds for every method.

Gymnasium (host) environments cannot be vmapped on a device; they run through
`agents.driver` (envs stepped on the host, update and tuner jitted), unsharded.

Tuning time (what the paper's Figure 1 puts on its x-axis, "wall-clock time spent in
hyperparameter search"): inside the run the tuner is fused into the compiled
iteration, so it cannot be timed there. After a unit finishes, its tuner is replayed
on the host CPU with the same number of agents (vmapped) and the objectives the run
actually produced, in the run's order (tell from the second iteration on, ask every
`tune_every` iterations), so its buffers have exactly the run's fill at every step;
each iteration's jitted tell(+ask) call is timed with `block_until_ready` after a
warm-up (compilation excluded). `tuner_time[t]` is that wall time for all agents of the
unit together: per-agent cost is `tuner_time / seeds` on a device that runs agents
in parallel, and at most that times the seed count on a serial one.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments import results as R
from experiments.presets import EnvChoice, Plan

# ---- configuration of one unit ----------------------------------------------------------


def tuner_options(plan: Plan, method: str) -> dict[str, Any]:
    """Options of `method` for this study: hyperband's budget is the run's number of
    decisions (so its brackets complete), then the preset's overrides."""
    p = plan.preset
    opts: dict[str, Any] = {}
    if method == "hyperband":
        opts["budget"] = max(1, p.iterations // p.tune_every)
    opts.update(p.tuner.get(method, {}))
    return opts


def ppo_options(plan: Plan) -> dict[str, Any]:
    """PPOConfig fields of this study."""
    p = plan.preset
    return dict(p.ppo, num_iterations=p.iterations, tune_every=p.tune_every, batch_size=p.batch_size[0],
                max_batch_size=p.batch_size[1])


def unit_config(plan: Plan, env: EnvChoice, method: str) -> dict[str, Any]:
    """Everything that changes a unit's numbers (its config_key is the hash of this)."""
    p = plan.preset
    return dict(env=dataclasses.asdict(env), method=method, seeds=p.seeds, iterations=p.iterations,
                eval_every=p.eval_every, tune_every=p.tune_every, batch_size=list(p.batch_size),
                ppo=ppo_options(plan), tuner=tuner_options(plan, method))


def check(plan: Plan) -> None:
    """Build every unit's PPOConfig and tuner (cheap, nothing compiled): any bad option
    raises ValueError now rather than after hours of other units."""
    from agents.ppo import PPOConfig

    from hcjax import make_tuner, ppo_space

    ppo = ppo_options(plan)
    unknown = sorted(set(ppo) - {f.name for f in dataclasses.fields(PPOConfig)})
    if unknown:
        raise ValueError(f"preset {plan.preset.name!r}: unknown PPOConfig field(s) {unknown}")
    PPOConfig(**ppo)
    space = ppo_space(batch_size=plan.preset.batch_size)
    for method in plan.preset.methods:
        make_tuner(method, space, **tuner_options(plan, method))


def build(plan: Plan, env: EnvChoice, method: str):
    """(learner, env, tuner) of one unit."""
    from agents import envs
    from agents.ppo import PPOConfig, make_learner

    from hcjax import make_tuner, ppo_space

    environment = envs.make(env.make)
    tuner = make_tuner(method, ppo_space(batch_size=plan.preset.batch_size), **tuner_options(plan, method))
    return make_learner(PPOConfig(**ppo_options(plan)), environment, tuner), environment, tuner


# ---- devices -----------------------------------------------------------------------------


def agent_mesh():
    """1-D Mesh named "agent" over every device (all processes' under jax.distributed)."""
    import jax
    from jax.sharding import Mesh

    return Mesh(np.asarray(jax.devices()), ("agent",))


def padded_count(n_seeds: int, n_devices: int) -> int:
    """Agents actually run: n_seeds rounded up to a multiple of n_devices."""
    return -(-n_seeds // n_devices) * n_devices


def seed_keys(seed_ids: np.ndarray, sharding):
    """(n, 2) uint32 PRNGKey(seed) per agent, created shard by shard (multi-process safe)."""
    import jax

    host = np.stack([np.asarray(jax.random.key_data(jax.random.key(int(s)))) for s in seed_ids])
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def to_host(x) -> np.ndarray:
    """A (possibly multi-process) sharded array -> the full NumPy array on this host."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


# ---- one unit ----------------------------------------------------------------------------


def compiled(jitted, *args, fast: bool = False):
    """Ahead-of-time compile `jitted` for `args`; fast: XLA backend optimisation level 0."""
    lowered = jitted.lower(*args)
    return lowered.compile(compiler_options={"xla_backend_optimization_level": 0}) if fast else lowered.compile()


def segments(iterations: int, eval_every: int) -> list[int]:
    """Lengths of the host-side segments: eval_every each, the last one shorter if needed."""
    out = [eval_every] * (iterations // eval_every)
    if iterations % eval_every:
        out.append(iterations % eval_every)
    return out


def run_jax_unit(learner, seed_ids: np.ndarray, iterations: int, eval_every: int,
                 on_segment: Callable[[int], None] = lambda k: None, fast_compile: bool = False
                 ) -> dict[str, np.ndarray]:
    """Train len(seed_ids) agents as one vmapped program sharded over every device.

    Returns per-iteration metrics (n, T[, h]), eval_iteration (E,), eval_reward (n, E),
    for the n = padded agents (callers drop the padding), and timings. fast_compile:
    compile the training segments with XLA's backend optimisation off (much shorter
    compilation, slower steps: for tiny runs).
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = agent_mesh()
    agents = NamedSharding(mesh, P("agent"))
    scalar = NamedSharding(mesh, P())
    keys = seed_keys(seed_ids, agents)

    init = jax.jit(jax.vmap(lambda k: learner.init(jax.random.fold_in(k, 0))), in_shardings=agents,
                   out_shardings=agents)
    init = compiled(init, keys, fast=True)  # runs once: optimising it is not worth its compile time

    def evaluate(state, k, it):
        return learner.evaluate(state, jax.random.fold_in(jax.random.fold_in(k, 1), it))

    evaluate = jax.jit(jax.vmap(evaluate, in_axes=(0, 0, None)), in_shardings=(agents, agents, scalar),
                       out_shardings=agents)
    programs = {}

    t0 = time.perf_counter()
    state = init(keys)
    first_eval = jax.device_put(jnp.asarray(eval_every, jnp.int32), scalar)
    evaluate = compiled(evaluate, state, keys, first_eval, fast=fast_compile)

    def segment(length):
        if length not in programs:
            program = jax.jit(jax.vmap(lambda s: learner.iterate(s, length)), in_shardings=agents,
                              out_shardings=agents, donate_argnums=0)
            programs[length] = compiled(program, state, fast=fast_compile)
        return programs[length]

    chunks, evals, eval_its, seg_times = [], [], [], []
    done = 0
    for length in segments(iterations, eval_every):
        ts = time.perf_counter()
        state, metrics = segment(length)(state)
        metrics = {k: to_host(v) for k, v in metrics.items()}
        done += length
        reward = to_host(evaluate(state, keys, jax.device_put(jnp.asarray(done, jnp.int32), scalar)))
        seg_times.append(time.perf_counter() - ts)
        chunks.append(metrics)
        evals.append(reward)
        eval_its.append(done)
        on_segment(length)
    out = {k: np.concatenate([c[k] for c in chunks], axis=1) for k in chunks[0]}
    out["eval_iteration"] = np.asarray(eval_its, np.int32)
    out["eval_reward"] = np.stack(evals, axis=1).astype(np.float32)
    out["train_seconds"] = time.perf_counter() - t0
    out["segment_seconds"] = np.asarray(seg_times)
    return out


def run_host_unit(learner, tuner, seed_ids: np.ndarray, eval_every: int,
                  on_segment: Callable[[int], None] = lambda k: None) -> dict[str, np.ndarray]:
    """Gymnasium envs: `agents.driver` steps one vector env per agent on the host, with the
    policy, the PPO update and the tuner jitted and vmapped (not sharded)."""
    import jax

    from agents import driver

    keys = np.stack([np.asarray(jax.random.key_data(jax.random.key(int(s)))) for s in seed_ids])
    done = [0]

    def callback(info):
        on_segment(info.iteration - done[0])
        done[0] = info.iteration

    t0 = time.perf_counter()
    res = driver.run(learner.config, learner.env, tuner, keys, eval_every=eval_every, callback=callback)
    out = {k: np.asarray(v) for k, v in res.metrics.items()}
    out["eval_iteration"] = np.asarray(res.eval_iterations, np.int32)
    out["eval_reward"] = np.asarray(res.eval_returns, np.float32)
    out["train_seconds"] = time.perf_counter() - t0
    return out


def measure_tuner_time(tuner, objectives: np.ndarray, tune_every: int, seed: int = 0) -> np.ndarray:
    """(T,) seconds of host ask+tell for all agents at each iteration of the run.

    objectives: (n, T) the objectives the run told (iteration 0 tells nothing, as in
    the PPO loop); asks happen at iterations t with (t + 1) % tune_every == 0, and the
    initial ask is charged to iteration 0. Runs on the CPU device, jitted and vmapped
    over the n agents; compilation is excluded by a warm-up on a copy of the state.
    """
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    n, T = objectives.shape
    with jax.default_device(cpu):
        keys = jax.random.split(jax.random.key(seed), (T + 1) * n).reshape(T + 1, n)
        x = jnp.asarray(np.asarray(objectives, np.float32))
        init = jax.jit(jax.vmap(tuner.init))
        ask = jax.jit(jax.vmap(tuner.ask))
        tell = jax.jit(jax.vmap(tuner.tell))
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


def run_unit(plan: Plan, env: EnvChoice, method: str, key: str,
             on_segment: Callable[[int], None] = lambda k: None) -> R.UnitResult:
    """Train every seed of one (env, method) unit and measure its tuning time."""
    import jax

    p = plan.preset
    t0 = time.perf_counter()
    learner, environment, tuner = build(plan, env, method)
    seeds = np.arange(p.seeds)
    if environment.host:
        ids = seeds
        out = run_host_unit(learner, tuner, ids, p.eval_every, on_segment)
        n_dev = 1
    else:
        n_dev = len(jax.devices())
        n = padded_count(p.seeds, n_dev)
        ids = np.concatenate([seeds, p.seeds + np.arange(n - p.seeds)])
        out = run_jax_unit(learner, ids, p.iterations, p.eval_every, on_segment, fast_compile=p.fast_compile)
    tuner_time = measure_tuner_time(tuner, np.asarray(out["objective"], np.float32), p.tune_every)
    S = p.seeds

    def cut(name, dtype):
        return np.asarray(out[name][:S], dtype)

    meta = dict(env=env.label, method=method, make=env.make, path=env.path, config_key=key,
                config=unit_config(plan, env, method), hparam_names=list(tuner.space.names),
                n_agents=int(len(ids)), n_devices=int(n_dev), devices=[str(d) for d in jax.devices()],
                train_seconds=float(out["train_seconds"]), unit_seconds=float(time.perf_counter() - t0),
                tuner_seconds=float(tuner_time.sum()),
                tuning_time="host CPU replay of tell(+ask) for all agents with the run's objectives; "
                            "seconds per iteration, compilation excluded")
    if "segment_seconds" in out:
        meta["segment_seconds"] = [float(s) for s in out["segment_seconds"]]
    return R.UnitResult(
        seeds=seeds.astype(np.int32),
        train_reward=cut("train_reward", np.float32), objective=cut("objective", np.float32),
        hparams=cut("hparams", np.float32), frames=cut("frames", np.int64), rejected=cut("rejected", np.int32),
        episode_return=cut("episode_return", np.float32),
        eval_iteration=np.asarray(out["eval_iteration"], np.int32), eval_reward=cut("eval_reward", np.float32),
        tuner_time=tuner_time.astype(np.float64), meta=meta)


# ---- the study ---------------------------------------------------------------------------


def run(plan: Plan, out: str | Path, progress: bool = True, log: Callable[[str], None] | None = None) -> list[Path]:
    """Run every unit of `plan` not already finished in `out`; returns the unit files."""
    import jax

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = Path(out)
    check(plan)
    units = plan.units
    keys = {(e.label, m): R.config_key(unit_config(plan, e, m)) for e, m in units}
    for (label, method), key in keys.items():
        path = R.unit_path(out, label, method)
        if path.exists() and not R.is_done(out, label, method, key):
            raise ValueError(f"{path} exists with a different configuration; use another --out "
                             f"(or delete it) to run preset {plan.preset.name!r}")
    out.mkdir(parents=True, exist_ok=True)
    if jax.process_index() == 0:
        R.write_manifest(out, plan.to_dict(), R.config_key(plan.to_dict()))
    R.heartbeat(out)
    from tqdm.auto import tqdm

    paths = []
    progress = progress and jax.process_index() == 0
    bar = tqdm(total=len(units), desc="units", unit="unit", disable=not progress, position=0, file=sys.stderr)
    with bar:
        for env, method in units:
            key = keys[(env.label, method)]
            if R.is_done(out, env.label, method, key):
                log(f"skip {env.label} / {method}: already finished in {out}")
                bar.update(1)
                paths.append(R.unit_path(out, env.label, method))
                continue
            stalled = R.stalled_path(out, R.unit_name(env.label, method))
            if stalled.exists():
                log(f"skip {env.label} / {method}: it stalled repeatedly (see {stalled}); delete that file to retry")
                bar.update(1)
                continue
            R.atomic_write_text(Path(out) / R.INFLIGHT, R.unit_name(env.label, method))
            if os.environ.get(STALL_FOR_TEST) == R.unit_name(env.label, method):
                time.sleep(3600)  # fault injection for the watchdog test: a hang without heartbeats
            bar.set_postfix_str(f"{env.label} / {method}")
            inner = tqdm(total=plan.preset.iterations, desc=f"{env.label}/{method}", unit="it", leave=False,
                         disable=not progress, position=1, file=sys.stderr)

            def on_segment(k):
                inner.update(k)
                R.heartbeat(out)

            R.heartbeat(out)
            with inner:
                result = run_unit(plan, env, method, key, on_segment=on_segment)
            if jax.process_index() == 0:
                paths.append(R.save_unit(out, result))
            log(f"done {env.label} / {method}: {result.meta['unit_seconds']:.1f} s "
                f"(tuning {result.meta['tuner_seconds']:.3g} s)")
            bar.update(1)
    return paths


STALL_FOR_TEST = "HCJAX_STALL_FOR_TEST"  # a unit name: the worker hangs there (tests only)


def summary(out: str | Path) -> str:
    """The results table (Markdown) of a study directory."""
    from experiments import plots

    units = R.load_units(out)
    if not units:
        return f"no finished units in {Path(out) / R.UNITS}"
    return plots.results_table(units) + "\n" + plots.success_table(units)
