"""The library API for a tuner inside someone else's training loop (issue 18): values by
name under jit (`Space.as_dict`), the configuration in effect (`Tuner.values`), tell then
ask on deciding iterations only (`Tuner.step`), objective helpers (`hcjax.objectives`),
optax hyperparameters (`hcjax.optax`), and PBT's `min_gap`."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hcjax
from hcjax.tuner import STEP_KEY_TAG

SPACE = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, "log"),
                     hcjax.Hyperparameter("clip_eps", 0.1, 0.4), hcjax.Hyperparameter("epochs", 1, 8, integer=True)])
SMALL = {"gp_ucb": dict(buffer=8, candidates=8, fit_points=8, refine_steps=2),
         "pb2": dict(buffer=8, candidates=8, fit_points=8, refine_steps=2), "hyperband": dict(budget=20)}
TUNERS = ("fixed", "random", "random_start", "hypercontroller", "hyperband", "gp_ucb", "pb2")


@functools.cache
def make(name):
    """One tuner per name for the module: its jitted functions compile once for every test."""
    return hcjax.make_tuner(name, SPACE, **SMALL.get(name, {}))


@functools.cache
def jitted(name):
    """(values, ask, tell) of make(name), jitted once for the module."""
    tuner = make(name)
    return jax.jit(tuner.values), jax.jit(tuner.ask), jax.jit(tuner.tell)


def test_every_tuner_is_tested():
    assert set(TUNERS) == set(hcjax.available())


def test_as_dict_under_jit_and_vmap():
    values = jnp.asarray([[1e-3, 0.2, 3.0], [2e-3, 0.3, 5.0]])
    assert list(SPACE.as_dict(values)) == ["learning_rate", "clip_eps", "epochs"]  # the space's order
    d = jax.jit(jax.vmap(SPACE.as_dict))(values)
    assert sorted(d) == ["clip_eps", "epochs", "learning_rate"]
    np.testing.assert_array_equal(d["clip_eps"], np.float32([0.2, 0.3]))
    one = jax.jit(SPACE.as_dict)(values[0])
    assert one["epochs"].shape == () and float(one["epochs"]) == 3.0
    with pytest.raises(ValueError, match=r"\(\.\.\., 3\).*got shape \(2,\)"):
        SPACE.as_dict(jnp.zeros(2))


@pytest.mark.parametrize("name", TUNERS)
@pytest.mark.slow
def test_values_is_the_configuration_in_effect(name):
    tuner = make(name)
    values, ask, tell = jitted(name)
    state = tuner.init(jax.random.PRNGKey(3))
    first = np.asarray(values(state))
    assert first.shape == (3,) and first.dtype == np.float32
    assert np.all((first >= SPACE.low) & (first <= SPACE.high)) and first[2] == round(first[2])
    told = tell(state, jnp.float32(1.0))
    np.testing.assert_array_equal(values(told), first)  # tell changes the model, never the configuration
    # the configuration init drew is the one the first tell was recorded against
    if name == "fixed":
        np.testing.assert_array_equal(first, SPACE.default)
    elif name in ("random", "random_start"):
        np.testing.assert_array_equal(first, state.values)
    elif name == "hypercontroller":
        np.testing.assert_array_equal(first, SPACE.grid(10)[np.arange(3), np.asarray(told.history[:, -1])])
    elif name == "hyperband":
        slot = int(np.flatnonzero(np.asarray(told.counts))[0])
        np.testing.assert_array_equal(first, told.configs[slot])
    else:  # GP tuners write the configuration in effect into the buffer row of the observation
        np.testing.assert_array_equal(told.x[0], state.current)
        np.testing.assert_allclose(first, SPACE.decode(state.current), rtol=1e-6)
    if name in ("random_start", "hyperband", "fixed"):  # they keep init's configuration at the first ask
        np.testing.assert_array_equal(ask(told, jax.random.PRNGKey(4))[1], first)
    for k in range(3):  # after every ask: exactly the values it returned
        told, asked = ask(told, jax.random.PRNGKey(5 + k))
        if name in ("hypercontroller", "random", "random_start", "hyperband", "fixed"):  # stored or looked up
            np.testing.assert_array_equal(values(told), asked)
        else:  # GP tuners decode their unit point in each program: XLA may round the two programs' exp
            np.testing.assert_allclose(values(told), asked, rtol=3e-7)  # differently (one float32 ulp)
        told = tell(told, jnp.float32(k))


def reference_run(name, keys, objectives, decide):
    """The explicit sequence, one agent at a time, one jitted call at a time."""
    tuner = make(name)
    values, ask, tell = jitted(name)
    out, finals = [], []
    for a in range(objectives.shape[1]):
        state, row = tuner.init(jax.random.PRNGKey(a)), []
        for t in range(objectives.shape[0]):
            state = tell(state, objectives[t, a])
            if decide[t]:
                state, v = ask(state, jax.random.fold_in(keys[t, a], STEP_KEY_TAG))
            else:
                v = values(state)
            row.append(np.asarray(v))
        out.append(row)
        finals.append(state)
    return np.asarray(out).transpose(1, 0, 2), finals


@pytest.mark.parametrize("name", TUNERS)
@pytest.mark.slow
def test_step_is_tell_then_ask_on_deciding_iterations(name):
    tuner = make(name)
    T, n = 9, 2
    keys = jax.random.split(jax.random.PRNGKey(7), T * n).reshape(T, n, -1)
    objectives = np.array(jax.random.normal(jax.random.PRNGKey(8), (T, n)))
    objectives[2, 0] = np.nan  # ignored by every tuner
    decide = np.arange(T) % 3 == 1

    @jax.jit
    def run(states):
        def body(s, x):
            key, objective, t = x
            # decide: unbatched (from the iteration index), as in a vmapped training loop
            s, v = jax.vmap(tuner.step, in_axes=(0, 0, 0, None))(s, key, objective, t % 3 == 1)
            return s, v
        return jax.lax.scan(body, states, (keys, jnp.asarray(objectives), jnp.arange(T)))

    states = jax.vmap(tuner.init)(jnp.stack([jax.random.PRNGKey(a) for a in range(n)]))
    final, got = run(states)
    want, finals = reference_run(name, keys, objectives, decide)
    exact = name not in ("gp_ucb", "pb2")  # GP numbers: compiled in one program vs call by call
    check = np.testing.assert_array_equal if exact else lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5)
    check(np.asarray(got), want)
    for a in range(n):  # the states too, up to float rounding (the ridge solves are fused differently)
        for leaf, ref in zip(jax.tree.leaves(final), jax.tree.leaves(finals[a])):
            np.testing.assert_allclose(np.asarray(leaf)[a], np.asarray(ref), rtol=2e-5, atol=1e-6)
    changed = np.any(np.diff(np.asarray(got), axis=0) != 0, axis=(1, 2))
    assert not np.any(changed & ~decide[1:])  # the values change on deciding iterations only


def test_step_with_a_python_bool_decides_at_trace_time():
    tuner = make("random")
    state = tuner.init(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    kept_state, kept = tuner.step(state, key, 1.0, False)
    np.testing.assert_array_equal(kept, state.values)
    asked_state, asked = tuner.step(state, key, 1.0, True)
    np.testing.assert_array_equal(asked, tuner.ask(state, jax.random.fold_in(key, STEP_KEY_TAG))[1])
    assert "cond" not in str(jax.make_jaxpr(lambda s: tuner.step(s, key, 1.0, True))(state))


def primitives(jaxpr) -> set[str]:
    """Names of the primitives of a closed jaxpr's top level."""
    return {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}


