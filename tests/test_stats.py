"""experiments.reporting.stats: normalisation, IQM, stratified bootstrap, probability of improvement and
performance profiles against hand-computed values and brute-force loops on small arrays."""
import numpy as np
import pytest
import scipy.stats

import hcjax.stats as core_stats
from experiments.reporting import stats as ST

NAN = np.nan


def study():
    """Two environments, three methods; 'b' has no score on e2, 'c' has none at all."""
    return {
        "a": {"e1": np.array([0.0, 10.0, NAN]), "e2": np.array([5.0])},
        "b": {"e1": np.array([5.0]), "e2": np.array([NAN, NAN])},
        "c": {"e1": np.array([NAN])},
    }


def test_min_max_normalisation_over_the_study_with_a_tied_environment():
    scores = study()
    assert ST.reference_scores(scores) == {"e1": (0.0, 10.0), "e2": (5.0, 5.0)}
    z = ST.normalise(scores)
    np.testing.assert_array_equal(z["a"]["e1"], [0.0, 1.0, NAN])
    np.testing.assert_array_equal(z["a"]["e2"], [0.5])  # every run of e2 tied: the midpoint
    np.testing.assert_array_equal(z["b"]["e1"], [0.5])
    assert np.all(np.isnan(z["b"]["e2"])) and np.all(np.isnan(z["c"]["e1"]))


def test_normalisation_with_given_reference_scores_is_not_clipped():
    z = ST.normalise(study(), {"e1": (2.0, 4.0), "e2": (0.0, 10.0)})
    np.testing.assert_array_equal(z["a"]["e1"], [-1.0, 4.0, NAN])
    np.testing.assert_array_equal(z["a"]["e2"], [0.5])
    with pytest.raises(ValueError, match="high > low"):
        ST.normalise(study(), {"e1": (1.0, 1.0), "e2": (0.0, 1.0)})
    with pytest.raises(ValueError, match="'e2'"):
        ST.normalise(study(), {"e1": (0.0, 1.0)})


@pytest.mark.parametrize("x, expected", [
    ([4.0, 1.0, 3.0, 2.0], 2.5),  # n = 4: drop 1 at each end -> mean(2, 3)
    ([1.0, 2.0, 3.0, 4.0, 50.0], 3.0),  # n = 5: floor(5/4) = 1 dropped -> mean(2, 3, 4)
    ([100.0, 1, 2, 3, 4, 5, 6, 7], 4.5),  # n = 8: drop 2 -> mean(3, 4, 5, 6)
    ([1.0, 2.0, 9.0], 4.0),  # n < 4: nothing dropped
    ([7.0], 7.0),
])
def test_iqm_hand_values(x, expected):
    assert ST.iqm(np.array(x)) == pytest.approx(expected)


def test_iqm_is_scipy_trim_mean_along_an_axis():
    rng = np.random.default_rng(1)
    for n in range(1, 20):
        x = rng.normal(size=(3, n))
        np.testing.assert_allclose(ST.iqm(x, axis=1), scipy.stats.trim_mean(x, 0.25, axis=1), rtol=1e-12)
        np.testing.assert_allclose(ST.iqm(x.T, axis=0), scipy.stats.trim_mean(x, 0.25, axis=1), rtol=1e-12)
    assert np.isnan(ST.iqm(np.zeros(0)))


def test_resample_counts_are_the_draws_of_resample():
    x = np.array([10.0, 20.0, 30.0])
    draws = ST.resample(x, 7, 3, "env", "m")
    counts = ST.resample_counts(3, 7, 3, "env", "m")
    assert draws.shape == counts.shape == (7, 3)
    np.testing.assert_array_equal(counts.sum(axis=1), 3)
    np.testing.assert_allclose(counts @ x, draws.sum(axis=1))
    assert set(np.unique(draws)) <= {10.0, 20.0, 30.0}
    np.testing.assert_array_equal(draws, ST.resample(x, 7, 3, "env", "m"))  # deterministic
    # another seed, environment or method: other draws (strata are resampled independently)
    for other in ((4, "env", "m"), (3, "env2", "m"), (3, "env", "m2")):
        assert not np.array_equal(draws, ST.resample(x, 7, *other))


def test_resample_counts_are_kept_read_only_within_their_memory_budget(monkeypatch):
    fresh = ST.resample_counts(5, 11, 8, "kept", "m").copy()
    first = ST.resample_counts(5, 11, 8, "kept", "m")
    assert ST.resample_counts(5, 11, 8, "kept", "m") is first  # kept: the same array again
    np.testing.assert_array_equal(first, fresh)
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 1.0  # a caller cannot change what the next one gets
    monkeypatch.setattr(core_stats, "COUNTS_CACHE_BYTES", 3 * first.nbytes)  # room for three of these
    for seed in range(100, 104):
        ST.resample_counts(5, 11, seed, "kept", "m")
    assert sum(c.nbytes for c in core_stats._counts_cache.values()) <= 3 * first.nbytes
    assert (5, 11, 8, "kept", "m") not in core_stats._counts_cache  # the least recently used went first
    again = ST.resample_counts(5, 11, 8, "kept", "m")  # computed again: the same draws
    assert again is not first
    np.testing.assert_array_equal(again, fresh)


