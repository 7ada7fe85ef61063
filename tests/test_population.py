"""Population-based training over the agent axis: hcjax.population (pbt, pb2_population, exploit)."""
from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from hcjax.population import exploit, exploit_in_place, quantile_size, select
from hcjax.population.pb2 import batch_ucb
from hcjax.population.pbt import perturb

ROOT = Path(__file__).resolve().parent.parent
SMALL_PB2 = {"buffer": 64, "candidates": 32, "fit_points": 32}
SMALL = {"pb2_population": SMALL_PB2, "hypercontroller_shared": {"d": 5, "s": 2}}
METHODS = ["pbt", "pb2_population", "hypercontroller_shared"]
N, POPS = 12, 16  # agents, and independent populations of the vmapped programs (`programs`)


def small(name, space, **options):
    """The population `name` with small GP buffers and controller models (fast tests)."""
    return hcjax.make_population(name, space, **SMALL.get(name, {}), **options)


@functools.cache
def programs(name):
    """small(name, mixed_space()) and its jitted programs, compiled once for the module's tests:
    init(key, n) (n static), step(state, key, objectives (n,)), and, vmapped over independent
    populations of N agents, vinit(keys (POPS,)) and vstep(states, keys (POPS,), objectives (POPS, N))."""
    pop = small(name, mixed_space())
    return (pop, jax.jit(pop.init, static_argnums=1), jax.jit(pop.step),
            jax.jit(jax.vmap(lambda key: pop.init(key, N))), jax.jit(jax.vmap(pop.step)))


def stack(trees):
    """Independent populations' states (or any pytrees) stacked on a new leading axis (NumPy)."""
    return jax.tree.map(lambda *leaves: np.stack([np.asarray(x) for x in leaves]), *trees)


def mixed_space():
    return hcjax.Space([
        hcjax.Hyperparameter("lr", 1e-5, 1e-2, scale="log"),
        hcjax.Hyperparameter("clip", 0.1, 0.5),
        hcjax.Hyperparameter("batch", 1, 9, integer=True),
        hcjax.Hyperparameter("width", 4, 512, scale="log", integer=True),
    ])


def valid_np(x):
    x = np.asarray(x, np.float32)
    return np.isfinite(x) & (np.abs(x) <= 1e15)


def random_objectives(rng, n, invalid_fraction=0.2, ties=True):
    x = rng.normal(size=n).astype(np.float32)
    if ties:
        x = np.round(x, 1).astype(np.float32)  # many exact ties
    x[x == 0] = 0.05  # no signed zeros
    bad = rng.uniform(size=n) < invalid_fraction
    x[bad] = rng.choice(np.array([np.nan, np.inf, -np.inf, 1e20, -2e15], np.float32), size=bad.sum())
    return x


def ref_select(objectives, u_tie, u_donor, m):
    """Slow NumPy selection: rank (valid, objective, tie draw), replace the r lowest, donors from the top k."""
    n = len(objectives)
    valid = valid_np(objectives)
    ranked = sorted(range(n), key=lambda i: (bool(valid[i]), float(objectives[i]) if valid[i] else 0.0,
                                             float(u_tie[i])))
    parents = np.arange(n)
    replaced = np.zeros(n, bool)
    n_valid = int(valid.sum())
    if m == 0 or n_valid == 0:
        return replaced, parents
    r, k = max(m, n - n_valid), min(m, n_valid)
    for i in ranked[:r]:
        replaced[i] = True
        offset = min(int(np.floor(np.float32(u_donor[i]) * np.float32(k))), k - 1)
        parents[i] = ranked[n - 1 - offset]
    return replaced, parents


# ---------------------------------------------------------------------------------------- registry, options


def test_registry_lists_methods_and_options():
    assert hcjax.populations() == ("hypercontroller_shared", "pb2_population", "pbt")
    assert hcjax.population_options("pbt") == {"quantile": 0.25, "resample_probability": 0.25,
                                               "perturbation_factors": (0.8, 1.2), "min_gap": None}
    assert set(hcjax.population_options("pb2_population")) == {"quantile", "buffer", "candidates", "fit_points"}
    assert hcjax.population_options("hypercontroller_shared") == {"d": 10, "s": 1, "ridge": 1.0, "beta": 0.0}


@pytest.mark.parametrize("name,options,field", [
    ("nope", {}, "unknown population name"),
    ("pbt", {"ready": 5}, "unknown option"),
    ("pbt", {"quantile": 0.0}, "pbt.quantile"),
    ("pbt", {"quantile": 0.6}, "pbt.quantile"),
    ("pbt", {"quantile": True}, "pbt.quantile"),
    ("pbt", {"resample_probability": 1.5}, "pbt.resample_probability"),
    ("pbt", {"perturbation_factors": ()}, "pbt.perturbation_factors"),
    ("pbt", {"perturbation_factors": (0.8, -1.0)}, r"pbt.perturbation_factors\[1\]"),
    ("pbt", {"perturbation_factors": 1.2}, "pbt.perturbation_factors"),
    ("pb2_population", {"buffer": 1}, "pb2_population.buffer"),
    ("pb2_population", {"candidates": 0}, "pb2_population.candidates"),
    ("pb2_population", {"fit_points": 1.5}, "pb2_population.fit_points"),
    ("pb2_population", {"quantile": 0.75}, "pb2_population.quantile"),
    ("hypercontroller_shared", {"s": 4}, "hypercontroller_shared.s"),
    ("hypercontroller_shared", {"d": 1}, "hypercontroller_shared.d"),
    ("hypercontroller_shared", {"ridge": 0.0}, "hypercontroller_shared.ridge"),
    ("hypercontroller_shared", {"beta": -1.0}, "hypercontroller_shared.beta"),
])
def test_bad_options_name_the_field(name, options, field):
    with pytest.raises(ValueError, match=field):
        hcjax.make_population(name, hcjax.unit_space(2), **options)