def test_unbatched_decide_keeps_the_cond_under_vmap():
    tuner = make("hypercontroller")
    states = jax.vmap(tuner.init)(jax.random.split(jax.random.PRNGKey(0), 4))
    keys, objectives = jax.random.split(jax.random.PRNGKey(1), 4), jnp.ones(4)
    assert "cond" in primitives(jax.make_jaxpr(jax.vmap(tuner.step, in_axes=(0, 0, 0, None)))(
        states, keys, objectives, jnp.bool_(True)))
    # a batched decide: vmap turns the cond into a select that runs every ask (the pitfall)
    assert "cond" not in primitives(jax.make_jaxpr(jax.vmap(tuner.step))(states, keys, objectives,
                                                                          jnp.ones(4, bool)))


def test_unbatched_decide_runs_no_ask_on_other_iterations():
    base = make("random")
    asks = []

    def counting_ask(state, key):
        jax.debug.callback(lambda: asks.append(1))
        return base.ask(state, key)

    tuner = base._replace(ask=counting_ask)
    step = jax.jit(jax.vmap(tuner.step, in_axes=(0, 0, 0, None)))
    states = jax.vmap(tuner.init)(jax.random.split(jax.random.PRNGKey(0), 4))
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    for t in range(6):
        states, _ = step(states, keys, jnp.ones(4), jnp.bool_(t % 3 == 0))
    jax.effects_barrier()
    assert 0 < len(asks) <= 2 * 4  # two deciding iterations (a callback may run once per agent)
    before = len(asks)
    states, _ = step(states, keys, jnp.ones(4), jnp.bool_(False))
    jax.effects_barrier()
    assert len(asks) == before


def numpy_return_change(level, returns, done):
    if not done.any():
        return math.nan, level
    now = returns[done].mean()
    return now - level, now


def test_return_change_against_numpy():
    rng = np.random.default_rng(0)
    level_ref = math.nan
    level = hcjax.objectives.NO_LEVEL
    got, want = [], []
    for t in range(8):
        returns = rng.uniform(0, 500, (16, 4)).astype(np.float32)
        done = rng.uniform(size=(16, 4)) < (0.0 if t in (0, 3) else 0.05)
        objective, level = jax.jit(hcjax.objectives.return_change)(level, returns, done)
        ref, level_ref = numpy_return_change(level_ref, returns, done)
        got.append((float(objective), float(level)))
        want.append((ref, level_ref))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert math.isnan(got[0][0]) and math.isnan(got[1][0]) and math.isnan(got[3][0])  # before the first level
    assert np.isfinite(got[2][0]) and np.isfinite(got[3][1])  # level held where none finished
    np.testing.assert_allclose(float(hcjax.objectives.mean_return(np.ones(3), np.array([1, 0, 1]))), 1.0)
    with pytest.raises(ValueError, match="same shape"):
        hcjax.objectives.mean_return(np.ones(3), np.ones(4, bool))