def test_aggregate_point_values_by_hand():
    z = {"e1": np.array([0.0, 1.0, 0.5, 0.5]), "e2": np.array([1.0, NAN])}
    a = ST.aggregate(z, "m", reps=100)
    # pooled runs sorted: 0, .5, .5, 1, 1 (n = 5, one dropped at each end) -> mean(.5, .5, 1)
    assert a["iqm"] == pytest.approx(2.0 / 3.0)
    # environments weigh equally: (mean(e1) = .5 + mean(e2) = 1) / 2, not the pooled 0.6
    assert a["mean"] == pytest.approx(0.75)
    assert a["runs"] == 5 and a["envs"] == ["e1", "e2"]


def test_aggregate_interval_is_the_percentile_of_a_stratified_bootstrap():
    z = {"e1": np.array([0.1, 0.9, 0.4, 0.7]), "e2": np.array([0.0, 0.3, 1.0])}
    reps = 300
    a = ST.aggregate(z, "m", reps=reps, seed=5)
    iqms, means = [], []
    b1, b2 = ST.resample(z["e1"], reps, 5, "e1", "m"), ST.resample(z["e2"], reps, 5, "e2", "m")
    for r in range(reps):  # one replicate at a time: seeds resampled within each environment
        iqms.append(scipy.stats.trim_mean(np.concatenate([b1[r], b2[r]]), 0.25))
        means.append((b1[r].mean() + b2[r].mean()) / 2)
    np.testing.assert_allclose(a["iqm_ci"], np.percentile(iqms, [2.5, 97.5]), rtol=1e-12)
    np.testing.assert_allclose(a["mean_ci"], np.percentile(means, [2.5, 97.5]), rtol=1e-12)
    assert a["iqm_ci"][0] < a["iqm"] < a["iqm_ci"][1]
    assert ST.aggregate(z, "m", reps=reps, seed=5) == a  # fixed seed: the same numbers
    assert ST.aggregate(z, "m", reps=reps, seed=6)["iqm_ci"] != a["iqm_ci"]


def test_single_seeds_give_a_point_interval_and_missing_environments_are_named():
    agg = ST.aggregates(ST.normalise(study()), reps=50)
    assert agg["a"]["missing_envs"] == [] and agg["a"]["runs"] == 3
    # b: e1 only (its e2 seeds are all NaN); one seed -> the bootstrap cannot vary it
    assert agg["b"]["envs"] == ["e1"] and agg["b"]["missing_envs"] == ["e2"]
    assert agg["b"]["iqm"] == 0.5 and agg["b"]["iqm_ci"] == [0.5, 0.5] and agg["b"]["mean_ci"] == [0.5, 0.5]
    assert np.isnan(agg["c"]["iqm"]) and agg["c"]["runs"] == 0 and agg["c"]["missing_envs"] == ["e1", "e2"]
    assert ST.single_seed_strata(study()) == [("e2", "a"), ("e1", "b")]


def test_strata_do_not_depend_on_the_other_methods_of_the_study():
    z = {"a": {"e1": np.array([0.2, 0.4, 0.9])}, "b": {"e1": np.array([0.1, 0.3])}}
    alone = ST.aggregates({"a": z["a"]}, reps=200)["a"]
    assert ST.aggregates(z, reps=200)["a"] == alone


@pytest.mark.parametrize("x, y, expected", [
    ([1.0, 2.0, 3.0], [2.0], 0.5),  # lose, tie (1/2), win
    ([3.0, 4.0], [1.0, 2.0, 3.0], 5.5 / 6.0),  # 5 wins and a tie of 6 pairs
    ([0.0], [1.0], 0.0),
])
def test_mann_whitney_by_hand(x, y, expected):
    assert ST.mann_whitney(np.array(x), np.array(y)) == pytest.approx(expected)


def test_probability_of_improvement_averages_environments_and_bootstraps_both_methods():
    x = {"e1": np.array([1.0, 2.0, 3.0]), "e2": np.array([10.0, 0.0]), "e3": np.array([1.0])}
    y = {"e1": np.array([2.0, NAN]), "e2": np.array([5.0, 6.0, 20.0])}
    reps = 200
    r = ST.probability_of_improvement(x, y, ("x", "y"), reps=reps, seed=2)
    # e1: 0.5; e2: 10 beats 5 and 6, 0 beats nothing -> 2/6; e3 is not shared
    assert r["envs"] == ["e1", "e2"]
    assert r["p"] == pytest.approx((0.5 + 2.0 / 6.0) / 2)
    boot = np.zeros(reps)
    for env in r["envs"]:
        xs = ST.resample(ST.finite(x[env]), reps, 2, env, "x")
        ys = ST.resample(ST.finite(y[env]), reps, 2, env, "y")
        boot += [ST.mann_whitney(xs[i], ys[i]) for i in range(reps)]
    np.testing.assert_allclose(r["ci"], np.percentile(boot / 2, [2.5, 97.5]), rtol=1e-12)
    assert r["ci"][0] < r["ci"][1]


