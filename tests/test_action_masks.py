"""Legal-action masks (`JaxEnv.action_mask`): the masked distribution against a NumPy
reference (zero probability, log-probabilities and entropy over the legal actions, the argmax
among them), and PPO on an environment whose legal actions change every step, counting the
illegal actions it takes in training and in greedy and sampled evaluation (none; without the
mask it takes many)."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents import envs, ppo
from agents import networks as nets

EPISODE = 5
ACTIONS = 4


def test_masked_distribution_matches_a_numpy_reference():
    logits = np.array([[0.3, -1.2, 2.0, 0.5], [1.0, 1.0, -3.0, 0.0]], np.float32)
    mask = np.array([[True, True, False, True], [False, True, True, False]])
    dist = jax.jit(nets.masked)(logits, mask)
    legal = np.where(mask, np.exp(logits - logits.max(axis=1, keepdims=True)), 0.0)
    probs = legal / legal.sum(axis=1, keepdims=True)  # softmax over the legal actions only
    for a in range(ACTIONS):
        logp = np.asarray(jax.jit(nets.log_prob, static_argnums=2)(dist, np.full(2, a, np.int32), True))
        expected = np.where(mask[:, a], np.log(np.where(mask[:, a], probs[:, a], 1.0)), -np.inf)
        np.testing.assert_allclose(np.where(mask[:, a], logp, -np.inf), expected, rtol=1e-5)
        assert np.all(logp[~mask[:, a]] < -1e30)  # illegal: a huge negative, finite (no NaN downstream)
    entropy = -np.sum(np.where(mask, probs * np.log(np.where(mask, probs, 1.0)), 0.0), axis=1)
    np.testing.assert_allclose(jax.jit(nets.entropy, static_argnums=1)(dist, True), entropy, rtol=1e-5)
    np.testing.assert_array_equal(jax.jit(nets.mode, static_argnums=1)(dist, True), [3, 1])  # not 2: illegal
    draws = jax.jit(jax.vmap(lambda k: nets.sample(k, dist, True)))(jax.random.split(jax.random.key(0), 2000))
    assert mask[np.arange(2), np.asarray(draws)].all()
    grads = jax.grad(lambda x: nets.log_prob(nets.masked(x, mask), jnp.array([0, 1]), True).sum())(logits)
    assert np.all(np.asarray(grads)[~mask] == 0) and np.all(np.isfinite(grads))


def _reset(key):
    """state: (t (), illegal actions taken so far ()); obs (2,)."""
    state = (jnp.int32(0), jnp.int32(0))
    return state, _obs(state)


def _obs(state):
    t, _ = state
    return jnp.stack([(t % 2).astype(jnp.float32), t.astype(jnp.float32) / EPISODE])


def _legal(state):
    """The even actions on even steps, the odd ones on odd steps."""
    t, _ = state
    return jnp.arange(ACTIONS) % 2 == t % 2


def _step(key, state, action):
    """Reward 1 for a legal action, 0 for an illegal one (counted in the state, never reset);
    episodes of EPISODE steps, auto-reset."""
    t, illegal = state
    ok = _legal(state)[action]
    t, illegal = t + 1, illegal + (~ok).astype(jnp.int32)
    done = t >= EPISODE
    state = (jnp.where(done, 0, t), illegal)
    return state, _obs(state), ok.astype(jnp.float32), done


GATE = envs.JaxEnv(name="gate", obs_size=2, action_size=ACTIONS, discrete=True, reset=_reset, step=_step,
                   max_episode_steps=EPISODE, action_mask=_legal)
CONFIG = ppo.PPOConfig(num_envs=4, batch_size=32, num_minibatches=2, update_epochs=1, hidden_sizes=(8,),
                       eval_steps=EPISODE, eval_episodes=3, num_iterations=3)


@pytest.mark.slow
def test_ppo_never_takes_an_illegal_action_in_training_or_evaluation():
    tuner = hcjax.make_tuner("fixed", hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, scale="log")]))
    runs = {}
    for masked in (True, False):
        env = GATE if masked else dataclasses.replace(GATE, action_mask=None)
        for policy in ("greedy", "sampled"):
            config = dataclasses.replace(CONFIG, eval_policy=policy)
            runs[masked, policy] = ppo.make_train(config, env, tuner, eval_every=1)
    results = jax.jit(lambda key: {k: train(key) for k, train in runs.items()})(jax.random.key(0))
    for (masked, policy), (state, metrics, evals) in results.items():
        illegal = int(np.asarray(state.env_state[1]).sum())  # over every env and step of the training
        frames = int(np.asarray(metrics["frames"]).sum())
        eval_illegal = EPISODE - np.asarray(evals["eval_return"])  # one reward per legal step
        if masked:
            assert illegal == 0 and frames == CONFIG.num_iterations * 32, (policy, illegal)
            np.testing.assert_array_equal(eval_illegal, 0.0)
        else:  # the same runs without the mask: the count can fail
            assert illegal > frames // 10, (policy, illegal, frames)
            assert eval_illegal.sum() > 0, (policy, eval_illegal)