@pytest.mark.parametrize("name", METHODS)
def test_bad_n_objectives_and_memory(name):
    pop, init, step, _, _ = programs(name)  # the module's compiled init: no op-by-op dispatch
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        pop.init(jax.random.key(0), 0)
    state, _ = init(jax.random.key(0), N)
    with pytest.raises(ValueError, match=rf"objectives must have shape \(n,\) = \({N},\)"):
        pop.step(state, jax.random.key(1), jnp.zeros((N - 1,)))
    with pytest.raises(ValueError, match=r"shape \(n,\)"):
        step(state, jax.random.key(1), jnp.zeros((N, 1)))  # refused while tracing
    with pytest.raises(ValueError, match="space must be an hcjax.Space"):
        hcjax.make_population(name, [0.0, 1.0])
    tiny = hcjax.make_population(name, hcjax.unit_space(2), memory_limit_gib=1e-6)
    with pytest.raises(ValueError, match="memory_limit_gib"):
        tiny.init(jax.random.key(0), 100_000)
    assert pop.memory_bytes(64) > pop.memory_bytes(8) > 0


# ---------------------------------------------------------------------------------------- selection, exploit


def test_quantile_size_matches_ray_tunes_rule():
    for n in range(1, 70):
        for q in (0.01, 0.1, 0.2, 0.25, 1 / 3, 0.4, 0.5):
            expected = 0 if n < 2 else min(math.ceil(round(q * n, 9)), n // 2)
            assert quantile_size(n, q) == expected
            assert n < 2 or quantile_size(n, q) >= 1
    assert quantile_size(30, 0.1) == 3 and quantile_size(8, 0.25) == 2 and quantile_size(5, 0.5) == 2


@pytest.mark.slow
def test_select_matches_numpy_reference():
    """Replaced set and donors equal the slow reference, on random objectives with ties and invalid entries."""
    rng = np.random.default_rng(0)
    cases = ((1, 0.25), (2, 0.25), (3, 0.5), (8, 0.1), (8, 0.5), (17, 0.25), (40, 0.1), (40, 0.5))
    batch = 8
    fractions = (0.0, 0.0, 0.2, 0.2, 0.5, 0.7, 0.9, 1.0)
    objectives = [np.stack([random_objectives(rng, n, invalid_fraction=f) for f in fractions]) for n, _ in cases]
    keys = [jax.random.split(jax.random.key(trial), batch) for trial in range(len(cases))]

    def draws(k, n):  # select's documented key use: (k_tie, k_donor) = split(key), uniform (n,) each
        k_tie, k_donor = jax.random.split(k)
        return jax.random.uniform(k_tie, (n,)), jax.random.uniform(k_donor, (n,))

    @jax.jit
    def every_case(keys, objectives):  # one program for all the cases
        return [(jax.vmap(lambda k, o: select(k, o, quantile_size(n, q)))(ks, obj),
                 jax.vmap(lambda k: draws(k, n))(ks)) for (n, q), ks, obj in zip(cases, keys, objectives)]

    out = every_case(keys, objectives)
    for (n, q), obj, ((replaced, parents), draw) in zip(cases, objectives, out):
        m = quantile_size(n, q)
        assert parents.dtype == jnp.int32
        replaced, parents, (u_tie, u_donor) = np.asarray(replaced), np.asarray(parents), map(np.asarray, draw)
        for b in range(batch):
            ref_replaced, ref_parents = ref_select(obj[b], u_tie[b], u_donor[b], m)
            np.testing.assert_array_equal(replaced[b], ref_replaced, err_msg=f"n={n} q={q} b={b}")
            np.testing.assert_array_equal(parents[b], ref_parents, err_msg=f"n={n} q={q} b={b}")


def test_select_refuses_a_quantile_above_half():
    with pytest.raises(ValueError, match=r"m must be an integer in \[0, n // 2\] = \[0, 3\]"):
        select(jax.random.key(0), jnp.zeros(7), 4)


@pytest.mark.slow
def test_invalid_agents_are_replaced_and_never_donors():
    rng = np.random.default_rng(1)
    sizes = (2, 5, 12, 29)
    objectives = [np.stack([random_objectives(rng, n, invalid_fraction=f) for f in np.linspace(0, 1, 50)])
                  for n in sizes]
    keys = [jax.random.split(jax.random.key(n), 50) for n in sizes]
    out = jax.jit(lambda keys, objectives: [jax.vmap(lambda k, o: select(k, o, quantile_size(n, 0.25)))(ks, obj)
                                            for n, ks, obj in zip(sizes, keys, objectives)])(keys, objectives)
    for n, batch, (replaced, parents) in zip(sizes, objectives, out):
        m = quantile_size(n, 0.25)
        for obj, rep, par in zip(batch, np.asarray(replaced), np.asarray(parents)):
            valid = valid_np(obj)
            if not valid.any():  # no donor: nothing happens
                assert not rep.any() and np.array_equal(par, np.arange(n))
                continue
            assert rep[~valid].all()  # every invalid agent is replaced
            assert rep.sum() == max(m, (~valid).sum())
            assert valid[par[rep]].all()  # donors are valid
            assert not rep[par[rep]].any()  # and not replaced themselves
            np.testing.assert_array_equal(par[~rep], np.nonzero(~rep)[0])
            # donors come from the top min(m, n_valid) valid agents
            k = min(m, valid.sum())
            kth_best = np.sort(obj[valid])[-k]
            assert (obj[par[rep]] >= kth_best).all()


def test_donors_uniform_over_the_top_quantile():
    """n = 12, q = 0.25: agents 9, 10, 11 are the top 3; over 3000 draws each donates ~1/3 of the time."""
    objectives = jnp.arange(12, dtype=jnp.float32)
    keys = jax.random.split(jax.random.key(3), 3000)
    _, parents = jax.jit(jax.vmap(lambda k: select(k, objectives, 3)))(keys)
    donors = np.asarray(parents)[:, :3].reshape(-1)  # agents 0, 1, 2 are always replaced
    counts = np.array([(donors == a).sum() for a in (9, 10, 11)])
    assert counts.sum() == donors.size
    p = 1 / 3
    se = math.sqrt(donors.size * p * (1 - p))
    assert np.all(np.abs(counts - donors.size * p) < 5 * se), counts


@pytest.mark.slow
def test_exploit_copies_exactly_the_donors_state():
    """After a pbt step on a PPO-like batched state, every leaf of agent i equals the
    donor's leaf bit for bit (NumPy gather), and agents not replaced are untouched."""
    rng = np.random.default_rng(2)
    n = N
    f32 = np.float32
    tree = {
        "params": {"actor": [rng.normal(size=(n, 5, 7)).astype(f32), rng.normal(size=(n, 7)).astype(f32)],
                   "critic": rng.normal(size=(n, 7, 1)).astype(f32)},
        "opt_state": (rng.normal(size=(n, 5, 7)).astype(f32), rng.integers(0, 100, size=(n,)).astype(np.int32)),
        "obs_stats": {"mean": rng.normal(size=(n, 5)).astype(f32), "count": rng.uniform(size=(n,)).astype(f32)},
        "unused": None,
    }
    _, init, step, _, _ = programs("pbt")
    state, _ = init(jax.random.key(0), n)
    objectives = random_objectives(rng, n)
    # NumPy arguments straight into the jitted programs: jnp.asarray would compile a program per shape
    _, _, parents = step(state, jax.random.key(5), objectives)
    out = jax.jit(exploit)(tree, parents)
    parents = np.asarray(parents)
    assert (parents != np.arange(n)).sum() >= quantile_size(n, 0.25)
    leaves_in, leaves_out = jax.tree.leaves(tree), jax.tree.leaves(out)
    assert out["unused"] is None and len(leaves_in) == len(leaves_out)
    for a, b in zip(leaves_in, leaves_out):
        b = np.asarray(b)
        for i in range(n):
            np.testing.assert_array_equal(b[i], a[parents[i]])


@pytest.mark.slow
def test_exploit_in_place_equals_the_gather():
    """Donated buffers: the same arrays as `exploit`, for selections with and without
    invalid agents, and under vmap over populations."""
    rng = np.random.default_rng(12)
    sizes, trials = (1, 7, 20), 6
    objectives = [np.stack([random_objectives(rng, n, invalid_fraction=float(trial % 3) * 0.3)
                            for trial in range(trials)]) for n in sizes]
    trees = [[{"w": rng.normal(size=(n, 3, 2)).astype(np.float32), "i": np.arange(n, dtype=np.int32) * 7}
              for _ in range(trials)] for n in sizes]
    keys = jax.vmap(jax.random.key)(jnp.arange(trials))

    @jax.jit
    def gathered(objectives, trees):  # every size's and trial's parents and `exploit` result, one program
        def one(n, key, obj, tree):
            _, parents = select(key, obj, quantile_size(n, 0.25))
            return parents, exploit(tree, parents)
        return [jax.vmap(functools.partial(one, n))(keys, obj, tree) for n, obj, tree in zip(sizes, objectives, trees)]

    expected = gathered(objectives, [stack(tree) for tree in trees])
    parents = [np.asarray(p) for p, _ in expected]
    in_place = jax.jit(lambda trees, parents: [exploit_in_place(t, p) for t, p in zip(trees, parents)],
                       donate_argnums=0)  # one program: every size's tree, in place
    for trial in range(trials):
        out = in_place([jax.tree.map(jnp.asarray, tree[trial]) for tree in trees], [p[trial] for p in parents])
        for (_, want), got in zip(expected, out):
            for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[trial])
    objectives = np.stack([random_objectives(rng, 9) for _ in range(4)])
    tree = rng.normal(size=(4, 9, 5)).astype(np.float32)

    @jax.jit
    def both(keys, objectives, tree):
        _, parents = jax.vmap(lambda k, o: select(k, o, 2))(keys, objectives)
        return jax.vmap(exploit_in_place)(tree, parents), jax.vmap(exploit)(tree, parents)

    got, want = both(jax.random.split(jax.random.key(0), 4), objectives, tree)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("gather", [exploit, exploit_in_place])
