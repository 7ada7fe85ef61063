"""The Python study API (`experiments.Study`): your own environment through the whole study
machine (killed mid-unit and resumed bit-identically, figures, a changed environment refused),
importable factories in study files and `--env-factory`, the estimate line, the same
ValueErrors as `hcjax run`."""
from __future__ import annotations

import dataclasses
import shutil
import signal
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

import experiments
from experiments import cli
from experiments.study import build, estimate, own_envs, presets, studyfile
from experiments.study import store as R
from tests.cli_runs import python
from tests.test_readme import OWN_STUDY, python_block


@struct.dataclass
class WalkState(environment.EnvState):  # EnvState holds `time`
    x: jax.Array


@struct.dataclass
class WalkParams(environment.EnvParams):
    max_steps_in_episode: int = 16
    goal: float = 3.0


class Walk(environment.Environment):
    """A walker on a line steps left or right (2 discrete actions) towards a goal; reward:
    minus its distance to the goal; 16 steps an episode. `drift` (0 here) is added at every
    step, so that DriftWalk(0.0) traces the very program of Walk() (a persistent-cache hit)."""

    drift = 0.0

    @property
    def default_params(self):
        return WalkParams()

    def reset_env(self, key, params):
        state = WalkState(time=0, x=jax.random.uniform(key, (), minval=-1.0, maxval=1.0))
        return self.get_obs(state, params), state

    def step_env(self, key, state, action, params):
        x = state.x + jnp.where(action == 1, 0.5, -0.5) + self.drift
        state = WalkState(time=state.time + 1, x=x)
        return self.get_obs(state, params), state, -jnp.abs(params.goal - x), jnp.array(False), {}

    def get_obs(self, state, params=None, key=None):
        goal = WalkParams().goal if params is None else params.goal
        return jnp.stack([state.x, goal - state.x])

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (2,))


def make_walk():
    """A factory for study files and --env-factory (tests.test_study_api:make_walk)."""
    return Walk()


class DriftWalk(Walk):
    """Walk drifting by `drift` at every step: an instance attribute, like the issue's
    Thermostat(drift=...), which the fingerprint once ignored."""

    def __init__(self, drift: float):
        super().__init__()
        self.drift = drift


class Dice(Walk):
    """Walk holding a NumPy Generator: an attribute the fingerprint cannot read (opaque)."""

    def __init__(self, seed: int):
        super().__init__()
        self.rng = np.random.default_rng(seed)


def not_an_env():
    return 42


# Five segments of 2 iterations, 2 seeds, a tiny network: compilation dominates.
TINY = dict(methods=["hypercontroller"], seeds=2, iterations=10, eval_every=2, tune_every=2, fast_compile=True,
            ppo=dict(num_envs=4, hidden_sizes=[8], update_epochs=1, num_minibatches=2, eval_steps=16),
            space=[dict(name="learning_rate", low=1e-4, high=1e-2, scale="log"),
                   dict(name="batch_size", low=16, high=32, integer=True)])

SCRIPT = """
import os, signal, sys
from experiments import Study
from experiments.study import checkpoints
from tests.test_study_api import TINY, Walk

if sys.argv[2] == "kill":  # SIGKILL right after the first checkpoint is on disk
    save = checkpoints.Checkpoint.save
    def save_then_die(self, state, record):
        save(self, state, record)
        os.kill(os.getpid(), signal.SIGKILL)
    checkpoints.Checkpoint.save = save_then_die
Study(envs={"walk": Walk()}, **TINY).run(sys.argv[1], progress=False, plot=False)
"""


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """(reference directory, the resumed run's StudyResult, its log lines): the uninterrupted
    run in this process, the killed one in another (its programs from the session's
    compilation cache), then the resume in this one (the same environment object: the
    reference's compiled programs, kept in this process)."""
    tmp = tmp_path_factory.mktemp("api")
    script = tmp / "study.py"
    script.write_text(SCRIPT)
    walk = Walk()
    experiments.Study(envs={"walk": walk}, **TINY).run(tmp / "ref", progress=False, plot=False)
    killed = python([script, tmp / "k", "kill"])
    out, _ = killed.communicate(timeout=600)
    assert killed.returncode == -signal.SIGKILL, out
    store = R.StudyDir(tmp / "k")
    assert store.checkpoint_path("walk", "hypercontroller").exists(), out
    assert not store.unit_path("walk", "hypercontroller").exists()
    lines = []
    result = experiments.Study(envs={"walk": walk}, **TINY).run(tmp / "k", progress=False, log=lines.append)
    return tmp / "ref", result, lines


