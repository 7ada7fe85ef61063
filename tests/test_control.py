"""hcjax.control: a control group at the defaults inside a vmapped tuned batch (one compiled
program), and its report against a slow bootstrap (a Python loop over the replicates with the
same resampling); hcjax.stats' primitives that the report shares with experiments.reporting."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import hcjax
from experiments.reporting import stats as ST
from hcjax import control as C
from hcjax.stats import mann_whitney, resample

SPACE = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, "log", default=2.5e-4),
                     hcjax.Hyperparameter("clip_eps", 0.1, 0.4, default=0.2)])
TARGET = np.float32([-2.0, 0.3])  # the toy's best configuration: log10 learning rate -2, clip 0.3


def toy_score(values):
    """Higher the nearer `values` ((..., 2): learning rate, clip) is to TARGET: the toy's return."""
    x = jnp.stack([jnp.log10(values[..., 0]), values[..., 1]], -1)
    return -jnp.sum((x - TARGET) ** 2, -1)


def make_batch(tuner, controlled=True, iterations=12):
    """jit(vmap(train)) over (keys, control flags): a toy training loop whose objective is the
    change of the toy's score, deciding every second iteration; returns each iteration's values
    and the final tuner state. controlled=False: `tuner` alone, the flags unused."""

    def train(rng, control):
        state = C.assign(tuner.init(rng), control) if controlled else tuner.init(rng)

        def body(carry, i):
            state, level = carry
            values = tuner.values(state)
            objective, level = hcjax.objectives.return_change(level, toy_score(values)[None])
            state, _ = tuner.step(state, jax.random.fold_in(rng, i), objective, i % 2 == 0)
            return (state, level), values

        (state, _), values = jax.lax.scan(body, (state, hcjax.objectives.NO_LEVEL), jnp.arange(iterations))
        return values, state

    return jax.jit(jax.vmap(train))


@pytest.fixture(scope="module")
def batch():
    """12 agents, every second a control, HyperController (d=4) on the toy: one compiled program."""
    tuner = C.with_control(hcjax.make_tuner("hypercontroller", SPACE, d=4))
    n = 12
    controls = C.controls(n)
    keys = jax.random.split(jax.random.PRNGKey(3), n)
    run = make_batch(tuner)
    values, state = run(keys, controls)
    return tuner, keys, controls, np.asarray(values), state, run


def test_controls_alternate_and_need_two_per_group():
    np.testing.assert_array_equal(C.controls(5), [False, True, False, True, False])
    with pytest.raises(ValueError, match=r"controls\.n must be an integer >= 4"):
        C.controls(3)


@pytest.mark.slow
def test_control_agents_run_the_defaults_in_the_same_program(batch):
    tuner, keys, controls, values, state, run = batch
    assert tuner.name == "control(hypercontroller)"
    assert values.shape == (12, 12, 2)  # (agents, iterations, h)
    np.testing.assert_array_equal(C.is_control(state), controls)  # the final states say which agents were controls
    np.testing.assert_array_equal(values[controls], np.broadcast_to(SPACE.default, values[controls].shape))
    assert np.all(np.diff(values[~controls], axis=1) != 0, axis=2).any()  # the tuned agents moved
    # each tuned agent's numbers are HyperController's run alone (the same keys, the same told objectives)
    alone = make_batch(hcjax.make_tuner("hypercontroller", SPACE, d=4), controlled=False)
    solo, _ = alone(keys[~controls], np.zeros((~controls).sum(), bool))
    np.testing.assert_allclose(values[~controls], np.asarray(solo), rtol=1e-6)
    assert run._cache_size() == 1  # one compilation serves both groups


def slow_report(scores, control, reps, seed):
    """P(tuned > control) and each group's IQM with 95% percentile intervals, one replicate at a
    time: resample each group's seeds (the stratum's draws), then the statistics."""
    tuned, fixed = scores[~control], scores[control]
    boot_tuned = resample(tuned, reps, seed, C.STRATUM, "tuned")
    boot_fixed = resample(fixed, reps, seed, C.STRATUM, "control")
    p = [mann_whitney(boot_tuned[r], boot_fixed[r]) for r in range(reps)]
    iqm_t = [scipy.stats.trim_mean(boot_tuned[r], 0.25) for r in range(reps)]
    iqm_c = [scipy.stats.trim_mean(boot_fixed[r], 0.25) for r in range(reps)]
    pairs = sum(float(a > b) + 0.5 * float(a == b) for a in tuned for b in fixed) / (tuned.size * fixed.size)
    return pairs, np.percentile(p, [2.5, 97.5]), np.percentile(iqm_t, [2.5, 97.5]), np.percentile(iqm_c, [2.5, 97.5])


