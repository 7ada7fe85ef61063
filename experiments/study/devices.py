"""The devices of a study: one 1-D mesh named "agent" over every device
(`hcjax.population.agent_mesh`), the agent axis
padded to a multiple of the device count, one PRNG key per seed, and arrays back to the host.

Every array of a unit's learner state is sharded with `NamedSharding(mesh, P("agent"))`, so
each device trains its own slice of agents and no communication is needed (but for a
population unit's step, whose ranking and exploit span the whole mesh:
`agents.population.PopulationLoop`). The number of
agents is padded up to a multiple of the device count with extra seeds (ids after the real
ones) whose results are dropped. Seed i of every method uses the key PRNGKey(i).
"""
from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils

# A seed id is stored as int32 in a unit (UnitResult.seeds) and names the key PRNGKey(id): ids
# above this bound would wrap when stored (2**32 read back as 0, 2**31 as negative).
MAX_SEED_ID = 2**31 - 1


def check_seed_ids(field: str, ids) -> np.ndarray:
    """(n,) int64 seed ids from a non-empty sequence of distinct whole numbers in [0, MAX_SEED_ID]
    (not bools); ValueError naming `field` and the bound otherwise."""
    values = list(ids) if isinstance(ids, (list, tuple, np.ndarray)) else None
    ok = bool(values) and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                              for v in values)
    if not ok:
        raise ValueError(f"{field} must be a non-empty list of whole numbers in [0, {MAX_SEED_ID}], got {ids!r}")
    out = np.asarray([int(v) for v in values], np.int64)
    bad = [int(v) for v in out if not 0 <= v <= MAX_SEED_ID]
    if bad:
        raise ValueError(f"{field}: seed ids must lie in [0, {MAX_SEED_ID}] (they are stored as int32), got {bad}")
    values, counts = np.unique(out, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"{field}: seed ids must be distinct, got duplicates {values[counts > 1].tolist()}")
    return out


def check_seed_count(field: str, n: int) -> int:
    """`n` seeds run the seed ids 0 .. n-1: ValueError naming `field` when the last would not
    fit in [0, MAX_SEED_ID] (a count is checked >= 1 where it is read)."""
    if n > MAX_SEED_ID + 1:
        raise ValueError(f"{field} must be at most {MAX_SEED_ID + 1}: {field} = n runs the seed ids 0 .. n-1, which "
                         f"are stored as int32 and name PRNGKey(id), so ids from 2**31 on would wrap; got {n}")
    return n


# The runs of one unit (seeds, test_seeds, or the sweep's configurations x seeds) are the agents of one
# program, held in memory together: a count beyond this is refused before any id is made (a list of 10**9
# ids alone took 20 GB), whatever the memory check would say of it.
MAX_RUNS = 2**20


def check_run_count(field: str, n: int, what: str = "") -> int:
    """ValueError naming `field` (`what`: how its count is made) when `n` runs of one unit exceed
    MAX_RUNS; checked before any seed id or configuration is made."""
    if n > MAX_RUNS:
        raise ValueError(f"{field}{what} must be at most {MAX_RUNS} (2**20): the runs of one unit are the agents of "
                         f"one program, held in memory together; got {n}")
    return n


def padded_count(n_seeds: int, n_devices: int) -> int:
    """Agents actually run: n_seeds rounded up to a multiple of n_devices."""
    return -(-n_seeds // n_devices) * n_devices


def host_seed_keys(seed_ids: np.ndarray) -> np.ndarray:
    """(n, 2) uint32: the key data of PRNGKey(seed) of every seed id, on the host."""
    return np.stack([np.asarray(jax.random.key_data(jax.random.key(int(s)))) for s in seed_ids])


def seed_keys(seed_ids: np.ndarray, sharding):
    """(n, 2) uint32 PRNGKey(seed) per agent, created shard by shard (multi-process safe)."""
    host = host_seed_keys(seed_ids)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def to_host(x) -> np.ndarray:
    """A (possibly multi-process) sharded array -> the full NumPy array on this host."""
    if jax.process_count() > 1:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))
