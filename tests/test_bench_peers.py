"""bench_peers: hcjax's and rejax's PPO configurations agree on every field it maps, and
`hcjax bench` reports the benchmark as missing (naming the extra) without rejax."""
import sys
import types

import pytest

from experiments.benchmarks import bench, bench_peers
from hcjax.extras import installed


def rejax_configuration(env_name: str):
    """rejax's PPO as bench_peers creates it where rejax is installed; elsewhere the keyword
    arguments it would create it from, as attributes (the actor's sizes and activation by name)."""
    if installed("rejax"):
        return bench_peers.rejax_algo(env_name)
    _, kwargs = bench_peers.settings(env_name)
    agent = kwargs["agent_kwargs"]
    actor = types.SimpleNamespace(hidden_layer_sizes=agent["hidden_layer_sizes"], activation=agent["activation"])
    return types.SimpleNamespace(**kwargs, actor=actor)


@pytest.mark.parametrize("env_name", bench_peers.ENVS)
def test_both_configurations_are_equal_in_every_mapped_field(env_name):
    config, kwargs = bench_peers.settings(env_name)
    algo = rejax_configuration(env_name)
    assert bench_peers.mismatches(config, algo) == []
    assert config.vf_clip_eps == algo.clip_eps and config.normalize_obs is False  # rejax's value clip, its default
    assert config.batch_size == config.max_batch_size == kwargs["num_envs"] * kwargs["num_steps"]
    changed = types.SimpleNamespace(**{b: getattr(algo, b) for _, b in bench_peers.MAPPED}, num_steps=algo.num_steps,
                                    actor=algo.actor)
    changed.num_epochs += 1
    changed.gae_lambda = 0.5
    assert [m.split("=")[0] for m in bench_peers.mismatches(config, changed)] == ["update_epochs", "gae_lambda"]


def test_bench_reports_bench_peers_missing_without_rejax(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rejax", None)  # as if not installed
    result = bench.run_script("bench_peers", tmp_path, quick=True)
    assert result["status"] == "missing"
    assert 'pip install "hcjax[peers]"' in result["message"]