def test_exploit_checks_leading_axes_and_parents(gather):
    """Issue 17: a leaf whose leading axis is not n, parents of another shape or dtype,
    and concrete parents outside [0, n) raise a ValueError naming them (no broadcast, no
    clamp); under jit the range is the caller's (documented clamp)."""
    n = 4
    tree = {"w": jnp.zeros((n, 3)), "b": jnp.zeros((n,)), "none": None}
    parents = np.array([0, 0, 2, 3], np.int32)
    bad_leaves = [({"w": jnp.zeros((n + 1, 3))}, r"tree\['w'\] has shape \(5, 3\)"),
                  ({"w": jnp.zeros((1, 3))}, r"tree\['w'\] has shape \(1, 3\)"),
                  ({"a": [jnp.zeros((n,)), jnp.zeros(())]}, r"tree\['a'\]\[1\] has shape \(\)")]
    for bad, match in bad_leaves:
        with pytest.raises(ValueError, match="leading axis.*" + match):
            gather(bad, parents)
    for bad in (parents[:, None], np.int32(1), parents.astype(np.float32), parents.astype(bool)):
        with pytest.raises(ValueError, match=r"parents must be an \(n,\) integer array"):
            gather(tree, bad)
    for bad in ([0, 1, 2, 4], [-1, 1, 2, 3], jnp.array([0, 1, 9, 3])):
        with pytest.raises(ValueError, match=r"parents must lie in \[0, n\) = \[0, 4\)"):
            gather(tree, bad)
    out = gather(tree, [0, 0, 2, 3])  # a Python list of ints is fine
    assert out["none"] is None and out["w"].shape == (n, 3)
    clamped = jax.jit(exploit)({"b": jnp.arange(n)}, jnp.array([0, 1, 2, 9]))  # traced: clamped, not checked
    np.testing.assert_array_equal(np.asarray(clamped["b"]), [0, 1, 2, 3])


