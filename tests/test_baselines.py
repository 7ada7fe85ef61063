"""Baseline tuners: robustness to any objective sequence, vmap = separate runs,
HyperBand's schedule and selections, GP methods beat random on a static problem."""
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hcjax
from hcjax.tuners.hyperband import brackets, hyperband_schedule

SPACE = hcjax.ppo_space()
SMALL_GP = dict(buffer=32, candidates=64, fit_points=32, refine_steps=3)
METHODS = {
    "fixed": {},
    "random": {},
    "random_start": {},
    "hyperband": dict(budget=40),
    "gp_ucb": SMALL_GP,
    "pb2": SMALL_GP,
    "hypercontroller": {},
}
T = 24  # decisions per run in the property and vmap tests
encode = jax.jit(SPACE.encode)  # one compilation for every method's (T, h) values, not op by op
TELLS = 2  # tells per decision


@functools.cache
def runner(name):
    """jitted run(key, objectives (T, TELLS)) -> (values (T, h), final state); compiled once."""
    tuner = hcjax.make_tuner(name, SPACE, **METHODS[name])

    def run(key, objectives):
        k_init, k_run = jax.random.split(key)

        def step(state, inp):
            key, objs = inp
            state, values = tuner.ask(state, key)
            for i in range(TELLS):
                state = tuner.tell(state, objs[i])
            return state, values

        keys = jax.random.split(k_run, objectives.shape[0])
        state, values = jax.lax.scan(step, tuner.init(k_init), (keys, objectives))
        return values, state

    return jax.jit(run)


def assert_finite_state(state):
    for leaf in jax.tree_util.tree_leaves(state):
        a = np.asarray(leaf)
        if np.issubdtype(a.dtype, np.floating):
            assert np.all(np.isfinite(a)), "state became non-finite"


def assert_in_bounds(values):
    v = np.asarray(values)
    assert np.all(np.isfinite(v))
    assert np.all(v >= SPACE.low) and np.all(v <= SPACE.high)


SPECIAL = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 1e15, -1e15, 0.0, 1.0, -1.0, 1e-30]
objective = st.one_of(st.sampled_from(SPECIAL), st.floats(-1e3, 1e3, allow_nan=False, width=32))
sequences = st.one_of(
    st.lists(objective, min_size=T * TELLS, max_size=T * TELLS),
    objective.map(lambda x: [x] * (T * TELLS)),  # constant
    st.tuples(objective, objective).map(lambda ab: [ab[i % 2] for i in range(T * TELLS)]),  # alternating
)


@pytest.mark.parametrize("name", list(METHODS))
@settings(max_examples=12, deadline=None)
@given(objs=sequences, seed=st.integers(0, 2 ** 31 - 1))
@pytest.mark.slow
def test_any_objective_sequence_keeps_asks_in_bounds_and_state_finite(name, objs, seed):
    objectives = jnp.asarray(np.asarray(objs, np.float64).astype(np.float32).reshape(T, TELLS))
    values, state = runner(name)(jax.random.key(seed), objectives)
    assert_in_bounds(values)
    assert_finite_state(state)
    n_bad = int(np.sum(~np.asarray(hcjax.tuner.valid_objective(objectives))))
    assert int(state.n_invalid) == n_bad


@pytest.mark.parametrize("name", list(METHODS))
@pytest.mark.slow
def test_vmap_of_8_agents_equals_8_separate_runs(name):
    keys = jax.random.split(jax.random.key(11), 8)
    objectives = jax.random.normal(jax.random.key(12), (8, T, TELLS))
    single = runner(name)
    batched_values, batched_state = jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(single))(keys, objectives))
    # Equal up to float rounding: compared in [0, 1] units, where one rounding flip of the
    # integer batch size (1 / 5000) stays inside the tolerance.
    for i in range(8):
        values, state = single(keys[i], objectives[i])
        np.testing.assert_allclose(np.asarray(encode(batched_values[i])), np.asarray(encode(values)), atol=5e-4)
        for a, b in zip(jax.tree_util.tree_leaves(batched_state), jax.tree_util.tree_leaves(state)):
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(b), rtol=1e-4, atol=5e-4)


