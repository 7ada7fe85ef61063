"""The results page's claims (experiments.reporting.claims): regenerated from the committed units,
equal to each study's tables/aggregate.json, per-environment verdicts against a slow reference,
and the paper-budget estimate on a hand-made input."""
import itertools
import json
import math
import pathlib
import re
import types

import numpy as np
import pytest

from experiments.reporting import claims
from experiments.reporting import stats as ST

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
BLOCK = re.compile(r"<!-- claims: (?P<studies>[^>]*?) -->\n(?P<text>.*?)<!-- /claims -->", flags=re.DOTALL)
STUDIES = ["headroom_study", "verdict_study", "cpu_study", "cpu_learn_study", "population_study", "gpu_h100_5b602f1"]


def page_block() -> re.Match:
    match = BLOCK.search(PAGE.read_text())
    assert match, "docs/results.md has no <!-- claims: ... --> block"
    return match


def test_page_block_is_regenerated_from_the_committed_units():
    match = page_block()
    studies = match["studies"].split()
    assert studies == [f"results/{s}" for s in STUDIES]  # every committed study, in the page's order
    text = claims.render([ROOT / s for s in studies], ROOT / "docs")
    assert match["text"].strip() == text.strip()


def test_cli_prints_the_block(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert claims.main(["results/population_study", "--relative-to", "docs"]) == 0
    out = capsys.readouterr().out
    assert out == claims.render(["results/population_study"], "docs")
    assert "(../results/population_study/tables/aggregate.md)" in out


@pytest.mark.parametrize("study", STUDIES)
def test_aggregate_rows_equal_the_study_tables(study):
    saved = json.loads((ROOT / "results" / study / "tables" / "aggregate.json").read_text())
    assert saved["bootstrap"]["reps"] == ST.REPS and saved["bootstrap"]["seed"] == 0
    result = claims.study_claims(ROOT / "results" / study)
    rows = {r["method"]: r for r in result["rows"] if r["env"] == claims.ALL}
    vs = saved["improvement"]["vs"]
    assert set(rows) == set(vs)
    for method, r in rows.items():
        assert r["p"] == vs[method]["p"] and r["ci"] == vs[method]["ci"], method
        assert r["verdict"] == claims.VERDICTS[vs[method]["verdict"]]
    envs = {r["env"] for r in result["rows"]} - {claims.ALL}
    assert envs == set(saved["normalisation"]["reference"])
    assert result["budget"]["iterations"] == ([100, 390, 2500] if study == "headroom_study" else [100])


def reference_pair(x, y, reps, seed, env, names):
    """P(X > Y) of one environment, its bootstrap interval by plain loops over pairs of runs (the
    resamples drawn as stats.resample draws them) and the call, by enumerating the permutation test."""
    def wins(a, b):
        total = 0.0
        for u in a:
            for v in b:
                total += 1.0 if u > v else 0.5 if u == v else 0.0
        return total / (len(a) * len(b))

    boot_x = ST.resample(x, reps, seed, env, names[0])
    boot_y = ST.resample(y, reps, seed, env, names[1])
    boot = np.array([wins(list(boot_x[r]), list(boot_y[r])) for r in range(reps)])
    lo, hi = np.percentile(boot, [2.5, 97.5])
    # the call: every split of the pooled runs into len(x) and len(y), the two-sided p-value of the statistic
    observed, pooled = wins(list(x), list(y)), list(x) + list(y)
    splits = [wins([pooled[i] for i in c], [pooled[i] for i in range(len(pooled)) if i not in c])
              for c in itertools.combinations(range(len(pooled)), len(x))]
    p_value = np.mean([abs(s - 0.5) >= abs(observed - 0.5) - 1e-12 for s in splits])
    smallest = 2 / math.comb(len(pooled), len(x))
    word = ("too few seeds to tell" if smallest > 0.05 else "not separated" if p_value > 0.05
            else "better" if observed > 0.5 else "worse")
    return observed, (lo, hi), word


def fake_units(scores: dict) -> list:
    """Units with only what claim_rows reads: meta env/method and the final evaluation."""
    return [types.SimpleNamespace(meta={"env": env, "method": m}, eval_reward=np.asarray(x, float)[:, None])
            for m, per_env in scores.items() for env, x in per_env.items()]


@pytest.mark.parametrize("trial", range(4))
def test_per_environment_verdict_matches_a_slow_reference(trial):
    rng = np.random.default_rng(trial)
    envs = ["a", "b"]
    methods = ["hypercontroller", "random", "fixed"]
    shift = {"hypercontroller": 0.0, "random": 2.0 * (trial - 1.5), "fixed": 0.0}
    scores = {m: {env: np.round(rng.normal(shift[m], 1.0, size=rng.integers(3, 7)), 1) for env in envs}
              for m in methods}  # rounded: ties happen
    rows = claims.claim_rows(fake_units(scores), reps=300, seed=trial)
    checked = 0
    for r in rows:
        if r["env"] == claims.ALL:
            continue
        p, (lo, hi), word = reference_pair(scores["hypercontroller"][r["env"]], scores[r["method"]][r["env"]], 300,
                                           trial, r["env"], ("hypercontroller", r["method"]))
        assert r["p"] == pytest.approx(p, abs=1e-12)
        assert r["ci"] == pytest.approx([lo, hi], abs=1e-12)
        assert r["verdict"] == word
        checked += 1
    assert checked == len(envs) * (len(methods) - 1)


def one_study(scores: dict) -> dict:
    units = fake_units(scores)
    envs, methods, _ = claims.grouped(units)
    return {"path": ROOT / "results" / "x", "name": "x", "units": units, "env_names": {e: e for e in envs},
            "single_seed": ST.single_seed_strata(claims.study_scores(units)), "rows": claims.claim_rows(units, 50),
            "budget": {"envs": envs, "methods": methods, "seeds": (1, 3), "iterations": [5], "frames": (8, 8),
                       "mean_frames": 8.0, "device": "cpu"}}


def test_one_run_in_a_stratum_gives_no_verdict_and_the_warning_is_carried():
    from experiments.reporting import tables

    scores = {"hypercontroller": {"a": np.array([3.0])}, "random": {"a": np.array([1.0, 1.5, 2.0])}}
    study = one_study(scores)
    assert {r["verdict"] for r in study["rows"]} == {"not testable"}  # HC's single run is higher: no "better"
    text = claims.study_section(study, ROOT / "docs")
    assert "**better**" not in text and "not testable" in text and "One seed only in a / HC" in text
    summary = ST.summarise(scores, reps=50)
    assert summary["improvement"]["vs"]["random"]["significant"] is False
    aggregate = tables.aggregate_table(summary)
    assert "not testable (one run)" in aggregate and "yes, HC better" not in aggregate


def test_a_study_without_hypercontroller_says_so():
    from experiments.reporting import tables

    scores = {"random": {"a": np.array([1.0, 2.0])}, "fixed": {"a": np.array([0.0, 3.0])}}
    text = claims.study_section(one_study(scores), ROOT / "docs")
    assert "no claim to test" in text and "better than none" not in text and "|" not in text
    assert "no claim to test" in tables.aggregate_table(ST.summarise(scores, reps=50))


def test_an_interval_near_one_half_shows_three_decimals():
    from experiments.reporting.tables import probability_text

    assert probability_text(0.41, [0.32, 0.496]) == "0.410 [0.320, 0.496]"
    assert probability_text(0.56, [0.5, 0.69]) == "0.56 [0.50, 0.69]"  # exactly 0.5: two decimals agree
    assert probability_text(0.56, [0.503, 0.69]) == "0.560 [0.503, 0.690]"


def test_environments_are_named_as_they_ran():
    from experiments.reporting.views import ran_as

    assert ran_as({"env": "HalfCheetah-v4", "make": "halfcheetah", "path": "brax"}) == \
        "Brax halfcheetah, standing in for HalfCheetah-v4"
    assert ran_as({"env": "CartPole-v1", "make": "CartPole-v1", "path": "gymnax"}) == "CartPole-v1 (gymnax)"


def gpu_unit(env, method, segments, fused):
    """A hand-made GPU unit: 2 seeds per method, batch size in [10, 100], evaluations every 10
    iterations of 30."""
    config = {"space": [{"name": "batch_size", "low": 10, "high": 100}]}
    return types.SimpleNamespace(meta={"env": env, "method": method, "config": config, "segment_seconds": segments,
                                       "n_agents": 2 * len(fused), "fused_with": fused, "devices": ["cuda:0"]},
                                 eval_iteration=np.array([10, 20, 30]))


def test_paper_estimate_on_a_hand_made_input():
    fused = ["hypercontroller", "fixed"]
    units = [gpu_unit("E", m, [10.0, 2.0, 2.2], fused) for m in fused]
    (rate,) = claims.measured_rates(units)
    # the median segment: 2.2 s / 10 iterations; compilation: 10 - 2.2 s; 4 agents x 100 frames
    assert rate["seconds_per_iteration"] == pytest.approx(0.22)
    assert rate["compile_seconds"] == pytest.approx(7.8)
    assert (rate["agents"], rate["methods"], rate["seeds"], rate["max_frames"]) == (4, 2, 2, 100)
    assert rate["agent_frames_per_second"] == pytest.approx(400 / 0.22)
    (est,) = claims.paper_estimate([rate], iterations=1000, frames=600, seeds=10)
    # 20 agents x 600 frames = 30x the measured 4 x 100 per iteration: 6.6 s per iteration
    assert est["agents"] == 20
    assert est["seconds"] == pytest.approx(1000 * 0.22 * 30 + 7.8)


def test_unfused_units_are_separate_programs():
    units = [gpu_unit("E", "hypercontroller", [5.0, 1.0, 1.0], ["hypercontroller"]),
             gpu_unit("E", "fixed", [5.0, 3.0, 3.0], ["fixed"])]
    (rate,) = claims.measured_rates(units)
    assert rate["seconds_per_iteration"] == pytest.approx(0.4)  # one program after the other
    assert rate["agents"] == 4 and rate["compile_seconds"] == pytest.approx(4.0 + 2.0)


def test_segments_must_match_evaluations():
    unit = gpu_unit("E", "fixed", [1.0, 1.0], ["fixed"])
    with pytest.raises(ValueError, match="segments do not match"):
        claims.program_rate(unit)


def test_a_method_whose_evaluations_are_all_nan_is_called_that_not_not_run():
    """Issue 41: the page called a method whose evaluations there were all NaN 'not run there'
    (and its results table 'no final evaluation', as for a unit that never evaluated)."""
    from experiments.reporting import tables

    nan = np.full(3, np.nan)
    scores = {"hypercontroller": {"a": np.array([1.0, 2.0, 3.0]), "b": nan, "c": np.array([1.0, 2.0, 3.0])},
              "random": {"a": nan, "b": np.array([0.0, 1.0, 2.0])},
              "fixed": {"c": np.array([0.0, 1.0, 2.0])}}  # random never ran on c, fixed only there
    study = one_study(scores)
    table = claims.claims_table(study["rows"], study["env_names"])
    row = next(line for line in table.splitlines() if line.startswith("| R |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == ["evaluations all NaN (R on a, HC on b)", "evaluations all NaN (R)",
                         "evaluations all NaN (HC)", "not run there"]
    units = [types.SimpleNamespace(meta={"env": "a", "method": m}, eval_reward=x[:, None],
                                   train_reward=np.zeros((3, 2)), tuner_time=np.zeros(2), seeds=np.arange(3))
             for m, x in [("hypercontroller", np.array([1.0, 2.0, 3.0])), ("random", nan)]]
    units.append(types.SimpleNamespace(meta={"env": "a", "method": "fixed"}, eval_reward=np.zeros((3, 0)),
                                       train_reward=np.zeros((3, 2)), tuner_time=np.zeros(2), seeds=np.arange(3)))
    text = tables.results_table(units)
    assert "| evaluations all NaN |" in text and "| no final evaluation |" in text
