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
import functools
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


def ppo_options(plan: Plan, env: EnvChoice | None = None) -> dict[str, Any]:
    """PPOConfig fields of this study (on `env`: with its own overrides)."""
    p = plan.preset
    return dict(p.ppo, **(env.ppo if env is not None else {}), num_iterations=p.iterations, tune_every=p.tune_every)


def unit_config(plan: Plan, env: EnvChoice, method: str) -> dict[str, Any]:
    """Everything that changes a unit's numbers (its config_key is the hash of this)."""
    p = plan.preset
    return dict(env=dataclasses.asdict(env), method=method, seeds=p.seeds, iterations=p.iterations,
                eval_every=p.eval_every, tune_every=p.tune_every, space=[dict(h) for h in p.space],
                ppo=ppo_options(plan), tuner=tuner_options(plan, method))


DEFAULT_MEMORY_LIMIT_GIB = 8.0
WORKSPACE_FACTOR = 4  # an iteration's XLA temporaries, relative to the state and trajectory (generous)


def check(plan: Plan, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> None:
    """Validate everything a unit needs without compiling: the PPOConfig, the space
    (tunable fields only), every method's tuner options, every environment (built), and
    each unit's memory: ValueError now rather than after hours of other units, or an
    abort, a hang or a MemoryError later."""
    from agents.ppo import PPOConfig, check_space

    from experiments.presets import ALL_METHODS

    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    configs = {}
    for env in (None,) + plan.envs:
        ppo = ppo_options(plan, env)
        unknown = sorted(set(ppo) - fields)
        where = f"study {plan.preset.name!r}" + ("" if env is None else f", env_ppo of {env.label}")
        if unknown:
            raise ValueError(f"{where}: unknown PPOConfig field(s) {unknown}; allowed: {', '.join(sorted(fields))}")
        try:
            configs[None if env is None else env.label] = PPOConfig(**ppo)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    space = plan.space
    check_space(space)
    unknown = sorted(set(plan.preset.tuner) - set(ALL_METHODS))
    if unknown:
        raise ValueError(f"study {plan.preset.name!r}: tuner options for unknown method(s) {unknown}; "
                         f"methods: {', '.join(ALL_METHODS)}")
    tuners = {m: make_method(plan, m, memory_limit_gib)
              for m in dict.fromkeys(list(plan.preset.methods) + list(plan.preset.tuner))}
    populations = [m for m in plan.preset.methods if is_population(m)]
    if populations:
        import jax

        host = [e.label for e in plan.envs if e.path == "gymnasium"]
        if host:
            raise ValueError(f"population methods {populations} run on JAX environments only (the agent axis is "
                             f"one program); gymnasium environments {host} run on the host")
        if jax.process_count() > 1:
            raise ValueError(f"population methods {populations} do not run under --distributed (yet)")
        if plan.preset.seeds % jax.device_count():
            raise ValueError(f"population methods {populations}: seeds ({plan.preset.seeds}) must be a multiple of "
                             f"the device count ({jax.device_count()}): the population is exactly the seeds")
    for env, methods in unit_groups(plan):
        base = agent_bytes(configs[env.label], env, space)
        agents = len(methods) * plan.preset.seeds
        if is_population(methods[0]):
            tuner_bytes = tuners[methods[0]].memory_bytes(plan.preset.seeds) / plan.preset.seeds
        else:
            tuner_bytes = sum(tuners[m].memory_bytes for m in methods)  # a fused agent holds every method's state
        total = agents * (base + tuner_bytes)
        if total > memory_limit_gib * 2**30:
            raise ValueError(
                f"unit {env.label} / {'+'.join(methods)}: estimated {total / 2**30:.3g} GiB ({agents} "
                f"agents x {(base + tuner_bytes) / 2**20:.3g} MiB: networks, optimiser, environments, "
                f"trajectory of the largest batch, {plan.preset.iterations} iterations of metrics, the tuner) "
                f"exceeds the memory limit of {memory_limit_gib:g} GiB; lower seeds, iterations, num_envs, the "
                f"batch size, hidden_sizes or the tuner's options, or raise --memory-limit-gib")


def agent_bytes(config, env: EnvChoice, space) -> int:
    """Estimated bytes of one agent, tuner excluded: its learner state (shapes traced with
    jax.eval_shape, nothing allocated), the trajectory of the largest batch, both times
    WORKSPACE_FACTOR, and the metrics kept on the host for every iteration."""
    from agents.ppo import METRIC_KEYS

    state_bytes, per_iteration = _learner_bytes(config, env.make, space.hyperparameters)
    metrics = 8 * config.num_iterations * (len(METRIC_KEYS) - 1 + space.h)  # hparams: h columns
    return WORKSPACE_FACTOR * (state_bytes + per_iteration) + metrics


@functools.lru_cache(maxsize=64)
def _environment(make: str):
    """`agents.envs.make(make)`, built once per process: building a Brax environment takes
    seconds, and `check` and then every unit group of the environment need it."""
    from agents import envs

    return envs.make(make)


@functools.lru_cache(maxsize=64)
def _learner_bytes(config, make: str, hyperparameters) -> tuple[int, int]:
    """(learner state bytes, trajectory bytes of one iteration) of one agent; cached per process."""
    import jax

    from agents.ppo import make_learner
    from hcjax import Space, make_tuner

    environment = _environment(make)
    learner = make_learner(config, environment, make_tuner("fixed", Space(hyperparameters)))
    state = jax.eval_shape(learner.init, jax.random.PRNGKey(0))
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    per_step = 2 * environment.obs_size + max(environment.action_size, 1) + 10  # obs, normalised obs, action, scalars
    return state_bytes, 4 * learner.max_steps * config.num_envs * per_step


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


def segments(iterations: int, eval_every: int, ready: int | None = None) -> list[int]:
    """Lengths of the host-side segments: they end at every multiple of eval_every (an
    evaluation), of `ready` (a population step) when given, and at `iterations`."""
    ends = set(range(eval_every, iterations, eval_every)) | {iterations}
    if ready:
        ends |= set(range(ready, iterations, ready))
    ends = sorted(ends)
    return [b - a for a, b in zip([0] + ends[:-1], ends)]


@dataclasses.dataclass
class Record:
    """What a unit has produced so far (kept in its checkpoint): `done` iterations;
    per-segment metrics, each {name: (n, k[, h])}; evaluations (n,) with the iteration
    count at each; seconds per segment."""

    done: int = 0
    chunks: list = dataclasses.field(default_factory=list)
    evals: list = dataclasses.field(default_factory=list)
    eval_its: list = dataclasses.field(default_factory=list)
    seg_times: list = dataclasses.field(default_factory=list)
    lineage: list = dataclasses.field(default_factory=list)  # (iteration, parents (n,), objectives (n,))

    def add(self, length: int, metrics: dict, reward: np.ndarray | None, seconds: float) -> None:
        self.done += length
        self.chunks.append({k: np.asarray(v) for k, v in metrics.items()})
        if reward is not None:
            self.evals.append(np.asarray(reward, np.float32))
            self.eval_its.append(self.done)
        self.seg_times.append(seconds)

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything as named arrays (for the checkpoint); `from_arrays` inverts it."""
        out = {f"metric/{k}": v for k, v in self.metrics().items()}
        out.update({"eval_reward": self.eval_reward(), "eval_iteration": np.asarray(self.eval_its, np.int32),
                    "segment_seconds": np.asarray(self.seg_times, np.float64), "done": np.asarray(self.done)})
        out.update(self.lineage_arrays())
        return out

    def lineage_arrays(self) -> dict[str, np.ndarray]:
        """lineage_iteration (K,), lineage_parent (n, K), lineage_objective (n, K)."""
        if not self.lineage:
            return {}
        its, parents, objectives = zip(*self.lineage)
        return {"lineage_iteration": np.asarray(its, np.int32),
                "lineage_parent": np.stack(parents, axis=1).astype(np.int32),
                "lineage_objective": np.stack(objectives, axis=1).astype(np.float32)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "Record":
        metrics = {k[len("metric/"):]: v for k, v in arrays.items() if k.startswith("metric/")}
        rec = cls(done=int(arrays["done"]), chunks=[metrics] if metrics else [],
                  evals=list(np.moveaxis(arrays["eval_reward"], 1, 0)),
                  eval_its=[int(i) for i in arrays["eval_iteration"]],
                  seg_times=[float(t) for t in arrays["segment_seconds"]])
        if "lineage_iteration" in arrays:
            rec.lineage = [(int(it), arrays["lineage_parent"][:, k], arrays["lineage_objective"][:, k])
                           for k, it in enumerate(arrays["lineage_iteration"])]
        return rec

    def metrics(self) -> dict[str, np.ndarray]:
        if not self.chunks:
            return {}
        return {k: np.concatenate([c[k] for c in self.chunks], axis=1) for k in self.chunks[0]}

    def eval_reward(self) -> np.ndarray:
        return np.stack(self.evals, axis=1) if self.evals else np.zeros((0, 0), np.float32)

    def result(self, t0: float) -> dict[str, np.ndarray]:
        """A finished unit's arrays: the metrics {name: (n, T)}, eval_iteration (E,),
        eval_reward (n, E), the lineage if any, and train_seconds since `t0`."""
        out = self.metrics()
        out["eval_iteration"] = np.asarray(self.eval_its, np.int32)
        out["eval_reward"] = self.eval_reward().astype(np.float32)
        out["train_seconds"] = time.perf_counter() - t0
        out.update(self.lineage_arrays())
        return out


class Checkpoint:
    """A unit's checkpoint in its study directory: the batched learner state (every leaf,
    gathered to the host) and the Record, saved atomically after every segment, tagged
    with the unit's config key. `store` None: no checkpoints (e.g. processes other
    than 0 under jax.distributed, which only read)."""

    def __init__(self, store: R.StudyDir | None, env: str, method: str, config_key: str,
                 log: Callable[[str], None], write: bool = True):
        self.store, self.env, self.method, self.key, self.log, self.write = store, env, method, config_key, log, write

    def save(self, state, record: Record) -> None:
        import jax

        leaves = [to_host(x) for x in jax.tree.leaves(state)]  # every process takes part in the gather
        if self.store is None or not self.write:
            return
        arrays = {f"state/{i:05d}": leaf for i, leaf in enumerate(leaves)}
        arrays.update({f"record/{k}": v for k, v in record.arrays().items()})
        arrays["config_key"] = np.asarray(self.key)
        self.store.save_checkpoint(self.env, self.method, arrays)

    def load(self, like) -> tuple[list[np.ndarray], Record] | None:
        """(state leaves, Record) of a checkpoint matching `like` (a pytree of
        ShapeDtypeStructs of the state) and this unit's config key; None otherwise
        (a mismatching checkpoint is moved aside)."""
        import jax

        if self.store is None:
            return None
        arrays = self.store.load_checkpoint(self.env, self.method, log=self.log)
        if arrays is None:
            return None
        leaves = [arrays[k] for k in sorted(k for k in arrays if k.startswith("state/"))]
        want = jax.tree.leaves(like)
        fits = str(arrays.get("config_key")) == self.key and len(leaves) == len(want) and all(
            a.shape == w.shape and a.dtype == w.dtype for a, w in zip(leaves, want))
        if not fits:
            path = self.store.checkpoint_path(self.env, self.method)
            if self.write:
                self.log(f"{path}: a checkpoint of another configuration; moved to {self.store.quarantine(path)}")
            return None
        record = Record.from_arrays({k[len("record/"):]: v for k, v in arrays.items() if k.startswith("record/")})
        if self.write:
            self.log(f"resume {self.env} / {self.method} from its checkpoint after iteration {record.done}")
        return leaves, record

    def remove(self) -> None:
        if self.store is not None and self.write:
            self.store.remove_checkpoint(self.env, self.method)


class PopulationLoop:
    """How a unit steps a population method (hcjax.population) over its agent axis:
    `agents.population.PopulationLoop` (every `ready` iterations, each agent's objective
    from the metrics of those iterations (`objective_of`), then `population.step`, the
    donors copied into the replaced agents and every agent's new hyperparameters set, by
    `Learner.exploit`). The population is the unit's agents (its seeds); its key is
    fixed per unit."""

    def __init__(self, learner, population, ready: int, objective_of: Callable[[dict], np.ndarray]):
        from agents.population import PopulationLoop as AgentsPopulationLoop

        loop = AgentsPopulationLoop(learner, population, ready, objective_of)
        self.learner, self.population, self.ready, self.objective_of = learner, population, ready, objective_of
        self.key, self.init, self.step = loop.key, loop.init, loop.step


def objective_for(method: str, ppo_objective: str, ready: int) -> Callable[[dict], np.ndarray]:
    """metrics of the unit so far {name: (n, T)} -> (n,) the objectives a population step
    ranks (`agents.population.population_objective`)."""
    from agents.population import population_objective

    return population_objective(method, ppo_objective, ready)


def run_jax_unit(learner, seed_ids: np.ndarray, iterations: int, eval_every: int,
                 on_segment: Callable[[int], None] = lambda k: None, fast_compile: bool = False,
                 checkpoint: Checkpoint | None = None, which: np.ndarray | None = None,
                 population: PopulationLoop | None = None) -> dict[str, np.ndarray]:
    """Train len(seed_ids) agents as one vmapped program sharded over every device,
    in segments with an evaluation after every `eval_every` iterations and the last.

    Returns per-iteration metrics (n, T[, h]), eval_iteration (E,), eval_reward (n, E),
    for the n = padded agents (callers drop the padding), and timings. fast_compile:
    compile the training segments with XLA's backend optimisation off (much shorter
    compilation, slower steps: for tiny runs). checkpoint: saved after every segment and
    resumed from when present, so a killed unit continues from its last segment with
    bit-identical results. which: (n,) int32 method of every agent when the learner's
    tuner is stacked (hcjax.tuners.stacked), None otherwise. population: a population
    method stepped every `population.ready` iterations (the lineage lands in the
    returned "lineage_*" arrays).
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = agent_mesh()
    agents = NamedSharding(mesh, P("agent"))
    scalar = NamedSharding(mesh, P())
    keys = seed_keys(seed_ids, agents)

    if which is None:
        init = jax.jit(jax.vmap(lambda k: learner.init(jax.random.fold_in(k, 0))), in_shardings=agents,
                       out_shardings=agents)
        init_args = (keys,)
    else:
        from hcjax.tuners.stacked import select

        def init_one(k, w):
            k = jax.random.fold_in(k, 0)
            return learner.init(k, select(learner.tuner.init(learner.tuner_key(k)), w))

        init = jax.jit(jax.vmap(init_one), in_shardings=(agents, agents), out_shardings=agents)
        init_args = (keys, jax.make_array_from_callback(which.shape, agents, lambda index: np.asarray(which)[index]))

    def evaluate(state, k, it):
        return learner.evaluate(state, jax.random.fold_in(jax.random.fold_in(k, 1), it))

    evaluate = jax.jit(jax.vmap(evaluate, in_axes=(0, 0, None)), in_shardings=(agents, agents, scalar),
                       out_shardings=agents)
    programs = {}

    def start_state():
        state = compiled(init, *init_args, fast=True)(*init_args)  # runs once: optimising it is not worth its compile time
        return state if population is None else population.init(state)

    t0 = time.perf_counter()
    like = jax.eval_shape(init, *init_args)  # the learner state, or (learner state, population state):
    like = like if population is None else jax.eval_shape(population.init, like)
    resumed = checkpoint.load(like) if checkpoint is not None else None
    if resumed is None:
        tree = start_state()
        record = Record()
    else:
        leaves, record = resumed
        n_agent_leaves = len(jax.tree.leaves(like if population is None else like[0]))
        shardings = [agents] * n_agent_leaves + [scalar] * (len(leaves) - n_agent_leaves)  # population: replicated
        tree = jax.tree.unflatten(jax.tree.structure(like), [
            jax.make_array_from_callback(leaf.shape, sh, lambda index, leaf=leaf: leaf[index])
            for leaf, sh in zip(leaves, shardings)])
        on_segment(record.done)
    state, pop_state = (tree, None) if population is None else tree
    an_int = jax.device_put(jnp.asarray(0, jnp.int32), scalar)  # shape and sharding of the int arguments
    evaluate = compiled(evaluate, state, keys, an_int, fast=fast_compile)

    def segment(length):
        if length not in programs:  # the first iteration's number is unbatched: asks only when deciding
            program = jax.jit(jax.vmap(lambda s, start: learner.iterate(s, length, start), in_axes=(0, None)),
                              in_shardings=(agents, scalar), out_shardings=agents, donate_argnums=0)
            programs[length] = compiled(program, state, an_int, fast=fast_compile)
        return programs[length]

    ready = population.ready if population is not None else None
    for length in segments(iterations, eval_every, ready)[len(record.seg_times):]:
        ts = time.perf_counter()
        start = jax.device_put(jnp.asarray(record.done, jnp.int32), scalar)
        state, metrics = segment(length)(state, start)
        metrics = {k: to_host(v) for k, v in metrics.items()}
        done = record.done + length
        reward = None
        if done % eval_every == 0 or done == iterations:
            reward = to_host(evaluate(state, keys, jax.device_put(jnp.asarray(done, jnp.int32), scalar)))
        record.add(length, metrics, reward, 0.0)
        if population is not None and done % ready == 0 and done < iterations:
            objectives = population.objective_of(record.metrics())
            state, pop_state, parents = population.step(state, pop_state, done, jnp.asarray(objectives, jnp.float32))
            record.lineage.append((done, to_host(parents), np.asarray(objectives, np.float32)))
        record.seg_times[-1] = time.perf_counter() - ts
        if checkpoint is not None:
            checkpoint.save(state if population is None else (state, pop_state), record)
        on_segment(length)
    out = record.result(t0)
    out["segment_seconds"] = np.asarray(record.seg_times)
    return out


