"""Population-based training of PPO agents: an `hcjax.Population` stepped over the
agent axis of a batch of learner states.

    loop = PopulationLoop(learner, population, ready=config.tune_every)
    states, pop_state = loop.init(states)                  # every agent's first values
    ...train `ready` iterations...
    states, pop_state, parents = loop.step(states, pop_state, done, loop.objective_of(metrics))

Every `ready` iterations each agent's objective is read from the metrics of those
iterations (`population_objective`), the population steps, the replaced agents continue
from their donors (`Learner.exploit`: network, optimiser state, observation statistics
and objective levels) and every agent gets its new hyperparameters. The population's key
is fixed (POPULATION_KEY), folded with the iteration count at each step.

On a mesh (`mesh`: a 1-D `jax.sharding.Mesh`, e.g. every device of every process under
`jax.distributed`) both programs take and give the learner states sharded over its axis
and the population state, the objectives and the parents replicated: the ranking sees the
whole population and XLA moves the donors' rows between devices (and processes) inside
the compiled step. Every process passes the same objectives (computed from the gathered
metrics) and gets the same parents.
"""
from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

POPULATION_KEY = 0x9B7


def population_objective(method: str, ppo_objective: str, ready: int) -> Callable[[dict], np.ndarray]:
    """metrics so far {name: (n, T)} -> (n,) the objectives a population step ranks: the
    level of performance for pbt / pb2_population (the mean training reward of the last
    `ready` iterations; the last mean episode return when the PPO objective is
    "return_change", whose per-step reward may be constant), and the PPO objective (a
    change) averaged over them for hypercontroller_shared."""
    def objective(metrics):
        if method == "hypercontroller_shared":
            return np.mean(metrics["objective"][:, -ready:], axis=1)
        if ppo_objective == "return_change":
            return metrics["episode_return"][:, -1]
        return np.mean(metrics["train_reward"][:, -ready:], axis=1)

    return objective


class PopulationLoop:
    """The jitted population steps of one batch of agents of `learner` (module docstring).

    init(states) -> (states with the population's first values, population state);
    step(states, pop_state, done, objectives (n,)) -> (states, pop_state, parents (n,)),
    with states and pop_state donated. objective_of: metrics -> (n,) objectives (default
    `population_objective(population.name, learner.config.objective, ready)`). mesh: None
    (placement left to JAX), or a 1-D Mesh whose axis shards the agents (module docstring).
    """

    def __init__(self, learner, population, ready: int, objective_of: Callable[[dict], np.ndarray] | None = None,
                 mesh=None):
        if not isinstance(ready, int) or ready < 1:
            raise ValueError(f"PopulationLoop: ready must be an integer >= 1, got {ready!r}")
        self.learner, self.population, self.ready = learner, population, ready
        self.objective_of = objective_of or population_objective(population.name, learner.config.objective, ready)
        self.key = jax.random.PRNGKey(POPULATION_KEY)
        if mesh is None:
            self.init = jax.jit(self._init)
            self.step = jax.jit(self._step, donate_argnums=(0, 1))
        else:
            if len(mesh.axis_names) != 1:
                raise ValueError(f"PopulationLoop: mesh must have one axis (the agents), got axes {mesh.axis_names}")
            agents, whole = NamedSharding(mesh, P(mesh.axis_names[0])), NamedSharding(mesh, P())
            self.init = jax.jit(self._init, in_shardings=agents, out_shardings=(agents, whole))
            self.step = jax.jit(self._step, donate_argnums=(0, 1), in_shardings=(agents, whole, whole, whole),
                                out_shardings=(agents, whole, whole))

    def due(self, done: int, iterations: int) -> bool:
        """Whether a population step follows the segment that ended after `done` of
        `iterations`: every `ready` iterations, never after the last."""
        return done % self.ready == 0 and done < iterations

    def advance(self, states, pop_state, done: int, metrics: dict):
        """The population step after `done` iterations, ranking the objectives of `metrics`
        (the run's metrics so far, {name: (n, done)}) -> (states, pop_state, parents (n,),
        objectives (n,) float32 NumPy); states and pop_state are donated. The objectives go
        in as NumPy, which a multi-process program takes as the same value in every process."""
        objectives = np.asarray(self.objective_of(metrics), np.float32)
        states, pop_state, parents = self.step(states, pop_state, done, objectives)
        return states, pop_state, parents, objectives

    def _init(self, states):
        pop_state, values = self.population.init(jax.random.fold_in(self.key, 0), states.iteration.shape[0])
        return jax.vmap(self.learner.set_hparams)(states, values), pop_state

    def _step(self, states, pop_state, done, objectives):
        pop_state, values, parents = self.population.step(pop_state, jax.random.fold_in(self.key, done), objectives)
        return self.learner.exploit(states, parents, values), pop_state, parents
