"""HyperController against the plain-Python reference, and its contract."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from hcjax.tuners.hypercontroller import break_ties, context_index, key_word
from tests.reference_controller import ReferenceController

STEPS = 200


def run_against_reference(h, d, s, beta, seed, tol=1e-4):
    """Drive both controllers with the same random objectives; compare arms and G each step."""
    space = hcjax.unit_space(h)
    tuner = hcjax.make_tuner("hypercontroller", space, d=d, s=s, beta=beta)
    ask, tell = jax.jit(tuner.ask), jax.jit(tuner.tell)
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    state = tuner.init(key)
    ref = ReferenceController(h, d, s, beta=beta)
    grid = space.grid(d)
    n_unique = 0
    for t in range(STEPS):
        key, sub = jax.random.split(key)
        state, values = ask(state, sub)
        arms = np.asarray(state.arms)
        np.testing.assert_allclose(np.asarray(values), grid[np.arange(h), arms])
        scores = np.array(ref.scores())
        for i in range(h):
            best = scores[i].max()
            # Arms within float32 noise of the maximum count as tied; anything else must match.
            near = np.flatnonzero(scores[i] >= best - tol * max(1.0, abs(best)))
            assert arms[i] in near, (t, i, arms[i], scores[i])
            n_unique += len(near) == 1
        ref.arms = [int(a) for a in arms]
        x = float(rng.normal() * 2.0 + 0.3 * np.sin(t / 7.0))
        state = tell(state, jnp.float32(x))
        ref.tell(x)
        # Every model G equals the reference's (its V^-1 B, solved for all models at once).
        models = list(ref.V)
        if models:
            index = tuple(np.array([(i, sum(a_k * d ** (s - 1 - k) for k, a_k in enumerate(ctx)), a)
                                    for i, ctx, a in models]).T)
            V, B = np.stack([ref.V[m] for m in models]), np.stack([ref.B[m] for m in models])
            np.testing.assert_allclose(np.asarray(state.G)[index], np.linalg.solve(V, B[..., None])[..., 0],
                                       rtol=1e-3, atol=1e-4, err_msg=f"step {t}")
    assert int(state.t) == STEPS
    return n_unique


@pytest.mark.parametrize("h,d,s", [(1, 4, 1), (3, 10, 1), (2, 5, 2), (2, 3, 3)])
@pytest.mark.slow
def test_matches_reference(h, d, s):
    n_unique = run_against_reference(h, d, s, beta=0.0, seed=h * 100 + d * 10 + s)
    # The comparison is only meaningful if most decisions had a unique best arm.
    assert n_unique > 0.5 * STEPS * h


@pytest.mark.slow
def test_matches_reference_with_optimism_bonus():
    run_against_reference(2, 4, 2, beta=0.7, seed=7)


def test_uniform_while_no_history_and_random_ties():
    """At t < s every arm is equally likely (tie-break is uniform, not arm 0)."""
    d = 5
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(1), d=d, s=1)
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    state = tuner.init(keys[0])
    arms = jax.jit(jax.vmap(lambda k: tuner.ask(state, k)[0].arms[0]))(keys)
    counts = np.bincount(np.asarray(arms), minlength=d)
    expected = len(keys) / d
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 20.0, counts  # chi-square, 4 dof: p < 0.001 at 18.5


def test_break_ties_picks_a_maximum():
    """Against NumPy on many rows with heavy ties and NaNs (NaN counts as -inf)."""
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, size=(500, 7)).astype(np.float32)
    scores[rng.random(scores.shape) < 0.1] = np.nan
    scores[0] = np.nan  # an all-NaN row still gives a valid arm
    keys = jax.random.split(jax.random.PRNGKey(5), 20)
    every = jax.jit(jax.vmap(break_ties, (0, None)))(keys, jnp.asarray(scores))  # one program, 20 keys
    for arms in np.asarray(every):
        assert arms.shape == (500,) and arms.dtype == np.int32
        clean = np.where(np.isnan(scores), -np.inf, scores)
        chosen = clean[np.arange(500), arms]
        np.testing.assert_array_equal(chosen, clean.max(axis=1))


def test_break_ties_uniform_among_partial_ties():
    """Tied best arms {1, 3, 4} are equally likely; the others never chosen."""
    scores = jnp.asarray([0.0, 3.0, 1.0, 3.0, 3.0, 2.0])
    keys = jax.random.split(jax.random.PRNGKey(1), 6000)
    counts = np.bincount(np.asarray(jax.jit(jax.vmap(break_ties, (0, None)))(keys, scores)), minlength=6)
    assert counts[[0, 2, 5]].sum() == 0, counts
    tied = counts[[1, 3, 4]]
    chi2 = float(((tied - 2000.0) ** 2 / 2000.0).sum())
    assert chi2 < 13.8, counts  # chi-square, 2 dof: p < 0.001


def test_key_word_accepts_every_key_kind():
    raw = jax.random.PRNGKey(3)
    assert int(key_word(raw)) == int(key_word(jax.random.key(3)))
    assert int(key_word(raw)) != int(key_word(jax.random.PRNGKey(4)))
    assert key_word(jax.random.key(3, impl="rbg")).dtype == jnp.uint32
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(2), d=4)
    state = tuner.init(raw)
    np.testing.assert_array_equal(tuner.ask(state, raw)[0].arms, tuner.ask(state, jax.random.key(3))[0].arms)


def test_context_index():
    history = jnp.asarray([[0, 0, 1], [2, 1, 0], [2, 2, 2]])
    np.testing.assert_array_equal(context_index(history, 3), [1, 2 * 9 + 3, 26])


def test_state_shapes():
    h, d, s = 4, 6, 2
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(h), d=d, s=s)
    st = tuner.init(jax.random.PRNGKey(0))
    assert st.V.shape == (h, d**s, d, s, s)
    assert st.B.shape == st.G.shape == (h, d**s, d, s)
    assert st.history.shape == (h, s) and st.window.shape == (s,) and st.arms.shape == (h,)


def test_current_is_the_current_contexts_models():
    """The cached copy `current` equals models[i, c_i] after every tell, invalid ones included."""
    h, d, s = 3, 4, 2
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(h), d=d, s=s)
    ask, tell = jax.jit(tuner.ask), jax.jit(tuner.tell)
    state = tuner.init(jax.random.PRNGKey(0))
    assert state.current.shape == (h, d, s * s + 2 * s)
    key = jax.random.PRNGKey(1)
    for x in [0.3, -1.2, float("nan"), 2.0, 0.7, 0.7, -0.1, 1e30, 0.4]:
        key, sub = jax.random.split(key)
        state, _ = ask(state, sub)
        state = tell(state, jnp.float32(x))
        ctx = np.asarray(context_index(state.history, d))
        np.testing.assert_array_equal(state.current, np.asarray(state.models)[np.arange(h), ctx])
    assert int(state.n_invalid) == 2


@functools.cache
def after_four_objectives():
    """A controller (h = 2, d = 4, s = 2) after four asks and valid tells, and its jitted
    tell: compiled once for every bad objective below."""
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(2), d=4, s=2)
    ask, tell = jax.jit(tuner.ask), jax.jit(tuner.tell)
    state = tuner.init(jax.random.PRNGKey(1))
    key = jax.random.PRNGKey(2)
    for x in [0.5, -1.0, 2.0, 0.1]:
        key, sub = jax.random.split(key)
        state, _ = ask(state, sub)
        state = tell(state, jnp.float32(x))
    return state, tell


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 1e30, -3e20])
def test_invalid_objective_is_ignored(bad):
    """An invalid objective changes nothing but the n_invalid counter."""
    state, tell = after_four_objectives()
    after = tell(state, jnp.float32(bad))
    for name in ["V", "B", "G", "history", "window", "arms", "t"]:
        np.testing.assert_array_equal(getattr(after, name), getattr(state, name), err_msg=name)
    assert int(after.n_invalid) == int(state.n_invalid) + 1
    leaves = jax.tree_util.tree_leaves(after)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in leaves)


@pytest.mark.slow
def test_vmap_equals_separate_runs():
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(3), d=5, s=2)

    def run(key, objectives):
        def step(state, inp):
            k, x = inp
            state, values = tuner.ask(state, k)
            return tuner.tell(state, x), values

        k0, k1 = jax.random.split(key)
        state, values = jax.lax.scan(step, tuner.init(k0), (jax.random.split(k1, 30), objectives))
        return values

    keys = jax.random.split(jax.random.PRNGKey(3), 8)
    objectives = jax.random.normal(jax.random.PRNGKey(4), (8, 30))
    batched = jax.jit(jax.vmap(run))(keys, objectives)
    single = jax.jit(run)
    for n in range(8):
        np.testing.assert_array_equal(batched[n], single(keys[n], objectives[n]))


@pytest.mark.parametrize("option,value,field", [
    ("d", 1, "hypercontroller.d"), ("s", 0, "hypercontroller.s"), ("s", 4, "hypercontroller.s"),
    ("ridge", 0.0, "hypercontroller.ridge"), ("beta", -1.0, "hypercontroller.beta"), ("d", 2.5, "hypercontroller.d"),
    ("ridge", float("inf"), "hypercontroller.ridge"), ("ridge", 1e39, "hypercontroller.ridge"),
    ("ridge", 1e-50, "hypercontroller.ridge"), ("ridge", np.float64("nan"), "hypercontroller.ridge"),
    ("beta", float("inf"), "hypercontroller.beta"), ("beta", True, "hypercontroller.beta"),
    ("d", True, "hypercontroller.d"), ("s", np.bool_(True), "hypercontroller.s"),
    ("d", np.float64(4), "hypercontroller.d"),
    ("ridge", "1", "hypercontroller.ridge"), ("ridge", jnp.ones(1), "hypercontroller.ridge"),
])
def test_bad_options(option, value, field):
    with pytest.raises(ValueError, match=field):
        hcjax.make_tuner("hypercontroller", hcjax.unit_space(2), **{option: value})


def test_unknown_name_and_option():
    with pytest.raises(ValueError, match="unknown tuner name.*known"):
        hcjax.make_tuner("bayes", hcjax.unit_space(2))
    with pytest.raises(ValueError, match="unknown option.*'lr'"):
        hcjax.make_tuner("hypercontroller", hcjax.unit_space(2), lr=1.0)


def test_real_options_accept_numpy_and_jax_scalars_and_keep_the_state_finite():
    """ridge=inf used to be accepted and made the state non-finite from init; the largest
    accepted ridge and beta keep every state array finite through learning."""
    space = hcjax.unit_space(2)
    a = hcjax.make_tuner("hypercontroller", space, d=np.int64(4), s=jnp.int32(2), ridge=np.float64(0.5),
                         beta=jnp.float32(0.25))
    b = hcjax.make_tuner("hypercontroller", space, d=4, s=2, ridge=0.5, beta=0.25)
    key = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(a.init(key).models, b.init(key).models)
    for ridge, beta in [(3.4e38, 0.0), (1e-30, 3.4e38)]:
        tuner = hcjax.make_tuner("hypercontroller", space, d=4, s=2, ridge=ridge, beta=beta)
        ask, tell = jax.jit(tuner.ask), jax.jit(tuner.tell)
        state = tuner.init(key)
        for k, x in enumerate([1e15, -1e15, 3.0, 1e-30, 2.0, -5.0]):
            state, values = ask(state, jax.random.fold_in(key, k))
            state = tell(state, x)
            assert all(np.all(np.isfinite(np.asarray(leaf))) for leaf in jax.tree_util.tree_leaves(state))
            assert np.all(np.isfinite(np.asarray(values)))


def test_contexts_must_fit_int32():
    with pytest.raises(ValueError, match=r"d\*\*s must be < 2\*\*31 .* got d=65536, s=2"):
        hcjax.make_tuner("hypercontroller", hcjax.unit_space(1), d=2 ** 16, s=2, memory_limit_gib=1e9)

