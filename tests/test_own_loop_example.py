"""docs/own-training-loop.md: its PureJaxRL-style PPO example (examples/ppo_cartpole*.py)
and DQN example (examples/dqn_cartpole*.py) run at tiny sizes, the guide quotes the
untuned PPO script and the diffs to the tuned and population versions and to the tuned
DQN exactly, and the line counts it states are the diffs'."""
import difflib
import json
import pathlib
import re

import jax
import numpy as np
import pytest

import hcjax
from examples import dqn_cartpole, dqn_cartpole_tuned, ppo_cartpole, ppo_cartpole_pbt, ppo_cartpole_tuned
from experiments.benchmarks import bench_own_loop
from tests.test_readme import OWN_LOOP_PPO

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "own-training-loop.md"
TINY = dict(ppo_cartpole.CONFIG, NUM_ENVS=2, NUM_STEPS=32, TOTAL_TIMESTEPS=9 * 64, UPDATE_EPOCHS=1, NUM_MINIBATCHES=2)
# 40 updates of 2 envs, learning from update 8, a greedy evaluation (and a decision) every 10 updates
CONTROLS = np.array([False, True])  # agent 1 of the tuned scripts' two is a control, at the defaults
TINY_DQN = dict(dqn_cartpole.CONFIG, NUM_ENVS=2, BUFFER_SIZE=64, BATCH_SIZE=8, TOTAL_TIMESTEPS=80, EPS_ANNEAL_TIME=40,
                LEARNING_STARTS=16, TARGET_UPDATE_INTERVAL=5, EVAL_EVERY=10, EVAL_EPISODES=2)


def unified(other: str, base: str = "ppo_cartpole.py") -> list[str]:
    """The unified diff (one line of context) from examples/`base` to examples/`other`."""
    a = (ROOT / "examples" / base).read_text().splitlines()
    b = (ROOT / "examples" / other).read_text().splitlines()
    return list(difflib.unified_diff(a, b, base, other, n=1, lineterm=""))


def counts(diff: list[str]) -> tuple[int, int]:
    """(lines added, lines removed) of a unified diff."""
    body = [line for line in diff if not line.startswith(("---", "+++", "@@"))]
    return sum(line.startswith("+") for line in body), sum(line.startswith("-") for line in body)


def fenced(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)


def test_guide_quotes_the_scripts_and_their_diffs():
    (script,) = [block for block in fenced("python") if OWN_LOOP_PPO in block]  # the guide's pattern comes first
    assert script == (ROOT / "examples" / "ppo_cartpole.py").read_text()
    dqn = unified("dqn_cartpole_tuned.py", "dqn_cartpole.py")
    assert fenced("diff") == ["\n".join(diff) + "\n" for diff in  # in the guide's order
                              (unified("ppo_cartpole_tuned.py"), dqn, unified("ppo_cartpole_pbt.py"))]
    text = GUIDE.read_text()
    for diff, stated in ((unified("ppo_cartpole_tuned.py"), (22, 9)), (dqn, (23, 10))):
        added, removed = counts(diff)
        assert (added, removed) == stated  # the counts the guide states
        assert f"{added} lines added and {removed} removed" in text
        assert f"{added - removed} more lines" in text