def test_random_start_is_constant_and_random_is_not():
    objectives = jnp.zeros((T, TELLS))
    v, _ = runner("random_start")(jax.random.key(0), objectives)
    assert np.all(np.asarray(v) == np.asarray(v)[0])
    v, _ = runner("random")(jax.random.key(0), objectives)
    assert len(np.unique(np.asarray(v)[:, 0])) > T // 2


@pytest.mark.parametrize("budget,eta", [(1, 3), (10, 2), (40, 3), (200, 3), (1000, 3), (1000, 4), (5000, 5)])
def test_hyperband_brackets_complete_within_budget(budget, eta):
    sched = hyperband_schedule(budget, eta)
    assert sched["length"] <= budget
    # The next larger HyperBand would not fit: the brackets are as large as the budget allows.
    bigger = sum(n * r for b in brackets(sched["s_max"] + 1, eta) for n, r in b)
    assert bigger > budget
    for bracket in sched["brackets"]:
        assert bracket[-1][0] >= 1  # every bracket ends with at least one survivor
        for (n0, r0), (n1, r1) in zip(bracket, bracket[1:]):
            assert n1 == n0 // eta and r1 == r0 * eta  # survivors run eta times longer
    assert int(sched["new_bracket"].sum()) == sched["s_max"] + 1


def test_hyperband_error_names_field():
    with pytest.raises(ValueError, match="hyperband.eta must be an integer >= 2, got 1"):
        hcjax.make_tuner("hyperband", SPACE, eta=1)
    with pytest.raises(ValueError, match="hyperband.budget"):
        hcjax.make_tuner("hyperband", SPACE, budget=0)
    with pytest.raises(ValueError, match="gp_ucb.buffer"):
        hcjax.make_tuner("gp_ucb", SPACE, buffer=1)
    with pytest.raises(ValueError, match="pb2.candidates"):
        hcjax.make_tuner("pb2", SPACE, candidates=0)


def test_hyperband_survivors_are_best_scored():
    """Drive the tuner and a plain-Python successive-halving simulation side by side."""
    space = hcjax.unit_space(2)
    budget, eta = 60, 3
    tuner = hcjax.make_tuner("hyperband", space, budget=budget, eta=eta)
    sched = hyperband_schedule(budget, eta)
    ask, tell = jax.jit(tuner.ask), jax.jit(tuner.tell)
    state = jax.jit(tuner.init)(jax.random.key(0))  # one program, not op by op
    rng = np.random.default_rng(0)
    key = jax.random.key(1)

    def objective(values, step):
        # Noisy, drifting; some invalid objectives, which must not be scored.
        if step % 7 == 3:
            return float("nan")
        return float(-np.sum((values - 0.3) ** 2) + 0.05 * rng.normal() + 0.001 * step)

    step = 0
    for _sweep in range(2):
        for bracket in sched["brackets"]:
            sums, counts, table, current = None, None, None, None
            for i, (n_i, r_i) in enumerate(bracket):
                for j in range(n_i):
                    for _ in range(r_i):
                        key, sub = jax.random.split(key)
                        state, values = ask(state, sub)
                        if table is None:
                            table = np.asarray(state.configs)[: bracket[0][0]]
                            sums, counts = np.zeros(len(table)), np.zeros(len(table))
                            current = list(range(len(table)))
                        expected = table[current[j]]
                        np.testing.assert_array_equal(np.asarray(values), expected)
                        for _ in range(2):
                            x = objective(expected, step)
                            state = tell(state, x)
                            if math.isfinite(x):
                                sums[current[j]] += x
                                counts[current[j]] += 1
                        step += 1
                if i + 1 < len(bracket):
                    score = [sums[c] / counts[c] if counts[c] else -3e38 for c in current]
                    ranked = [c for _, c in sorted(zip(score, current), key=lambda sc: -sc[0])]
                    current = ranked[: bracket[i + 1][0]]
                    # The survivors are the best-scored configurations.
                    mean = {c: sums[c] / counts[c] if counts[c] else -3e38 for c in ranked}
                    assert min(mean[c] for c in current) >= max([mean[c] for c in ranked[len(current):]],
                                                                default=-np.inf)
    assert step == 2 * sched["length"]


