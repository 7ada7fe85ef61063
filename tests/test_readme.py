"""The README's Python examples run as written, and its quick start matches CI."""
import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def python_block(marker: str) -> str:
    """The README's one ```python block containing `marker`."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
              if marker in b]
    assert len(blocks) == 1, f"README has {len(blocks)} python blocks with {marker!r}"
    return blocks[0]


def run_block(marker: str) -> dict:
    namespace = {}
    exec(compile(python_block(marker), f"README example ({marker})", "exec"), namespace)
    return namespace


def test_readme_example_runs():
    values = np.asarray(run_block("def toy_objective")["values"])
    assert values.shape == (8, 300, 2)
    # by the end the agents mostly play the learning rate with the best objective (1e-3,
    # one of the 10 arms); random search would play it 10% of the time
    at_best = np.isclose(values[:, -100:, 0], 1e-3, rtol=1e-3).mean(axis=1)
    assert at_best.mean() > 0.7 and np.all(at_best > 0.3), at_best


def test_readme_ppo_example_runs():
    # 4 vmapped PPO agents on CartPole with a HyperController each.
    namespace = run_block('objective="return_change"')
    hp = np.asarray(namespace["metrics"]["hparams"])
    assert hp.shape == (4, 30, 4) and np.all(np.isfinite(hp))
    assert np.all((hp[..., 3] >= 128) & (hp[..., 3] <= 512))
    frames = np.asarray(namespace["metrics"]["frames"])
    assert np.all(frames >= hp[..., 3]) and np.all(frames < hp[..., 3] + 8)  # up to one step of all envs
    assert len({tuple(a) for a in hp[:, -1]}) > 1  # each agent chose on its own


def test_readme_custom_environment_example_learns(capsys):
    namespace = run_block("class PointToTarget")
    env, ret = namespace["env"], np.asarray(namespace["metrics"]["episode_return"])
    assert env.backend == "gymnax" and (env.obs_size, env.action_size, env.max_episode_steps) == (2, 1, 20)
    assert np.isnan(ret[0]) or ret[0] < -40  # the untrained point wanders
    assert ret[-1] > -30 and np.all(np.isfinite(ret[1:])), ret  # it learned to reach the target
    assert "episode return" in capsys.readouterr().out


def test_readme_host_tuner_example_runs(capsys):
    namespace = run_block("HostTuner(")
    assert capsys.readouterr().out.strip() == "True"
    hp = namespace["hp"]
    assert list(hp) == ["learning_rate", "batch_size"]
    assert type(hp["learning_rate"]) is float and type(hp["batch_size"]) is int
    assert namespace["tuner"].n_asks == namespace["resumed"].n_asks == 301


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[dev\]" && (python -m pytest[^\n`]*)', readme).group(1).strip()
    assert command in ci.splitlines()


def test_readme_population_example_runs(capsys):
    namespace = run_block('make_population("pbt"')
    losses = np.asarray(namespace["losses"])
    assert losses.shape == (30, 32)
    assert np.median(losses[-1]) < 0.01 * np.median(losses[0])  # the population found a working learning rate
    assert capsys.readouterr().out.splitlines()[0] == "(30, 32)"
