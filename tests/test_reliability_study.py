"""Issue 17, classes 2 and 3: no work lost on valid input (population runs shorter than one
tuning interval, one failing unit among good ones, two labels sharing a unit file), and
study files read strictly (types, empty lists, names, bounded reads, nesting) with
every documented omission filled by its default; and, of class 5, a truncated checkpoint of
a real run (the population run of this file; the other class-5 checks:
tests/test_reliability_paths.py)."""
from __future__ import annotations

import os
import pathlib
import time

import gymnasium as gym
import numpy as np
import pytest

from experiments import cli
from experiments.study import engine, presets, studyfile
from experiments.study import store as R
from experiments.study.checkpoints import Checkpoint
from tests.cli_runs import tiny_study

MINIMAL = 'envs = ["CartPole-v1"]\nmethods = ["fixed"]\n'
BASE = MINIMAL + "seeds = 1\niterations = 2\n"


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = cli.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(text_or_path, tmp_path, capsys, *words, extra=()):
    """Run `hcjax run --config` on a study file: exit 2, every word in the message, nothing written."""
    if isinstance(text_or_path, str):
        path = tmp_path / "study.toml"
        path.write_text(text_or_path)
    else:
        path = text_or_path
    out = tmp_path / "out"
    t0 = time.perf_counter()
    code, _, err = run_cli(["run", "--config", str(path), "--out", str(out), "--no-progress", *extra], capsys)
    assert code == 2, err
    for w in words:
        assert w in err, err
    assert not out.exists(), "refused before any work: the study directory is not even created"
    assert time.perf_counter() - t0 < 60
    return err


# ---- class 3: study files --------------------------------------------------------------------


def test_the_smallest_documented_study_file_takes_every_default(tmp_path):
    path = tmp_path / "mini.toml"
    path.write_text(MINIMAL)
    preset = studyfile.load(path)
    plan = presets.resolve(preset, seeds=2, iterations=3)
    p = plan.preset
    assert (p.name, p.seeds, p.iterations, p.eval_every, p.tune_every) == ("mini", 2, 3, 10, 5)
    assert (p.fast_compile, p.fuse_methods, dict(p.tuner), p.reductions) == (False, False, {}, ())
    assert dict(p.ppo) == presets.SMALL_PPO  # no [ppo] table: the small PPO, announced in the estimate line
    assert p.space == presets.paper_space()  # the documented default: the paper's four


def test_a_study_file_without_seeds_names_the_field_and_the_flag(tmp_path, capsys):
    refused(MINIMAL + "iterations = 2\n", tmp_path, capsys, "seeds is not set", "--seeds")
    refused(MINIMAL, tmp_path, capsys, "iterations is not set", "--iterations", extra=["--seeds", "1"])


def test_a_default_name_from_an_odd_file_stem_is_made_safe(tmp_path):
    path = tmp_path / "my study (v2).toml"
    path.write_text(BASE)
    assert studyfile.load(path).name == "my_study__v2_"
    path = tmp_path / "..toml"
    path.write_text(BASE)
    assert presets.resolve(studyfile.load(path)).preset.name == "study"


@pytest.mark.parametrize("line, words", [
    ('fast_compile = "no"', ["'fast_compile'", "true or false"]),
    ("fast_compile = 0", ["'fast_compile'", "true or false"]),
    ('fuse_methods = "true"', ["'fuse_methods'", "true or false"]),
    ('eval_every = "10"', ["'eval_every'", "integer"]),
    ("tune_every = 2.0", ["'tune_every'", "integer"]),
    ("tune_every = true", ["'tune_every'", "integer"]),
    ('name = ""', ["'name'", "letters, digits"]),
    ("name = 5", ["'name'", "letters, digits"]),
    ('name = "/some/dir"', ["'name'", "'/some/dir'"]),
    ('name = "../../x"', ["'name'", "'../../x'"]),
    ('name = "a/b"', ["'name'"]),
    ('name = ".hidden"', ["'name'"]),
    ("name = true", ["'name'"]),
    ("description = 3", ["'description' must be a string"]),
    ("space = []", ["'space' must not be empty"]),
    ("reductions = [1]", ["'reductions' must be a list of strings"]),
    ('ppo = "fast"', ["'ppo' must be a table"]),
    ('[paths."CartPole-v1"]\nmake = "CartPole-v1"\nwhy = 3', ["paths.CartPole-v1", "'why'"]),
    ("[[space]]\nname = 5\nlow = 0.0\nhigh = 0.1", ["space"]),
])
def test_strict_types_in_a_study_file(line, words, tmp_path, capsys):
    refused(BASE + line + "\n", tmp_path, capsys, *words)


