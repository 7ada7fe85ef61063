"""`ppo.make_train(..., eval_every=k)`: evaluation returns beside the training metrics,
equal to evaluating the states of a plain segment-by-segment run, training unchanged."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents import envs, ppo

CONFIG = ppo.PPOConfig(num_envs=2, batch_size=16, num_minibatches=2, update_epochs=1, hidden_sizes=(8,),
                       eval_steps=20, num_iterations=3)


@pytest.fixture(scope="module")
def tuner():
    return hcjax.make_tuner("fixed", hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, scale="log")]))


@pytest.mark.slow
def test_evaluations_every_k_iterations_and_after_the_last(tuner):
    cartpole, steps_traced = envs.make("CartPole-v1"), []

    def step(key, state, action):  # CartPole's step, counting its traces
        steps_traced.append(1)
        return cartpole.step(key, state, action)

    evaluating = ppo.make_train(CONFIG, dataclasses.replace(cartpole, step=step), tuner, eval_every=2)
    plain = ppo.make_train(CONFIG, "CartPole-v1", tuner)
    learner = ppo.make_learner(CONFIG, "CartPole-v1", tuner)

    def reference(key):  # train segment by segment, evaluate each state with the study's evaluator and key
        s, done, expected = learner.init(key), 0, []
        for length in (2, 1):
            s, _ = learner.iterate(s, length, done)
            done += length
            expected.append(learner.evaluate(s, ppo.eval_key(key, done)))
        return jnp.stack(expected)

    # the three runs in one program: one compilation instead of two programs and the reference op by op
    (state, metrics, evals), (plain_state, plain_metrics), expected = jax.jit(
        lambda key: (evaluating(key), plain(key), reference(key)))(jax.random.key(3))
    for name in metrics:  # the evaluations change nothing of the training
        np.testing.assert_array_equal(metrics[name], plain_metrics[name])
    jax.tree.map(np.testing.assert_array_equal, state.params, plain_state.params)
    np.testing.assert_array_equal(evals["iteration"], [2, 3])
    np.testing.assert_allclose(evals["eval_return"], np.asarray(expected), rtol=1e-6)
    assert evals["eval_return"].dtype == np.float32 and np.all(np.asarray(expected) > 0)
    # one iteration and one evaluation in train's program although 3 is no multiple of 2
    # (the rollout's and the episode's loops each trace the step once)
    assert len(steps_traced) == 2


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3"])
def test_a_bad_eval_every_is_refused(tuner, bad):
    with pytest.raises(ValueError, match="eval_every"):
        ppo.make_train(CONFIG, "CartPole-v1", tuner, eval_every=bad)