def run_host_unit(learner, tuner, seed_ids: np.ndarray, eval_every: int,
                  on_segment: Callable[[int], None] = lambda k: None,
                  checkpoint: Checkpoint | None = None) -> dict[str, np.ndarray]:
    """Gymnasium envs: `agents.driver` steps one vector env per agent on the host, with the
    policy, the PPO update and the tuner jitted and vmapped (not sharded). With a
    checkpoint, the learner state and the Record are saved after every segment; a resumed
    unit continues from there with new environments (gymnasium envs cannot be saved:
    the episodes in flight at the kill start over, so a resumed host unit is not
    bit-identical to an uninterrupted one)."""
    import jax

    from agents import driver

    keys = np.stack([np.asarray(jax.random.key_data(jax.random.key(int(s)))) for s in seed_ids])
    t0 = time.perf_counter()
    states, record = None, Record()
    if checkpoint is not None:
        like = jax.eval_shape(jax.vmap(learner.init), keys)
        resumed = checkpoint.load(like)
        if resumed is not None:
            leaves, record = resumed
            states = jax.tree.unflatten(jax.tree.structure(like), [jax.numpy.asarray(x) for x in leaves])
            on_segment(record.done)

    last = [time.perf_counter()]

    def callback(info):
        length = info.iteration - record.done
        now = time.perf_counter()
        record.add(length, info.metrics, info.eval_returns, now - last[0])
        last[0] = now
        if checkpoint is not None:
            checkpoint.save(info.states, record)
        on_segment(length)

    driver.run(learner.config, learner.env, tuner, keys, eval_every=eval_every, callback=callback, states=states)
    return record.result(t0)


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


