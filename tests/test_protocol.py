"""The tuning/test protocol of a study (experiments.study.protocol): test seeds disjoint from the
tuning seeds, the sweep of static configurations and its incumbent, poor defaults, and the
replays of the found schedules on the test seeds."""
from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np
import pytest

import experiments
from experiments import cli
from experiments.study import presets, protocol
from experiments.study.plan import unit_groups, unit_seeds
from experiments.study.store import load_units
from hcjax.calls import FewSeedsWarning
from tests.test_readme import VERDICT, run_block

SPACE = presets.paper_space(batch_size=(32, 64))
TINY_PPO = dict(num_envs=4, hidden_sizes=(8,), update_epochs=1, num_minibatches=2, eval_steps=40, eval_episodes=2)


def tiny(**fields) -> experiments.Study:
    """A CartPole study of two tuners, `fixed` and the sweep, 2 tuning and 2 test seeds, a poor default."""
    base = dict(envs=["CartPole-v1"], methods=["hypercontroller", "random", "fixed", "sweep"], seeds=2,
                iterations=6, eval_every=3, tune_every=2, test_seeds=2, space=SPACE, ppo=TINY_PPO,
                poor_defaults={"lr_low": {"learning_rate": 1e-5}}, tuner={"sweep": {"configurations": 3, "seeds": 2}},
                fuse_methods=True, fast_compile=True)
    return experiments.Study(**{**base, **fields})


def test_test_seeds_overlapping_the_tuning_seeds_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"test_seeds \[1, 2\] are tuning seeds too .*seeds 0..2"):
        tiny(seeds=3, test_seeds=[1, 2, 100]).plan()
    with pytest.raises(ValueError, match=r"test_seeds: seed ids must lie in \[0, 2147483647\]"):
        tiny(test_seeds=[2**31]).plan()
    with pytest.raises(ValueError, match="test_seeds must be a count >= 0"):
        tiny(test_seeds=-1).plan()
    assert tiny(seeds=3, test_seeds=4).plan().test_ids == (100, 101, 102, 103)
    assert tiny(seeds=120, test_seeds=2, tuner={}).plan().test_ids == (200, 201)  # after the tuning seeds
    assert tiny(test_seeds=[7, 5]).plan().test_ids == (7, 5)


def test_fewer_test_seeds_than_a_claim_needs_warn_when_planned():
    """A warning, not a refusal, before any work: the verdict's calls need calls.MIN_SEEDS runs per
    group and environment; without test seeds, the seeds are what the comparisons are made on."""
    with pytest.warns(FewSeedsWarning, match=r"^2 runs in each method's test seeds \(test_seeds: 2\), where the "
                                             r"verdict makes its claims: below hcjax\.calls\.MIN_SEEDS = 4, a "
                                             r"difference on one environment cannot be called"):
        tiny().plan()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewSeedsWarning)
        tiny(test_seeds=4).plan()