# ---------------------------------------------------------------------------------------- PBT explore


def ref_perturbed(space, donor, factor):
    """NumPy: donor * factor, integer rounding with the one-unit move when stuck, clipped."""
    x = np.float32(donor) * np.float32(factor)
    out = x.copy()
    for j in range(space.h):
        if space.is_integer[j]:
            r = np.round(x[j])
            if r == donor[j] and factor != 1.0:
                r = donor[j] + np.sign(factor - 1.0) * (-1.0 if donor[j] < 0 else 1.0)
            out[j] = r
    return np.clip(out, space.low, space.high)


def test_perturbation_values_and_bounds():
    """resample_probability = 0: each value is a donor's value times 0.8 or 1.2 (integer
    rule, clipped); both factors occur; integers stay integers; all in bounds."""
    space = mixed_space()
    rng = np.random.default_rng(4)
    n = 400
    donors = np.array(jax.jit(space.decode)(rng.uniform(size=(n, space.h)).astype(np.float32)))  # not op by op
    donors[:20] = space.high  # at the upper bounds: 1.2 must clip
    donors[20:40] = space.low
    donors[40:60, 2] = 2.0  # small integers: 2 x 0.8 -> 1.6 -> 2 (stuck) -> 1; 2 x 1.2 -> 3
    out = np.asarray(jax.jit(lambda k, v: perturb(space, k, v, 0.0, (0.8, 1.2)))(jax.random.key(0),
                                                                                  donors))
    seen = set()
    for i in range(n):
        for j in range(space.h):
            low = ref_perturbed(space, donors[i], 0.8)[j]
            high = ref_perturbed(space, donors[i], 1.2)[j]
            assert np.isclose(out[i, j], low, rtol=1e-6) or np.isclose(out[i, j], high, rtol=1e-6), (i, j)
            seen.add(bool(np.isclose(out[i, j], high, rtol=1e-6) and not np.isclose(low, high, rtol=1e-6)))
    assert seen == {True, False}
    assert np.all(out >= space.low) and np.all(out <= space.high)
    np.testing.assert_array_equal(out[:, space.is_integer], np.round(out[:, space.is_integer]))
    assert set(np.unique(out[40:60, 2])) <= {1.0, 3.0} and len(set(np.unique(out[40:60, 2]))) == 2


def test_resampling_frequency_and_distribution():
    """resample_probability = 0.25: about a quarter of the values are fresh samples; with
    probability 1 the samples are uniform on each scale (log-uniform lr)."""
    space = hcjax.Space([hcjax.Hyperparameter("lr", 1e-5, 1e-1, scale="log"), hcjax.Hyperparameter("x", 0.0, 1.0)])
    n = 4000
    donors = jnp.tile(jnp.asarray([[1e-3, 0.5]], jnp.float32), (n, 1))
    # Both probabilities in one compiled program (not dispatched op by op).
    out, fresh = map(np.asarray, jax.jit(lambda donors: (perturb(space, jax.random.key(1), donors, 0.25, (0.8, 1.2)),
                                                         perturb(space, jax.random.key(2), donors, 1.0, (0.8, 1.2))))(
        donors))
    perturbed = np.isclose(out, np.asarray(donors) * 0.8, rtol=1e-6) | np.isclose(out, np.asarray(donors) * 1.2,
                                                                                  rtol=1e-6)
    frac = 1 - perturbed.mean()
    assert abs(frac - 0.25) < 5 * math.sqrt(0.25 * 0.75 / out.size), frac
    u = np.log10(fresh[:, 0])  # uniform on [-5, -1]
    assert abs(u.mean() + 3.0) < 5 * 4 / math.sqrt(12 * n) and u.min() >= -5 and u.max() <= -1
    assert abs(fresh[:, 1].mean() - 0.5) < 5 / math.sqrt(12 * n)