def run_units(plan: Plan, env: EnvChoice, methods: list[str], keys: dict[str, str],
              on_segment: Callable[[int], None] = lambda k: None,
              memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB, checkpoint: Checkpoint | None = None
              ) -> list[R.UnitResult]:
    """Train every seed of the units (env, method) of `methods` (resuming from
    `checkpoint` when it holds one) and measure each tuner's tuning time.

    One method: its seeds are one vmapped program. Several methods (the study's
    `fuse_methods`, JAX envs only): all of them in ONE program, compiled once, with a
    stacked tuner (hcjax.tuners.stacked) whose method is chosen per agent: agent
    m * seeds + i runs method m with seed i, and gets the numbers it would get alone.
    keys: method -> the unit's config key."""
    import jax

    from agents.ppo import PPOConfig, make_learner
    from hcjax.tuners.stacked import stack

    p = plan.preset
    t0 = time.perf_counter()
    environment = _environment(env.make)
    config = PPOConfig(**ppo_options(plan, env))
    tuners = [make_method(plan, m, memory_limit_gib) for m in methods]
    population = None
    if is_population(methods[0]):  # a population method runs alone: the unit's seeds are its population
        learner = make_learner(config, environment, tuners[0])
        population = PopulationLoop(learner, tuners[0], p.tune_every, objective_for(methods[0], config.objective,
                                                                                     p.tune_every))
    else:
        learner = make_learner(config, environment, tuners[0] if len(methods) == 1 else stack(tuners))
    S, M = p.seeds, len(methods)
    seeds = np.arange(S)
    if environment.host:
        if M > 1:
            raise ValueError(f"{env.label}: methods are fused only on JAX environments, not on the host path")
        ids, n_dev = seeds, 1
        out = run_host_unit(learner, learner.tuner, ids, p.eval_every, on_segment, checkpoint=checkpoint)
    else:
        n_dev = len(jax.devices())
        n = padded_count(M * S, n_dev)
        ids = np.concatenate([np.tile(seeds, M), S + np.arange(n - M * S)])
        which = np.concatenate([np.repeat(np.arange(M), S), np.zeros(n - M * S, np.int64)]).astype(np.int32)
        out = run_jax_unit(learner, ids, p.iterations, p.eval_every, on_segment, fast_compile=p.fast_compile,
                           checkpoint=checkpoint, which=which if M > 1 else None, population=population)
    train_seconds = float(out["train_seconds"])
    results = []
    for m, (method, sub) in enumerate(zip(methods, tuners)):
        rows = slice(m * S, (m + 1) * S)

        def cut(name, dtype):
            return np.asarray(out[name][rows], dtype)

        if population is None:
            tuner_time = measure_tuner_time(sub, cut("objective", np.float32), p.tune_every)
        else:
            tuner_time = measure_population_time(sub, out["lineage_iteration"], out["lineage_objective"],
                                                 p.iterations)
        meta = dict(env=env.label, method=method, make=env.make, path=env.path, config_key=keys[method],
                    config=unit_config(plan, env, method), hparam_names=list(sub.space.names),
                    n_agents=int(len(ids)), n_devices=int(n_dev), devices=[str(d) for d in jax.devices()],
                    train_seconds=train_seconds, unit_seconds=float(time.perf_counter() - t0),
                    tuner_seconds=float(tuner_time.sum()),
                    tuning_time="host CPU replay of tell(+ask) for all agents with the run's objectives; "
                                "seconds per iteration, compilation excluded")
        if M > 1:
            meta["fused_with"] = list(methods)
        if "segment_seconds" in out:
            meta["segment_seconds"] = [float(x) for x in out["segment_seconds"]]
        results.append(R.UnitResult(
            seeds=seeds.astype(np.int32),
            train_reward=cut("train_reward", np.float32), objective=cut("objective", np.float32),
            hparams=cut("hparams", np.float32), frames=cut("frames", np.int64), rejected=cut("rejected", np.int32),
            episode_return=cut("episode_return", np.float32),
            eval_iteration=np.asarray(out["eval_iteration"], np.int32), eval_reward=cut("eval_reward", np.float32),
            tuner_time=tuner_time.astype(np.float64), meta=meta,
            **({} if population is None else dict(
                lineage_iteration=np.asarray(out["lineage_iteration"], np.int32),
                lineage_parent=np.asarray(out["lineage_parent"], np.int32),
                lineage_objective=np.asarray(out["lineage_objective"], np.float32)))))
    return results


