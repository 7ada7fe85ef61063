"""Studies as data: study files (TOML) <-> presets, `--config`, `--space`, `--envs` by registry name."""
from __future__ import annotations

import pathlib
import time

import numpy as np
import pytest

from experiments import cli
from experiments.study import presets, studyfile
from experiments.study import store as R
from experiments.study.checks import check
from tests.compilations import compilations

STUDY = '''
name = "tiny"
envs = ["gymnax/CartPole-v1"]
methods = ["fixed", "random"]
seeds = 1
iterations = 2
fast_compile = true

[ppo]
num_envs = 4
hidden_sizes = [16]
update_epochs = 1
num_minibatches = 2
objective = "return_change"
eval_steps = 50

[[space]]
name = "learning_rate"
low = 1e-4
high = 1e-2
scale = "log"
default = 1e-3

[[space]]
name = "ent_coef"
low = 0.0
high = 0.05

[[space]]
name = "batch_size"
low = 16
high = 32
integer = true
'''


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_every_preset_round_trips_through_a_study_file(name, capsys):
    assert cli.main(["presets", "--toml", name]) == 0
    text = capsys.readouterr().out
    assert studyfile.loads(text, default_name="other") == presets.PRESETS[name]
    plan = presets.resolve(studyfile.loads(text))
    assert plan.to_dict() == presets.resolve(name).to_dict()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(the output directory, {method: unit}) of STUDY with hypercontroller added, its three
    methods in one program (fuse_methods)."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.toml"
    path.write_text(STUDY.replace('methods = ["fixed", "random"]', 'methods = ["fixed", "random", "hypercontroller"]')
                    .replace("fast_compile = true", "fast_compile = true\nfuse_methods = true"))
    out = path.parent / "out"
    assert cli.main(["run", "--config", str(path), "--out", str(out), "--no-plot", "--no-progress"]) == 0
    return out, {u.meta["method"]: u for u in R.StudyDir(out).units()}


@pytest.mark.slow
def test_a_study_file_runs_with_its_own_space(tiny):
    out, units = tiny
    assert set(units) == {"fixed", "random", "hypercontroller"}
    for u in units.values():
        assert u.meta["hparam_names"] == ["learning_rate", "ent_coef", "batch_size"]
        assert u.hparams.shape == (1, 2, 3) and u.meta["env"] == "gymnax/CartPole-v1"
    np.testing.assert_allclose(units["fixed"].hparams[0, :, :2], [[1e-3, 0.025]] * 2, rtol=1e-6)
    manifest = R.StudyDir(out).read_manifest()
    assert manifest["config"]["name"] == "tiny" and manifest["config"]["env_choices"][0]["path"] == "gymnax"
    assert [h["name"] for h in manifest["study"]["space"]] == ["learning_rate", "ent_coef", "batch_size"]


