"""hcjax.control: a control group at the defaults inside a vmapped tuned batch (one compiled
program), and its report: the call of hcjax.calls, its intervals against a slow bootstrap (a
Python loop over the replicates with the same resampling), the means and the collapsed runs in
its sentence; hcjax.stats' primitives that the report shares with experiments.reporting."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import hcjax
from experiments.reporting import stats as ST
from hcjax import calls
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
    with pytest.warns(calls.FewSeedsWarning):  # 2 controls: below calls.MIN_SEEDS (tests/test_calls.py)
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
def test_the_batchs_report_is_the_call_on_its_final_scores(batch):
    """The vmapped batch's final scores (the toy's return of each agent's last configuration):
    6 + 6 agents, below hcjax.calls.MIN_INTERVAL, so the call comes without an interval."""
    _, _, controls, values, state, _ = batch
    scores = np.asarray(toy_score(jnp.asarray(values[:, -1])), np.float64)
    r = C.report(scores, C.is_control(state), reps=400, seed=7)
    verdicts, stat, p, how = calls.decide([scores[~controls]], [scores[controls]])
    assert (r.verdict, r.p, r.p_value, r.test) == (verdicts[()], pytest.approx(float(stat)), float(p), how)
    assert r.p == pytest.approx(slow_report(scores, controls, 10, 7)[0], abs=1e-12)
    assert np.isnan(r.p_ci).all() and np.isnan(r.iqm_tuned_ci).all()  # 6 agents a group: no interval
    assert r.iqm_tuned == pytest.approx(scipy.stats.trim_mean(scores[~controls], 0.25))
    assert r.iqm_control == pytest.approx(scipy.stats.trim_mean(scores[controls], 0.25))
    assert (r.n_tuned, r.n_control, r.n_dropped) == (6, 6, 0)


def test_the_reports_intervals_match_a_slow_bootstrap():
    rng = np.random.default_rng(4)
    scores, controls = rng.normal(0.0, 1.0, 24), C.controls(24)
    scores[~controls] += 0.4
    r = C.report(scores, controls, reps=400, seed=7)
    p, p_ci, iqm_t_ci, iqm_c_ci = slow_report(scores, controls, 400, 7)
    assert r.p == pytest.approx(p, abs=1e-12) and r.call.no_interval == ""
    np.testing.assert_allclose(r.p_ci, p_ci, rtol=1e-12)
    np.testing.assert_allclose(r.iqm_tuned_ci, iqm_t_ci, rtol=1e-12)
    np.testing.assert_allclose(r.iqm_control_ci, iqm_c_ci, rtol=1e-12)
    assert (r.mean_tuned, r.se_tuned) == pytest.approx((scores[~controls].mean(), scipy.stats.sem(scores[~controls])))
    assert r.verdict == calls.decide([scores[~controls]], [scores[controls]])[0][()]


@pytest.mark.parametrize("shift, verdict, words", [
    (10.0, "better", "tuned better than its control: P(tuned > control) = 1.00 (p < 0.001); mean"),
    (-10.0, "worse", "tuned worse than its control, and 10 of 10 tuned runs collapsed (agent 0: -11.27; agent 2: "
                     "-10.7; agent 4: -9.053; 7 more; 0.91 expected by chance): P(tuned > control) = 0.00 "
                     "(p < 0.001); mean"),
    (0.0, "not separated", "tuned and its control not separated: P(tuned > control) = 0.50 [0.23, 0.77], p = 1.00;"),
])
def test_report_sentence(shift, verdict, words):
    rng = np.random.default_rng(0)
    fixed = rng.normal(0.0, 1.0, 10)
    scores = np.empty(20)
    scores[1::2] = fixed
    scores[0::2] = fixed[::-1] + shift  # shift 0: the same scores, so P = 1/2 exactly
    r = C.report(scores, C.controls(20), reps=300)
    assert r.verdict == verdict and str(r).startswith(words), str(r)
    assert "(10 and 10 seeds)" in str(r)
    assert ("see the ranges" in str(r)) == (verdict == "worse")
    assert ("[" in str(r).split(";")[0]) == (verdict == "not separated")  # entirely apart: no [1, 1] interval
    # the same statistic as the study reports' probability of improvement on one environment
    study = ST.probability_of_improvement({C.STRATUM: scores[0::2]}, {C.STRATUM: scores[1::2]}, ("tuned", "control"),
                                          reps=300)
    assert study["p"] == r.p and (r.call.no_interval or tuple(study["ci"]) == r.p_ci)


def test_the_sentence_names_a_collapsed_run_with_its_seed_and_hyperparameters():
    """The guide's PPO case: tuned better by rank while one tuned agent fell to CartPole's floor."""
    rng = np.random.default_rng(6)
    controls = C.controls(40)
    scores = np.where(controls, rng.normal(440.0, 15.0, 40), rng.normal(475.0, 15.0, 40))
    scores[6] = 9.4  # agent 6 (seed 106): tuned, learning rate at the top of its range
    lr = np.where(controls, 2.5e-4, 1e-3)
    lr[6] = 1e-2
    r = C.report(scores, controls, seeds=np.arange(100, 140), hyperparameters={"learning_rate": lr})
    text = str(r)
    assert r.verdict == "better" and len(r.collapsed) == 1 and r.collapsed[0]["seed"] == 106
    assert text.startswith("tuned better than its control, but 1 of 20 tuned runs collapsed (seed 106: 9.4, "
                           f"learning_rate 0.01; 0.95 expected by chance): P(tuned > control) = {r.p:.2f} [")
    assert f"mean {scores[~controls].mean():.4g} ± " in text and f"{scores[controls].mean():.4g} ± " in text
    unnamed = str(C.report(scores, controls))  # no seeds given: agents by index
    assert "(agent 6: 9.4; 0.95 expected by chance)" in unnamed


@pytest.mark.filterwarnings("ignore::hcjax.calls.FewSeedsWarning")  # controls(4) on purpose
def test_report_drops_non_finite_scores_and_says_when_it_cannot_tell():
    scores = np.array([5.0, 1.0, np.nan, 2.0, 6.0, np.inf, 7.0, 0.0])
    r = C.report(scores, C.controls(8), reps=200)
    assert (r.n_tuned, r.n_control, r.n_dropped) == (3, 3, 2) and "2 agents without a finite score" in str(r)
    assert r.verdict == "too few seeds to tell" and "too few seeds to tell (n = 3+3)" in str(r)  # p >= 2/20
    few = C.report(np.array([1.0, 2.0, 3.0, np.nan]), C.controls(4))
    assert few.verdict == "too few seeds to tell" and few.p == 0.5 and "(n = 2+1)" in str(few)
    none = C.report(np.array([1.0, np.nan, 3.0, np.nan]), C.controls(4))
    assert none.verdict == "not testable" and "not testable (2 tuned and 0 control" in str(none)


@pytest.mark.filterwarnings("ignore::hcjax.calls.FewSeedsWarning")  # controls(4) on purpose
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