@pytest.mark.slow
def test_the_batchs_report_matches_a_slow_bootstrap(batch):
    """The vmapped batch's final scores (the toy's return of each agent's last configuration)."""
    _, _, controls, values, state, _ = batch
    scores = np.asarray(toy_score(jnp.asarray(values[:, -1])), np.float64)
    r = C.report(scores, C.is_control(state), reps=400, seed=7)
    p, p_ci, iqm_t_ci, iqm_c_ci = slow_report(scores, controls, 400, 7)
    assert r.p == pytest.approx(p, abs=1e-12)
    np.testing.assert_allclose(r.p_ci, p_ci, rtol=1e-12)
    np.testing.assert_allclose(r.iqm_tuned_ci, iqm_t_ci, rtol=1e-12)
    np.testing.assert_allclose(r.iqm_control_ci, iqm_c_ci, rtol=1e-12)
    assert r.iqm_tuned == pytest.approx(scipy.stats.trim_mean(scores[~controls], 0.25))
    assert r.iqm_control == pytest.approx(scipy.stats.trim_mean(scores[controls], 0.25))
    assert (r.n_tuned, r.n_control, r.n_dropped) == (6, 6, 0)
    assert r.verdict == ("better" if p_ci[0] > 0.5 else "worse" if p_ci[1] < 0.5 else "not separated")


@pytest.mark.parametrize("shift, verdict, words", [
    (10.0, "better", "tuned better than its control: P(tuned > control) = 1.00 [1.00, 1.00]"),
    (-10.0, "worse", "tuned worse than its control: P(tuned > control) = 0.00 [0.00, 0.00]"),
    (0.0, "not separated", "tuned and its control not separated: P(tuned > control) = 0.5"),
])
def test_report_sentence(shift, verdict, words):
    rng = np.random.default_rng(0)
    fixed = rng.normal(0.0, 1.0, 10)
    scores = np.empty(20)
    scores[1::2] = fixed
    scores[0::2] = fixed[::-1] + shift  # shift 0: the same scores, so P = 1/2 exactly
    r = C.report(scores, C.controls(20), reps=300)
    assert r.verdict == verdict and str(r).startswith(words)
    assert "(10 and 10 seeds)" in str(r)
    assert ("see the ranges" in str(r)) == (verdict == "worse")
    # the same statistic as the study reports' probability of improvement on one environment
    study = ST.probability_of_improvement({C.STRATUM: scores[0::2]}, {C.STRATUM: scores[1::2]}, ("tuned", "control"),
                                          reps=300)
    assert study["p"] == r.p and tuple(study["ci"]) == r.p_ci


def test_report_drops_non_finite_scores_and_says_when_it_cannot_test():
    scores = np.array([5.0, 1.0, np.nan, 2.0, 6.0, np.inf, 7.0, 0.0])
    r = C.report(scores, C.controls(8), reps=200)
    assert (r.n_tuned, r.n_control, r.n_dropped) == (3, 3, 2) and "2 agents without a finite score" in str(r)
    few = C.report(np.array([1.0, 2.0, 3.0, np.nan]), C.controls(4))
    assert few.verdict == "not testable" and np.isnan(few.p) and "not testable (2 tuned and 1 control" in str(few)


def test_bad_inputs_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"report: scores must be \(n,\) numbers and control \(n,\) bool"):
        C.report(np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match=r"report\.reps must be an integer >= 1"):
        C.report(np.zeros(4), C.controls(4), reps=0)
    bare = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, "log")])
    with pytest.raises(ValueError, match=r"\['learning_rate'\] have no default.*default=\.\.\."):
        C.with_control(hcjax.make_tuner("random", bare))
    given = C.with_control(hcjax.make_tuner("random", bare), values=[3e-4])  # explicit values need no default
    state = C.assign(given.init(jax.random.PRNGKey(0)), True)
    np.testing.assert_allclose(given.values(state), [3e-4], rtol=1e-6)
    with pytest.raises(ValueError, match=r"assign: state must come from hcjax\.control\.with_control"):
        C.assign(hcjax.make_tuner("random", bare).init(jax.random.PRNGKey(0)), True)
    with pytest.raises(ValueError, match=r"assign: control must be a bool scalar"):
        C.assign(state, 1)