@pytest.mark.slow
def test_pbt_step_keeps_survivors_and_explores_from_donors():
    space = mixed_space()
    pop = hcjax.make_population("pbt", space, resample_probability=0.0)
    n = 32

    @jax.jit
    def run(key, objectives):  # init, one step and, on the step's selection key, `select`: one program
        state, values = pop.init(jax.random.key(0), n)
        k_select, _ = jax.random.split(key)
        return values, pop.step(state, key, objectives), select(k_select, objectives, quantile_size(n, 0.25))

    objectives = random_objectives(np.random.default_rng(6), n)
    values, (state2, new, parents), selected = run(jax.random.key(9), objectives)
    values = np.asarray(values)
    assert values.shape == (n, 4) and np.all(values >= space.low) and np.all(values <= space.high)
    new, parents = np.asarray(new), np.asarray(parents)
    replaced, ref_parents = map(np.asarray, selected)
    np.testing.assert_array_equal(parents, ref_parents)
    np.testing.assert_array_equal(new[~replaced], values[~replaced])
    for i in np.nonzero(replaced)[0]:
        options = [ref_perturbed(space, values[parents[i]], f) for f in (0.8, 1.2)]
        for j in range(4):
            assert np.isclose(new[i, j], options[0][j], rtol=1e-6) or np.isclose(new[i, j], options[1][j], rtol=1e-6)
    assert int(state2.n_invalid) == int((~valid_np(objectives)).sum())
    assert int(state2.n_replaced) == int(replaced.sum()) and int(state2.t) == 1
    np.testing.assert_array_equal(np.asarray(state2.values), new)


# ---------------------------------------------------------------------------------------- PB2


@pytest.mark.slow
def test_pb2_records_interval_changes():
    """Step 2 writes (time 1 = interval index, the configuration in effect, objective - level started from)
    for agents whose objective and starting level are valid; invalid ones take no row."""
    pop, init, step, _, _ = programs("pb2_population")
    space, n = pop.space, N
    state, values0 = init(jax.random.key(0), n)
    obj1 = np.linspace(-1, 1, n).astype(np.float32)
    obj1[4] = np.nan
    state, values1, parents1 = step(state, jax.random.key(1), obj1)  # NumPy in: no per-shape transfer program
    assert not np.asarray(state.mask).any()  # nothing known before the first step
    parents1 = np.asarray(parents1)
    np.testing.assert_array_equal(np.asarray(state.has_before), valid_np(obj1)[parents1])
    np.testing.assert_allclose(np.asarray(state.before)[valid_np(obj1)[parents1]],
                               obj1[parents1][valid_np(obj1)[parents1]])
    obj2 = obj1 + np.arange(n, dtype=np.float32)
    obj2[7] = np.inf
    obj2[4] = 3.0
    state2, _, _ = step(state, jax.random.key(2), obj2)
    before = obj1[parents1]
    ok = valid_np(obj2) & valid_np(before)
    unit = np.asarray(jax.jit(space.encode)(values1))
    expected = sorted((1.0, *np.round(unit[i], 5), round(float(obj2[i] - before[i]), 4)) for i in range(n) if ok[i])
    mask = np.asarray(state2.mask)
    got = sorted((float(t), *np.round(x, 5), round(float(y), 4)) for t, x, y in
                 zip(np.asarray(state2.time)[mask], np.asarray(state2.x)[mask], np.asarray(state2.y)[mask]))
    assert got == expected
    assert int(state2.ptr) == ok.sum() and int(state2.t) == 2 and int(state2.n_invalid) == 2


@pytest.mark.slow
def test_pb2_ring_buffer_wraps_and_subsamples():
    """n = 20 agents, buffer 8: each step writes 8 valid observations; the buffer stays full and finite."""
    pop = hcjax.make_population("pb2_population", hcjax.unit_space(1), buffer=8, candidates=8, fit_points=8)
    state, _ = jax.jit(pop.init, static_argnums=1)(jax.random.key(0), 20)
    step = jax.jit(pop.step)
    for i in range(4):
        state, values, _ = step(state, jax.random.key(i), np.arange(20, dtype=np.float32) * (i + 1))
    assert np.asarray(state.mask).all() and int(state.ptr) == (3 * 8) % 8
    assert set(np.asarray(state.time).tolist()) == {3.0}  # written by the 4th step: interval 3
    assert np.all(np.isfinite(np.asarray(values)))


def ref_bucb_acquisition(Kcc, mean, cov0, noise_var, chosen_before, root_beta):
    """NumPy: UCB after conditioning the posterior (cov0) on noisy pseudo-observations at
    the candidates chosen so far, by an explicit Gram-matrix solve."""
    if not chosen_before:
        var = np.diag(cov0)
    else:
        S = cov0[np.ix_(chosen_before, chosen_before)] + noise_var * np.eye(len(chosen_before))
        cross = cov0[:, chosen_before]
        var = np.diag(cov0) - np.einsum("ij,jk,ik->i", cross, np.linalg.inv(S), cross)
    return mean + root_beta * np.sqrt(np.maximum(var, 0) + 1e-12)