@pytest.mark.parametrize("field", ["envs", "methods"])
def test_empty_name_lists_are_refused(field, tmp_path, capsys):
    text = BASE.replace('["CartPole-v1"]' if field == "envs" else '["fixed"]', "[]")
    refused(text, tmp_path, capsys, f"'{field}' must not be empty")
    refused(text.replace("[]", '"fixed"' if field == "methods" else '"CartPole-v1"'), tmp_path, capsys,
            f"'{field}' must be a list")


def test_seeds_as_a_string_is_a_usage_error(tmp_path, capsys):
    refused(BASE.replace("seeds = 1", 'seeds = "2"'), tmp_path, capsys, "'seeds'", "integer")


@pytest.mark.parametrize("depth", [50, 5000])
def test_deeply_nested_arrays_are_refused(depth, tmp_path, capsys):
    refused(BASE + "reductions = " + "[" * depth + "]" * depth + "\n", tmp_path, capsys, "nested too deeply")


def test_deeply_nested_tables_are_refused(tmp_path, capsys):
    refused(BASE + "[tuner." + ".".join(["a"] * 20) + "]\nx = 1\n", tmp_path, capsys, "nested too deeply")


def test_reads_are_bounded(tmp_path, capsys):
    refused(pathlib.Path("/dev/zero"), tmp_path, capsys, "/dev/zero", "not a regular file")
    refused(tmp_path, tmp_path, capsys, "not a regular file")
    fifo = tmp_path / "study.fifo"
    os.mkfifo(fifo)
    refused(fifo, tmp_path, capsys, "not a regular file")  # opening it would wait for a writer
    big = tmp_path / "big.toml"
    big.write_text(BASE + "# " + "x" * (2 << 20) + "\n")
    refused(big, tmp_path, capsys, "larger than 1048576 bytes")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"name = \"\xff\xfe\"\n" + BASE.encode())
    refused(binary, tmp_path, capsys, "not UTF-8")


def test_a_preset_whose_name_is_a_path_is_refused():
    p = presets.PRESETS["smoke"]
    for bad in ("", "../x", "/tmp/x", 5):
        with pytest.raises(ValueError, match="name must be"):
            presets.resolve(presets.dataclasses.replace(p, name=bad))


def test_study_files_still_round_trip_with_empty_optional_lists():
    p = presets.dataclasses.replace(presets.PRESETS["smoke"], reductions=(), description="")
    assert studyfile.loads(studyfile.dumps(p), default_name="x") == p


# ---- class 2: unit names ---------------------------------------------------------------------

COLLIDING = BASE.replace('envs = ["CartPole-v1"]', 'envs = ["a/b", "a_b"]') + '''
[paths."a/b"]
make = "CartPole-v1"
why = "one"

[paths."a_b"]
make = "Acrobot-v1"
why = "two"
'''


def test_two_labels_sharing_a_unit_file_are_refused_before_any_work(tmp_path, capsys):
    refused(COLLIDING, tmp_path, capsys, "'a/b'", "'a_b'", "a_b__METHOD.npz")
    case = COLLIDING.replace('"a_b"', '"A/B"')
    refused(case, tmp_path, capsys, "'a/b'", "'A/B'")


