"""hcjax.permutation and hcjax.calls (NumPy only, nothing compiled): the stratified permutation
test against a slow enumeration of every split and against scipy's exact Mann-Whitney test, the
Monte Carlo fallback against the exact distribution, the A/A rate of false calls at every group
size from the smallest `controls(n)` accepts to 20 on 1, 2, 4 and 6 tasks (2000 trials each,
vectorised over the trials), the interval shown only where it agrees, collapsed runs against a
loop, and the few-seeds warning."""
import itertools
import warnings

import numpy as np
import pytest
import scipy.stats

from hcjax import calls
from hcjax import control as C
from hcjax import permutation as P
from hcjax.stats import mann_whitney

TRIALS = 2000


def slow_p(xs, ys):
    """(statistic, two-sided p) by enumerating every split of every task's pooled runs."""
    observed = np.mean([mann_whitney(x, y) for x, y in zip(xs, ys)])
    per_task = []
    for x, y in zip(xs, ys):
        pool, values = np.concatenate([x, y]), []
        for chosen in itertools.combinations(range(pool.size), len(x)):
            mask = np.zeros(pool.size, bool)
            mask[list(chosen)] = True
            values.append(mann_whitney(pool[mask], pool[~mask]))
        per_task.append(values)
    null = [np.mean(split) for split in itertools.product(*per_task)]
    return observed, np.mean([abs(s - 0.5) >= abs(observed - 0.5) - 1e-12 for s in null])


def test_the_exact_p_value_is_the_enumerated_one_ties_included():
    rng = np.random.default_rng(0)
    for _ in range(30):
        T = int(rng.integers(1, 4))
        digits = int(rng.integers(0, 2))  # 0: rounded to integers, many ties
        xs = [np.round(rng.normal(0.7 * rng.integers(0, 2), 1.0, rng.integers(1, 5)), digits) for _ in range(T)]
        ys = [np.round(rng.normal(0.0, 1.0, rng.integers(1, 5)), digits) for _ in range(T)]
        stat, p, how = P.p_values(xs, ys)
        want = slow_p(xs, ys)
        assert how == "exact"
        assert (float(stat), float(p)) == pytest.approx(want, abs=1e-10)


@pytest.mark.parametrize("n, m", [(5, 7), (12, 12), (20, 20), (20, 3)])
def test_one_task_without_ties_is_scipys_exact_mann_whitney(n, m):
    rng = np.random.default_rng(n * m)
    for shift in (0.0, 0.8):
        x, y = rng.normal(shift, 1.0, n), rng.normal(0.0, 1.0, m)
        _, p, _ = P.p_values([x], [y])
        assert float(p) == pytest.approx(scipy.stats.mannwhitneyu(x, y, method="exact").pvalue, rel=1e-9)


def test_the_monte_carlo_fallback_agrees_with_the_exact_distribution(monkeypatch):
    rng = np.random.default_rng(1)
    xs = [np.round(rng.normal(0.4, 1.0, 9), 1), rng.normal(0.4, 1.0, 6)]
    ys = [np.round(rng.normal(0.0, 1.0, 8), 1), rng.normal(0.0, 1.0, 7)]
    _, exact, how = P.p_values(xs, ys)
    assert how == "exact"
    monkeypatch.setattr(P, "EXACT_BUDGET", 0)
    _, sampled, how = P.p_values(xs, ys, seed=3)
    assert how == f"monte carlo ({P.SPLITS} splits)"
    assert abs(float(sampled) - float(exact)) < 4 * np.sqrt(float(exact) * (1 - float(exact)) / P.SPLITS) + 1e-4
    assert float(P.p_values(xs, ys, seed=3)[1]) == float(sampled)  # seeded: the same splits again


def aa_groups(rng, tasks, n, m, trials=TRIALS):
    """Two groups drawn from one distribution, `trials` times: xs, ys (tasks of (trials, n), (trials, m))."""
    scale = rng.uniform(0.1, 100.0, tasks)  # tasks of different reward scales
    return ([s * rng.normal(size=(trials, n)) for s in scale], [s * rng.normal(size=(trials, m)) for s in scale])