def test_batch_ucb_equals_explicit_conditioning():
    """Each GP-BUCB choice maximises (to 1e-3) the UCB of the posterior conditioned on the
    earlier choices as pseudo-observations, computed by a float64 NumPy solve."""
    rng = np.random.default_rng(7)
    bucb = jax.jit(batch_ucb, static_argnums=(2, 3, 5))  # compiled once (was op by op)
    for trial in range(5):
        M, count = 40, 12
        X = rng.uniform(size=(M, 2))
        Kcc = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1) / 0.3 ** 2)
        D = rng.uniform(size=(6, 2))  # real data: posterior cov0 = K - K_cd (K_dd + s I)^-1 K_dc
        Kcd = np.exp(-0.5 * ((X[:, None] - D[None]) ** 2).sum(-1) / 0.3 ** 2)
        Kdd = np.exp(-0.5 * ((D[:, None] - D[None]) ** 2).sum(-1) / 0.3 ** 2)
        cov0 = Kcc - Kcd @ np.linalg.solve(Kdd + 0.1 * np.eye(6), Kcd.T)
        mean = rng.normal(size=M) * 0.3
        noise_var, root_beta = 0.05, 1.5
        chosen, _ = bucb(mean.astype(np.float32), cov0.astype(np.float32), noise_var, root_beta, np.int32(count), 16)
        chosen = np.asarray(chosen)
        assert np.all(chosen[count:] == 0)
        for k in range(count):
            acq = ref_bucb_acquisition(Kcc, mean, cov0, noise_var, list(chosen[:k]), root_beta)
            assert acq[chosen[k]] >= acq.max() - 1e-3, (trial, k)
        assert len(set(chosen[:count].tolist())) > 1  # the pseudo-observations spread the batch


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.slow
def test_invalid_objectives_never_poison_the_state(name):
    pop, init, step, _, _ = programs(name)
    space, n = pop.space, N
    state, values = init(jax.random.key(0), n)
    rng = np.random.default_rng(8)
    invalid = 0
    for i in range(6):
        objectives = random_objectives(rng, n, invalid_fraction=0.5, ties=False) * 1e3
        if i == 3:
            objectives[:] = np.nan  # no donor at all: nothing is replaced
        invalid += int((~valid_np(objectives)).sum())
        before = np.asarray(values)
        state, values, parents = step(state, jax.random.key(i), objectives)
        parents = np.asarray(parents)
        if name == "hypercontroller_shared":
            np.testing.assert_array_equal(parents, np.arange(n))  # no exploit
        elif i == 3:
            np.testing.assert_array_equal(parents, np.arange(n))
            np.testing.assert_array_equal(np.asarray(values), before)
        else:
            assert valid_np(objectives[parents]).all()
        for leaf in jax.tree.leaves(state):
            assert np.all(np.isfinite(np.asarray(leaf, np.float64)))
        assert np.all(np.asarray(values) >= space.low) and np.all(np.asarray(values) <= space.high)
    assert int(np.sum(state.n_invalid)) == invalid


# ---------------------------------------------------------------------------------------- vmap, sharding


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.slow
def test_vmap_over_populations_equals_separate_runs(name):
    """P populations initialised and stepped by the vmapped programs equal each population
    initialised and stepped alone (a Python loop over the single-population programs)."""
    _, init, step, vinit, vstep = programs(name)
    P, steps = POPS, 3
    rng = np.random.default_rng(9)
    objectives = rng.normal(size=(steps, P, N)).astype(np.float32)
    init_keys = jax.random.split(jax.random.key(0), P)
    step_keys = jax.random.split(jax.random.key(1), (steps, P))
    state, values = vinit(init_keys)
    batched = [(values, None)]
    for s in range(steps):
        state, values, parents = vstep(state, step_keys[s], objectives[s])
        batched.append((values, parents))
    for p in range(P):
        state, values = init(init_keys[p], N)
        separate = [(values, None)]
        for s in range(steps):
            state, values, parents = step(state, step_keys[s, p], objectives[s, p])
            separate.append((values, parents))
        for (bv, bp), (sv, sp) in zip(batched, separate):
            if sp is not None:
                np.testing.assert_array_equal(np.asarray(bp)[p], np.asarray(sp))
            np.testing.assert_allclose(np.asarray(bv)[p], np.asarray(sv), rtol=1e-5)


SHARDING_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import hcjax
    from tests.test_population import METHODS, N, mixed_space, small
    assert len(jax.devices()) == 4
    mesh = hcjax.population.agent_mesh()
    agent, rep = NamedSharding(mesh, P("agent")), NamedSharding(mesh, P())
    rng, out = np.random.default_rng(0), {}
    # a program of its own, the same shapes for every method: compiled once
    moved = jax.jit(lambda agents, parents: hcjax.population.exploit_sharded(
        agents, parents, mesh, hcjax.population.quantile_size(N, 0.25)))
    for name in METHODS:
        pop = small(name, mixed_space())
        state, _ = jax.jit(pop.init, static_argnums=1)(jax.random.key(0), N)
        agents = {"w": rng.normal(size=(N, 8, 4)).astype(np.float32), "count": rng.uniform(size=N).astype(np.float32)}
        objs = rng.normal(size=(3, N)).astype(np.float32)
        objs[1, 5] = np.nan
        out.update({f"{name}/w": agents["w"], f"{name}/count": agents["count"], f"{name}/objectives": objs})

        def step(state, agents, key, obj):
            state, values, parents = pop.step(state, key, obj)
            in_place = hcjax.population.exploit_in_place(agents, parents)
            return state, values, parents, hcjax.exploit(agents, parents), in_place

        def place(tree):  # agent-axis leaves over the 4 devices, the rest replicated
            return jax.tree.map(lambda x: jax.device_put(x, agent if x.ndim and x.shape[0] == N else rep), tree)

        state, agents = place((state, agents))
        f = jax.jit(step)
        for i, obj in enumerate(objs):
            state, values, parents, exploited, in_place = f(state, agents, jax.random.key(10 + i),
                                                            jax.device_put(obj, agent))
            results = {"exploit": exploited, "in_place": in_place, "exploit_sharded": moved(agents, parents)}
            # placed again: every step's program sees the same input shardings, so it compiles once
            # (hypercontroller_shared's exploited state may come back replicated, see below)
            state, agents = place((state, exploited))
            out.update({f"{name}/{i}/parents": parents, f"{name}/{i}/values": values,
                        f"{name}/{i}/sharded": tuple(exploited["w"].sharding.spec)[:1] == ("agent",)
                                               and len(exploited["w"].sharding.device_set) == 4,
                        f"{name}/{i}/exploit_sharded_sharded":
                            tuple(results["exploit_sharded"]["w"].sharding.spec)[:1] == ("agent",)})
            out.update({f"{name}/{i}/{how}/{leaf}": tree[leaf] for how, tree in results.items() for leaf in tree})
    np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in out.items()})
