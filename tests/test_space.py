"""Hyperparameter spaces: grids, encoding, validation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hcjax import Hyperparameter, Space, ppo_space, unit_space


def test_grid_linear_log_integer():
    space = Space([Hyperparameter("a", 0.0, 1.0), Hyperparameter("lr", 1e-4, 1e-2, "log"),
                   Hyperparameter("n", 1, 4, integer=True)])
    g = space.grid(5)
    assert g.shape == (3, 5) and g.dtype == np.float32
    np.testing.assert_allclose(g[0], [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(g[1], [1e-4, 10**-3.5, 1e-3, 10**-2.5, 1e-2], rtol=1e-5)
    # 5 arms over the 4 integers 1..4: rounded, inside bounds, one value repeats harmlessly
    np.testing.assert_array_equal(g[2], np.round(g[2]))
    assert g[2].min() == 1 and g[2].max() == 4 and len(set(g[2])) == 4


def test_encode_decode_roundtrip_and_bounds():
    space = ppo_space()
    u = np.array(jax.random.uniform(jax.random.PRNGKey(0), (100, 4)))
    u[-1] = 0.5  # log scale: the midpoint of [0, 1] is the geometric mean
    x, back = map(np.asarray, jax.jit(lambda u: (space.decode(u), space.encode(space.decode(u))))(u))
    assert np.all(x >= space.low) and np.all(x <= space.high)
    np.testing.assert_array_equal(x[:, 3], np.round(x[:, 3]))
    np.testing.assert_allclose(back[:, :3], u[:, :3], atol=1e-5)
    np.testing.assert_allclose(back[:, 3], u[:, 3], atol=0.5 / 5000 + 1e-6)  # integer rounding
    np.testing.assert_allclose(x[-1, 0], np.sqrt(1e-5 * 1e-3), rtol=1e-5)


SNAP_SPACE = unit_space(3)
snap7 = jax.jit(lambda values: SNAP_SPACE.snap(values, 7))  # one compilation for every example


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
                min_size=3, max_size=3))
def test_snap_picks_nearest_arm(values):
    space = SNAP_SPACE
    arms = np.asarray(snap7(jnp.asarray(values, jnp.float32)))
    grid = space.grid(7)
    for i, v in enumerate(np.clip(values, 0, 1)):
        assert abs(grid[i, arms[i]] - v) <= np.min(np.abs(grid[i] - v)) + 1e-6


def test_unit_grid_matches_encoded_grid():
    space = ppo_space()
    np.testing.assert_allclose(space.unit_grid(10), np.asarray(space.encode(space.grid(10).T)).T, atol=1e-6)


@pytest.mark.parametrize("kwargs,field", [
    (dict(name="x", low=1.0, high=1.0), "low must be < high"),
    (dict(name="x", low=0.0, high=1.0, scale="log"), "low > 0"),
    (dict(name="x", low=0.0, high=1.0, scale="exp"), "scale must be one of"),
    (dict(name="", low=0.0, high=1.0), "name"),
    (dict(name="x", low=0.0, high=1.0, default=2.0), "default"),
    (dict(name="x", low=float("nan"), high=1.0), "low must be a finite"),
    (dict(name="x", low=0.2, high=0.8, integer=True), "integer"),
])
def test_bad_hyperparameter(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Hyperparameter(**kwargs)


def test_bad_space():
    with pytest.raises(ValueError, match="must not be empty"):
        Space([])
    with pytest.raises(ValueError, match="duplicate names"):
        Space([Hyperparameter("a", 0, 1), Hyperparameter("a", 0, 2)])
    for d in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="d must be an integer >= 2"):
            unit_space(2).grid(d)


def test_defaults():
    space = ppo_space()
    np.testing.assert_allclose(space.default, [3e-4, 0.2, 0.95, 1000.0], rtol=1e-6)
    assert Hyperparameter("lr", 1e-4, 1e-2, "log").default_value == pytest.approx(1e-3)


@pytest.mark.parametrize("kwargs,match", [
    (dict(low=0.0, high=1e39), "high must be a finite number representable in float32"),
    (dict(low=-1e39, high=1.0), "low must be a finite number representable in float32"),
    (dict(low=0.0, high=float("inf")), "high must be a finite number"),
    (dict(low=0.0, high=10 ** 400), "high must be a finite number"),
    (dict(low=1e-300, high=1.0, scale="log"), r"scale='log' needs low >= 1.1754944e-38 \(float32's smallest normal"),
    # a float32 denormal: XLA may flush it to 0, whose log is -inf
    (dict(low=1e-40, high=1.0, scale="log"), "scale='log' needs low >= .* got low=1e-40"),
    (dict(low=1.0, high=1.0 + 1e-9), "low must be < high in float32"),
    (dict(low=-3e38, high=3e38), r"a linear scale needs high - low <= 3.4028235e\+38"),
    (dict(low=True, high=2.0), "low must be a finite number"),
    (dict(low=0.0, high=np.bool_(True)), "high must be a finite number"),
    (dict(low=0.0, high=2.0, default=True), "default must be a finite number"),
    (dict(low=0.0, high=2.0, default=jnp.asarray(True)), "default must be a finite number"),
    (dict(low=0.0, high=np.array([2.0])), "high must be a finite number"),
    (dict(low="0", high=2.0), "low must be a finite number"),
    (dict(low=0.0, high=2.0, integer="yes"), "integer must be True or False"),
])
def test_bounds_must_be_float32_numbers(kwargs, match):
    with pytest.raises(ValueError, match=r"Hyperparameter 'x': " + match):
        Hyperparameter("x", **kwargs)


def test_extreme_representable_bounds_give_finite_nonzero_values():
    """The largest and smallest accepted bounds decode to finite values, positive on log scales."""
    space = Space([Hyperparameter("big", 0.0, 3.4e38), Hyperparameter("tiny", 1.2e-38, 1.0, "log"),
                   Hyperparameter("wide", -1.7e38, 1.7e38)])
    u = jnp.asarray([[0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 1.0]])
    for x in (np.asarray(space.decode(u)), space.grid(5).T):
        assert np.all(np.isfinite(x)) and np.all(x[:, 1] > 0)
        assert np.all(x >= space.low) and np.all(x <= space.high)
    assert np.all(np.isfinite(np.asarray(space.encode(space.decode(u)))))


def test_numpy_and_jax_scalars_are_accepted_and_stored_as_floats():
    p = Hyperparameter("x", np.float64(1.0), np.int64(3), default=jnp.float32(2.5))
    q = Hyperparameter("y", np.array(1e-4), jnp.asarray(1e-2, jnp.float32), "log", integer=np.bool_(False))
    assert (p.low, p.high, p.default) == (1.0, 3.0, 2.5) and all(type(v) is float for v in (p.low, p.high, p.default))
    assert type(q.low) is float and q.integer is False
    assert p == Hyperparameter("x", 1.0, 3.0, default=2.5) and hash(p) == hash(Hyperparameter("x", 1, 3, default=2.5))
    space = Space([p, q])
    np.testing.assert_allclose(space.grid(np.int64(3)), space.grid(3))
    np.testing.assert_allclose(space.grid(jnp.int32(3)), space.grid(3))
    assert unit_space(np.int64(2)).h == 2 and unit_space(jnp.asarray(3)).h == 3
    for bad in (True, 2.0, np.float32(2)):
        with pytest.raises(ValueError, match="unit_space: h must be an integer >= 1"):
            unit_space(bad)


def test_values_by_name_inside_jit():
    space = ppo_space()
    assert [space.index(n) for n in space.names] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"unknown hyperparameter 'lr'.*'learning_rate', 'clip_eps'"):
        space.index("lr")
    with pytest.raises(ValueError, match="unknown hyperparameter 3"):
        space.index(3)
    values = jnp.asarray([1e-4, 0.2, 0.95, 2048.0])
    lr = jax.jit(lambda v: space.value(v, "learning_rate") * 2)(values)
    assert lr.shape == () and float(lr) == float(np.float32(1e-4) * 2)
    batch = jax.jit(jax.vmap(lambda v: space.value(v, "batch_size")))(jnp.stack([values, values + 1]))
    np.testing.assert_array_equal(np.asarray(batch), [2048.0, 2049.0])
    batched = space.value(jnp.stack([values, values]), "clip_eps")
    np.testing.assert_array_equal(np.asarray(batched), np.float32([0.2, 0.2]))