def is_population(method: str) -> bool:
    """A population method (hcjax.populations()) rather than a per-agent tuner."""
    from hcjax import populations

    return method in populations()


def make_method(plan: Plan, method: str, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB):
    """The Tuner or Population of `method` with this study's options."""
    from hcjax import make_population, make_tuner

    make = make_population if is_population(method) else make_tuner
    return make(method, plan.space, memory_limit_gib=memory_limit_gib, **tuner_options(plan, method))


def measure_population_time(population, iterations: np.ndarray, objectives: np.ndarray, T: int) -> np.ndarray:
    """(T,) seconds of the population's init (charged to iteration 0) and of each of its
    steps (charged to the iteration it followed), replayed on the host CPU with the
    run's objectives (n, K), jitted, compilation excluded by a warm-up."""
    import jax
    import jax.numpy as jnp

    n = objectives.shape[0]
    times = np.zeros(T)
    with jax.default_device(jax.devices("cpu")[0]):
        init = jax.jit(population.init, static_argnums=1)
        step = jax.jit(population.step)
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


# ---- the study ---------------------------------------------------------------------------


def study_config(plan: Plan) -> dict[str, Any]:
    """The part of the unit configurations every unit of `plan` shares (see results.study_part)."""
    env, method = plan.units[0]
    return R.study_part(unit_config(plan, env, method))