""")


@pytest.mark.slow
def test_sharded_agent_axis_equals_one_device(tmp_path):
    """4 CPU devices (a subprocess), the agent axis sharded with NamedSharding(P("agent")):
    parents and the exploited state (`exploit`, `exploit_in_place`, and `exploit_sharded`,
    which keeps the agent sharding) equal one device's (this process, the module's
    programs) exactly, values to float rounding."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", SHARDING_SCRIPT, str(tmp_path / "four.npz")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    four = np.load(tmp_path / "four.npz")
    gather = jax.jit(exploit)
    for name in METHODS:
        _, init, step, _, _ = programs(name)
        state, _ = init(jax.random.key(0), N)
        agents = {"w": four[f"{name}/w"], "count": four[f"{name}/count"]}
        for i, obj in enumerate(four[f"{name}/objectives"]):
            state, values, parents = step(state, jax.random.key(10 + i), obj)
            parents, values = np.asarray(parents), np.asarray(values)
            agents = jax.tree.map(np.asarray, gather(agents, parents))
            np.testing.assert_array_equal(four[f"{name}/{i}/parents"], parents, err_msg=f"{name} step {i}")
            for how in ("exploit", "in_place", "exploit_sharded"):  # exploit_sharded: only the donors' rows moved
                for leaf in agents:
                    np.testing.assert_array_equal(four[f"{name}/{i}/{how}/{leaf}"], agents[leaf],
                                                  err_msg=f"{name} step {i} {how} {leaf}")
            assert four[f"{name}/{i}/exploit_sharded_sharded"], (name, i)
            # The exploited state stays sharded over the 4 devices (hypercontroller_shared's parents
            # are the constant identity, whose gather XLA may replicate: nothing is exploited there).
            assert four[f"{name}/{i}/sharded"] or name == "hypercontroller_shared", (name, i)
            assert np.max(np.abs(four[f"{name}/{i}/values"] - values) / (1 + np.abs(values))) < 1e-5, (name, i)
            replaced = int(np.sum(parents != np.arange(N)))
            assert replaced >= (0 if name == "hypercontroller_shared" else quantile_size(N, 0.25)), (name, i)


# ---------------------------------------------------------------------------------------- a population problem


def synthetic_best(name, seed: int, explore: bool, intervals: int = 30):
    """A drifting population problem, POPS independent populations of N agents (vmapped):
    agent i's network level theta_i gains 1 - 8 (x_i - x*(t))^2 + 0.1 noise per interval,
    x*(t) = 0.5 + 0.35 sin(2 pi t / 30), x_i its "clip" hyperparameter in [0, 1] units.
    With `explore`, the population steps after every interval on the levels and theta
    follows the parents; without, the initial random configurations stay fixed
    (independent random search; the same noise). Returns each population's best final level."""
    _, _, _, vinit, vstep = programs(name)
    rng = np.random.default_rng(seed)
    k_init, k_run = jax.random.split(jax.random.key(seed))
    state, values = vinit(jax.random.split(k_init, POPS))
    step_keys = jax.random.split(k_run, (intervals, POPS))
    low, high = mixed_space().low[1], mixed_space().high[1]
    theta = np.zeros((POPS, N))
    for t in range(intervals):
        x = (np.asarray(values)[..., 1] - low) / (high - low)
        target = 0.5 + 0.35 * np.sin(2 * np.pi * t / 30.0)
        theta = theta + 1.0 - 8.0 * (x - target) ** 2 + 0.1 * rng.normal(size=theta.shape)
        if explore:
            state, values, parents = vstep(state, step_keys[t], theta.astype(np.float32))
            theta = np.take_along_axis(theta, np.asarray(parents), axis=1)
    return theta.max(axis=1)


@pytest.mark.parametrize("name", ["pbt", "pb2_population"])
@pytest.mark.slow
def test_population_beats_independent_random_search(name):
    """POPS seeds (vmapped populations): the best final level of PBT / PB2 exceeds that of
    independent random search (same initial configurations) by > 3 paired standard errors."""
    tuned, fixed = synthetic_best(name, 2026, explore=True), synthetic_best(name, 2026, explore=False)
    diff = tuned - fixed
    se = diff.std(ddof=1) / math.sqrt(diff.size)
    assert diff.mean() > 3 * se, (tuned.mean(), fixed.mean(), se)
    assert diff.mean() > 3 * math.hypot(tuned.std(ddof=1), fixed.std(ddof=1)) / math.sqrt(diff.size)


