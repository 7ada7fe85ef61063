"""The agent axis over every device of every process (`jax.distributed`, one program per process).

    mesh = hcjax.population.agent_mesh()                     # Mesh(jax.devices(), ("agent",))
    keys = hcjax.population.shard_agents(np.asarray(jax.random.split(key, n)), mesh)   # (n, 2)
    key = hcjax.population.replicate(np.asarray(key), mesh)  # the same value on every device
    ...                                                      # jitted steps over these global arrays
    agents = hcjax.population.exploit_sharded(agents, parents, mesh, donors=m)   # under jax.jit
    host = hcjax.population.gather_agents(tree)              # NumPy, all n agents, on every process

Under `jax.distributed` each process holds only its own devices' rows, and a jitted
program over the mesh must be given global arrays: `shard_agents` and `replicate` build
them from a host value that every process computes alike (same seed, same code), each
process placing only the slices its devices hold (`jax.make_array_from_callback`).
Inside the jitted program the population step's ranking all-gathers the (n,) objectives.
`hcjax.exploit`'s gather is correct on a sharded agent axis, but XLA partitions it by
all-gathering every leaf: each device receives all n agents' rows (n x 3.1 MB for PPO on
HalfCheetah), in memory and over the network. `exploit_sharded` moves only the donors'
rows: each device contributes the donors it holds to a (donors, ...) buffer summed over
the "agent" axis (one all-reduce of `donors` rows, exact: every other device adds -0.0
to a float, which leaves every number and signed zero as it is and a NaN a NaN, or 0 to
an integer; a float all-reduce ran twice as fast on XLA:CPU as the same bytes as
integers), then copies the donor row into each of its replaced rows, row by row, in
place when the tree is donated (as `exploit_in_place` does). `gather_agents` brings a result back whole to every process
(`jax.experimental.multihost_utils.process_allgather`); print or write from process 0
only. With one process the same calls work on its local devices.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from hcjax.population.exploit import check_parents


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


def exploit_sharded(tree, parents: jax.Array, mesh: Mesh, donors: int | None = None):
    """`hcjax.exploit(tree, parents)` for leaves (n, ...) whose agent axis is sharded over
    `mesh` (`agent_sharding`), moving only the donors' rows (module docstring); the result
    keeps the agent sharding. Jittable (call it under `jax.jit`, with the tree donated to
    reuse its buffers).

    `donors` (static): an upper bound on the number of distinct donors, the rows each
    device receives; default n // 2. Parents from `select` (every `pbt` and
    `pb2_population` step) have at most m = `quantile_size(n, quantile)` donors, and pass
    m to move the fewest rows. Parents with more distinct donors than `donors` are out of
    contract: agents whose donor did not fit keep their own rows. Checks: `check_parents`,
    and ValueError unless n is a multiple of the mesh's device count.
    """
    parents = check_parents("exploit_sharded", tree, parents)
    n, devices = parents.shape[0], mesh.devices.size
    if n % devices:
        raise ValueError(f"exploit_sharded: the n = {n} agents must be a multiple of the mesh's {devices} devices")
    donors = n // 2 if donors is None else donors
    if not isinstance(donors, int) or not 1 <= donors <= n:
        raise ValueError(f"exploit_sharded: donors must be an integer in [1, n] = [1, {n}] (e.g. quantile_size(n, q)), "
                         f"got {donors!r}")
    rows = n // devices

    def local(tree, parents):  # this device's rows (rows, ...), all n parents
        start = jax.lax.axis_index("agent") * rows
        agents = jnp.arange(n, dtype=jnp.int32)
        is_donor = jnp.zeros((n,), bool).at[parents].max(parents != agents)
        donor_ids = jnp.nonzero(is_donor, size=donors, fill_value=n)[0].astype(jnp.int32)  # ascending, n = unused
        held = (donor_ids >= start) & (donor_ids < start + rows)
        own_parents = jax.lax.dynamic_slice_in_dim(parents, start, rows)
        slot = jnp.searchsorted(donor_ids, own_parents).clip(0, donors - 1)
        take = (own_parents != start + jnp.arange(rows, dtype=jnp.int32)) & (donor_ids[slot] == own_parents)

        def donor_rows(x):  # (donors, ...): every donor's row, from the device that holds it
            mine = jnp.take(x, (donor_ids - start).clip(0, rows - 1), axis=0)
            # the other devices add -0.0 to a float (x + -0.0 == x, signed zeros too) or 0 to an integer
            zero = -0.0 if jnp.issubdtype(x.dtype, jnp.floating) else 0
            mine = jnp.where(held.reshape((donors,) + (1,) * (x.ndim - 1)), mine, jnp.asarray(zero, x.dtype))
            if x.dtype == jnp.bool_:
                return jax.lax.psum(mine.astype(jnp.uint8), "agent").astype(bool)
            return jax.lax.psum(mine, "agent")

        buffers = jax.tree.map(donor_rows, tree)
        targets = jnp.nonzero(take, size=rows, fill_value=0)[0].astype(jnp.int32)

        def copy_row(k, t):  # one replaced row of every leaf, in place when the tree is donated
            dst = targets[k]
            return jax.tree.map(lambda x, b: jax.lax.dynamic_update_index_in_dim(
                x, jax.lax.dynamic_index_in_dim(b, slot[dst], 0, keepdims=True), dst, 0), t, buffers)

        return jax.lax.fori_loop(0, jnp.sum(take).astype(jnp.int32), copy_row, tree)

    spec = PartitionSpec("agent")
    return jax.shard_map(local, mesh=mesh, in_specs=(spec, PartitionSpec()), out_specs=spec)(tree, parents)
