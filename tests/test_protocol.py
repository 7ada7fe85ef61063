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


SWEEP = {"configurations": 3, "seeds": 2, "repeats": 2, "default": True}


def tiny(**fields) -> experiments.Study:
    """A CartPole study of two tuners, `fixed` and the sweep (2 draws of 3 configurations, the default
    the first of each), 2 tuning and 2 test seeds, a poor default that HyperController also starts
    from; CartPole runs 8 iterations with an evaluation every 4 (its own schedule: the study's is 6
    and 3)."""
    base = dict(envs=["CartPole-v1"], methods=["hypercontroller", "random", "fixed", "sweep"], seeds=2,
                iterations=6, eval_every=3, tune_every=2, test_seeds=2, space=SPACE, ppo=TINY_PPO,
                poor_defaults={"lr_low": {"learning_rate": 1e-5}}, tuner={"sweep": SWEEP},
                start_from_poor=["hypercontroller"], env_schedule={"CartPole-v1": {"iterations": 8, "eval_every": 4}},
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
    (dict(tuner={"sweep": {"repeats": 0}}), r"tuner.sweep.repeats must be an integer >= 1"),
    (dict(tuner={"sweep": {"default": 1}}), r"tuner.sweep.default must be true or false"),
    (dict(tuner={"sweep": {"configurations": 10**6, "seeds": 2}}),
     r"tuner.sweep.repeats x configurations x seeds \(1 x 1000000 x 2: the sweep's runs, one program\) must be"),
    (dict(start_from_poor=["random_start"], methods=["random_start", "fixed"]),
     "start_from_poor: 'random_start' cannot start from a poor default .*fixed:<name> runs that"),
    (dict(start_from_poor=["gp_ucb"]), r"start_from_poor: 'gp_ucb' is not one of the study's methods"),
    (dict(start_from_poor=["random"], poor_defaults={}), "start_from_poor starts methods from the study's poor"),
    (dict(env_schedule={"CartPole-v1": {"iterations": 0}}), r"env_schedule.CartPole-v1.iterations must be a positive"),
    (dict(env_schedule={"CartPole-v1": {"steps": 3}}), r"env_schedule.CartPole-v1: unknown field\(s\) \['steps'\]"),
    (dict(env_schedule={"Acrobot-v1": {"iterations": 3}}), r"env_schedule names environment\(s\) \['Acrobot-v1'\]"),
])
def test_protocol_mistakes_are_refused_before_any_work(fields, words):
    with pytest.raises(ValueError, match=words):
        tiny(**fields).plan()


def test_the_units_and_their_groups():
    """Tuning units (HC also from the poor default), then every one again on the test seeds, then
    the replays of the online methods (not of runs started from a poor default); fused, the
    tuners' tuning units are one program, the sweep another, the tuners' test units a third (after
    everything chosen on the tuning seeds), and the units that read results (replays, the
    incumbents) a last one."""
    plan = tiny().plan()
    assert plan.methods == ["hypercontroller", "random", "fixed", "sweep", "fixed:lr_low", "hypercontroller:lr_low",
                            "hypercontroller@test", "random@test", "fixed@test", "sweep@test", "fixed:lr_low@test",
                            "hypercontroller:lr_low@test", "replay_hypercontroller@test", "replay_random@test"]
    assert [methods for _, methods in unit_groups(plan)] == [
        ["hypercontroller", "random", "fixed", "fixed:lr_low", "hypercontroller:lr_low"], ["sweep"],
        ["hypercontroller@test", "random@test", "fixed@test", "fixed:lr_low@test", "hypercontroller:lr_low@test"],
        ["sweep@test", "replay_hypercontroller@test", "replay_random@test"]]
    assert unit_seeds(plan, "sweep").tolist() == [0, 1] * 6  # 2 draws x 3 configurations x 2 seeds
    assert unit_seeds(plan, "sweep@test").tolist() == [100, 101, 100, 101]  # each draw's incumbent
    assert unit_seeds(plan, "replay_random@test").tolist() == [100, 101]
    assert plan.timing(plan.envs[0]) == (8, 4, 2)
    assert protocol.kind("replay_fixed:a@test") == protocol.UnitKind("fixed:a", "test", replay=True)
    assert not tiny(test_seeds=0).plan().test_ids