@pytest.mark.slow
def test_untuned_and_tuned_scripts_run():
    rngs = jax.random.split(jax.random.PRNGKey(0), 2)
    plain = jax.jit(jax.vmap(ppo_cartpole.make_train(TINY)))(rngs)
    assert np.all(np.isfinite(jax.tree.leaves(plain["runner_state"][0].params)[0]))
    out = jax.jit(jax.vmap(ppo_cartpole_tuned.make_train(TINY)))(rngs, CONTROLS)
    metrics = out["metrics"]
    lr, clip = np.asarray(metrics["learning_rate"]), np.asarray(metrics["clip_eps"])
    assert lr.shape == clip.shape == (2, 9)  # (seeds, updates): the values each update trained with
    assert np.all((lr >= 1e-4 * (1 - 1e-6)) & (lr <= 1e-2 * (1 + 1e-6))) and np.all((clip >= 0.1) & (clip <= 0.4))
    changed = (np.diff(lr, axis=1) != 0) | (np.diff(clip, axis=1) != 0)  # between update k and k + 1
    decided = np.arange(8) % 4 == 0  # the tuner decided at the end of updates 0 and 4
    assert not np.any(changed[:, ~decided]) and np.any(changed[0, decided])
    np.testing.assert_allclose(lr[1], TINY["LR"], rtol=1e-6)  # the control agent: the script's own values
    np.testing.assert_allclose(clip[1], TINY["CLIP_EPS"], rtol=1e-6)
    train_state = out["runner_state"][0][0]
    for leaf in jax.tree.leaves(train_state.params):
        assert np.all(np.isfinite(np.asarray(leaf)))
    # the learning rate in effect is the optimiser's: the last update's value is in its state
    injected = train_state.opt_state[1].hyperparams["learning_rate"]
    np.testing.assert_array_equal(injected, lr[:, -1])
    tuner_state, level = out["runner_state"][1]
    np.testing.assert_array_equal(hcjax.control.is_control(tuner_state), CONTROLS)
    assert int(np.asarray(tuner_state.states[0].t)[0]) >= 1 and np.all(np.isfinite(level))  # episodes finished, told


@pytest.mark.slow
def test_untuned_and_tuned_dqn_run():
    rngs = jax.random.split(jax.random.PRNGKey(0), 2)
    plain = jax.jit(jax.vmap(dqn_cartpole.make_train(TINY_DQN)))(rngs)
    out = jax.jit(jax.vmap(dqn_cartpole_tuned.make_train(TINY_DQN)))(rngs, CONTROLS)
    evaluating = np.arange(40) % 10 == 9
    for run in (plain, out):
        greedy = np.asarray(run["metrics"]["greedy_return"])  # (seeds, updates)
        assert greedy.shape == (2, 40) and np.all(np.isnan(greedy[:, ~evaluating]))
        assert np.all((greedy[:, evaluating] >= 1) & (greedy[:, evaluating] <= 500))  # whole greedy episodes
        assert np.all(np.isfinite(np.asarray(jax.tree.leaves(run["runner_state"][0].params if run is plain
                                                             else run["runner_state"][0][0].params)[0])))
    metrics = out["metrics"]
    lr, floor = np.asarray(metrics["learning_rate"]), np.asarray(metrics["eps_floor"])
    low, high = dqn_cartpole_tuned.SPACE.low, dqn_cartpole_tuned.SPACE.high
    assert np.all((lr >= low[0] * (1 - 1e-6)) & (lr <= high[0] * (1 + 1e-6)))
    assert np.all((floor >= low[1] * (1 - 1e-6)) & (floor <= high[1] * (1 + 1e-6)))
    changed = (np.diff(lr, axis=1) != 0) | (np.diff(floor, axis=1) != 0)  # between update k and k + 1
    assert not np.any(changed[:, ~evaluating[:-1]]) and np.any(changed[0, evaluating[:-1]])  # decided at evaluations
    np.testing.assert_allclose([lr[1], floor[1]], np.broadcast_to(dqn_cartpole_tuned.SPACE.default[:, None], (2, 40)),
                               rtol=1e-6)  # the control agent runs the defaults
    assert dqn_cartpole_tuned.SPACE.default.tolist() == np.float32([TINY_DQN["LR"], TINY_DQN["EPS_FINISH"]]).tolist()
    eps = np.asarray(metrics["eps"])  # annealed from 1 to the tuned floor over 20 updates
    np.testing.assert_allclose(eps[:, -1], floor[:, -1], rtol=1e-6)
    train_state = out["runner_state"][0][0]
    np.testing.assert_array_equal(train_state.opt_state.hyperparams["learning_rate"], lr[:, -1])
    tuner_state, level = out["runner_state"][1]
    assert int(np.asarray(tuner_state.states[0].t)[0]) == 3  # 4 evaluations: the first sets the level, 3 told
    np.testing.assert_allclose(level, np.asarray(metrics["greedy_return"])[:, -1], rtol=1e-6)