def test_improvement_over_marks_significant_intervals():
    rng = np.random.default_rng(0)
    envs = ("e1", "e2", "e3")
    scores = {
        "hypercontroller": {e: rng.normal(10.0, 1.0, 5) for e in envs},
        "worse": {e: rng.normal(0.0, 1.0, 5) for e in envs},  # every HC run beats every run here
        "better": {e: rng.normal(20.0, 1.0, 5) for e in envs},
        "elsewhere": {"e9": np.array([1.0, 2.0])},
    }
    scores["same"] = {e: scores["hypercontroller"][e][::-1].copy() for e in envs}  # the same runs, reordered
    vs = ST.improvement_over(scores, "hypercontroller", reps=300)
    assert set(vs) == {"worse", "better", "same", "elsewhere"}
    assert vs["worse"]["p"] == 1.0 and vs["worse"]["ci"] == [1.0, 1.0]
    assert vs["worse"]["significant"] and vs["worse"]["verdict"] == "better"
    assert vs["better"]["p"] == 0.0 and vs["better"]["verdict"] == "worse" and vs["better"]["significant"]
    assert vs["same"]["p"] == 0.5 and not vs["same"]["significant"] and vs["same"]["verdict"] == "not significant"
    assert vs["same"]["ci"][0] < 0.5 < vs["same"]["ci"][1]
    assert np.isnan(vs["elsewhere"]["p"]) and vs["elsewhere"]["verdict"] == "no shared environment"
    assert ST.improvement_over({"a": {"e": np.ones(2)}}, "hypercontroller") == {}
    # the call is hcjax.calls' exact test: 3 + 3 runs entirely apart on one environment give p = 2 / C(6, 3) = 0.1
    apart = {"hypercontroller": {"e": np.array([4.0, 5.0, 6.0])}, "x": {"e": np.array([1.0, 2.0, 3.0])}}
    few = ST.improvement_over(apart, "hypercontroller", reps=300)["x"]
    assert few["p"] == 1.0 and few["verdict"] == "too few seeds" and not few["significant"]
    assert vs["worse"]["p_value"] == pytest.approx(2 / 252 ** 3)  # 5 + 5 runs apart on 3 environments: 2 / C(10, 5)^3


def test_performance_profile_by_hand_and_against_a_bootstrap_loop():
    z = {"m": {"e1": np.array([0.0, 0.5, 1.0]), "e2": np.array([0.25, NAN])}, "none": {"e1": np.array([NAN])}}
    taus = np.array([0.0, 0.5, 0.75])
    prof = ST.performance_profile(z, taus, reps=100, seed=1)
    # e1: > 0: 2/3, > .5: 1/3, > .75: 1/3; e2: 1, 0, 0; environments weigh equally
    np.testing.assert_allclose(prof["m"]["fraction"], [5.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0])
    b1 = ST.resample(np.array([0.0, 0.5, 1.0]), 100, 1, "e1", "m")
    b2 = ST.resample(np.array([0.25]), 100, 1, "e2", "m")
    loop = np.array([[(np.mean(b1[r] > t) + np.mean(b2[r] > t)) / 2 for t in taus] for r in range(100)])
    np.testing.assert_allclose(prof["m"]["lower"], np.percentile(loop, 2.5, axis=0), rtol=1e-12)
    np.testing.assert_allclose(prof["m"]["upper"], np.percentile(loop, 97.5, axis=0), rtol=1e-12)
    assert np.all(np.isnan(prof["none"]["fraction"])) and prof["none"]["envs"] == []


def test_summarise_collects_every_statistic():
    s = ST.summarise(study(), baseline="a", reps=100, taus=np.linspace(0, 1, 5))
    assert s["normalisation"]["reference"] == {"e1": [0.0, 10.0], "e2": [5.0, 5.0]}
    assert s["bootstrap"]["reps"] == 100 and s["bootstrap"]["confidence"] == 0.95
    assert list(s["aggregates"]) == ["a", "b", "c"] and set(s["improvement"]["vs"]) == {"b", "c"}
    # a vs b on e1: a's runs 0 and 10 against b's 5 -> 1/2
    assert s["improvement"]["vs"]["b"]["p"] == 0.5 and s["improvement"]["vs"]["b"]["envs"] == ["e1"]
    assert s["profile"]["taus"].shape == (5,) and s["profile"]["methods"]["a"]["fraction"].shape == (5,)
    given = ST.summarise(study(), {"e1": (0.0, 20.0), "e2": (0.0, 10.0)}, reps=10)
    assert given["normalisation"]["kind"] == "given reference scores"
    assert given["aggregates"]["b"]["iqm"] == 0.25