def false_call_rate(verdicts) -> float:
    return float(np.isin(verdicts, ["better", "worse"]).mean())


@pytest.mark.parametrize("tasks", [1, 2, 4, 6])
def test_one_distribution_is_called_better_or_worse_at_most_about_5_percent_at_every_size(tasks):
    """2000 A/A trials at every group size from 2 + 2 (the smallest `controls(n)` accepts) to
    20 + 20, and the unequal groups of an odd `controls(n)` (n + 1 tuned, n controls)."""
    rng = np.random.default_rng(tasks)
    rates = {}
    for n in range(2, 21):
        for m in (n, n + 1) if n < 20 else (n,):
            verdicts, *_ = calls.decide(*aa_groups(rng, tasks, m, n))
            rates[(m, n)] = false_call_rate(verdicts)
    assert max(rates.values()) <= 0.07, {k: v for k, v in rates.items() if v > 0.07}
    assert np.mean(list(rates.values())) <= 0.055  # the exact test's level is 0.05; discreteness only lowers it


def test_the_call_has_power_where_the_groups_differ():
    rng = np.random.default_rng(5)
    xs, ys = aa_groups(rng, 1, 10, 10, trials=500)
    verdicts, *_ = calls.decide([xs[0] + 1.5 * np.std(ys[0])], ys)  # 1.5 standard deviations apart
    assert np.mean(verdicts == "better") > 0.8 and not np.any(verdicts == "worse")


def test_too_few_seeds_to_tell_where_no_outcome_could_reach_5_percent():
    apart = [np.array([10.0, 11.0])], [np.array([0.0, 1.0])]  # 2 + 2, entirely apart: p = 2 / C(4, 2)
    r = calls.call(*apart)
    assert r.verdict == "too few seeds to tell" and r.words == "too few seeds to tell (n = 2+2)"
    assert r.p == 1.0 and r.p_value == pytest.approx(1 / 3) and r.no_interval
    assert calls.call([np.arange(4.0) + 10], [np.arange(4.0)]).verdict == "better"  # 4 + 4: p = 2/70
    assert calls.call([np.arange(3.0) + 10], [np.arange(4.0)]).verdict == "too few seeds to tell"  # 2/35 > 0.05
    three = calls.call([np.array([10.0, 11.0])] * 3, [np.array([0.0, 1.0])] * 3)  # 2 + 2 on 3 tasks: 2/216
    assert three.verdict == "better" and three.words == "better"
    two = calls.call([np.array([10.0, 11.0])] * 2, [np.array([0.0, 1.0])] * 2)
    assert two.words == "too few seeds to tell (n = 2+2 per task)"  # 2/36 > 0.05
    assert calls.MIN_SEEDS == 4 and P.smallest_p([(calls.MIN_SEEDS,) * 2]) <= 0.05 < P.smallest_p([(3, 4)])


def test_the_interval_is_shown_only_where_it_agrees_with_the_call():
    rng = np.random.default_rng(2)
    x, y = rng.normal(1.0, 1.0, 12), rng.normal(0.0, 1.0, 12)
    shown = calls.call([x], [y], (0.6, 0.9))
    assert shown.verdict == "better" and shown.ci == (0.6, 0.9) and shown.no_interval == ""
    assert shown.numbers.startswith(f"{shown.p:.2f} [0.60, 0.90]")
    disagree = calls.call([x], [y], (0.45, 0.9))  # the call separates, the interval would not
    assert np.isnan(disagree.ci).all() and "calls differ" in disagree.no_interval
    assert disagree.numbers == f"{disagree.p:.2f} ({calls.p_text(disagree.p_value)})"
    few = calls.call([x[:6]], [y[:6]], (0.6, 0.9))
    assert np.isnan(few.ci).all() and few.no_interval == f"no interval below {calls.MIN_INTERVAL} runs per group"
    point = calls.call([x + 10], [y], (1.0, 1.0))
    assert point.verdict == "better" and "every resample" in point.no_interval
    assert calls.p_text(0.0004) == "p < 0.001" and calls.p_text(0.0123) == "p = 0.012"
    assert calls.p_text(0.5, "monte carlo (20000 splits)") == "p = 0.50 (Monte Carlo)"


