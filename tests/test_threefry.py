"""agents.threefry against JAX's own threefry keys: the same bits for every draw the rollout and
the evaluation make (split, fold_in, bits, uniform, normal, categorical), and for the others
that a user's `act` may make; one compiled program per comparison."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import threefry

RNG = np.random.default_rng(20261129)
KEYS = jnp.asarray(RNG.integers(0, 2 ** 32, (16, 2), dtype=np.uint64).astype(np.uint32))
DATA = jnp.asarray(RNG.integers(0, 2 ** 31, 16), jnp.int32)
LOGITS = jnp.asarray(RNG.normal(size=(5, 3)), jnp.float32)


def raw(key):
    return jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key


def draws(key, data):
    """Every draw of one key (raw or typed) as raw arrays."""
    return dict(
        split=raw(jax.random.split(key, 3)), split_many=raw(jax.random.split(key, (7, 2))),
        fold_in=raw(jax.random.fold_in(key, data)),
        bits32=jax.random.bits(key, (4, 3)), bits8=jax.random.bits(key, (5,), jnp.uint8),
        bits16=jax.random.bits(key, (3,), jnp.uint16), uniform=jax.random.uniform(key, (9,)),
        normal=jax.random.normal(key, (4, 2)), categorical=jax.random.categorical(key, LOGITS),
        randint=jax.random.randint(key, (6,), -3, 100), permutation=jax.random.permutation(key, 10))


@jax.jit
def both(keys, data):
    ours = jax.vmap(lambda k, d: draws(threefry.fast(k)[0], d))(keys, data)
    return jax.vmap(draws)(keys, data), ours


def test_every_draw_equals_jaxs_threefry_bit_for_bit():
    jaxs, ours = both(KEYS, DATA)
    for name in jaxs:
        np.testing.assert_array_equal(np.asarray(ours[name]), np.asarray(jaxs[name]), err_msg=name)
    assert len(np.unique(np.asarray(jaxs["bits32"]))) > 150  # the draws are not constant


def test_hash_against_a_python_reference_on_random_counts():
    """The 20 rounds themselves, against Threefry-2x32 written out in Python integers."""
    def reference(k1, k2, x1, x2):
        m = 2 ** 32 - 1
        ks = [k1, k2, k1 ^ k2 ^ 0x1BD11BDA]
        x1, x2 = (x1 + ks[0]) & m, (x2 + ks[1]) & m
        for block in range(5):
            for r in ((13, 15, 26, 6), (17, 29, 16, 24))[block % 2]:
                x1 = (x1 + x2) & m
                x2 = (((x2 << r) | (x2 >> (32 - r))) & m) ^ x1
            x1 = (x1 + ks[(block + 1) % 3]) & m
            x2 = (x2 + ks[(block + 2) % 3] + block + 1) & m
        return x1, x2

    k1, k2 = (int(v) for v in RNG.integers(0, 2 ** 32, 2))
    xs = RNG.integers(0, 2 ** 32, (2, 6), dtype=np.uint64).astype(np.uint32)
    y1, y2 = jax.jit(threefry.hash2x32)(np.uint32(k1), np.uint32(k2), xs[0], xs[1])
    expect = [reference(k1, k2, int(a), int(b)) for a, b in zip(xs[0], xs[1])]
    assert [(int(a), int(b)) for a, b in zip(y1, y2)] == expect


def test_keys_come_back_in_the_form_they_came_in():
    for s in (0, 7, 2 ** 31 - 1, -3):
        np.testing.assert_array_equal(jax.random.key_data(jax.random.key(s, impl=threefry.IMPL)),
                                      jax.random.PRNGKey(s))
    raw_key, typed_key = KEYS[0], jax.random.wrap_key_data(KEYS[0])
    fast, back = threefry.fast(raw_key)
    assert jnp.issubdtype(fast.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(back(jax.random.split(fast, 4)), jax.random.split(raw_key, 4))
    fast, back = threefry.fast(typed_key)  # a typed threefry key: typed threefry keys back
    split = back(jax.random.split(fast, 4))
    assert jax.random.key_impl(split) == "threefry2x32"
    np.testing.assert_array_equal(jax.random.key_data(split), jax.random.split(raw_key, 4))
    rbg = jax.random.key(3, impl="rbg")  # another implementation: untouched
    assert threefry.fast(rbg)[0] is rbg and threefry.fast(rbg)[1](rbg) is rbg
    with jax.threefry_partitionable(False):
        # JAX's other mode draws other bits: the key is left to JAX, so its streams stay JAX's
        assert threefry.fast(raw_key)[0] is raw_key and threefry.fast(typed_key)[0] is typed_key
    with pytest.raises(ValueError, match="2\\*\\*32"):
        threefry._counts((2 ** 16, 2 ** 16))
