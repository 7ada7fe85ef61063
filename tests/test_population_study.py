"""Population methods in PPO and the study: the exploit step on real learner states, a
population unit's checkpoint and resume (with the programs the process kept: nothing
compiled again), lineage on disk and in the figures; what the kept programs are keyed by."""
from __future__ import annotations

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import experiments
from experiments import cli
from experiments.study import engine, presets, programs, studyfile
from experiments.study import store as R
from experiments.study.build import DEFAULT_MEMORY_LIMIT_GIB
from experiments.study.checkpoints import Checkpoint
from experiments.study.checks import check
from experiments.study.devices import seed_keys
from experiments.study.plan import unit_keys
from hcjax.population.sharding import agent_mesh
from tests.cli_runs import tiny_study
from tests.compilations import compilations

# segments of 2 iterations (evaluations and population steps every 2): one segment program per method
# pb2_population's GP at 16 rows and candidates, not its default 1000 and 256 (not the point here):
# the module's CPU seconds 29.8 -> 23.8, the GP's Cholesky factorisations of 1000 x 1000 run no more
STUDY = tiny_study(["pbt", "pb2_population"], seeds=4, iterations=6, eval_every=2, hidden=8, batch_high=32,
                   eval_steps=50, extra="\n[tuner.pbt]\nquantile = 0.25\n\n[tuner.pb2_population]\n"
                                        "buffer = 16\ncandidates = 16\nfit_points = 8\n")


