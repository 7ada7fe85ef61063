"""hcjax: online hyperparameter tuners for reinforcement learning, in pure JAX.

    tuner = hcjax.make_tuner("hypercontroller", space, d=10, s=1)
    state = tuner.init(key)
    state, values = tuner.ask(state, key)
    state = tuner.tell(state, objective)
    state, values = tuner.step(state, key, objective, decide)   # tell, then ask if decide

Inside your own jitted training loop: `space.as_dict(values)` (values by name),
`tuner.values(state)` (the configuration in effect), `hcjax.objectives` (what to tell),
`hcjax.optax.set_hyperparams` (hyperparameters of an optax optimiser) and
`hcjax.control` (a control group at the defaults in the same batch, and its report); see
docs/own-training-loop.md.

Population-based training over the agent axis (`hcjax.population`):
`pop = hcjax.make_population("pbt", space)`, `state, values = pop.init(key, n)`,
`state, values, parents = pop.step(state, key, objectives)`, then
`hcjax.exploit(agent_states, parents)`.

From a plain Python loop: `hcjax.HostTuner(name, space, seed=0, **options)`, with
`ask() -> {name: value}`, `tell(objective)`, `state_dict()` / `load_state_dict(d)`.

Importing hcjax sets OPENBLAS_NUM_THREADS=1 unless it is already set (it only acts if
OpenBLAS, which JAX's CPU LAPACK calls go through, is not loaded yet). Multi-threaded
OpenBLAS spins for cores that XLA's own threads hold: measured on a busy 2-core CPU, a
1000 x 1000 Cholesky took 2 s instead of 18 ms. Set the variable yourself to override.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from hcjax import control, objectives, optax, stats
from hcjax.host import HostTuner
from hcjax.keys import check_keys
from hcjax.population import Population, exploit, make_population, population_options, populations
from hcjax.space import Hyperparameter, Space, ppo_space, unit_space
from hcjax.tuner import Tuner
from hcjax.tuners import available, make_tuner, options

__all__ = ["HostTuner", "Hyperparameter", "Population", "Space", "Tuner", "available", "check_keys", "control",
           "exploit", "make_population", "make_tuner", "objectives", "optax", "options", "population_options",
           "populations", "ppo_space", "stats", "unit_space"]
__version__ = "0.1.0"