@pytest.mark.slow
def test_own_environment_killed_mid_unit_resumes_bit_identically(killed_and_resumed):
    ref, result, lines = killed_and_resumed
    assert "resume walk / hypercontroller from its checkpoint after iteration 2" in lines
    a, b = R.StudyDir(ref).units()[0], R.StudyDir(result.directory).units()[0]
    for name in R.SEED_METRICS + ("eval_reward", "eval_iteration"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert not R.StudyDir(result.directory).checkpoint_path("walk", "hypercontroller").exists()


@pytest.mark.slow
def test_the_result_names_units_figures_and_the_manifest(killed_and_resumed):
    _, result, lines = killed_and_resumed
    assert result.units == [("walk", "hypercontroller")]
    assert "walk" in result.summary and result.figures["results"].exists()
    assert any(str(p).endswith(".png") and p.exists() for p in result.figures.values())
    choice = result.manifest["config"]["env_choices"][0]
    assert choice["label"] == "walk" and choice["make"].startswith("object:tests.test_study_api.Walk#")
    assert choice["path"] == "gymnax"
    # resumed after iteration 2 of 10: the estimate announces what is left (8 iterations, 2 seeds, 32 frames)
    assert result.estimate.frames == 2 * 8 * 32 and any(line.startswith("estimate: 512 frames") for line in lines)


@pytest.mark.slow
def test_a_changed_own_environment_is_refused_on_resume(killed_and_resumed, tmp_path):
    _, result, _ = killed_and_resumed
    copy = tmp_path / "copy"
    shutil.copytree(result.directory, copy)
    (copy / R.StudyDir.LOCK).unlink(missing_ok=True)
    changed = (Walk(), WalkParams(goal=2.0))
    with pytest.raises(ValueError, match="environment 'walk' changed since this directory's run"):
        experiments.Study(envs={"walk": changed}, **TINY).run(copy, progress=False)
    with pytest.raises(ValueError, match="already holds a study; resume=True"):
        experiments.Study(envs={"walk": Walk()}, **TINY).run(copy, resume=False, progress=False)


def test_environments_by_name_object_and_factory_resolve_without_compiling():
    plan = experiments.Study(envs=["CartPole-v1", Walk()], methods=["fixed"], seeds=1, iterations=1,
                             env_factories=["w3=tests.test_study_api:make_walk"]).plan()
    assert [(e.label, e.path) for e in plan.envs] == [("CartPole-v1", "gymnax"), ("Walk", "gymnax"), ("w3", "gymnax")]
    assert plan.envs[0].make == "CartPole-v1"
    assert plan.envs[2].make.startswith("factory:tests.test_study_api:make_walk#")
    assert plan.envs[1].make.split("#")[1] == plan.envs[2].make.split("#")[1]  # same environment, same fingerprint
    named = experiments.Study(envs={"mine": make_walk, "far": (Walk(), WalkParams(goal=1.0))}, methods=["fixed"],
                              seeds=1, iterations=1).plan()
    assert [e.label for e in named.envs] == ["mine", "far"]
    assert named.envs[0].make.startswith("object:tests.test_study_api.make_walk#")
    assert named.envs[1].make.startswith("object:tests.test_study_api.Walk#")  # a pair: named by its env's class
    assert named.envs[1].make.split("#")[1] != plan.envs[1].make.split("#")[1]  # other params, other fingerprint
    with pytest.raises(ValueError, match="env: duplicates"):
        experiments.Study(envs=[Walk(), make_walk], methods=["fixed"], seeds=1, iterations=1).plan()


def test_factories_without_envs_replace_the_presets_environments_and_with_envs_join_them():
    """`--env-factory` alone with a preset runs the factory's environment only (the preset's
    tasks and their env_ppo entries dropped, and the run's header says so); with `--envs`, both."""
    alone = experiments.Study("verdict", env_factories=["w=tests.test_study_api:make_walk"])
    assert [e.label for e in alone.plan().envs] == ["w"] and alone.plan().preset.env_ppo == {}
    assert alone._dropped == ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0")
    both = experiments.Study("smoke", envs=["CartPole-v1"], env_factories=["w=tests.test_study_api:make_walk"])
    assert [e.label for e in both.plan().envs] == ["CartPole-v1", "w"] and both._dropped == ()
    assert presets.resolve("smoke", env_factories=["w=tests.test_study_api:make_walk"]).preset.envs == ()


def test_an_unknown_field_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"Study: unknown field\(s\) \['learning_rate'\]; allowed: name, envs"):
        experiments.Study(envs=["CartPole-v1"], methods=["fixed"], learning_rate=1e-3)