@pytest.mark.slow
def test_a_population_step_copies_the_donors_networks_and_sets_every_agents_values(study):
    """The exploit step on real learner states: those of STUDY's pbt unit group (4 agents,
    quantile 0.25) after one segment of 2 iterations, made by the learner, population loop
    and compiled programs that the `study` run kept in this process (nothing compiled anew)."""
    plan = presets.resolve(studyfile.loads(STUDY), methods=["pbt"])
    kept = programs.unit_programs(plan, plan.envs[0], ["pbt"], DEFAULT_MEMORY_LIMIT_GIB)
    loop, mesh = kept.population, agent_mesh()
    with compilations() as count:
        state = kept.programs["init compiled"](seed_keys(np.arange(4), NamedSharding(mesh, P("agent"))))
        state, pop_state = loop.init(state)
        start = jax.device_put(jnp.asarray(0, jnp.int32), NamedSharding(mesh, P()))
        state, _ = kept.programs[("segment", 2)](state, start)  # agents now differ
        before = jax.tree.map(np.asarray, state)
        # agent 0 is worst, agent 3 best: with 4 agents and quantile 0.25, agent 0 takes agent 3's network
        state, pop_state, parents = loop.step(state, pop_state, 2, np.asarray([0.0, 1.0, 2.0, 3.0], np.float32))
        parents = np.asarray(parents)
    assert count["compiled"] == 0, count
    assert parents.tolist() == [3, 1, 2, 3]
    def copied(s):  # the optimiser's moments and count; its injected hyperparameters are checked below
        return dict(params=s.params, obs_stats=s.obs_stats, adam=s.opt_state.inner_state, count=s.opt_state.count)

    for a, b in zip(jax.tree.leaves(copied(state)), jax.tree.leaves(copied(before))):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_array_equal(a[0], b[3])  # the donor's, exactly
        np.testing.assert_array_equal(a[1:], b[1:])  # the others untouched
    hparams = np.asarray(state.hparams)
    assert not np.array_equal(hparams[0], before.hparams[0])  # explored from the donor's values
    np.testing.assert_array_equal(hparams[1:], before.hparams[1:])
    lr = np.asarray(state.opt_state.hyperparams["learning_rate"])
    np.testing.assert_allclose(lr, hparams[:, 0], rtol=1e-6)  # the optimiser uses the new values
    np.testing.assert_array_equal(np.asarray(state.env_state.time), before.env_state.time)  # envs stay


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The output directory of STUDY (pbt and pb2_population) run by `hcjax run`."""
    path = tmp_path_factory.mktemp("pop") / "pop.toml"
    path.write_text(STUDY)
    out = path.parent / "out"
    assert cli.main(["run", "--config", str(path), "--out", str(out), "--no-progress"]) == 0
    return out


@pytest.mark.slow
def test_a_population_unit_resumes_from_its_checkpoint_bit_identically(tmp_path, study):
    plan = presets.resolve(studyfile.loads(STUDY), methods=["pbt"])
    env = plan.envs[0]
    key = unit_keys(plan)[(env.label, "pbt")]

    def run(store, stop_after=None):
        seen = []

        def on_segment(k):
            seen.append(k)
            if stop_after is not None and len(seen) == stop_after:
                raise KeyboardInterrupt

        checkpoint = Checkpoint(store, env.label, "pbt", key, lambda msg: None)
        return engine.run_units(plan, env, ["pbt"], {"pbt": key}, on_segment=on_segment,
                                checkpoint=checkpoint)[0]

    whole = {u.meta["method"]: u for u in R.StudyDir(study).units()}["pbt"]  # the same unit, never stopped
    store = R.StudyDir(tmp_path / "killed")
    with compilations() as count:  # the study's programs, kept in this process, serve both runs
        with pytest.raises(KeyboardInterrupt):
            run(store, stop_after=2)  # segments of 2 iterations (population steps at 2 and 4)
        with np.load(store.checkpoint_path(env.label, "pbt")) as z:
            assert int(z["record/done"]) == 4 and z["record/lineage_iteration"].tolist() == [2, 4]
        resumed = run(store)
    assert (count["lowered"], count["compiled"]) == (0, 0), count
    for name in R.SEED_METRICS + ("eval_reward",) + R.LINEAGE:
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole, name), err_msg=name)
    assert whole.lineage_iteration.tolist() == [2, 4] and whole.lineage_parent.shape == (4, 2)


@pytest.mark.slow
def test_a_study_with_population_methods_saves_lineage_and_draws_it(study):
    units = {u.meta["method"]: u for u in R.StudyDir(study).units()}
    for method in ("pbt", "pb2_population"):
        u = units[method]
        assert u.lineage_iteration.tolist() == [2, 4] and u.lineage_parent.shape == (4, 2)
        assert u.lineage_objective.shape == (4, 2)
        parents = u.lineage_parent
        assert np.all((parents >= 0) & (parents < 4))
        assert np.sum(parents != np.arange(4)[:, None]) >= 1  # quantile 0.25 of 4: one copy per step
        png = study / "figures" / f"lineage_CartPole-v1__{method}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert u.tuner_time.shape == (6,) and u.tuner_time.sum() > 0


def test_population_methods_are_refused_where_they_cannot_run(capsys, tmp_path):
    code = cli.main(["run", "--preset", "smoke", "--envs", "BipedalWalker-v3", "--methods", "pbt",
                     "--out", str(tmp_path)])
    assert code == 2 and "population methods ['pbt'] run on JAX environments only" in capsys.readouterr().err


def test_population_seeds_must_fill_every_device_of_every_process(monkeypatch):
    """The population is exactly the seeds (no padding agents would join the ranking): with 4
    devices in all (e.g. 2 processes x 2 under --distributed), 6 seeds are refused, 8 pass."""
    monkeypatch.setattr(jax, "device_count", lambda: 4)
    with pytest.raises(ValueError, match=r"seeds \(6\) must be a multiple of the device count \(4\)"):
        check(presets.resolve(studyfile.loads(STUDY), methods=["pbt"], seeds=6))
    check(presets.resolve(studyfile.loads(STUDY), methods=["pbt"], seeds=8))


def test_a_unit_group_keeps_its_programs_only_for_the_same_configuration():
    plan = presets.resolve(studyfile.loads(STUDY), methods=["pbt"])
    kept = programs.unit_programs(plan, plan.envs[0], ["pbt"], 8.0)
    assert programs.unit_programs(plan, plan.envs[0], ["pbt"], 8.0) is kept
    more = presets.resolve(studyfile.loads(STUDY), methods=["pbt"], seeds=8)
    assert programs.unit_programs(more, more.envs[0], ["pbt"], 8.0) is not kept
    assert programs.unit_programs(plan, plan.envs[0], ["pbt"], 4.0) is not kept
    assert programs.unit_programs(plan, plan.envs[0], ["pb2_population"], 8.0) is not kept

    def first_unit(env):
        own = experiments.Study(envs={"cartpole": env}, methods=["fixed"], seeds=1, iterations=2).plan()
        return programs.unit_programs(own, own.envs[0], ["fixed"], 8.0)

    pair = gymnax.make("CartPole-v1")
    mine = first_unit(pair)
    assert first_unit(pair) is mine  # the same object: its first build and programs
    assert first_unit(gymnax.make("CartPole-v1")) is not mine  # another object (it may differ in code): anew


def test_a_tuners_replay_programs_are_kept_per_tuner_configuration():
    """The programs that time a method's tuner (its replay) are kept per tuner configuration:
    the same for another environment or PPO (so every unit group of the method compiles them
    once), others for another method, option, space or memory limit."""
    plan = presets.resolve(studyfile.loads(STUDY), methods=["pbt"])
    built, name = [], ("tuner replay", object())  # a name of this run's own: none kept by an earlier run

    def replay(plan, method="random", memory_limit_gib=8.0):
        return programs.tuner_programs(plan, method, memory_limit_gib)(name, lambda: built.append(0) or len(built))

    first = replay(plan)
    other_env = presets.resolve(studyfile.loads(STUDY.replace('["CartPole-v1"]', '["Acrobot-v1"]')
                                                .replace("hidden_sizes = [8]", "hidden_sizes = [4]")))
    assert replay(plan) == first and replay(other_env) == first and len(built) == 1
    longer = presets.resolve(studyfile.loads(STUDY), iterations=8)  # hyperband's budget: 4 decisions, not 3
    assert replay(longer) == first
    assert len({first, replay(plan, "fixed"), replay(plan, memory_limit_gib=4.0), replay(plan, "hyperband"),
                replay(longer, "hyperband"),
                replay(presets.resolve(studyfile.loads(STUDY.replace("high = 1e-2", "high = 1e-1"))))}) == 6
