"""Population-based tuners over the agent axis of one compiled program.

    pop = hcjax.make_population("pbt", space, quantile=0.25)
    state, values = pop.init(key, n)                              # values: (n, h)
    state, values, parents = pop.step(state, key, objectives)     # every `ready` iterations
    agents = hcjax.exploit(agents, parents)                       # params, opt_state, obs stats
    # or, with `agents` donated to the jitted call, only the replaced rows, in place:
    agents = hcjax.population.exploit_in_place(agents, parents)

Modules: `base` (the Population interface and registry; `interval`, a `ready` that divides
the run), `exploit` (the selection rule and the gather), `sharding` (the agent axis over
every process's devices: `agent_mesh`,
`shard_agents`, `replicate`, `exploit_sharded`, `gather_agents`), `pbt`, `pb2` (`pb2_population`), `shared`
(`hypercontroller_shared`: ridge models learned from every agent's observations, no exploit).
Importing this package registers the methods.
"""
from hcjax.population import pb2, pbt, shared  # noqa: F401  (registers the methods)
from hcjax.population.base import (
    IntervalWarning,
    Population,
    interval,
    make_population,
    population_options,
    populations,
)
from hcjax.population.exploit import exploit, exploit_in_place, quantile_size, select
from hcjax.population.sharding import (
    agent_mesh,
    agent_sharding,
    exploit_sharded,
    gather_agents,
    replicate,
    shard_agents,
)

__all__ = ["IntervalWarning", "Population", "agent_mesh", "agent_sharding", "exploit", "exploit_in_place",
           "exploit_sharded", "gather_agents", "interval", "make_population", "population_options", "populations",
           "quantile_size", "replicate", "select", "shard_agents"]