@pytest.mark.parametrize("kwargs, words", [
    (dict(envs=["CartPol-v1"]), ["unknown environment 'CartPol-v1'", "gymnax/CartPole-v1"]),
    (dict(envs=[]), ["env must not be empty"]),
    (dict(envs=[object()]), ["object is not an environment"]),
    (dict(envs=[not_an_env]), ["the factory returned int, not an environment"]),
    (dict(env_factories=["tests.test_study_api:nowhere"]), ["'tests.test_study_api:nowhere' cannot be imported"]),
    (dict(env_factories=["tests.test_study_api:not_an_env"]), ["the factory returned int"]),
    (dict(env_factories=["no module"]), ["not of the form [LABEL=]package.module:function"]),
    (dict(envs=["CartPole-v1"], seeds=0), ["seeds must be a positive integer"]),
    (dict(envs=["CartPole-v1"], ppo=dict(num_env=4)), ["unknown PPOConfig field(s) ['num_env']"]),
])
def test_mistakes_raise_the_clis_value_errors_before_any_work(kwargs, words, tmp_path):
    study = experiments.Study(**dict(dict(methods=["fixed"], seeds=1, iterations=1), **kwargs))
    with pytest.raises(ValueError) as caught:
        study.run(tmp_path / "out")
    for w in words:
        assert w in str(caught.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, words", [
    (["--env-factory", "tests.test_study_api:nowhere"], ["cannot be imported", "tests.test_study_api:nowhere"]),
    (["--env-factory", "tests.test_study_api:not_an_env"], ["not_an_env", "the factory returned int"]),
    (["--envs", "tests.test_study_api:make_walk"], ["unknown environment 'tests.test_study_api:make_walk'",
                                                    "looks like a factory", "--env-factory"]),
])
def test_the_cli_refuses_a_bad_factory_and_never_imports_from_envs(args, words, tmp_path, capsys):
    code = cli.main(["run", "--preset", "smoke", "--methods", "fixed", "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    for w in words:
        assert w in err, err
    assert not (tmp_path / "o").exists()


def test_a_study_file_names_factories_in_their_own_field_and_round_trips():
    text = 'env_factories = ["walk=tests.test_study_api:make_walk"]\nmethods = ["fixed"]\nseeds = 1\niterations = 1\n'
    preset = studyfile.loads(text)
    assert preset.envs == () and preset.env_factories == ("walk=tests.test_study_api:make_walk",)
    assert studyfile.loads(studyfile.dumps(preset)) == preset
    plan = presets.resolve(preset, seeds=1, iterations=1)
    assert plan.envs[0].label == "walk" and "imports and runs your code" in plan.envs[0].why
    assert tuple(plan.to_dict()["env_factories"]) == preset.env_factories  # recorded in the manifest


def test_the_estimate_counts_frames_and_announces_the_small_default():
    preset = studyfile.loads('envs = ["CartPole-v1"]\nmethods = ["fixed", "random"]\n')
    assert dict(preset.ppo) == presets.SMALL_PPO
    plan = presets.resolve(preset, seeds=3, iterations=50)
    guess = estimate.estimate(plan, speed=1.0, machine=1.0)
    assert guess.frames == 2 * 3 * 50 * 6000 and guess.groups == 2  # the paper's space: batches up to 6000
    assert "ppo: the small default PPO" in guess.describe()
    assert estimate.estimate(plan, finished={("CartPole-v1", "fixed")}, speed=1.0).frames == guess.frames // 2
    paper = presets.resolve(dataclasses.replace(preset, ppo={}), seeds=3, iterations=50)
    slower = estimate.estimate(paper, speed=1.0, machine=1.0)
    assert slower.seconds > 2 * guess.seconds and "small PPO" not in slower.describe()


def test_the_estimate_is_the_seconds_spent_and_its_parts_at_this_machines_contention():
    """seconds = spent + machine x (serial x (3/4 c + 1/4) + parallel x (c / 2 + 1/4)), the
    parts summed over the unit groups (the evaluation program and a tuner's timing programs
    charged once per process), the figures when plotting, STARTUP when nothing was spent yet."""
    plan = presets.resolve(studyfile.loads('envs = ["CartPole-v1"]\nmethods = ["fixed", "random"]\n'), seeds=3,
                           iterations=50)
    fixed, rand = (estimate.group_parts(plan, plan.envs[0], [m], first=(m == "fixed", frozenset({"static"})
                                                                         if m == "random" else frozenset()))
                   for m in ("fixed", "random"))
    serial = fixed["serial"] + rand["serial"] + estimate.FIGURES[0] + 2 * estimate.FIGURES[1]
    for c, m in ((1.0, 1.0), (3.0, 1.0), (2.5, 0.5)):
        guess = estimate.estimate(plan, speed=c, machine=m, spent=7.0)
        want = 7.0 + m * (serial * (0.75 * c + 0.25) + (fixed["parallel"] + rand["parallel"]) * (c / 2 + 0.25))
        assert guess.seconds == pytest.approx(want) and guess.spent == 7.0 and (guess.speed, guess.machine) == (c, m)
        assert "7 s spent" in guess.describe()
    without = estimate.estimate(plan, speed=1.0, machine=1.0, spent=7.0, plot=False)
    assert without.seconds == pytest.approx(want_at_1 := 7.0 + serial + (fixed["parallel"] + rand["parallel"]) * 0.75
                                            - estimate.FIGURES[0] - 2 * estimate.FIGURES[1])
    assert estimate.estimate(plan, speed=1.0, machine=1.0, plot=False).seconds == pytest.approx(
        want_at_1 - 7.0 + estimate.STARTUP)
    assert rand["serial"] < fixed["serial"] + estimate.TUNERS["simple"][1] + estimate.SEGMENT[False]  # eval shared
    longer = estimate.group_parts(presets.resolve(plan.preset, iterations=100), plan.envs[0], ["fixed"])
    assert longer["frames"] == 2 * fixed["frames"] and 1.9 < longer["parallel"] / fixed["parallel"] <= 2.0


@pytest.mark.slow
def test_the_own_environment_page_runs_to_figures_and_resumes(tmp_path, monkeypatch, capsys):
    """docs/own-environment.md as written (its tiny sizes), in a temporary directory; then
    the same study again: every unit is skipped, nothing is compiled."""
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(python_block(OWN_STUDY), "docs/own-environment.md", "exec"), namespace)  # noqa: S102
    result = namespace["result"]
    assert sorted(result.units) == [("thermostat", m) for m in ("fixed", "hypercontroller", "random")]
    assert result.directory == R.StudyDir("runs/thermostat").path and result.estimate.groups == 1  # fused
    assert all(path.exists() for path in result.figures.values())
    frames = namespace["frames"]  # the DataFrames of the study directory, as experiments.load gives them
    assert set(frames.iterations["method"]) == {"fixed", "hypercontroller", "random"}
    assert len(frames.iterations) == 3 * 2 * 20 and frames.iterations["hp_batch_size"].dtype.kind == "i"
    assert set(frames.evaluations["iteration"]) <= set(frames.iterations["iteration"]) and len(frames.lineage) == 0
    out = capsys.readouterr()
    assert "thermostat" in out.out and "'results'" in out.out
    assert "estimate: " in out.err and "done thermostat / fixed" in out.err
    again = namespace["study"].run("runs/thermostat", progress=False, plot=False)
    assert again.units == result.units and again.estimate.groups == 0
    assert "skip thermostat / fixed: already finished" in capsys.readouterr().err


def test_an_environment_object_given_again_keeps_its_build_while_among_the_recent_ones():
    """The same object given again is the same built environment (its units' kept programs
    apply); once GIVEN_KEPT other objects were given after it, it is built anew (nothing of it
    is held past that)."""
    walk = Walk()
    first = own_envs.built(own_envs.from_object(walk).make)
    assert own_envs.built(own_envs.from_object(walk).make) is first
    for _ in range(own_envs.GIVEN_KEPT):
        own_envs.from_object(Walk())
    assert id(walk) not in own_envs._GIVEN
    assert own_envs.built(own_envs.from_object(walk).make) is not first


def test_a_factory_reference_named_again_keeps_its_build_while_it_names_the_same_function(monkeypatch):
    """A study file rerun in one process builds its factory's environment once (its units'
    kept programs apply); a changed function under the same reference (a reloaded module) is
    called again."""
    first = own_envs.built(own_envs.from_factory("w=tests.test_study_api:make_walk").make)
    assert own_envs.built(own_envs.from_factory("other=tests.test_study_api:make_walk").make) is first
    monkeypatch.setattr(sys.modules[__name__], "make_walk", lambda: Walk())
    changed = own_envs.built(own_envs.from_factory("w=tests.test_study_api:make_walk").make)
    assert changed is not first and isinstance(changed, type(first))


def test_distinct_objects_under_distinct_labels_never_share_a_build():
    """Issue 41: two objects of one class with other attributes (and two lambdas) had one
    fingerprint, and the process kept one built environment per fingerprint: every label
    trained the last one given. The fingerprint now covers what an object holds; where it
    cannot (an opaque attribute) the label is part of it."""
    objects = {"slow": DriftWalk(0.01), "fast": DriftWalk(0.5), "l_slow": lambda: DriftWalk(0.01),
               "l_fast": lambda: DriftWalk(0.5), "d0": Dice(0), "d1": Dice(1)}
    plan = experiments.Study(envs=objects, methods=["fixed"], seeds=1, iterations=1).plan()
    makes = {e.label: e.make for e in plan.envs}
    assert len(set(makes.values())) == len(makes), makes
    assert len({id(build.environment(m)) for m in makes.values()}) == len(makes)
    fingerprint = {label: make.split("#")[1] for label, make in makes.items()}
    assert fingerprint["slow"] == fingerprint["l_slow"]  # the same environment, made two ways
    again = experiments.Study(envs={"slow": DriftWalk(0.01), "d0": Dice(0)}, methods=["fixed"], seeds=1,
                              iterations=1).plan()
    assert [e.make for e in again.envs] == [makes["slow"], makes["d0"]]  # equal objects, equal identities


def test_a_rerun_study_uses_its_own_objects_even_where_they_cannot_be_told_apart():
    """Issue 41, the notebook sequence with objects the fingerprint cannot read: study A, then
    study B of the same class and label, then A again: A's plan, check and run use A's object."""
    a = experiments.Study(envs={"d": Dice(0)}, methods=["fixed"], seeds=1, iterations=1)
    b = experiments.Study(envs={"d": Dice(1)}, methods=["fixed"], seeds=1, iterations=1)
    env_a = build.environment(a.plan().envs[0].make)
    env_b = build.environment(b.plan().envs[0].make)
    assert a.plan().envs[0].make == b.plan().envs[0].make and env_a is not env_b
    assert build.environment(a.plan().envs[0].make) is env_a
    assert build.environment(b.plan().envs[0].make) is env_b


@pytest.mark.slow
def test_two_thermostats_train_each_its_own_and_a_rerun_study_keeps_its_own(tmp_path):
    """Issue 41 end to end: Study(envs={"slow": ..., "fast": ...}) of one class trained both
    labels on the fast one; study B (other arguments, same label) run after study A made A's
    rerun train B's environment. Two seeds, four iterations; the training rewards of every
    iteration compared (a label's unit on the fast walker equals B's, on the slow one not).
    TINY's sizes: the slow walker (DriftWalk(0.0), the program of Walk()) then comes from the
    persistent cache of `killed_and_resumed`'s runs; the fast one compiles its own."""
    sizes = dict(TINY, iterations=4)

    def rewards(study, out):
        return {u.meta["env"]: u.train_reward for u in R.StudyDir(study.run(out, progress=False, plot=False).directory)
                .units()}

    a = experiments.Study(envs={"slow": DriftWalk(0.0), "fast": DriftWalk(1.0)}, **sizes)
    first = rewards(a, tmp_path / "a")
    b = experiments.Study(envs={"slow": DriftWalk(1.0)}, **sizes)  # A's fast walker under A's slow label
    other = rewards(b, tmp_path / "b")["slow"]
    assert np.all(np.isfinite(other)) and not np.allclose(other, first["slow"])  # A's slow label ran the slow walker
    rerun = rewards(a, tmp_path / "a2")
    for label in ("slow", "fast"):
        np.testing.assert_array_equal(rerun[label], first[label])  # A again: A's walkers, not B's
