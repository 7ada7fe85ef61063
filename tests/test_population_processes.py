"""A population in one's own loop across processes: hcjax.population.sharding, and
examples/ppo_cartpole_pbt_distributed.py as two jax.distributed processes of two CPU
devices each (gloo) against one process of four devices."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from examples import ppo_cartpole_pbt
from examples import ppo_cartpole_pbt_distributed as dist
from experiments.benchmarks.bench_population_distributed import communicate_all, free_port
from hcjax.population import agent_mesh, exploit_sharded, gather_agents, replicate, shard_agents
from tests.cli_runs import python

# 6 updates of 2 envs x 16 steps, PBT every 2: three intervals, two exploits
TINY = ["NUM_ENVS=2", "NUM_STEPS=16", "TOTAL_TIMESTEPS=192", "UPDATE_EPOCHS=1", "NUM_MINIBATCHES=2", "READY=2"]


def test_shard_then_gather_gives_back_the_host_values():
    mesh = agent_mesh()
    tree = {"w": np.arange(2 * len(jax.devices()) * 3, dtype=np.float32).reshape(-1, 3),
            "keys": np.asarray(jax.random.split(jax.random.PRNGKey(0), 2 * len(jax.devices())))}
    sharded = shard_agents(tree, mesh)
    assert sharded["w"].sharding.spec[0] == "agent"
    back = gather_agents({**sharded, "key": replicate(np.uint32([1, 2]), mesh)})
    np.testing.assert_array_equal(back["w"], tree["w"])
    np.testing.assert_array_equal(back["keys"], tree["keys"])
    np.testing.assert_array_equal(back["key"], [1, 2])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match=r"leaf tree\['b'\] has shape \(\)"):
        shard_agents({"a": np.zeros(2), "b": np.float32(0)}, agent_mesh())
    with pytest.raises(ValueError, match=r"donors must be an integer in \[1, n\] = \[1, 2\]"):
        exploit_sharded({"a": np.zeros(2)}, np.arange(2), agent_mesh(), donors=3)
    with pytest.raises(ValueError, match="KEY one of LR, NUM_ENVS"):
        dist.config_from(["NUM_ENV=2"], ppo_cartpole_pbt.CONFIG)
    assert dist.config_from(["NUM_ENVS=2", "LR=1e-3"], ppo_cartpole_pbt.CONFIG)["NUM_ENVS"] == 2
    with pytest.raises(ValueError, match=r"interval: ready must be an integer in \[1, 6\], got 7"):  # 6 updates
        dist.run_pbt_sharded(dist.config_from(TINY + ["READY=7"], ppo_cartpole_pbt.CONFIG), 0, 4, agent_mesh())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The example as 2 processes x 2 devices and as 1 process x 4 devices, all three at once;
    every process is killed (its whole session) if the runs fail or time out."""
    tmp = tmp_path_factory.mktemp("pbt_processes")
    script = ["-m", "examples.ppo_cartpole_pbt_distributed", *(a for s in TINY for a in ("--set", s))]
    port = free_port()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JAX_LOG_COMPILES", "1")  # each process logs its compilations (test_each_program_compiles_once)
        pair = [python(script + ["--coordinator", f"127.0.0.1:{port}", "--num-processes", 2, "--process-id", i,
                                 "--out", tmp / f"two_{i}.npz"], devices=2, start_new_session=True) for i in (0, 1)]
        alone = python(script + ["--out", tmp / "one.npz"], devices=4, start_new_session=True)
    procs = pair + [alone]
    logs = communicate_all(procs, timeout=400)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log
    return tmp, logs


@pytest.mark.slow
def test_two_processes_equal_one(runs):
    """Returns, parameters, hyperparameter values, objectives and lineage of 2 x 2 devices equal
    1 x 4 bit for bit (each device holds the same agent in both; gathers and all-gathers
    copy exactly), and the exploits did replace agents."""
    tmp, _ = runs
    with np.load(tmp / "two_0.npz") as two, np.load(tmp / "one.npz") as one:
        assert sorted(two.files) == sorted(one.files)
        for name in two.files:
            np.testing.assert_allclose(two[name], one[name], rtol=1e-6, atol=1e-6, err_msg=name)
        parents = one["parents"]
        assert parents.shape == (2, 4) and (parents != np.arange(4)).any()
        assert np.isfinite(one["returns"]).all() and one["params_0"].shape[0] == 4


@pytest.mark.slow
def test_only_process_zero_prints_and_writes(runs):
    tmp, (log0, log1, _) = runs
    assert "2 process(es), 4 devices, 4 agents" in log0 and "mean return" in log0
    assert "mean return" not in log1
    assert not (tmp / "two_1.npz").exists()


@pytest.mark.slow
def test_each_program_compiles_once(runs):
    """Each program compiles once in every process, the training interval included: `interval`
    takes the state that `first` returns and the one that `explore` returns (a weak type or
    another sharding in either would compile it again)."""
    _, logs = runs
    for log in logs:
        for program in ("first", "interval", "explore"):
            assert log.count(f"Finished XLA compilation of jit({program})") == 1, program
