"""The agent axis over every device of every process (`jax.distributed`, one program per process).

    mesh = hcjax.population.agent_mesh()                     # Mesh(jax.devices(), ("agent",))
    keys = hcjax.population.shard_agents(np.asarray(jax.random.split(key, n)), mesh)   # (n, 2)
    key = hcjax.population.replicate(np.asarray(key), mesh)  # the same value on every device
    ...                                                      # jitted steps over these global arrays
    host = hcjax.population.gather_agents(tree)              # NumPy, all n agents, on every process

Under `jax.distributed` each process holds only its own devices' rows, and a jitted
program over the mesh must be given global arrays: `shard_agents` and `replicate` build
them from a host value that every process computes alike (same seed, same code), each
process placing only the slices its devices hold (`jax.make_array_from_callback`).
Inside the jitted program the population step's ranking all-gathers the (n,) objectives
and `hcjax.exploit`'s gather moves the donors' rows between devices and processes (see
`hcjax.population.exploit`). `gather_agents` brings a result back whole to every process
(`jax.experimental.multihost_utils.process_allgather`); print or write from process 0
only. With one process the same calls work on its local devices.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def agent_mesh(devices=None) -> Mesh:
    """A one-axis mesh named "agent" over `devices` (default: `jax.devices()`, every process's)."""
    return Mesh(np.asarray(jax.devices() if devices is None else devices), ("agent",))


def agent_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis split over the mesh's "agent" axis: device d holds rows [d n / D, (d + 1) n / D)."""
    return NamedSharding(mesh, PartitionSpec("agent"))


def _global(tree, sharding: NamedSharding):
    def place(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(place, tree)


def shard_agents(tree, mesh: Mesh):
    """Every leaf (n, ...), the same host value on every process -> a global array with
    its agent axis sharded over the mesh. ValueError unless n is a multiple of the
    number of devices (each device holds n / D agents)."""
    devices = mesh.devices.size
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        shape = np.shape(leaf)
        if not shape or shape[0] % devices:
            raise ValueError(f"shard_agents: every leaf's leading (agent) axis must be a multiple of the mesh's "
                             f"{devices} devices; leaf tree{jax.tree_util.keystr(path)} has shape {shape}: "
                             f"pad the population or use fewer devices")
    return _global(tree, agent_sharding(mesh))


def replicate(tree, mesh: Mesh):
    """Every leaf, the same host value on every process -> a global array whole on every device."""
    return _global(tree, NamedSharding(mesh, PartitionSpec()))


def gather_agents(tree):
    """Every leaf of global (or local) arrays -> one NumPy array of its global value, on every
    process (a collective: every process must call it)."""
    return multihost_utils.process_allgather(tree, tiled=True)