def regret_run(name, opts, n_seeds=32, decisions=100, noise=0.1, seed=2024):
    """Mean simple regret (best true value seen), its standard error and mean last-decision regret."""
    space = hcjax.unit_space(4)
    tuner = hcjax.make_tuner(name, space, **opts)

    def run(key):
        k_opt, k_init, k_run = jax.random.split(key, 3)
        optimum = jax.random.uniform(k_opt, (4,), minval=0.1, maxval=0.9)

        def step(state, key):
            k_ask, k_noise = jax.random.split(key)
            state, x = tuner.ask(state, k_ask)
            value = -jnp.sum((x - optimum) ** 2)
            state = tuner.tell(state, value + noise * jax.random.normal(k_noise))
            return state, value

        _, values = jax.lax.scan(step, tuner.init(k_init), jax.random.split(k_run, decisions))
        return -jnp.max(values), -values[-1]

    # Seeds in vmapped chunks of 8 (one compiled function).
    batched = jax.jit(jax.vmap(run))
    keys = jax.random.split(jax.random.key(seed), n_seeds).reshape(-1, 8)
    simple, last = (jnp.concatenate(parts) for parts in zip(*[batched(k) for k in keys]))
    return float(jnp.mean(simple)), float(jnp.std(simple) / math.sqrt(n_seeds)), float(jnp.mean(last))


@pytest.mark.slow
def test_gp_methods_beat_random_on_static_noisy_problem():
    # Small GPs without gradient refinement (compilation dominates; the candidates alone beat random):
    # 8 seeds x 40 decisions (one vmapped call per method), mean simple regret gp_ucb / pb2 / random
    # 0.018 / 0.016 / 0.049 (key 2024); keys 1, 2, 3: 0.019 / 0.028 / 0.076, 0.016 / 0.024 / 0.067,
    # 0.024 / 0.031 / 0.067 (16 seeds, key 2024: 0.017 / 0.017 / 0.061)
    gp_opts = dict(buffer=64, candidates=64, fit_points=32, refine_steps=0)
    results = {name: regret_run(name, opts, n_seeds=8, decisions=40) for name, opts in
               [("random", {}), ("gp_ucb", gp_opts), ("pb2", gp_opts)]}
    for name, (mean, se, last) in results.items():
        print(f"{name:8s} simple regret {mean:.4f} +- {se:.4f}   last-decision regret {last:.4f}")
    rnd = results["random"][0]
    for name in ("gp_ucb", "pb2"):
        print(f"{name}: simple regret {results[name][0] / rnd:.2f} x random's")
        assert results[name][0] < rnd


@pytest.mark.parametrize("name,option,value", [
    ("gp_ucb", "beta_scale", float("inf")), ("gp_ucb", "beta_scale", 1e39), ("gp_ucb", "beta_scale", True),
    ("gp_ucb", "delta", np.float64("nan")), ("gp_ucb", "delta", 1e-50),  # 0 in float32, needs > 0
    ("gp_ucb", "buffer", 32.0), ("gp_ucb", "buffer", np.bool_(True)), ("pb2", "fit_points", True),
    ("pb2", "candidates", jnp.float32(8)), ("hyperband", "budget", True), ("hyperband", "eta", np.float64(3)),
    ("hyperband", "budget", 2 ** 31),
])
def test_bad_option_types_and_values_name_the_field(name, option, value):
    with pytest.raises(ValueError, match=f"{name}.{option} must be"):
        hcjax.make_tuner(name, SPACE, **{option: value})


@pytest.mark.slow
def test_numpy_and_jax_option_scalars_are_accepted():
    opts = dict(buffer=np.int64(8), candidates=jnp.int32(4), refine_steps=np.uint8(1), fit_points=np.int32(8))
    tuners = [hcjax.make_tuner("gp_ucb", SPACE, **opts, beta_scale=np.float64(0.3), delta=jnp.float32(0.2)),
              hcjax.make_tuner("pb2", SPACE, **opts)]
    # Both tuners' init and ask in one program (one compilation instead of two plus op-by-op inits).
    asked = jax.jit(lambda k0, k1: [tuner.ask(tuner.init(k0), k1) for tuner in tuners])
    for state, values in asked(jax.random.key(0), jax.random.key(1)):
        assert state.x.shape == (8, 4) and np.all(np.isfinite(np.asarray(values)))
    tuner = hcjax.make_tuner("hyperband", SPACE, budget=np.int64(40), eta=jnp.asarray(3))
    shape = jax.eval_shape(tuner.init, jax.random.key(0)).configs.shape  # traced: not op by op
    assert shape == (hyperband_schedule(40, 3)["n_slots"], 4)