@pytest.mark.parametrize("edit, words", [
    (lambda s: 'mystery = 3\n' + s, ["unknown key(s) ['mystery']", "allowed: name, envs"]),
    (lambda s: s.replace('envs = ["gymnax/CartPole-v1"]', ''), ["env must not be empty", "env_factories"]),
    (lambda s: s.replace('envs = ["gymnax/CartPole-v1"]', 'envs = ["CartPol-v1"]'),
     ["unknown environment 'CartPol-v1'", "gymnax/CartPole-v1"]),
    (lambda s: s.replace('num_envs = 4', 'num_env = 4'), ["unknown PPOConfig field(s) ['num_env']", "num_envs"]),
    (lambda s: s.replace('name = "ent_coef"', 'name = "num_envs"'), ["'num_envs' is a static PPOConfig field"]),
    (lambda s: s.replace('high = 0.05', 'high = 0.05\nstep = 2'), ["space[1]: unknown key(s) ['step']"]),
    (lambda s: s.replace('low = 1e-4', 'low = -1.0'), ["'learning_rate'", "log", "low > 0"]),
    (lambda s: s + '\n[tuner.random]\nbuffer = 3\n', ["unknown option", "buffer"]),
    (lambda s: s + '\n[tuner.bayesopt]\nx = 1\n', ["unknown method(s) ['bayesopt']"]),
    (lambda s: s.replace('seeds = 1', 'seeds = 0'), ["seeds must be a positive integer"]),
    (lambda s: s.replace('objective = "return_change"', 'objective = "loss"'), ["PPOConfig.objective"]),
    (lambda s: s.replace('[ppo]', '[ppo'), ["not valid TOML"]),
])
def test_a_bad_study_file_is_a_usage_error_before_any_work(edit, words, tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(edit(STUDY))
    t0 = time.perf_counter()
    code = cli.main(["run", "--config", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    for w in words:
        assert w in err, err
    assert f"--config {path}: " in err
    assert not (tmp_path / "out" / "units").exists()
    assert time.perf_counter() - t0 < 60


def test_space_flag_parses_and_validates():
    assert cli.parse_hyperparameter("ent_coef=0:0.1") == {"name": "ent_coef", "low": 0.0, "high": 0.1}
    assert cli.parse_hyperparameter("learning_rate=1e-5:1e-3:log:default=3e-4") == {
        "name": "learning_rate", "low": 1e-5, "high": 1e-3, "scale": "log", "default": 3e-4}
    assert cli.parse_hyperparameter("batch_size=64:512:int")["integer"] is True
    for bad in ("ent_coef", "ent_coef=0", "ent_coef=a:b", "ent_coef=0:1:cubic", "=0:1"):
        with pytest.raises(ValueError, match="--space"):
            cli.parse_hyperparameter(bad)


def test_space_and_envs_flags_change_a_preset(capsys):
    plan = presets.resolve("smoke", envs=["brax/hopper", "Acrobot-v1"],
                           space=[cli.parse_hyperparameter("gamma=0.9:0.999")])
    assert [(e.label, e.path) for e in plan.envs] == [("brax/hopper", "brax"), ("Acrobot-v1", "gymnax")]
    assert plan.space.names == ("gamma",)
    code = cli.main(["run", "--space", "hidden_sizes=1:2", "--out", "/tmp/never-created-hcjax"])
    assert code == 2 and "'hidden_sizes' is a static PPOConfig field" in capsys.readouterr().err


@pytest.mark.slow
def test_fused_methods_give_each_method_its_own_numbers(tiny, tmp_path, capsys):
    """fuse_methods runs every method of an environment in one program (a stacked tuner,
    compiled once: `tiny`); every unit equals the same method run alone, bit for bit. The
    methods run alone share one evaluation program (`programs.evaluation_programs`)."""
    path = tmp_path / "alone.toml"
    path.write_text(STUDY.replace('methods = ["fixed", "random"]', 'methods = ["hypercontroller", "random"]'))
    out = tmp_path / "alone"
    with compilations() as count:
        assert cli.main(["run", "--config", str(path), "--out", str(out), "--no-plot", "--no-progress"]) == 0
    assert count["names"].count("jit(evaluate_one)") == 1, count["names"]  # two units, one evaluation program
    units = {"true": tiny[1], "false": {u.meta["method"]: u for u in R.StudyDir(out).units()}}
    capsys.readouterr()
    assert units["true"]["random"].meta["fused_with"] == ["fixed", "random", "hypercontroller"]
    assert "fused_with" not in units["false"]["random"].meta
    for method in ("hypercontroller", "random"):
        for name in R.SEED_METRICS + ("eval_reward",):
            np.testing.assert_array_equal(getattr(units["true"][method], name), getattr(units["false"][method], name),
                                          err_msg=f"{method} {name}")


@pytest.mark.parametrize("path", sorted((pathlib.Path(__file__).resolve().parents[1] / "studies").rglob("*.toml")),
                         ids=lambda p: p.name)
@pytest.mark.slow
def test_every_committed_study_file_resolves(path):
    plan = presets.resolve(studyfile.load(path))
    check(plan)  # PPO and tuner options, the space, memory: everything but running
