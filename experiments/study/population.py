"""How a unit steps a population method over its agent axis (`PopulationLoop`) and the
objectives a population step ranks (`objective_for`)."""
from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from hcjax.population.exploit import exploit_in_place


class PopulationLoop:
    """How a unit steps a population method (hcjax.population) over its agent axis:
    every `ready` iterations, each agent's objective from the metrics of those
    iterations (`objective_of`), then `population.step`, the donors' networks copied
    into the replaced agents (parameters, optimiser state, observation statistics, and
    the reference levels of the objective, so the next change is measured from the
    donor's level) and every agent's new hyperparameters set (`learner.set_hparams`).
    The population is the unit's agents (its seeds); its key is fixed per unit."""

    def __init__(self, learner, population, ready: int, objective_of: Callable[[dict], np.ndarray]):
        self.learner, self.population, self.ready, self.objective_of = learner, population, ready, objective_of
        self.key = jax.random.PRNGKey(0x9B7)

        def init(state):
            pop_state, values = population.init(jax.random.fold_in(self.key, 0), state.iteration.shape[0])
            return jax.vmap(learner.set_hparams)(state, values), pop_state

        def step(state, pop_state, done, objectives):
            pop_state, values, parents = population.step(pop_state, jax.random.fold_in(self.key, done), objectives)
            # only the replaced rows are written, in place (the state is donated); none for
            # hypercontroller_shared, whose parents are every agent itself
            fields = ("params", "opt_state", "obs_stats", "prev_reward", "has_reward", "prev_return", "has_return")
            state = state.replace(**exploit_in_place({f: getattr(state, f) for f in fields}, parents))
            return jax.vmap(learner.set_hparams)(state, values), pop_state, parents

        self.init, self.step = jax.jit(init), jax.jit(step, donate_argnums=(0, 1))


def objective_for(method: str, ppo_objective: str, ready: int) -> Callable[[dict], np.ndarray]:
    """metrics of the unit so far {name: (n, T)} -> (n,) the objectives a population step
    ranks: the level of performance for pbt / pb2_population (the mean training reward
    of the last `ready` iterations; the last mean episode return when the PPO objective
    is "return_change", whose per-step reward may be constant), and the PPO objective
    (a change) averaged over them for hypercontroller_shared."""
    def objective(metrics):
        if method == "hypercontroller_shared":
            return np.mean(metrics["objective"][:, -ready:], axis=1)
        if ppo_objective == "return_change":
            return metrics["episode_return"][:, -1]
        return np.mean(metrics["train_reward"][:, -ready:], axis=1)

    return objective