def test_fixed_values_are_checked_entry_by_entry():
    good = [np.float64(1e-3), jnp.float32(0.2), np.array(0.95), np.int64(2000)]
    state = hcjax.make_tuner("fixed", SPACE, values=good).init(jax.random.key(0))
    np.testing.assert_allclose(state.values, [1e-3, 0.2, 0.95, 2000], rtol=1e-6)
    np.testing.assert_array_equal(
        hcjax.make_tuner("fixed", SPACE, values=jnp.asarray([1e-3, 0.2, 0.95, 2000])).init(None).values, state.values)
    for bad, match in [([True, 0.2, 0.95, 2000], r"fixed.values\[0\] \('learning_rate'\) must be a finite number"),
                       ([1e-3, 0.2, 0.95, 1e39], r"fixed.values\[3\] \('batch_size'\)"),
                       ([1e-3, float("nan"), 0.95, 2000], r"fixed.values\[1\]"),
                       ([1e-3, 0.2, 1.5, 2000], r"fixed.values\[2\] \('gae_lambda'\) must be a finite number in "
                                                r"\[0.9, 1.0\]"),
                       ([1e-3, 0.2, 0.95], "fixed.values must be a list or 1-D array of 4 numbers"),
                       (np.zeros((1, 4)), "fixed.values must be a list or 1-D array of 4 numbers"),
                       ("0.1", "fixed.values must be a list"), (0.5, "fixed.values must be a list")]:
        with pytest.raises(ValueError, match=match):
            hcjax.make_tuner("fixed", SPACE, values=bad)


def xla_peak_bytes(tuner, agents):
    """Per agent: the largest arguments + outputs + temporaries that XLA's buffer
    assignment gives a jitted, vmapped init, ask or tell (compiled, never run)."""
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), agents))
    states = jax.eval_shape(jax.vmap(tuner.init), keys)
    objectives = jax.ShapeDtypeStruct((agents,), jnp.float32)
    peak = 0
    for fn, args in [(tuner.init, (keys,)), (tuner.ask, (states, keys)), (tuner.tell, (states, objectives))]:
        m = jax.jit(jax.vmap(fn)).lower(*args).compile().memory_analysis()
        peak = max(peak, m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes)
    return peak / agents


@pytest.mark.parametrize("name,opts,agents,tight", [
    ("hypercontroller", dict(d=12, s=3), 4, True),  # 5 MB of models: the state dominates
    ("hypercontroller", dict(d=5, beta=1.0), 1, False),
    ("gp_ucb", dict(buffer=400, fit_points=16, candidates=16, refine_steps=1), 1, True),  # N x N dominates
    ("pb2", dict(buffer=64, fit_points=64, candidates=16, refine_steps=1), 2, True),  # 60 F x F dominate
    ("gp_ucb", dict(buffer=64, fit_points=32, candidates=2000, refine_steps=1), 1, True),  # N x C dominates
    ("hyperband", dict(budget=2000, eta=2), 4, False),
    ("random", {}, 1, False),
    ("fixed", {}, 1, False),
])
@pytest.mark.slow
def test_memory_estimate_bounds_xla_buffer_assignment(name, opts, agents, tight):
    """memory_bytes is an upper bound of what XLA allocates per agent (CPU), and within 2.5x of
    it where one array family dominates (so the estimate scales the way the real need does)."""
    tuner = hcjax.make_tuner(name, SPACE, **opts)
    measured = xla_peak_bytes(tuner, agents)
    assert isinstance(tuner.memory_bytes, int) and measured <= tuner.memory_bytes
    if tight:
        assert tuner.memory_bytes <= 2.5 * measured, (tuner.memory_bytes, measured)


@pytest.mark.parametrize("name,opts,involved", [
    ("hypercontroller", dict(d=10 ** 6, s=3), r"d=1000000, s=3 \(with h=4"),
    ("hypercontroller", dict(d=2000, s=2), "d=2000, s=2"),
    ("gp_ucb", dict(buffer=10 ** 5), "buffer=100000, fit_points=128, candidates=256"),
    ("pb2", dict(buffer=1000, fit_points=1000, candidates=10 ** 6), "buffer=1000, fit_points=1000, candidates=1000000"),
    ("hyperband", dict(budget=2 ** 31 - 1, eta=2), "budget=2147483647, eta=2"),
])
def test_memory_limit_refuses_before_allocating(name, opts, involved):
    start = time.process_time()  # this process's CPU time: a loaded machine does not inflate it
    with pytest.raises(ValueError, match=f"{name}: {involved}.* need an estimated .* GiB per agent.*above "
                                         r"memory_limit_gib=4; .*memory_limit_gib=\.\.\."):
        hcjax.make_tuner(name, SPACE, **opts)
    assert time.process_time() - start < 1.0  # nothing was allocated or compiled


