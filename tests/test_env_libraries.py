"""The JAX environment libraries by name (jumanji/, navix/, xminigrid/, pgx/; craftax/ in
tests/test_env_craftax.py), each in a tiny study (skipped, saying why, only where the library is
not installed: the dev extra installs them on Python 3.12); a missing library named by its
extra; pytree observations flattened; the mistakes of a hand-written adapter (no auto-reset, a
multi-discrete action) refused before any work; the estimate charging a probed environment's
cost. (`hcjax replay` of a factory study in a fresh process: tests/test_study_cli.py.)"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import experiments
from agents import envs
from agents.envs import backend
from experiments import cli
from experiments.study import build, estimate
from experiments.study.store import StudyDir
from tests import tiny_env
from tests.cli_runs import tiny_study
from tests.test_readme import JUMANJI_BY_NAME, LEVERS_ADAPTER, OWN_OBJECTS, XLAND_RULESET, run_block

TINY_PPO = dict(num_envs=2, hidden_sizes=[8], update_epochs=1, num_minibatches=2, batch_size=8, eval_steps=8)
SPACE = [dict(name="learning_rate", low=1e-4, high=1e-2, scale="log")]


def library(name: str) -> None:
    """Skip, saying why, when the library `name` is not installed."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed: the {name!r} extra (pip install \"hcjax[{name}]\"; in dev, on "
                    f"Python 3.12+ only)")


def tiny(envs_, out):
    """A one-unit study per environment: fixed, one seed, two iterations of 8 frames."""
    study = experiments.Study(envs=envs_, methods=["fixed"], seeds=1, iterations=2, eval_every=2, fast_compile=True,
                              space=SPACE, ppo=TINY_PPO)
    lines = []
    return study.run(out, progress=False, plot=False, log=lines.append), lines


def check_ran(result, label: str, lib: str) -> None:
    assert (label, "fixed") in result.units
    choice = next(e for e in result.manifest["config"]["env_choices"] if e["label"] == label)
    assert choice["path"] == lib
    assert result.manifest["packages"][lib] == importlib.metadata.version(lib)  # the version that ran
    unit = next(u for u in StudyDir(result.directory).units() if u.meta["env"] == label)
    assert unit.frames.sum() == 2 * 8 and np.all(np.isfinite(unit.eval_reward))


def run_page_block(marker: str, directory) -> dict:
    """docs/environment-libraries.md's python block holding `marker`, run as written in `directory`
    (its study writes under runs/ there); its namespace, a `result`'s directory made absolute."""
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        namespace = run_block(marker)
    finally:
        os.chdir(cwd)
    if "result" in namespace:
        namespace["result"].directory = Path(directory) / namespace["result"].directory
    return namespace


@pytest.mark.slow
@pytest.mark.parametrize("name", ["jumanji/Snake-v1", "navix/Navix-Empty-5x5-v0", "xminigrid/MiniGrid-Empty-5x5",
                                  "pgx/2048"])
def test_a_tiny_study_of_each_library_by_name(name, tmp_path):
    """jumanji's study is the page's block, as written; the others the same study by name."""
    lib = name.split("/")[0]
    library(lib)
    if lib == "jumanji":
        result, lines = run_page_block(JUMANJI_BY_NAME, tmp_path)["result"], None
    else:
        result, lines = tiny([name], tmp_path / "study")
    check_ran(result, name, lib)
    assert lines is None or any(line.startswith("hcjax run: study study,") for line in lines)  # named by its name


@pytest.mark.slow
def test_each_librarys_own_object_is_taken_as_it_is():
    """docs/environment-libraries.md's objects of jumanji, NAVIX, XLand-MiniGrid and Pgx, as
    written: each made and traced in one study's plan, its backend named by its library."""
    for lib in ("jumanji", "navix", "xminigrid", "pgx"):
        library(lib)
    plan = run_block(OWN_OBJECTS)["plan"]
    assert [(e.label, e.path) for e in plan.envs] == [("snake", "jumanji"), ("empty", "navix"),
                                                      ("minigrid", "xminigrid"), ("2048", "pgx")]


@pytest.mark.slow
def test_an_xland_task_takes_a_ruleset_and_is_refused_without_one():
    library("xminigrid")
    namespace = run_block(XLAND_RULESET)
    with_ruleset = envs.make(namespace["make_hold_ball"]())
    assert with_ruleset.obs_size == namespace["env"].obs_size and with_ruleset.backend == "xminigrid"
    for made in (lambda: envs.make("xminigrid/XLand-MiniGrid-R1-9x9"),
                 lambda: experiments.Study(envs=["xminigrid/XLand-MiniGrid-R1-9x9"], methods=["fixed"], seeds=1,
                                           iterations=1).check()):
        with pytest.raises(ValueError, match=r"needs a ruleset.*Give ruleset="):
            made()


class Imitation:
    """gymnax's interface without its base class (as craftax's environments): CartPole inside,
    stepping in gymnax 0.0.x's five-value form, a dict observation."""

    def __init__(self):
        self.inner, self.default_params = envs.make("CartPole-v1"), None

    def reset(self, key, params=None):
        state, obs = self.inner.reset(key)
        return {"cart": obs[:2], "pole": obs[2:]}, state

    def step(self, key, state, action, params=None):
        state, obs, reward, done = self.inner.step(key, state, action)
        return {"cart": obs[:2], "pole": obs[2:]}, state, reward, done, {}

    def action_space(self, params=None):
        return type("Discrete", (), {"n": 2, "shape": ()})()

    def observation_space(self, params=None):
        return None