def test_hcjax_run_says_the_few_seeds_warning_before_any_work(tmp_path, capsys):
    out = tmp_path / "a file"
    out.write_text("")
    code = cli.main(["run", "--envs", "CartPole-v1", "--methods", "fixed", "--seeds", "3", "--iterations", "1",
                     "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "is an existing file, not a directory" in err, err  # refused after the checks
    assert "hcjax run: warning: 3 runs in each method's seeds (seeds = 3), where its comparisons are made: " \
           "below hcjax.calls.MIN_SEEDS = 4" in err


@pytest.mark.parametrize("fields, words", [
    (dict(poor_defaults={"x": {"momentum": 0.1}}), "poor_defaults.x: 'momentum' is not a tuned hyperparameter"),
    (dict(poor_defaults={"x": {"learning_rate": 1.0}}), r"poor_defaults.x.learning_rate must be a number in"),
    (dict(poor_defaults={"a b": {"learning_rate": 1e-4}}), "poor_defaults: names must be"),
    (dict(methods=["hypercontroller"]), "poor_defaults are compared with the study's default: add 'fixed'"),
    (dict(tuner={"sweep": {"configurations": 0}}), r"tuner.sweep.configurations must be an integer >= 1"),
    (dict(tuner={"sweep": {"seeds": 3}}), r"tuner.sweep.seeds \(3\) must be at most the study's seeds \(2\)"),
    (dict(tuner={"sweep": {"budget": 3}}), r"tuner.sweep: unknown option\(s\) \['budget'\]"),
])
def test_protocol_mistakes_are_refused_before_any_work(fields, words):
    with pytest.raises(ValueError, match=words):
        tiny(**fields).plan()


def test_the_units_and_their_groups():
    """Tuning units, then every one again on the test seeds, then the replays of the online
    methods; fused, the tuners' units (tuning and test) are one program, the sweep another, and
    the units that read results (replays, the incumbent) a last one."""
    plan = tiny().plan()
    assert plan.methods == ["hypercontroller", "random", "fixed", "sweep", "fixed:lr_low", "hypercontroller@test",
                            "random@test", "fixed@test", "sweep@test", "fixed:lr_low@test",
                            "replay_hypercontroller@test", "replay_random@test"]
    assert [methods for _, methods in unit_groups(plan)] == [
        ["hypercontroller", "random", "fixed", "fixed:lr_low", "hypercontroller@test", "random@test", "fixed@test",
         "fixed:lr_low@test"], ["sweep"], ["sweep@test", "replay_hypercontroller@test", "replay_random@test"]]
    assert unit_seeds(plan, "sweep").tolist() == [0, 1, 0, 1, 0, 1]
    assert unit_seeds(plan, "replay_random@test").tolist() == [100, 101]
    assert protocol.kind("replay_fixed:a@test") == protocol.UnitKind("fixed:a", "test", replay=True)
    assert not tiny(test_seeds=0).plan().test_ids


def slow_incumbent(final, configuration) -> int:
    """The configuration with the best mean over its rows, NaN as -inf, the first of ties: a loop."""
    best, best_mean = None, None
    for c in sorted(set(configuration.tolist())):
        scores = [x if np.isfinite(x) else -np.inf for x, k in zip(final, configuration) if k == c]
        mean = sum(scores) / len(scores)
        if best_mean is None or mean > best_mean:
            best, best_mean = c, mean
    return best


def test_the_incumbent_equals_a_slow_reference_on_fabricated_results():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n, k = int(rng.integers(1, 9)), int(rng.integers(1, 4))
        final = rng.choice([0.0, 1.0, 2.0, 3.5], size=n * k) if trial % 2 else rng.normal(size=n * k)
        final[rng.random(n * k) < 0.1] = np.nan
        configuration = np.repeat(np.arange(n), k)
        assert protocol.incumbent(final, configuration) == slow_incumbent(final, configuration)


@pytest.fixture(scope="module")
def protocol_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("protocol") / "runs" / "protocol"
    tiny().run(out, progress=False, plot=False)
    return out, {u.meta["method"]: u for u in load_units(out)}


@pytest.mark.slow
def test_the_verdict_example_of_the_studies_page_runs_on_a_study_with_test_seeds(protocol_study, capsys):
    out, _ = protocol_study
    cwd = os.getcwd()
    os.chdir(out.parent.parent)
    try:
        namespace = run_block(VERDICT)
    finally:
        os.chdir(cwd)
    assert namespace["verdict"].sentences["hypercontroller"].startswith("HC on 2 test seeds:")
    assert "### On the test seeds (the claims)" in capsys.readouterr().out


@pytest.mark.slow
def test_replays_on_the_test_seeds_run_the_source_schedules(protocol_study):
    """replay_<m>@test: test seed j runs row j mod S of m's tuning schedules, iteration by
    iteration, on the test seeds of the fresh runs (the same keys: paired)."""
    _, units = protocol_study
    for m in ("hypercontroller", "random"):
        source, replay = units[m], units[f"replay_{m}@test"]
        assert replay.seeds.tolist() == units[f"{m}@test"].seeds.tolist() == [100, 101]
        for j in range(2):
            np.testing.assert_array_equal(replay.hparams[j], source.hparams[j % 2])
        assert replay.meta["source"]["unit"] == m and replay.meta["phase"] == "test"
    assert np.any(units["random"].hparams[:, 0] != units["random"].hparams[:, -1])  # a schedule that moves


@pytest.mark.slow
def test_the_sweep_runs_its_configurations_and_its_incumbent_on_the_test_seeds(protocol_study):
    _, units = protocol_study
    sweep, best = units["sweep"], units["sweep@test"]
    configurations = np.asarray(sweep.meta["sweep"]["configurations"], np.float32)
    rows = np.asarray(sweep.meta["sweep"]["configuration"])
    assert configurations.shape == (3, 4) and rows.tolist() == [0, 0, 1, 1, 2, 2]
    assert sweep.meta["runs"] == 6 and sweep.seeds.tolist() == [0, 1] * 3
    np.testing.assert_array_equal(sweep.hparams, np.broadcast_to(configurations[rows][:, None], sweep.hparams.shape))
    chosen = slow_incumbent(sweep.eval_reward[:, -1], rows)
    assert best.meta["incumbent"]["configuration"] == chosen
    np.testing.assert_array_equal(best.hparams, np.broadcast_to(configurations[chosen], best.hparams.shape))
    assert best.seeds.tolist() == [100, 101]


@pytest.mark.slow
def test_the_fixed_units_rerun_on_the_test_seeds_are_what_a_replay_of_fixed_gives(protocol_study):
    """fixed@test (in the fused program) equals `fixed` replayed on the test seeds, array for
    array; the poor default runs the defaults with its own learning rate."""
    out, units = protocol_study
    replayed = experiments.replay(out, "CartPole-v1__fixed", [100, 101])
    for name in ("train_reward", "hparams", "frames", "eval_reward"):
        np.testing.assert_allclose(getattr(replayed, name), getattr(units["fixed@test"], name), rtol=1e-5,
                                   err_msg=name)
    poor, good = units["fixed:lr_low"].hparams[0, 0], units["fixed"].hparams[0, 0]
    assert poor[0] == pytest.approx(1e-5) and np.array_equal(poor[1:], good[1:])
    assert units["fixed:lr_low"].meta["poor_default"] == {"name": "lr_low", "values": {"learning_rate": 1e-5}}
    assert {u.meta["phase"] for u in units.values()} == {"tuning", "test"}
    assert all(u.seeds.tolist() == [100, 101] for m, u in units.items() if m.endswith("@test"))


def test_a_study_file_holds_the_protocol_and_round_trips():
    from experiments.study import studyfile
    preset = dataclasses.replace(tiny().plan().preset, test_seeds=(100, 105))
    assert studyfile.loads(studyfile.dumps(preset)) == preset
    with pytest.raises(ValueError, match="'test_seeds' must be a count"):
        studyfile.loads('envs = ["CartPole-v1"]\nmethods = ["fixed"]\ntest_seeds = "ten"\n')
