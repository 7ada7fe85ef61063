"""JAX's threefry-2x32 keys, the same bits, hashed by straight-line integer arithmetic.

On the CPU JAX lowers its threefry hash as a rolled loop of five steps; inside a rollout's
scan that loop cost a one-agent PPO iteration about a seventh of its time (docs/benchmarks.md,
"The rollout's hash": with this module one CartPole or Pendulum agent ran 15-16% faster, the
same bits; 1-5% with 16 or 256 agents).
This module defines a PRNG implementation (`jax.extend.random.define_prng_impl`) whose
seed, split, fold_in and random_bits give exactly the bits of JAX's default threefry
implementation in its partitionable mode (`jax_threefry_partitionable`, JAX's default), but
hash without a loop. A rollout wraps its key with `fast`, draws through `jax.random`
as usual (categorical, normal, split: JAX's own code on these bits), and hands the environment
its keys in the form the caller's key came in (`fast` returns the conversion). With
`jax_threefry_partitionable` off, or a key of another implementation, `fast` changes nothing,
so every stream stays JAX's.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import define_prng_impl

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotl(x, d: int):
    return (x << np.uint32(d)) | (x >> np.uint32(32 - d))


def hash2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds: keys k1, k2 () uint32, counts x1, x2 (...) uint32 ->
    (y1, y2) (...) uint32, the values of JAX's `threefry2x32_p`."""
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, r) ^ x1
        x1 = x1 + ks[(block + 1) % 3]
        x2 = x2 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _counts(shape):
    """(hi, lo) uint32 arrays of `shape`: a flat 64-bit iota over it, as JAX counts."""
    n = math.prod(shape)
    if n >= 2 ** 32:
        raise ValueError(f"shape {shape}: at most 2**32 - 1 random values per draw")
    lo = jax.lax.iota(np.uint32, n).reshape(shape)
    return jnp.zeros(shape, np.uint32), lo


def _seed(seed):
    seed = jnp.asarray(seed)
    hi = jax.lax.shift_right_logical(seed, jnp.asarray(32, seed.dtype)).astype(np.uint32)
    lo = (seed & np.uint32(0xFFFFFFFF)).astype(np.uint32)
    return jnp.stack([hi, lo])


def _split(key, shape):
    y1, y2 = hash2x32(key[0], key[1], *_counts(tuple(shape)))
    return jnp.stack([y1, y2], axis=y1.ndim)


def _fold_in(key, data):
    data = jnp.asarray(data, np.uint32)
    y1, y2 = hash2x32(key[0], key[1], jnp.zeros((), np.uint32), data)
    return jnp.stack([y1, y2])


def _random_bits(key, bit_width: int, shape):
    y1, y2 = hash2x32(key[0], key[1], *_counts(tuple(shape)))
    if bit_width == 64:
        return (y1.astype(np.uint64) << np.uint64(32)) | y2.astype(np.uint64)
    dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bit_width]
    return (y1 ^ y2).astype(dtype)


IMPL = define_prng_impl(key_shape=(2,), seed=_seed, split=_split, random_bits=_random_bits,
                        fold_in=_fold_in, name="threefry2x32_unrolled", tag="tfu")


def _same(key):
    return key


def fast(key):
    """key -> (key', back): key' draws, through `jax.random`, exactly the bits `key` would, but
    hashed by this module; back(k) turns a key split from key' into the form `key` came in
    (raw uint32 data, or a typed key of JAX's threefry). key: raw threefry key data (..., 2)
    uint32 or typed threefry keys (...). Any other key (another implementation, or
    `jax_threefry_partitionable` off) comes back as it is, with back the identity."""
    if not jax.config.jax_threefry_partitionable:
        return key, _same
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if jax.random.key_impl(key) != "threefry2x32":
            return key, _same
        return (jax.random.wrap_key_data(jax.random.key_data(key), impl=IMPL),
                lambda k: jax.random.wrap_key_data(jax.random.key_data(k), impl="threefry2x32"))
    if key.dtype != np.uint32 or key.shape[-1:] != (2,):
        return key, _same
    return jax.random.wrap_key_data(key, impl=IMPL), jax.random.key_data