def test_gymnax_interface_without_the_base_class_and_a_dict_observation():
    env = envs.make(Imitation())
    assert (env.name, env.obs_size, env.action_size, env.backend) == ("Imitation", 4, 2, "custom")
    state, obs = env.reset(jax.random.key(0))
    _, cart = envs.make("CartPole-v1").reset(jax.random.key(0))
    np.testing.assert_array_equal(obs, cart)  # "cart" before "pole": sorted keys, each flattened


def test_flatten_observation_against_numpy():
    obs = {"b": np.arange(6, dtype=np.int32).reshape(2, 3), "a": (np.float32(7.0), np.ones((1, 2), bool))}
    expected = np.concatenate([[7.0], [1.0, 1.0], np.arange(6.0)]).astype(np.float32)
    np.testing.assert_array_equal(jax.jit(envs.flatten_observation)(obs), expected)
    assert backend.observation_size(obs) == 9


def test_a_pytree_observation_of_a_hand_written_env_is_refused_naming_the_fix():
    env = envs.JaxEnv(name="tree", obs_size=2, action_size=2, discrete=True,
                      reset=lambda key: (0, {"x": jnp.zeros(2)}),
                      step=lambda key, s, a: (s, {"x": jnp.zeros(2)}, jnp.float32(0), jnp.bool_(False)))
    with pytest.raises(ValueError, match=r"'tree'.*pytree.*flatten_observation"):
        envs.make(env)


def test_something_else_names_the_jax_env_route_and_its_page():
    with pytest.raises(ValueError, match=r"JaxEnv.*docs/environment-libraries.md"):
        envs.make(object())
    with pytest.raises(ValueError, match=r"JaxEnv.*docs/environment-libraries.md"):
        experiments.Study(envs={"thing": object()}, methods=["fixed"], seeds=1, iterations=1).plan()


def test_a_missing_library_is_refused_naming_its_extra(monkeypatch):
    real = backend.installed_version
    monkeypatch.setattr(backend, "installed_version", lambda p: None if p == "navix" else real(p))
    with pytest.raises(ValueError, match=r"navix/Navix-Empty-5x5-v0.*navix is not installed.*hcjax\[navix\]"):
        envs.resolve("navix/Navix-Empty-5x5-v0")
    with pytest.raises(ValueError, match=r"hcjax\[navix\]"):
        experiments.Study(envs=["navix/Navix-Empty-5x5-v0"], methods=["fixed"], seeds=1, iterations=1).plan()
    assert envs.resolve("CartPole-v1").backend == "gymnax"  # a bare name never looks there


@pytest.mark.parametrize("factory, words", [
    ("tests.tiny_env:make_stuck_walk", ["'stuck-walk' does not reset after done", "agents.envs.auto_reset"]),
    ("tests.tiny_env:make_two_choice_walk", ["'two-choice-walk'", "multi-discrete", "divmod(action, n2)"]),
])
def test_adapter_mistakes_are_refused_before_any_work(factory, words, tmp_path, capsys):
    config = tmp_path / "study.toml"  # no envs, no env_factories: --env-factory completes it
    config.write_text(tiny_study(["fixed"], 1, 2, 2, envs=()).replace("envs = []\n", ""))
    code = cli.main(["run", "--config", str(config), "--env-factory", factory, "--out", str(tmp_path / "out"),
                     "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    for w in words:
        assert w in err, err
    assert not (tmp_path / "out" / "units").exists()


@pytest.mark.slow
def test_the_pages_hand_written_adapter_is_made_traced_and_probed(tmp_path):
    """docs/environment-libraries.md's adapter (a multi-discrete action flattened, a mask, our
    auto-reset), as written: `Study.check` builds, traces and probes it; its mask forbids moving
    left at the left wall."""
    namespace = run_page_block(LEVERS_ADAPTER, tmp_path)
    assert [e.label for e in namespace["plan"].envs] == ["levers"]
    state = {"position": jnp.int32(0), "lever": jnp.int32(0), "t": jnp.int32(0)}
    assert namespace["legal"](state).tolist() == [False, False, True, True]


def test_the_estimate_charges_a_probed_environment(monkeypatch):
    """Its measured compilation ENV_COMPILE times (its step is in the initial state, the evaluation
    and the training segment), and its measured step per sequential step of the copies a
    program steps: agents x num_envs in the rollout, agents x eval_episodes in an evaluation."""
    plan = experiments.Study(envs={"walk": tiny_env.make_walk()}, methods=["fixed"], seeds=2, iterations=10,
                             eval_every=5, space=SPACE, ppo=TINY_PPO).plan()
    env = plan.envs[0]
    assert build.measured(env) and build.probe_batch(plan, env) == 2 * 2
    costs = {}
    for compile_s, step_s in ((0.0, 0.0), (100.0, 0.0), (0.0, 0.01)):
        probe = envs.Probe("walk", 4, 7, 50.0, 50.0, 1, 0, 1, compile_cpu_seconds=compile_s, step_cpu_seconds=step_s)
        monkeypatch.setattr(build, "probe", lambda plan, env, probe=probe: probe)
        costs[compile_s, step_s] = estimate.group_parts(plan, env, ["fixed"])
    assert math.isclose(costs[100.0, 0.0]["serial"] - costs[0.0, 0.0]["serial"], estimate.ENV_COMPILE * 100.0)
    steps = 8 // 2  # a rollout of batch_size / num_envs steps of 2 agents x 2 envs, 10 iterations
    evaluations = 8 * 2 * 2  # eval_steps steps of 2 agents x 1 episode, at iterations 5 and 10
    assert math.isclose(costs[0.0, 0.01]["parallel"] - costs[0.0, 0.0]["parallel"],
                        0.01 / 4 * (10 * steps * 4 + evaluations))
    assert estimate.group_parts(plan, env, ["fixed"], done=6)["frames"] == 2 * 4 * 8  # resumed at iteration 6
