"""docs/own-training-loop.md: its PureJaxRL-style PPO example (examples/ppo_cartpole*.py)
runs at tiny sizes, the guide quotes the untuned script and the diffs to the tuned and
population versions exactly, and the line counts it states are the diff's."""
import difflib
import json
import pathlib
import re

import jax
import numpy as np

import hcjax
from examples import ppo_cartpole, ppo_cartpole_pbt, ppo_cartpole_tuned
from experiments.benchmarks import bench_own_loop

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "own-training-loop.md"
TINY = dict(ppo_cartpole.CONFIG, NUM_ENVS=2, NUM_STEPS=32, TOTAL_TIMESTEPS=9 * 64, UPDATE_EPOCHS=1, NUM_MINIBATCHES=2)


def unified(other: str) -> list[str]:
    """The unified diff (one line of context) from ppo_cartpole.py to examples/`other`."""
    a = (ROOT / "examples" / "ppo_cartpole.py").read_text().splitlines()
    b = (ROOT / "examples" / other).read_text().splitlines()
    return list(difflib.unified_diff(a, b, "ppo_cartpole.py", other, n=1, lineterm=""))


def counts(diff: list[str]) -> tuple[int, int]:
    """(lines added, lines removed) of a unified diff."""
    body = [line for line in diff if not line.startswith(("---", "+++", "@@"))]
    return sum(line.startswith("+") for line in body), sum(line.startswith("-") for line in body)


def fenced(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)


def test_guide_quotes_the_scripts_and_their_diffs():
    assert fenced("python") == [(ROOT / "examples" / "ppo_cartpole.py").read_text()]
    diffs = fenced("diff")
    assert diffs[0] == "\n".join(unified("ppo_cartpole_tuned.py")) + "\n"
    assert diffs[1] == "\n".join(unified("ppo_cartpole_pbt.py")) + "\n"
    added, removed = counts(unified("ppo_cartpole_tuned.py"))
    assert (added, removed) == (16, 6)  # the counts the guide states
    text = GUIDE.read_text()
    assert f"{added} lines added and {removed} removed" in text
    assert f"{added - removed} more lines" in text


def test_untuned_and_tuned_scripts_run():
    rngs = jax.random.split(jax.random.PRNGKey(0), 2)
    plain = jax.jit(jax.vmap(ppo_cartpole.make_train(TINY)))(rngs)
    assert np.all(np.isfinite(jax.tree.leaves(plain["runner_state"][0].params)[0]))
    out = jax.jit(jax.vmap(ppo_cartpole_tuned.make_train(TINY)))(rngs)
    metrics = out["metrics"]
    lr, clip = np.asarray(metrics["learning_rate"]), np.asarray(metrics["clip_eps"])
    assert lr.shape == clip.shape == (2, 9)  # (seeds, updates): the values each update trained with
    assert np.all((lr >= 1e-4 * (1 - 1e-6)) & (lr <= 1e-2 * (1 + 1e-6))) and np.all((clip >= 0.1) & (clip <= 0.4))
    changed = (np.diff(lr, axis=1) != 0) | (np.diff(clip, axis=1) != 0)  # between update k and k + 1
    decided = np.arange(8) % 4 == 0  # the tuner decided at the end of updates 0 and 4
    assert not np.any(changed[:, ~decided]) and np.any(changed[:, decided])
    train_state = out["runner_state"][0][0]
    for leaf in jax.tree.leaves(train_state.params):
        assert np.all(np.isfinite(np.asarray(leaf)))
    # the learning rate in effect is the optimiser's: the last update's value is in its state
    injected = train_state.opt_state[1].hyperparams["learning_rate"]
    np.testing.assert_array_equal(injected, lr[:, -1])
    tuner_state, level = out["runner_state"][1]
    assert int(np.asarray(tuner_state.t).min()) >= 1 and np.all(np.isfinite(level))  # episodes finished, told


def test_population_recipe_runs():
    agents = 4
    config = dict(TINY, READY=3)
    out, history = ppo_cartpole_pbt.run_pbt(config, jax.random.PRNGKey(1), agents)
    assert len(history) == 3  # three intervals of 3 updates: two PBT steps between them
    for interval in history[1:]:
        objective, parents = np.asarray(interval["objective"]), np.asarray(interval["parents"])
        assert objective.shape == (agents,) and np.all(np.isfinite(objective))
        replaced = parents != np.arange(agents)
        assert np.all(objective[parents[replaced]] > objective[replaced])  # min_gap=0: only a better agent is copied
    assert sum(np.sum(np.asarray(i["parents"]) != np.arange(agents)) for i in history[1:]) > 0  # PBT acted
    for before, interval in zip(history, history[1:]):  # values change only where an agent was replaced
        values, replaced = np.asarray(interval["values"]), np.asarray(interval["parents"]) != np.arange(agents)
        assert values.shape == (agents, 2) and np.all((values >= ppo_cartpole_pbt.SPACE.low)
                                                      & (values <= ppo_cartpole_pbt.SPACE.high))
        np.testing.assert_array_equal(values[~replaced], np.asarray(before["values"])[~replaced])
    assert np.all(np.isfinite(np.asarray(jax.tree.leaves(out["runner_state"][0].params)[0])))
    keys = np.asarray(out["runner_state"][3])  # (agents, 2) raw keys
    assert len({k.tobytes() for k in keys}) == agents  # fresh keys after a copy: no agent replays another's draws
    assert hcjax.population_options("pbt")["min_gap"] is None  # the recipe sets min_gap=0 itself


def test_benchmark_writes_its_report(tmp_path, capsys):
    out = tmp_path / "own_loop.json"
    report = bench_own_loop.main(["--seeds", "2", "--rounds", "2", "--timesteps", "1024", "--out", str(out)])
    assert json.loads(out.read_text())["ratios"] == report["ratios"] and len(report["ratios"]) == 2
    assert all(r > 0 for r in report["ratios"]) and report["ratio_min"] <= report["ratio_median"] <= report["ratio_max"]
    assert "ratio tuned/untuned" in capsys.readouterr().out
