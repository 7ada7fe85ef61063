"""The README's Python example runs as written, and its quick start matches CI."""
import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def python_blocks():
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_example_runs(capsys):
    blocks = python_blocks()
    assert blocks, "README has no python example"
    namespace = {}
    exec(compile(blocks[0], "README example", "exec"), namespace)
    values = np.asarray(namespace["values"])
    assert values.shape == (8, 300, 2)
    # by the end the agents mostly play the learning rate with the best objective (1e-3,
    # one of the 10 arms); random search would play it 10% of the time
    at_best = np.isclose(values[:, -100:, 0], 1e-3, rtol=1e-3).mean(axis=1)
    assert at_best.mean() > 0.7 and np.all(at_best > 0.3), at_best


def test_readme_ppo_example_runs():
    # The second example: 4 vmapped PPO agents on CartPole with a HyperController each.
    blocks = python_blocks()
    assert len(blocks) >= 2, "README lost its PPO example"
    namespace = {}
    exec(compile(blocks[1], "README PPO example", "exec"), namespace)
    hp = np.asarray(namespace["metrics"]["hparams"])
    assert hp.shape == (4, 30, 4) and np.all(np.isfinite(hp))
    assert np.all((hp[..., 3] >= 128) & (hp[..., 3] <= 512))
    frames = np.asarray(namespace["metrics"]["frames"])
    assert np.all(frames >= hp[..., 3]) and np.all(frames < hp[..., 3] + 8)  # up to one step of all envs
    assert len({tuple(a) for a in hp[:, -1]}) > 1  # each agent chose on its own


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[dev\]" && (python -m pytest[^\n`]*)', readme).group(1).strip()
    assert command in ci.splitlines()
