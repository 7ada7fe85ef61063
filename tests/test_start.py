"""make_tuner(..., start=values): every tuner asks `start` first and observes it (`Tuner.place`),
checked against plain NumPy references of what each tuner's state must hold; the checks of
`start`; HostTuner and a state_dict round trip with it."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax

SPACE = hcjax.Space([
    hcjax.Hyperparameter("learning_rate", 1e-5, 1e-2, scale="log", default=3e-4),
    hcjax.Hyperparameter("clip_eps", 0.1, 0.5, default=0.2),
    hcjax.Hyperparameter("batch_size", 64, 512, integer=True, default=128),
    hcjax.Hyperparameter.choice("normalize_advantage", [0, 1], default=1),
])
SMALL_GP = dict(buffer=8, candidates=16, fit_points=8, refine_steps=1)
OPTIONS = {"fixed": {}, "random": {}, "random_start": {}, "hyperband": dict(budget=9), "gp_ucb": SMALL_GP,
           "pb2": SMALL_GP, "hypercontroller": dict(d=5)}
START = np.asarray([2e-5, 0.45, 100.0, 0.0], np.float32)  # a poor configuration, off HyperController's grid


def test_every_registered_tuner_is_covered():
    assert set(OPTIONS) == set(hcjax.available())


@functools.cache
def program(name):
    """jitted run(key) -> (first values, values in effect after it, state after one tell of 1.5,
    second values, state after the second ask), the tuner started at START."""
    tuner = hcjax.make_tuner(name, SPACE, start=START, **OPTIONS[name])

    def run(key):
        k0, k1, k2 = jax.random.split(key, 3)
        state, first = tuner.ask(tuner.init(k0), k1)
        in_effect = tuner.values(state)
        told = tuner.tell(state, jnp.float32(1.5))
        state2, second = tuner.ask(told, k2)
        return first, in_effect, told, second, state2

    return jax.jit(run)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_the_first_ask_is_the_start_and_it_stays_in_effect_until_the_next(name):
    first, in_effect, _, second, state2 = program(name)(jax.random.PRNGKey(3))
    np.testing.assert_array_equal(np.asarray(first), START)
    np.testing.assert_array_equal(np.asarray(in_effect), START)
    tuner = hcjax.make_tuner(name, SPACE, start=START, **OPTIONS[name])
    np.testing.assert_allclose(np.asarray(tuner.values(state2)), np.asarray(second), rtol=1e-6)  # another program
    if name in ("fixed", "random_start"):  # they hold their first configuration: the start
        np.testing.assert_array_equal(np.asarray(second), START)


def test_random_is_itself_from_the_second_ask():
    """The start changes nothing but the first configuration of a method that learns nothing."""
    key = jax.random.PRNGKey(5)
    *_, second, _ = program("random")(key)
    plain = hcjax.make_tuner("random", SPACE)
    k0, k1, k2 = jax.random.split(key, 3)
    state, _ = plain.ask(plain.init(k0), k1)
    _, expected = plain.ask(plain.tell(state, 1.5), k2)
    np.testing.assert_allclose(np.asarray(second), np.asarray(expected), rtol=1e-6)  # eager vs jitted


def unit(values):
    """A plain NumPy `Space.encode` of one configuration (float64)."""
    lo, hi = np.asarray(SPACE.low, np.float64), np.asarray(SPACE.high, np.float64)
    x = np.asarray(values, np.float64)
    log = np.asarray(SPACE.is_log)
    safe = lambda v: np.log(np.where(log, v, 1.0))  # noqa: E731 - the log of the log-scale entries only
    u = np.where(log, (safe(x) - safe(lo)) / np.where(log, safe(hi) - safe(lo), 1.0), (x - lo) / (hi - lo))
    k = np.maximum(np.asarray(SPACE.n_options), 1)
    return np.where(np.asarray(SPACE.is_categorical), (np.round(x) + 0.5) / k, u)


@pytest.mark.parametrize("name", ["gp_ucb", "pb2"])
def test_a_gp_tuner_records_the_start_as_its_first_observation(name):
    _, _, told, _, _ = program(name)(jax.random.PRNGKey(4))
    inner = told.inner
    np.testing.assert_allclose(np.asarray(inner.x[0]), unit(START), atol=1e-6)
    assert float(inner.y[0]) == 1.5 and bool(inner.mask[0]) and not bool(inner.mask[1])


def test_hyperband_scores_the_start_as_its_first_candidate():
    _, _, told, _, _ = program("hyperband")(jax.random.PRNGKey(6))
    inner = told.inner
    slot = int(inner.slot)
    np.testing.assert_array_equal(np.asarray(inner.configs[slot]), START)
    assert float(inner.sums[slot]) == 1.5 and float(inner.counts[slot]) == 1.0


def nearest_arms_reference(values, d):
    """Per hyperparameter, by a loop over its arms: the arm whose encoded value is nearest the
    encoded `values` (the first of equally near ones); a categorical's arm j is option j."""
    grid, n_arms = SPACE.arm_grid(d)
    target = unit(values)
    arms = []
    for i in range(SPACE.h):
        best, best_distance = 0, np.inf
        for j in range(n_arms[i]):
            config = np.asarray(SPACE.default, np.float64).copy()
            config[i] = grid[i, j]
            distance = abs(unit(config)[i] - target[i])
            if distance < best_distance - 1e-6:
                best, best_distance = j, distance
        arms.append(best)
    return np.asarray(arms)