def test_a_label_colliding_with_one_already_in_the_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    store = R.StudyDir(out)
    plan = presets.resolve(studyfile.loads(COLLIDING.replace('"a/b", "a_b"', '"a/b"')))
    store.path.mkdir()
    engine.prepare(plan, store, log=lambda msg: None)
    other = presets.resolve(studyfile.loads(COLLIDING.replace('"a/b", "a_b"', '"a_b"')))
    with pytest.raises(ValueError, match="'a/b' and 'a_b'"):
        engine.prepare(other, store, log=lambda msg: None)


def test_unit_names_are_one_safe_component_and_unchanged_for_plain_labels():
    assert R.unit_name("CartPole-v1", "fixed") == "CartPole-v1__fixed"
    assert R.unit_name("gymnax/CartPole-v1", "pbt") == "gymnax_CartPole-v1__pbt"
    assert R.unit_name("e", "pbt/../../../x") == "e__pbt_.._.._.._x"
    long = R.unit_name("x" * 300, "fixed")
    assert len(long) < 100 and long != R.unit_name("x" * 301, "fixed")
    assert "/" not in R.unit_name("../../etc", "fixed")


# ---- class 2: population runs shorter than one tuning interval --------------------------------


# pbt on the tiny CartPole study of tests/cli_runs.py, 2 iterations, deciding every 5: shorter than one tuning
# interval; the tests below run this same configuration, so that its programs are compiled once in the process
SHORT_POPULATION = tiny_study(["pbt"], seeds=2, iterations=2, eval_every=2, tune_every=5)


def short_population_run(tmp_path) -> list[str]:
    """`hcjax run` arguments of SHORT_POPULATION into tmp_path/out."""
    config = tmp_path / "population.toml"
    config.write_text(SHORT_POPULATION)
    return ["run", "--config", str(config), "--out", str(tmp_path / "out"), "--no-progress", "--no-plot"]


@pytest.mark.slow
def test_a_population_run_shorter_than_one_tuning_interval_writes_a_valid_unit(tmp_path, capsys):
    out = tmp_path / "out"
    args = short_population_run(tmp_path)
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    (unit,) = R.StudyDir(out).units()
    assert unit.meta["method"] == "pbt" and unit.train_reward.shape == (2, 2)
    assert unit.lineage_iteration.shape == (0,) and unit.lineage_parent.shape == (2, 0)
    assert unit.lineage_objective.shape == (2, 0)
    assert not (out / R.StudyDir.CHECKPOINTS).exists()
    code, _, err = run_cli(args, capsys)
    assert code == 0 and "skip CartPole-v1 / pbt" in err


# ---- class 2: one failing unit among good ones ----------------------------------------------

RAISE = {"on": True}


