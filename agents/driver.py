"""Host-side segmented driver for long PPO runs of N vmapped agents.

    result = run(config, env, tuner, keys, eval_every=10, callback=cb)

JAX envs (Brax, gymnax): per segment one jitted, vmapped `lax.scan` of K iterations for
all agents, then (every `eval_every` iterations) a jitted, vmapped evaluation
(PPOConfig.eval_episodes episodes with eval_policy). Host envs (gymnasium): each agent owns
a `SyncVectorEnv` of num_envs copies; the rollout is stepped on the host with a jitted, vmapped policy, and the PPO
update, the tuner's tell/ask and the metrics run in the same jitted `learn` as the JAX
path, so both give the same metrics.

A population (`hcjax.Population`, JAX envs only) is stepped over the agent axis every
`tune_every` iterations (`agents.population.PopulationLoop`: the replaced agents continue
from their donors); the lineage (iteration, parents, objectives) lands in the RunResult.

`callback(info: SegmentInfo)` runs after every segment (checkpoints, progress bars,
logs); returning True stops the run early. Resume with `states=` (e.g. a checkpoint;
tuners only).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agents.population import PopulationLoop
from agents.ppo import METRIC_KEYS, PPOConfig, make_learner
from hcjax.population import Population
from hcjax.tuner import Tuner


@dataclasses.dataclass
class SegmentInfo:
    """What a callback sees after a segment.

    iteration: iterations done so far; num_iterations: the run's total;
    states: batched LearnerState (agents leading; device arrays);
    metrics: this segment's metrics, numpy, each (n_agents, K, ...);
    eval_returns: (n_agents,) numpy or None when no evaluation ran; elapsed_s: wall time.
    """

    iteration: int
    num_iterations: int
    states: Any
    metrics: dict
    eval_returns: np.ndarray | None
    elapsed_s: float


@dataclasses.dataclass
class RunResult:
    """metrics: each (n_agents, iterations, ...) numpy; eval_iterations: (n_evals,) the
    iteration count at each evaluation; eval_returns: (n_agents, n_evals); states: final
    batched LearnerState; wall_s: seconds; frames: (n_agents,) valid frames collected.
    Populations only (empty otherwise): lineage_iteration (K,) the iteration count at each
    population step, lineage_parent (n_agents, K) int32 each agent's donor (itself when
    kept), lineage_objective (n_agents, K) float32 the objectives ranked."""

    metrics: dict
    eval_iterations: np.ndarray
    eval_returns: np.ndarray
    states: Any
    wall_s: float
    frames: np.ndarray
    lineage_iteration: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    lineage_parent: np.ndarray | None = None
    lineage_objective: np.ndarray | None = None


def run(config: PPOConfig, env, tuner_or_population, keys, *, eval_every: int = 10, segment: int | None = None,
        callback: Callable[[SegmentInfo], Any] | None = None, states=None) -> RunResult:
    """Train len(keys) agents for config.num_iterations iterations.

    tuner_or_population: an hcjax.Tuner (every agent its own) or an hcjax.Population
    (the agents are the population, stepped every config.tune_every iterations).
    keys: (n_agents, 2) PRNG keys, one per agent (with a tuner, agent i =
    make_train(...)(keys[i])).
    eval_every: evaluate every that many iterations and after the last one (0: never).
    segment: iterations per jitted segment (default eval_every, or 10 when eval_every
    is 0); a segment never crosses an evaluation point. states: batched LearnerState
    to resume from.
    """
    if not isinstance(eval_every, int) or eval_every < 0:
        raise ValueError(f"run: eval_every must be an integer >= 0, got {eval_every!r}")
    seg = segment if segment is not None else (eval_every or 10)
    if not isinstance(seg, int) or seg < 1:
        raise ValueError(f"run: segment must be an integer >= 1, got {segment!r}")
    if not isinstance(tuner_or_population, (Tuner, Population)):
        raise ValueError(f"run: tuner_or_population must be an hcjax.Tuner or an hcjax.Population, "
                         f"got {type(tuner_or_population).__name__}")
    keys = jnp.asarray(keys)
    if keys.ndim != 2:
        raise ValueError(f"run: keys must be (n_agents, 2) PRNG keys, got shape {keys.shape}")
    learner = make_learner(config, env, tuner_or_population)
    population = None
    if isinstance(tuner_or_population, Population):
        if learner.env.host:
            raise ValueError(f"run: population method {tuner_or_population.name!r} runs on JAX environments only "
                             f"(the agent axis is one program); {learner.env.name} is a host (gymnasium) env")
        if states is not None:
            raise ValueError("run: states= resumes tuner runs only; a population run starts from the beginning")
        population = PopulationLoop(learner, tuner_or_population, config.tune_every)
    if learner.env.host:
        return _run_host(learner, keys, eval_every, seg, callback, states)
    return _run_jax(learner, keys, eval_every, seg, callback, states, population)


def _schedule(start: int, total: int, eval_every: int, seg: int, ready: int = 0):
    """Segment lengths from `start` to `total` that stop at every evaluation point and
    (ready > 0) at every population step."""
    done, out = start, []
    while done < total:
        k = min(seg, total - done)
        for every in (eval_every, ready):
            if every:
                k = min(k, every - done % every)
        out.append(k)
        done += k
    return out


def _eval_keys(keys, iteration):
    return jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, 0x5EED), iteration))(keys)


def _concat(chunks: list[dict]) -> dict:
    return {name: np.concatenate([c[name] for c in chunks], axis=1) for name in METRIC_KEYS}


def _finish(learner, keys, eval_every, seg, callback, states, init_fn, segment_fn, eval_fn, population=None):
    """The segment loop of both paths: segment_fn(states, k, start) runs iterations
    start..start+k-1; eval_fn(states, eval keys, iteration) evaluates after `iteration`;
    population (a PopulationLoop) steps after every `population.ready` iterations."""
    cfg = learner.config
    t0 = time.perf_counter()
    if states is None:
        states = init_fn(keys)
    if population is not None:
        states, pop_state = population.init(states)
    start = int(np.asarray(states.iteration).reshape(-1)[0])
    chunks, eval_its, eval_rets, lineage = [], [], [], []
    done = start
    ready = population.ready if population is not None else 0
    for k in _schedule(start, cfg.num_iterations, eval_every, seg, ready):
        states, metrics = segment_fn(states, k, done)
        metrics = {name: np.asarray(v) for name, v in metrics.items()}
        chunks.append(metrics)
        done += k
        rets = None
        if eval_every and (done % eval_every == 0 or done == cfg.num_iterations):
            rets = np.asarray(eval_fn(states, _eval_keys(keys, done), done))
            eval_its.append(done)
            eval_rets.append(rets)
        if population is not None and population.due(done, cfg.num_iterations):
            states, pop_state, parents, objectives = population.advance(states, pop_state, done, _concat(chunks))
            lineage.append((done, np.asarray(parents, np.int32), objectives))
        if callback is not None:
            stop = callback(SegmentInfo(iteration=done, num_iterations=cfg.num_iterations, states=states,
                                        metrics=metrics, eval_returns=rets, elapsed_s=time.perf_counter() - t0))
            if stop:
                break
    n = keys.shape[0]
    if chunks:
        metrics = _concat(chunks)
    else:
        metrics = {name: np.zeros((n, 0)) for name in METRIC_KEYS}
    ev = np.stack(eval_rets, axis=1) if eval_rets else np.zeros((n, 0), np.float32)
    its, parents, objectives = zip(*lineage) if lineage else ((), [np.zeros(n, np.int32)], [np.zeros(n, np.float32)])
    return RunResult(metrics=metrics, eval_iterations=np.asarray(eval_its, np.int64), eval_returns=ev,
                     states=states, wall_s=time.perf_counter() - t0,
                     frames=metrics["frames"].sum(axis=1) if chunks else np.zeros(n, np.int64),
                     lineage_iteration=np.asarray(its, np.int32),
                     lineage_parent=np.stack(parents, axis=1)[:, :len(its)],
                     lineage_objective=np.stack(objectives, axis=1)[:, :len(its)])


def _run_jax(learner, keys, eval_every, seg, callback, states, population=None):
    init_fn = jax.jit(jax.vmap(learner.init))
    compiled = {}

    def segment_fn(states, k, start):
        if k not in compiled:  # the first iteration's number is unbatched: asks only when deciding
            compiled[k] = jax.jit(jax.vmap(lambda s, start: learner.iterate(s, k, start), in_axes=(0, None)))
        return compiled[k](states, np.int32(start))

    evaluate = jax.jit(jax.vmap(learner.evaluate))

    def eval_fn(states, eval_keys, _iteration):
        return evaluate(states, eval_keys)
    return _finish(learner, keys, eval_every, seg, callback, states, init_fn, segment_fn, eval_fn, population)


class HostRollout:
    """The host half of the gymnasium path: one SyncVectorEnv per agent (reset with seeds
    from the agents' keys, shifted when resuming at iteration `start`).

    `collect(states)` steps the envs for each agent's own n_steps (from its batch size)
    and returns the padded, masked trajectory (agents leading) for the jitted `learn`.
    """

    def __init__(self, learner, keys, start: int = 0):
        self.learner = learner
        cfg, env = learner.config, learner.env
        self.n = int(keys.shape[0])
        self.E, self.T = cfg.num_envs, learner.max_steps
        seeds = np.asarray(jax.vmap(lambda k: jax.random.randint(jax.random.fold_in(k, 0xE4F), (), 0, 2**30))(keys))
        self.seeds = [int(s) + 104729 * start for s in seeds]  # resumed at iteration `start`: other episodes
        self.vecs = [env.vector(self.E) for _ in range(self.n)]
        self.obs = np.stack([v.reset(seed=s)[0] for v, s in zip(self.vecs, self.seeds)]).astype(np.float32)
        self.running = np.zeros((self.n, self.E), np.float32)
        self.act = jax.jit(jax.vmap(learner.act, in_axes=(0, 0, None)))
        self.value = jax.jit(jax.vmap(learner.value))
        self.n_steps = jax.jit(jax.vmap(learner.n_steps))
        self.eval_action = jax.jit(jax.vmap(lambda s, o, k, t: learner.eval_action(s, o, jax.random.fold_in(k, t)),
                                            in_axes=(0, 0, 0, None)))
        self.eval_envs = None

    def collect(self, states):
        n, E, T = self.n, self.E, self.T
        env = self.learner.env
        n_steps = np.asarray(self.n_steps(states))
        obs_size = env.obs_size
        a_shape = () if env.discrete else (env.action_size,)
        traj = dict(obs=np.zeros((n, T, E, obs_size), np.float32), raw_obs=np.zeros((n, T, E, obs_size), np.float32),
                    action=np.zeros((n, T, E) + a_shape, np.int32 if env.discrete else np.float32),
                    logp=np.zeros((n, T, E), np.float32), value=np.zeros((n, T, E), np.float32),
                    reward=np.zeros((n, T, E), np.float32), ep_return=np.zeros((n, T, E), np.float32),
                    done=np.zeros((n, T, E), bool), valid=np.zeros((n, T, E), bool), ep_done=np.zeros((n, T, E), bool))
        for t in range(int(n_steps.max())):
            out = {k: np.asarray(v) for k, v in self.act(states, self.obs, t).items()}
            for i in range(n):
                if t >= n_steps[i]:
                    continue
                nxt, r, term, trunc, _ = self.vecs[i].step(out["env_action"][i])
                d = np.logical_or(term, trunc)
                r = np.asarray(r, np.float32)
                acc = self.running[i] + r
                traj["obs"][i, t], traj["raw_obs"][i, t] = out["obs_norm"][i], self.obs[i]
                for name in ("action", "logp", "value"):
                    traj[name][i, t] = out[name][i]
                traj["reward"][i, t], traj["done"][i, t], traj["valid"][i, t] = r, d, True
                traj["ep_done"][i, t], traj["ep_return"][i, t] = d, np.where(d, acc, 0.0)
                self.running[i] = np.where(d, 0.0, acc)
                self.obs[i] = nxt  # same-step auto-reset: the next episode's first obs where done
        traj["last_value"] = np.asarray(self.value(states, self.obs))
        return traj

    def evaluate(self, states, keys, iteration: int):
        """(n,) float32 mean returns of config.eval_episodes episodes per agent, each of at most
        config.eval_steps steps from its own seeded reset, acting with config.eval_policy
        (`Learner.eval_action`; a sampled policy draws with keys (n, 2) folded with the episode
        and the step)."""
        cfg = self.learner.config
        if self.eval_envs is None:
            self.eval_envs = [self.learner.env.single() for _ in range(self.n)]
        returns = np.zeros((cfg.eval_episodes, self.n), np.float64)
        for e in range(cfg.eval_episodes):
            seeds = [s + 7919 * (iteration + 1) + 1000003 * e for s in self.seeds]
            obs = np.stack([env.reset(seed=s)[0] for env, s in zip(self.eval_envs, seeds)]).astype(np.float32)
            alive = np.ones(self.n, bool)
            for t in range(cfg.eval_steps):
                actions = np.asarray(self.eval_action(states, obs, keys, e * cfg.eval_steps + t))
                for i in range(self.n):
                    if alive[i]:
                        o, r, term, trunc, _ = self.eval_envs[i].step(actions[i])
                        returns[e, i] += r
                        obs[i] = o
                        alive[i] = not (term or trunc)
                if not alive.any():
                    break
        return returns.mean(axis=0).astype(np.float32)

    def close(self):
        for v in self.vecs:
            v.close()
        for e in self.eval_envs or []:
            e.close()


def _run_host(learner, keys, eval_every, seg, callback, states):
    start = 0 if states is None else int(np.asarray(states.iteration).reshape(-1)[0])
    rollout = HostRollout(learner, keys, start)
    learn = jax.jit(jax.vmap(learner.learn, in_axes=(0, 0, None)))
    init_fn = jax.jit(jax.vmap(learner.init))
    tune_every = learner.config.tune_every

    def segment_fn(states, k, start):
        ms = []
        for it in range(start, start + k):
            states, m = learn(states, rollout.collect(states), np.bool_((it + 1) % tune_every == 0))
            ms.append(m)
        return states, jax.tree.map(lambda *x: jnp.stack(x, axis=1), *ms)

    def eval_fn(states, eval_keys, iteration):
        return rollout.evaluate(states, eval_keys, iteration)

    try:
        return _finish(learner, keys, eval_every, seg, callback, states, init_fn, segment_fn, eval_fn)
    finally:
        rollout.close()