def slow_incumbent(final, configuration, curve=None, distance=None) -> int:
    """The configuration with the best mean over its rows, NaN as -inf; of ties (exactly equal
    means here), the best mean over the whole run (curve), then the nearest (distance), then the
    first: a loop."""
    def mean(values):
        values = [x if np.isfinite(x) else -np.inf for x in values]
        return sum(values) / len(values)

    configs = sorted(set(configuration.tolist()))
    final_mean = {c: mean([x for x, k in zip(final, configuration) if k == c]) for c in configs}
    top = max(final_mean.values())
    tied = [c for c in configs if final_mean[c] == top]
    if len(tied) > 1 and curve is not None:
        run = {c: mean([mean(row) for row, k in zip(curve, configuration) if k == c]) for c in tied}
        tied = [c for c in tied if run[c] == max(run.values())]
    if len(tied) > 1 and distance is not None:
        tied = [c for c in tied if distance[c] == min(distance[t] for t in tied)]
    return tied[0]


def test_the_incumbent_and_its_tie_rule_equal_a_slow_reference_on_fabricated_results():
    rng = np.random.default_rng(0)
    for trial in range(300):
        n, k = int(rng.integers(1, 9)), int(rng.integers(1, 4))
        final = rng.choice([0.0, 1.0, 2.0, 3.5], size=n * k) if trial % 2 else rng.normal(size=n * k)
        final[rng.random(n * k) < 0.1] = np.nan
        configuration = np.repeat(np.arange(n), k)
        curve = np.concatenate([rng.choice([0.0, 1.0], size=(n * k, 2)), final[:, None]], axis=1)
        distance = rng.choice([0.5, 1.0], size=n)
        assert protocol.incumbent(final, configuration) == slow_incumbent(final, configuration)
        assert protocol.incumbent(final, configuration, curve, distance) == \
            slow_incumbent(final, configuration, curve, distance)


def test_ties_go_to_the_configuration_that_got_there_sooner_then_to_the_nearest_default():
    final = np.array([500.0, 500.0, 500.0, 500.0, 480.0, 480.0])
    configuration = np.repeat(np.arange(3), 2)
    assert protocol.incumbent(final, configuration) == 0  # no rule given: the first
    curve = np.array([[100.0, 500.0], [100.0, 500.0], [300.0, 500.0], [300.0, 500.0], [400, 480], [400, 480]])
    assert protocol.incumbent(final, configuration, curve) == 1  # sooner at 500
    flat = np.full((6, 2), 500.0)
    assert protocol.incumbent(final, configuration, flat, np.array([0.3, 0.1, 0.0])) == 1  # nearer the default


