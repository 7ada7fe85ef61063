"""agents.envs factory, Brax smoke run and gymnasium host smoke run with HyperController."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents import driver, envs
from agents.ppo import METRIC_KEYS, PPOConfig


def test_unknown_name_lists_known():
    with pytest.raises(ValueError, match="halfcheetah.*CartPole-v1.*BipedalWalker-v3"):
        envs.make("NoSuchEnv-v0")
    with pytest.raises(ValueError, match="backend"):
        envs.make("reacher", backend="nope")


@pytest.mark.parametrize("name,discrete,obs_size", [("CartPole-v1", True, 4), ("Pendulum-v1", False, 3)])
def test_gymnax_reset_step(name, discrete, obs_size):
    env = envs.make(name)
    assert env.discrete == discrete and env.obs_size == obs_size and not env.host
    state, obs = env.reset(jax.random.PRNGKey(0))
    assert obs.shape == (obs_size,) and obs.dtype == jnp.float32
    action = jnp.zeros((), jnp.int32) if discrete else jnp.zeros((env.action_size,))
    state, obs, r, d = env.step(jax.random.PRNGKey(1), state, action)
    assert obs.shape == (obs_size,) and r.shape == () and d.dtype == jnp.bool_


def replay_tuner(tuner, init_key, objectives, tune_every, host):
    """Re-run the tuner outside PPO with PPO's key schedule: (iters, h) values in effect."""
    _, _, k_tuner, k_ask, _, key = jax.random.split(init_key, 6)
    ts = tuner.init(k_tuner)
    ts, values = tuner.ask(ts, k_ask)
    used = []
    for i, x in enumerate(objectives):
        used.append(np.asarray(values))
        if not host:
            key, _ = jax.random.split(key)
        _, _, k_ask, key = jax.random.split(key, 4)
        if i > 0:  # reward_change: nothing is told in the first iteration
            ts = tuner.tell(ts, jnp.float32(x))
        if (i + 1) % tune_every == 0:
            ts, values = tuner.ask(ts, k_ask)
    return np.stack(used)


def check_hparams_used(result, tuner, keys, cfg, host):
    m = result.metrics
    assert set(m) == set(METRIC_KEYS)
    n, iters = m["frames"].shape
    assert iters == cfg.num_iterations and m["hparams"].shape == (n, iters, 4)
    for i in range(n):
        expect = replay_tuner(tuner, keys[i], m["objective"][i], cfg.tune_every, host)
        np.testing.assert_allclose(m["hparams"][i], expect, rtol=1e-6)
    # the batch size used is the frames collected (up to one step of all envs)
    batch = m["hparams"][..., 3]
    np.testing.assert_array_equal(m["frames"], np.ceil(batch / cfg.num_envs) * cfg.num_envs)
    assert len(np.unique(batch)) > 1  # HyperController did change the batch size
    # the learning rate in the optimiser is the last one asked
    lr = np.asarray(result.states.opt_state.hyperparams["learning_rate"])
    np.testing.assert_allclose(lr, m["hparams"][:, -1, 0], rtol=1e-6)
    assert np.all(np.isfinite(m["train_reward"])) and np.all(np.isfinite(m["episode_return"]))


def test_brax_smoke_hypercontroller():
    env = envs.make("inverted_double_pendulum")  # spring backend
    space = hcjax.ppo_space(batch_size=(32, 128))
    tuner = hcjax.make_tuner("hypercontroller", space, d=4)
    cfg = PPOConfig(num_iterations=8, num_envs=4, num_minibatches=4, update_epochs=2, hidden_sizes=(32, 32),
                    tune_every=2, eval_steps=50)
    keys = jax.random.split(jax.random.PRNGKey(3), 1)
    seen = []
    # one segment of 8 iterations, then one evaluation (Brax compiles are slow on CPU)
    result = driver.run(cfg, env, tuner, keys, eval_every=8, callback=lambda info: seen.append(info.iteration))
    assert seen == [8]
    assert result.eval_returns.shape == (1, 1) and np.all(np.isfinite(result.eval_returns))
    check_hparams_used(result, tuner, keys, cfg, host=False)


def test_gymnasium_host_smoke_hypercontroller():
    env = envs.make("BipedalWalker-v3")
    assert env.host and env.obs_size == 24 and env.action_size == 4
    space = hcjax.ppo_space(batch_size=(16, 64))
    tuner = hcjax.make_tuner("hypercontroller", space, d=4)
    cfg = PPOConfig(num_iterations=6, num_envs=2, num_minibatches=2, update_epochs=2, hidden_sizes=(32, 32),
                    tune_every=2, eval_steps=30)
    keys = jax.random.split(jax.random.PRNGKey(4), 2)
    result = driver.run(cfg, env, tuner, keys, eval_every=3)
    assert result.eval_returns.shape == (2, 2) and np.all(np.isfinite(result.eval_returns))
    check_hparams_used(result, tuner, keys, cfg, host=True)