def test_collapsed_runs_are_those_below_every_reference_run():
    rng = np.random.default_rng(3)
    for _ in range(50):
        scores = np.round(rng.normal(0.0, 2.0, 9), 0)
        scores[rng.integers(0, 9)] = np.nan
        refs = [np.round(rng.normal(0.0, 1.0, k), 0) for k in rng.integers(1, 6, rng.integers(1, 3))]
        floor = min(v for r in refs for v in r)
        got = calls.collapsed(scores, refs, seeds=np.arange(100, 109), hyperparameters={"lr": np.arange(9) / 10})
        want = [i for i, s in enumerate(scores) if s == s and s < floor]
        assert [c["index"] for c in got] == want
        assert all(c["seed"] == 100 + c["index"] and c["hyperparameters"] == {"lr": c["index"] / 10} for c in got)
    assert calls.collapsed(np.zeros(3), [np.array([np.nan])]) == []  # no reference run: nothing to fall below
    run = {"seed": 7, "score": 9.4, "hyperparameters": {"learning_rate": 0.01, "batch_size": 1024.0}}
    assert calls.collapse_text([run], 20, "tuned") == \
        "1 of 20 tuned runs collapsed (seed 7: 9.4, learning_rate 0.01, batch_size 1024)"


def test_controls_warn_below_the_smallest_group_that_can_be_called():
    with pytest.warns(calls.FewSeedsWarning, match=r"3 runs in the control group of controls\(6\): below "
                                                   r"hcjax\.calls\.MIN_SEEDS = 4"):
        C.controls(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C.controls(8)  # 4 + 4: a call can be made
    assert "only comparisons over all 3 tasks can" in calls.few_seeds(2, tasks=3)
    assert "no comparison can call a difference at all" in calls.few_seeds(2, tasks=2)
    assert calls.few_seeds(4, tasks=1) == ""


def test_the_bootstrap_rule_it_replaced_called_small_groups_often():
    """experiments.benchmarks.bench_calls' two rules at 2 + 2 runs on one task: the percentile
    bootstrap's interval excluded 1/2 for about a third of one-distribution pairs (31% in its
    table); the exact test can call none there."""
    from experiments.benchmarks import bench_calls

    rng = np.random.default_rng(0)
    xs, ys = bench_calls.groups(rng, 1, 2, 400)
    assert bench_calls.bootstrap_rate(rng, xs, ys, reps=200) > 0.2
    assert bench_calls.call_rate(xs, ys) == 0.0


def test_the_guides_seed_sets_pool_into_one_report():
    """experiments.benchmarks.guide_claims.report: the seed sets' agents as one group each."""
    from experiments.benchmarks import guide_claims

    rng = np.random.default_rng(1)
    runs = [{"scores": rng.normal(400.0, 50.0, 8).tolist(), "controls": C.controls(8).tolist(),
             "seeds": [100 * k + i for i in range(8)], "final": {"learning_rate": rng.uniform(1e-4, 1e-2, 8).tolist()}}
            for k in (7, 8)]
    runs[1]["scores"][2] = 5.0  # a tuned agent (seed 802) below every control
    pooled = guide_claims.report(runs)
    alone = C.report(np.concatenate([r["scores"] for r in runs]), np.concatenate([r["controls"] for r in runs]),
                     seeds=np.concatenate([r["seeds"] for r in runs]),
                     hyperparameters={"learning_rate": np.concatenate([r["final"]["learning_rate"] for r in runs])})
    assert str(pooled) == str(alone) and (pooled.n_tuned, pooled.n_control) == (8, 8)
    assert [c["seed"] for c in pooled.collapsed] == [802]