@pytest.mark.slow
def test_population_recipe_runs():
    agents = 4
    config = dict(TINY, READY=4)  # 9 updates: 4 does not divide them, the nearest divisor 3 does
    with pytest.warns(hcjax.population.IntervalWarning, match=r"ready=4 does not divide the run's 9 updates: using 3"):
        out, history = ppo_cartpole_pbt.run_pbt(config, jax.random.PRNGKey(1), agents)
    assert len(history) == 3  # three intervals of 3 updates: two PBT steps between them
    assert sum(np.asarray(i["returned_episode"]).shape[1] for i in history) == 9  # every update ran
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


def test_population_interval_is_the_nearest_divisor_or_names_them():
    assert hcjax.population.interval(390, 10) == 10  # the guide's run: 10 divides it, nothing said
    with pytest.warns(hcjax.population.IntervalWarning) as said:
        assert hcjax.population.interval(976, 10) == 8  # PureJaxRL's 5e5 steps: divisors 8 and 16
        assert hcjax.population.interval(976, 12) == 8  # 12 - 8 < 16 - 12
        assert hcjax.population.interval(976, 12) == 8
    assert [str(w.message) for w in said][:2] == [
        "ready=10 does not divide the run's 976 updates: using 8 (the divisors nearest 10 are 8 and 16)",
        "ready=12 does not divide the run's 976 updates: using 8 (the divisors nearest 12 are 8 and 16)"]
    with pytest.warns(hcjax.population.IntervalWarning, match="using 2"):
        assert hcjax.population.interval(20, 3) == 2
    with pytest.warns(hcjax.population.IntervalWarning, match="using 4"):
        assert hcjax.population.interval(12, 5) == 4  # a tie between 4 and 6: the smaller
    with pytest.raises(ValueError, match=r"ready=10 does not divide the run's 977 updates, and its nearest divisors "
                                         r"are 1 and 977; choose one of them, or a run of 970 or 980 updates"):
        hcjax.population.interval(977, 10)
    with pytest.raises(ValueError, match=r"interval: ready must be an integer in \[1, 9\]"):
        hcjax.population.interval(9, 10)
    # the recipe's own run: a prime number of updates is refused before anything compiles
    with pytest.raises(ValueError, match=r"ready=3 does not divide the run's 7 updates.*a run of 6 or 9 updates"):
        ppo_cartpole_pbt.run_pbt(dict(TINY, TOTAL_TIMESTEPS=7 * 64, READY=3), jax.random.PRNGKey(1), 2)


@pytest.mark.slow
def test_benchmark_writes_its_report(tmp_path, capsys, monkeypatch):
    # the benchmark's report at the tiny sizes of the tests above: the same four programs (2 seeds), which the
    # session's persistent compilation cache holds once those tests ran; what is measured does not change the report
    tiny = {"ppo_cartpole": TINY, "ppo_cartpole_tuned": TINY, "dqn_cartpole": TINY_DQN, "dqn_cartpole_tuned": TINY_DQN}
    load = bench_own_loop.load_example

    def tiny_example(name):
        module = load(name)
        module.CONFIG = tiny[name]
        return module

    monkeypatch.setattr(bench_own_loop, "load_example", tiny_example)
    for pair, config in (("ppo", TINY), ("dqn", TINY_DQN)):  # --quick runs the tiny number of steps
        monkeypatch.setitem(bench_own_loop.PAIRS, pair, (*bench_own_loop.PAIRS[pair][:3], config["TOTAL_TIMESTEPS"]))
    out = tmp_path / "own_loop.json"
    report = bench_own_loop.main(["--quick", "--seeds", "2", "--rounds", "2", "--out", str(out)])
    assert json.loads(out.read_text())["examples"].keys() == report["examples"].keys() == {"ppo", "dqn"}
    assert report["examples"]["ppo"]["config"] == TINY and report["examples"]["dqn"]["config"] == TINY_DQN
    for pair in report["examples"].values():
        assert len(pair["ratios"]) == 2 and all(r > 0 for r in pair["ratios"])
        assert pair["ratio_min"] <= pair["ratio_median"] <= pair["ratio_max"] and len(pair["cpu_ratios"]) == 2
    printed = capsys.readouterr().out
    assert "ppo ratio tuned/untuned" in printed and "dqn ratio tuned/untuned" in printed