def test_reward_change_against_numpy_under_vmap():
    rewards = np.random.default_rng(1).normal(size=(3, 5, 16, 4)).astype(np.float32)  # (iterations, agents, ...)
    level = jnp.full((5,), hcjax.objectives.NO_LEVEL)
    step = jax.jit(jax.vmap(hcjax.objectives.reward_change))
    for t in range(3):
        objective, level = step(level, rewards[t])
        means = rewards[t].mean(axis=(1, 2))
        np.testing.assert_allclose(level, means, rtol=1e-5)
        if t == 0:
            assert np.all(np.isnan(objective))
        else:
            np.testing.assert_allclose(objective, means - rewards[t - 1].mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)


def test_set_hyperparams_changes_the_optax_update():
    params = {"w": jnp.arange(3.0)}
    grads = {"w": jnp.asarray([1.0, -2.0, 0.5])}
    tx = optax.chain(optax.clip_by_global_norm(10.0), optax.inject_hyperparams(optax.adam)(learning_rate=1e-3))
    assert hcjax.optax.hyperparam_names(tx.init(params)) == ("b1", "b2", "eps", "eps_root", "learning_rate")

    @jax.jit
    @jax.vmap
    def update(lr):
        state = hcjax.optax.set_hyperparams(tx.init(params), {"learning_rate": lr})
        return tx.update(grads, state, params)[0]["w"]

    lrs = jnp.asarray([1e-3, 0.5])
    for lr, got in zip(lrs, update(lrs)):
        plain = optax.chain(optax.clip_by_global_norm(10.0), optax.inject_hyperparams(optax.adam)(learning_rate=lr))
        np.testing.assert_allclose(got, plain.update(grads, plain.init(params), params)[0]["w"], rtol=1e-6)
    state = tx.init(params)
    assert hcjax.optax.set_hyperparams(state, {"learning_rate": 2})[1].hyperparams["learning_rate"].dtype == jnp.float32
    # names the optimiser lacks are the caller's (a tuner's whole dict may be passed) ...
    both = hcjax.optax.set_hyperparams(state, {"learning_rate": 0.25, "clip_eps": 0.3})
    assert float(both[1].hyperparams["learning_rate"]) == 0.25 and "clip_eps" not in both[1].hyperparams
    # ... but a dict with none of them is a mistake
    with pytest.raises(ValueError, match=r"none of \['lr'\] is an injected .*'learning_rate'"):
        hcjax.optax.set_hyperparams(state, {"lr": 0.1})
    with pytest.raises(ValueError, match="must be a scalar"):
        hcjax.optax.set_hyperparams(state, {"learning_rate": jnp.ones(2)})


@pytest.mark.slow
def test_pbt_min_gap_ties_never_copy():
    space = hcjax.Space([hcjax.Hyperparameter("lr", 1e-4, 1e-2, "log")])
    ray, ties, gap = (hcjax.make_population("pbt", space, **options)
                      for options in ({}, {"min_gap": 0.0}, {"min_gap": 1.0}))
    tied = jnp.full((8,), 500.0)  # every agent at CartPole's maximum
    gaps = jnp.asarray([[0.0, 5.0, 5.0, 5.0], [4.0, 5.0, 4.5, 5.0], [jnp.nan, 5.0, 4.5, 5.0]])

    @jax.jit  # every population's init and steps in one program (eagerly, a compilation per op)
    def run(key):
        ray_parents = ray.step(ray.init(key, 8)[0], key, tied)[2]
        state, values = ties.init(key, 8)
        gap_state = gap.init(key, 4)[0]
        return ray_parents, values, ties.step(state, key, tied), [gap.step(gap_state, key, o)[2] for o in gaps]

    ray_parents, values, (new_state, new_values, parents), gap_parents = run(jax.random.PRNGKey(0))
    assert np.sum(np.asarray(ray_parents) != np.arange(8)) == 2  # Ray Tune's rule copies the bottom quantile anyway
    np.testing.assert_array_equal(parents, np.arange(8))
    np.testing.assert_array_equal(new_values, values)
    assert int(new_state.n_replaced) == 0
    # a gap above min_gap copies, one at or below it does not, an invalid agent always is replaced
    parents = gap_parents[0]
    assert int(parents[0]) in (1, 2, 3) and list(np.asarray(parents[1:])) == [1, 2, 3]
    np.testing.assert_array_equal(gap_parents[1], np.arange(4))
    assert int(gap_parents[2][0]) != 0
    with pytest.raises(ValueError, match="pbt.min_gap"):
        hcjax.make_population("pbt", space, min_gap=-1.0)