def merge_configs(old: dict, new: dict) -> dict:
    """Manifest config of a directory that gets more environments or methods of the same
    study: the new config with the union of both env_choices and methods (old first)."""
    merged = dict(new)
    envs = {e["label"]: e for e in old.get("env_choices", [])}
    envs.update({e["label"]: e for e in new.get("env_choices", [])})
    merged["env_choices"] = list(envs.values())
    merged["envs"] = [e["label"] for e in merged["env_choices"]]
    merged["methods"] = list(dict.fromkeys(list(old.get("methods", [])) + list(new.get("methods", []))))
    return merged


def unit_keys(plan: Plan) -> dict[tuple[str, str], str]:
    """(env label, method) -> config key of every unit of `plan`."""
    return {(e.label, m): R.config_key(unit_config(plan, e, m)) for e, m in plan.units}


def prepare(plan: Plan, store: R.StudyDir,
            log: Callable[[str], None]) -> tuple[dict[tuple[str, str], str], set[tuple[str, str]]]:
    """Checks against the directory before any work (ValueError on a conflict): the
    directory's study configuration must be this plan's, and no unit file may hold
    another configuration (unreadable ones are moved aside). Writes the manifest.
    Returns the config key of every unit and the (env label, method) units finished."""
    study = study_config(plan)
    skey = R.config_key(study)
    store.check_study(study, skey)
    keys = unit_keys(plan)
    # finished: raises on a conflict, quarantines corrupt files
    done = {unit for unit, key in keys.items() if store.finished(*unit, key, log=log)}
    store.write_manifest(plan.to_dict(), study, skey, merge=merge_configs)
    return keys, done