class Flaky(gym.Env):
    """Three observations, two actions, episodes of 8 steps; raises on its 5th step while RAISE is on."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)
    steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        Flaky.steps += 1
        if RAISE["on"] and Flaky.steps >= 5:
            raise RuntimeError("the simulator lost its contact solver")
        return np.full(3, 0.1 * self.t, np.float32), 1.0, self.t >= 8, False, {}


class Steady(Flaky):
    def step(self, action):
        self.t += 1
        return np.full(3, -0.1 * self.t, np.float32), float(action), self.t >= 8, False, {}


gym.register("RelStudyFlaky-v0", entry_point=Flaky)
gym.register("RelStudySteady-v0", entry_point=Steady)


@pytest.mark.slow
def test_one_failing_unit_is_named_and_the_others_still_run(tmp_path, capsys):
    out = tmp_path / "out"
    config = tmp_path / "study.toml"  # the tiny PPO of tests/cli_runs.py on the two host envs
    config.write_text(tiny_study(["fixed"], seeds=1, iterations=2, eval_every=2,
                                     envs=["gymnasium/RelStudyFlaky-v0", "gymnasium/RelStudySteady-v0"]))
    args = ["run", "--config", str(config), "--out", str(out), "--no-progress", "--no-plot"]
    RAISE["on"] = True
    code, stdout, err = run_cli(args, capsys)
    assert code == 1, err
    store = R.StudyDir(out)
    assert not store.unit_path("gymnasium/RelStudyFlaky-v0", "fixed").exists()
    good = store.unit_path("gymnasium/RelStudySteady-v0", "fixed")
    assert good.exists(), "the unit after the failing one ran"
    cause = "gymnasium/RelStudyFlaky-v0 / fixed: RuntimeError: the simulator lost its contact solver"
    assert f"FAILED {cause}" in err and "1 of 2 units failed" in err and f"  {cause}" in err
    assert "retry only the failed units" in err
    assert "hcjax: failed: RuntimeError: the simulator lost its contact solver at " in err and "in step" in err
    assert f"full traceback: {store.log_path}" in err
    log = store.log_path.read_text()
    assert f"FAILED {cause}" in log and "Traceback" in log and "in step" in log
    before = good.read_bytes()
    RAISE["on"] = False  # the environment is fixed: the rerun retries only the failed unit
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    assert "skip gymnasium/RelStudySteady-v0 / fixed" in err and "done gymnasium/RelStudyFlaky-v0 / fixed" in err
    assert good.read_bytes() == before
    assert {u.meta["env"] for u in store.units()} == {"gymnasium/RelStudyFlaky-v0", "gymnasium/RelStudySteady-v0"}


@pytest.mark.slow
def test_a_rerun_after_a_crash_resumes_then_starts_clean_never_looping(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    args = short_population_run(tmp_path)
    store = R.StudyDir(out)
    checkpoint = store.checkpoint_path("CartPole-v1", "pbt")

    def crash(*args, **kwargs):  # a failure after the training, as the KeyError of issue 17 was
        raise KeyError("lineage_iteration")

    monkeypatch.setattr(engine, "measure_population_time", crash)
    code, _, err = run_cli(args, capsys)
    assert code == 1 and "FAILED CartPole-v1 / pbt: KeyError" in err
    assert checkpoint.exists(), "kept: the next run resumes from it"
    code, _, err = run_cli(args, capsys)
    assert code == 1 and "resume CartPole-v1 / pbt from its checkpoint after iteration 2" in err
    assert "the next run starts this unit over" in err and not checkpoint.exists()
    monkeypatch.undo()
    code, _, err = run_cli(args, capsys)
    assert code == 0 and "resume" not in err and "done CartPole-v1 / pbt" in err
    (unit,) = store.units()
    assert unit.train_reward.shape == (2, 2)


@pytest.mark.slow
def test_a_truncated_checkpoint_of_a_real_run_is_recomputed_in_full(tmp_path, capsys, monkeypatch):
    """The issue's reproduction end to end: a real checkpoint (kept by a run whose clean-up
    is switched off) with its per-iteration arrays cut to 1 of the 2 iterations its `done`
    says; the rerun resumed from it and wrote a unit 1 iteration short (exit 0). The run is
    SHORT_POPULATION's, whose programs the tests above compiled."""
    out = tmp_path / "out"
    store = R.StudyDir(out)
    args = short_population_run(tmp_path)
    with monkeypatch.context() as m:
        m.setattr(Checkpoint, "remove", lambda self: None)
        code, _, err = run_cli(args, capsys)
    assert code == 0, err
    path = store.checkpoint_path("CartPole-v1", "pbt")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    assert int(arrays["record/done"]) == 2
    arrays.update({k: v[:, :1] for k, v in arrays.items() if k.startswith("record/metric/")})
    store.save_checkpoint("CartPole-v1", "pbt", arrays)
    store.unit_path("CartPole-v1", "pbt").unlink()
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    assert f"{path}: inconsistent checkpoint" in err and "starts over" in err
    unit = R.load_unit(store.unit_path("CartPole-v1", "pbt"))
    assert unit.train_reward.shape == (2, 2) and unit.eval_iteration.tolist() == [2]