def test_hypercontroller_learns_the_start_as_its_nearest_arms():
    _, _, told, _, _ = program("hypercontroller")(jax.random.PRNGKey(7))
    expected = nearest_arms_reference(START, 5)
    np.testing.assert_array_equal(np.asarray(told.inner.history[:, -1]), expected)  # the context it learned
    rng = np.random.default_rng(0)
    tuner = hcjax.make_tuner("hypercontroller", SPACE, d=5)
    place = jax.jit(tuner.place)
    state = tuner.init(jax.random.PRNGKey(0))
    for _ in range(20):  # random configurations: place() agrees with the loop
        values = np.asarray(SPACE.sample(1, int(rng.integers(1 << 30)))[0])
        np.testing.assert_array_equal(np.asarray(place(state, values).arms), nearest_arms_reference(values, 5))


def test_start_default_is_the_space_default_and_vmaps():
    tuner = hcjax.make_tuner("hypercontroller", SPACE, start="default", d=5)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    _, values = jax.jit(jax.vmap(lambda k: tuner.ask(tuner.init(k), k)))(keys)
    np.testing.assert_array_equal(np.asarray(values), np.broadcast_to(np.asarray(SPACE.default), (3, SPACE.h)))


@pytest.mark.parametrize("start,match", [
    ("defaults", "start must be None, 'default' or a list of 4 values"),
    ([1e-3, 0.2, 128.0], "start: .*list or 1-D array of 4 numbers"),
    ([1.0, 0.2, 128.0, 1.0], r"start\[0\] \('learning_rate'\) must be a finite number in"),
    ([1e-3, 0.2, 128.0, 0.5], r"start\[3\] \('normalize_advantage'\) is categorical"),
])
def test_a_bad_start_is_refused_naming_it(start, match):
    with pytest.raises(ValueError, match=match):
        hcjax.make_tuner("random", SPACE, start=start)


def test_host_tuner_starts_there_and_its_state_round_trips():
    host = hcjax.HostTuner("gp_ucb", SPACE, seed=1, start=START, **SMALL_GP)
    first = host.ask()
    assert first == SPACE.names_to_values(START)
    host.tell(2.0)
    saved = host.state_dict()
    assert "state.inner.x" in saved and "state.asks" in saved
    again = hcjax.HostTuner("gp_ucb", SPACE, seed=1, start=START, **SMALL_GP)
    again.load_state_dict(saved)
    assert again.ask() == host.ask()


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_a_tuner_built_inside_a_jit_starts_as_one_built_outside(name):
    """make_tuner called while tracing (as experiments/benchmarks/lgds_population.py does) builds
    its constants without concretising a tracer, and its first ask is the start."""
    def run(key):
        tuner = hcjax.make_tuner(name, SPACE, start=START, **OPTIONS[name])
        return tuner.ask(tuner.init(key), key)[1]

    np.testing.assert_array_equal(np.asarray(jax.jit(run)(jax.random.PRNGKey(0))), START)