def run(plan: Plan, store: R.StudyDir, keys: dict[tuple[str, str], str], finished: set[tuple[str, str]] | None,
        progress: bool = True, log: Callable[[str], None] | None = None,
        memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> list[Path]:
    """Run every unit of `plan` not already finished in `store` (`finished`, from
    `prepare`; None: looked up in `store`, as processes other than 0 do); returns the
    unit files. Only process 0 writes (under jax.distributed)."""
    import jax

    from experiments.progress import Progress

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    writer = jax.process_index() == 0
    progress = progress and writer
    paths = []
    study_key = R.config_key(study_config(plan))
    with Progress(len(plan.units), "units", "unit", enabled=progress, position=0) as bar:
        for env, methods in unit_groups(plan):
            pending = []
            for method in methods:
                unit = (env.label, method)
                done = (unit in finished) if finished is not None else store.finished(*unit, keys[unit], log=log)
                if done:
                    log(f"skip {env.label} / {method}: already finished in {store.path}")
                    bar.update(1)
                    paths.append(store.unit_path(env.label, method))
                else:
                    pending.append(method)
            if not pending:
                continue
            group_key = R.config_key([keys[(env.label, m)] for m in pending])
            checkpoint = Checkpoint(store, env.label, "+".join(pending), group_key, log, write=writer)
            with Progress(plan.preset.iterations, f"{env.label}/{'+'.join(pending)}", enabled=progress, position=1,
                          leave=False) as inner:
                results = run_units(plan, env, pending, {m: keys[(env.label, m)] for m in pending},
                                    on_segment=inner.update, memory_limit_gib=memory_limit_gib, checkpoint=checkpoint)
            for result in results:
                result.meta["study_key"] = study_key
                if writer:
                    paths.append(store.save_unit(result))
                log(f"done {env.label} / {result.meta['method']}: {result.meta['unit_seconds']:.1f} s "
                    f"(tuning {result.meta['tuner_seconds']:.3g} s)")
                bar.update(1, note=f"{env.label} / {result.meta['method']}")
            checkpoint.remove()
    return paths


def unit_groups(plan: Plan) -> list[tuple[EnvChoice, list[str]]]:
    """(env, methods) run as one program each: every method alone, or, with the study's
    fuse_methods, all per-agent methods of a JAX environment together (compiled once);
    population methods always run alone."""
    groups = []
    for env in plan.envs:
        fused = [m for m in plan.preset.methods if not is_population(m)]
        if plan.preset.fuse_methods and env.path != "gymnasium" and len(fused) > 1:
            groups.append((env, fused))
            groups += [(env, [m]) for m in plan.preset.methods if is_population(m)]
        else:
            groups += [(env, [m]) for m in plan.preset.methods]
    return groups


def summary(units: list[R.UnitResult]) -> str:
    """The results and success tables (Markdown) of a study's units."""
    from experiments import plots

    return plots.results_table(units) + "\n" + plots.success_table(units)