def test_several_draws_are_separate_sweeps():
    """A sweep of R draws holds the configurations of R sweeps of one draw with seeds seed..seed+R-1
    (the default first in each), and each draw's incumbent is that sweep's own."""
    space = tiny().plan().space
    default = np.asarray(space.default, np.float32)
    together = protocol.sweep_configurations(space, dict(SWEEP, seed=4), default)
    apart = [protocol.sweep_configurations(space, dict(SWEEP, seed=4 + r, repeats=1), default) for r in range(2)]
    np.testing.assert_array_equal(together, np.concatenate(apart))
    np.testing.assert_array_equal(together[[0, 3]], np.stack([default, default]))
    rng = np.random.default_rng(1)
    final = rng.normal(size=12)
    configuration = np.repeat(np.arange(6), 2)
    chosen = protocol.draw_incumbents(final, configuration, SWEEP)
    assert chosen.tolist() == [protocol.incumbent(final[:6], configuration[:6]),
                               3 + protocol.incumbent(final[6:], configuration[6:] - 3)]


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
def test_the_sweep_runs_its_configurations_and_its_incumbents_on_the_test_seeds(protocol_study):
    """Two draws of three configurations (the default first in each) on two seeds; each draw's
    incumbent (the slow reference, with the tie rule) on both test seeds."""
    _, units = protocol_study
    sweep, best = units["sweep"], units["sweep@test"]
    configurations = np.asarray(sweep.meta["sweep"]["configurations"], np.float32)
    rows = np.asarray(sweep.meta["sweep"]["configuration"])
    assert configurations.shape == (6, 4) and rows.tolist() == np.repeat(np.arange(6), 2).tolist()
    assert sweep.meta["runs"] == 12 and sweep.seeds.tolist() == [0, 1] * 6
    assert sweep.meta["sweep"]["repeats"] == 2 and sweep.meta["sweep"]["per_draw"] == 3
    np.testing.assert_array_equal(sweep.hparams, np.broadcast_to(configurations[rows][:, None], sweep.hparams.shape))
    np.testing.assert_array_equal(configurations[0], units["fixed"].hparams[0, 0])  # the default, in each draw
    np.testing.assert_array_equal(configurations[3], units["fixed"].hparams[0, 0])
    np.testing.assert_array_equal(sweep.eval_reward[0:2], sweep.eval_reward[6:8])  # one run per configuration and seed
    space = tiny().plan().space
    distance = np.abs(np.asarray(space.encode(configurations)) -
                      np.asarray(space.encode(configurations[0]))).sum(axis=1)
    final = sweep.eval_reward[:, -1]
    chosen = [r * 3 + slow_incumbent(final[r * 6:(r + 1) * 6], rows[r * 6:(r + 1) * 6] - r * 3,
                                     sweep.eval_reward[r * 6:(r + 1) * 6], distance[r * 3:(r + 1) * 3])
              for r in range(2)]
    assert [c["configuration"] for c in best.meta["incumbents"]] == chosen
    for j, c in enumerate([chosen[0]] * 2 + [chosen[1]] * 2):
        np.testing.assert_array_equal(best.hparams[j], np.broadcast_to(configurations[c], best.hparams[j].shape))
    assert best.seeds.tolist() == [100, 101, 100, 101]


@pytest.mark.slow
def test_a_method_started_from_a_poor_default_runs_it_first_then_tunes(protocol_study):
    """hypercontroller:lr_low's first configuration is the poor default (learning rate 1e-5), then
    HC chooses; its units name their poor default; CartPole ran its own schedule (8 iterations,
    an evaluation every 4) and every unit says so."""
    _, units = protocol_study
    poor = units["fixed:lr_low"].hparams[0, 0]
    for name in ("hypercontroller:lr_low", "hypercontroller:lr_low@test"):
        u = units[name]
        np.testing.assert_allclose(u.hparams[:, 0], np.broadcast_to(poor, u.hparams[:, 0].shape))
        assert np.any(u.hparams[:, -1] != poor)  # HC moved away from it
        assert u.meta["poor_default"] == {"name": "lr_low", "values": {"learning_rate": 1e-5}}
    for u in units.values():
        assert u.train_reward.shape[1] == 8 and u.eval_iteration.tolist() == [4, 8]
        assert u.meta["config"]["schedule"] == {"iterations": 8, "eval_every": 4, "tune_every": 2}


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
    assert all(u.seeds.tolist() == [100, 101] for m, u in units.items() if m.endswith("@test") and m != "sweep@test")


def test_a_study_file_holds_the_protocol_and_round_trips():
    from experiments.study import studyfile
    preset = dataclasses.replace(tiny().plan().preset, test_seeds=(100, 105))
    assert studyfile.loads(studyfile.dumps(preset)) == preset
    with pytest.raises(ValueError, match="'test_seeds' must be a count"):
        studyfile.loads('envs = ["CartPole-v1"]\nmethods = ["fixed"]\ntest_seeds = "ten"\n')