def test_memory_limit_can_be_raised_or_lowered():
    opts = dict(buffer=20_000)  # 16 N^2 bytes of posterior matrices: about 6 GiB
    with pytest.raises(ValueError, match="gp_ucb: buffer=20000"):
        hcjax.make_tuner("gp_ucb", SPACE, **opts)
    tuner = hcjax.make_tuner("gp_ucb", SPACE, memory_limit_gib=16, **opts)
    assert 4 * 2 ** 30 < tuner.memory_bytes <= 16 * 2 ** 30
    assert tuner.init(jax.random.key(0)).x.shape == (20_000, 4)  # building and init are cheap; ask is the cost
    small = hcjax.make_tuner("hypercontroller", SPACE)
    assert 0 < small.memory_bytes < 2 ** 20
    with pytest.raises(ValueError, match=r"memory_limit_gib=1e-07"):
        hcjax.make_tuner("hypercontroller", SPACE, memory_limit_gib=1e-7)
    for bad in (0, -1.0, float("inf"), True, "4"):
        with pytest.raises(ValueError, match="make_tuner.memory_limit_gib must be"):
            hcjax.make_tuner("random", SPACE, memory_limit_gib=bad)
    assert "memory_limit_gib" not in hcjax.options("gp_ucb")


BAD_OBJECTIVES = [[1.0, 2.0], [0.5], (0.5,), np.zeros(2), np.zeros(1), jnp.zeros((1,)), jnp.zeros((2, 1))]
GOOD_OBJECTIVES = [1.5, 2, np.float32(0.5), np.float64(-1.0), np.int64(3), jnp.asarray(0.25), jnp.float32(float("nan"))]


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.slow
def test_tell_needs_a_scalar_objective(name):
    assert set(METHODS) == set(hcjax.available())
    tuner = hcjax.make_tuner(name, SPACE, **METHODS[name])
    # one compiled init, the vmapped one below (only tell's checks are under test): its first agent's state
    states = jax.jit(jax.vmap(tuner.init))(jax.random.split(jax.random.key(1), 3))
    state = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], states)  # NumPy: indexing compiles nothing
    shapes = jax.tree_util.tree_map(jnp.shape, state)
    # The unjitted tell's check sees the raw objective; traced (the closure keeps it raw) rather
    # than run op by op, which compiled some 50 one-op programs per tuner for a shape check.
    unjitted = lambda state, good: jax.tree_util.tree_map(jnp.shape, jax.eval_shape(lambda s: tuner.tell(s, good),
                                                                                    state))
    tell = jax.jit(tuner.tell)
    for bad in BAD_OBJECTIVES + [True, jnp.asarray(True), "1.0"]:
        for fn in (tuner.tell, tell) if not isinstance(bad, str) else (tuner.tell,):  # jit refuses str itself
            with pytest.raises(ValueError, match=rf"{name}.tell: objective must be a (real )?(scalar|number)"):
                fn(state, bad)
    with pytest.raises(ValueError, match=rf"{name}.tell: .*got a list of shape \(2,\)"):
        tuner.tell(state, [1.0, 2.0])
    with pytest.raises(ValueError, match=rf"{name}.tell: .*shape \(1,\)"):
        tell(state, jnp.zeros((1,)))
    for good in GOOD_OBJECTIVES:
        assert unjitted(state, good) == shapes
        after = tell(state, good)
        assert jax.tree_util.tree_map(jnp.shape, after) == shapes
    assert int(after.n_invalid) == 1  # the NaN
    # Under vmap each agent's objective is a scalar.
    after = jax.jit(jax.vmap(tuner.tell))(states, jnp.asarray([1.0, float("nan"), 2.0]))
    np.testing.assert_array_equal(after.n_invalid, [0, 1, 0])
    assert jax.tree_util.tree_map(jnp.shape, after) == jax.tree_util.tree_map(jnp.shape, states)