# ---------------------------------------------------------------------------------------- shared HyperController


@pytest.mark.parametrize("s,beta", [(1, 0.0), (2, 0.5), (3, 0.0)])
@pytest.mark.slow
def test_shared_controller_with_one_agent_is_the_tuner(s, beta):
    """n = 1, the agent's key split(key, 1)[0]: the same values as make_tuner("hypercontroller")
    told then asked, through invalid objectives, and the same models."""
    space = hcjax.unit_space(2)
    pop = hcjax.make_population("hypercontroller_shared", space, d=5, s=s, beta=beta)
    tuner = hcjax.make_tuner("hypercontroller", space, d=5, s=s, beta=beta)
    key = jax.random.key(0)
    # both inits in one compiled program (op by op, each was ~10 compiles)
    (state, values), tstate = jax.jit(lambda k: (pop.init(k, 1), tuner.init(jax.random.split(k, 1)[0])))(key)
    np.testing.assert_array_equal(np.asarray(values[0]), np.asarray(space.grid(5))[[0, 1], tstate.arms])

    @jax.jit
    def both(state, tstate, k, x):  # the population's step and, independently, the tuner's tell then ask
        state, values, parents = pop.step(state, k, x[None])
        tstate, tvalues = tuner.ask(tuner.tell(tstate, x), jax.random.split(k, 1)[0])
        return state, values, parents, tstate, tvalues

    rng = np.random.default_rng(s)
    for i in range(120):
        x = np.float32(rng.normal() if i % 13 else np.nan)
        state, values, parents, tstate, tvalues = both(state, tstate, jax.random.key(i + 1), x)
        np.testing.assert_array_equal(np.asarray(values)[0], np.asarray(tvalues), err_msg=f"step {i}")
        assert int(np.asarray(parents)[0]) == 0
    np.testing.assert_allclose(np.asarray(state.models), np.asarray(tstate.models), rtol=1e-5, atol=1e-5)
    assert int(state.t[0]) == int(tstate.t) and int(state.n_invalid[0]) == int(tstate.n_invalid) == 10


def test_shared_models_pool_every_agents_observations():
    """n = 6, s = 2: V = ridge I + sum of Xi Xi^T and B = sum X Xi over every agent's
    valid observations at its (context, arm), G = V^-1 B (NumPy replay); each agent's
    next arms maximise the shared predictions with its own window and context."""
    h, d, s, ridge, n = 2, 4, 2, 0.5, 6
    space = hcjax.unit_space(h)
    pop = hcjax.make_population("hypercontroller_shared", space, d=d, s=s, ridge=ridge)
    state, _ = jax.jit(pop.init, static_argnums=1)(jax.random.key(1), n)  # not op by op
    step = jax.jit(pop.step)
    V = np.tile(ridge * np.eye(s), (h, d ** s, d, 1, 1))
    B = np.zeros((h, d ** s, d, s))
    rng = np.random.default_rng(11)
    for i in range(40):
        x = rng.normal(size=n).astype(np.float32)
        x[rng.uniform(size=n) < 0.15] = np.nan
        hist, win, arms, t = (np.asarray(a) for a in (state.history, state.window, state.arms, state.t))
        for a in range(n):
            if not valid_np(x[a]) or t[a] < s:
                continue
            for j in range(h):
                c = sum(int(hist[a, j, k]) * d ** (s - 1 - k) for k in range(s))
                V[j, c, arms[a, j]] += np.outer(win[a], win[a])
                B[j, c, arms[a, j]] += float(x[a]) * win[a]
        state, values, _ = step(state, jax.random.key(100 + i), x)
    np.testing.assert_allclose(np.asarray(state.V), V, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(state.B), B, rtol=1e-5, atol=1e-5)
    G = np.linalg.solve(V, B[..., None])[..., 0]
    np.testing.assert_allclose(np.asarray(state.G), G, rtol=1e-4, atol=1e-4)
    hist, win, arms = np.asarray(state.history), np.asarray(state.window), np.asarray(state.arms)
    assert np.all(np.asarray(state.t) >= s)
    for a in range(n):
        for j in range(h):
            c = sum(int(hist[a, j, k]) * d ** (s - 1 - k) for k in range(s))
            scores = G[j, c] @ win[a]
            assert scores[arms[a, j]] >= scores.max() - 1e-4 * (1 + abs(scores.max()))
    np.testing.assert_array_equal(np.asarray(values), np.asarray(space.grid(d))[np.arange(h), arms])


@pytest.mark.slow
def test_shared_statistics_lower_lgds_regret():
    """16 agents on the same LGDS problems (h = 2, d = 10, 200 steps, 16 problems): the
    shared models' mean regret per agent is lower than independent controllers' by more
    than 3 paired standard errors (experiments/lgds_population.py). 16 problems, seeds 3, 1,
    2: 5.7, 6.9, 7.1 paired standard errors (32 problems: 8.6, 10.4, 9.6)."""
    from experiments.benchmarks.lgds_population import measure

    row = measure(seeds=16, n_agents=16, steps=200, seed=3)
    assert row["shared_minus_independent"] < -3 * row["paired_se"], row["shared_minus_independent"]
    assert row["independent"] < row["random"]
