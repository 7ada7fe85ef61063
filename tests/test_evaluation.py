"""Evaluations that measure: several episodes each from its own reset, a greedy or a sampled policy."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents import envs, ppo
from agents.ppo import stages

TINY = dict(num_envs=2, batch_size=8, num_minibatches=2, update_epochs=1, hidden_sizes=(8,))


def drift_env() -> envs.JaxEnv:
    """1-D: the reset draws a start x0 in [0, 1); every step pays x and moves x by 0.1 x (action - 1)
    (actions 0, 1, 2); 6-step episodes. Returns differ between resets."""
    def reset(key):
        x = jax.random.uniform(key)
        return (x, jnp.zeros((), jnp.int32)), x[None]

    def step(key, state, action):
        x, t = state
        x, t = x + 0.1 * (action - 1), t + 1
        return (x, t), x[None], x, t >= 6

    return envs.JaxEnv(name="drift", obs_size=1, action_size=3, discrete=True, reset=reset, step=step,
                       max_episode_steps=6)


def lever_env() -> envs.JaxEnv:
    """A sparse reward: action 1 pays 1, action 0 nothing; 5-step episodes."""
    def reset(key):
        return jnp.zeros((), jnp.int32), jnp.zeros((1,), jnp.float32)

    def step(key, t, action):
        return t + 1, jnp.zeros((1,), jnp.float32), (action == 1).astype(jnp.float32), t + 1 >= 5

    return envs.JaxEnv(name="lever", obs_size=1, action_size=2, discrete=True, reset=reset, step=step,
                       max_episode_steps=5)


def learner_on(env, **fields):
    return ppo.make_learner(ppo.PPOConfig(**TINY, **fields), env, hcjax.make_tuner("fixed", hcjax.ppo_space((8, 16))))


def test_an_evaluation_is_the_mean_of_its_episodes_each_from_its_own_reset():
    """evaluate(state, key) with eval_episodes=4 equals the mean of episode_return over the four
    keys split from key, each run alone (a Python loop); the episodes start apart (their
    returns differ), and one episode of the same key is not their mean."""
    env = drift_env()
    learner = learner_on(env, eval_episodes=4, eval_steps=10)
    state = jax.jit(learner.init)(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(5)
    got = float(jax.jit(learner.evaluate)(state, key))
    policy = functools.partial(learner.eval_action, state)
    one = jax.jit(lambda k: stages.episode_return(env.reset, env.step, policy, k, 10))
    episodes = [float(one(k)) for k in jax.random.split(key, 4)]
    assert got == pytest.approx(np.mean(episodes), rel=1e-5)
    assert len(set(np.round(episodes, 5))) == 4
    single = learner_on(env, eval_episodes=1, eval_steps=10)
    assert float(jax.jit(single.evaluate)(state, key)) != pytest.approx(got, rel=1e-3)


def test_a_sparse_reward_that_greedy_never_reaches_is_measured_by_sampled_episodes():
    """A policy that slightly prefers the unpaid action: its greedy evaluation scores exactly 0
    whatever the key (it measures nothing), its sampled evaluation over 8 episodes scores between
    0 and the maximum, and differs between keys."""
    env = lever_env()
    greedy = learner_on(env, eval_episodes=8, eval_steps=5)
    sampled = learner_on(env, eval_episodes=8, eval_steps=5, eval_policy="sampled")
    state = jax.jit(greedy.init)(jax.random.PRNGKey(0))
    head = state.params["actor"]["params"]["MLP_0"]["Dense_1"]
    head = dict(head, bias=jnp.asarray([0.2, 0.0]), kernel=jnp.zeros_like(head["kernel"]))  # logits (0.2, 0)
    actor = {"params": {"MLP_0": dict(state.params["actor"]["params"]["MLP_0"], Dense_1=head)}}
    state = state.replace(params=dict(state.params, actor=actor))
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    assert [float(jax.jit(greedy.evaluate)(state, k)) for k in keys] == [0.0, 0.0, 0.0]
    scores = [float(jax.jit(sampled.evaluate)(state, k)) for k in keys]
    assert all(0.5 < s < 4.5 for s in scores) and len(set(scores)) > 1  # P(action 1) = 0.45: 2.25 expected
    with pytest.raises(ValueError, match="eval_policy must be one of"):
        ppo.PPOConfig(eval_policy="mean")
    with pytest.raises(ValueError, match="eval_episodes must be an integer >= 1"):
        ppo.PPOConfig(eval_episodes=0)


def evaluation_temp_bytes(learner) -> int:
    """XLA's temporary buffers of the compiled evaluation of one agent (nothing run)."""
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(learner.init, key)
    return jax.jit(learner.evaluate).lower(state, key).compile().memory_analysis().temp_size_in_bytes


def test_an_evaluation_holds_nothing_proportional_to_eval_steps():
    """Issue 41: eval_steps=10**9 once split one key per step per agent (10 GiB in 82 s of the
    probe); the steps' keys are now drawn inside the scan, so the compiled evaluation's
    temporaries are those of eval_steps=10 (shapes only: nothing is run)."""
    short = evaluation_temp_bytes(learner_on(drift_env(), eval_steps=10, eval_episodes=2))
    long = evaluation_temp_bytes(learner_on(drift_env(), eval_steps=10**9, eval_episodes=2))
    assert long == short < 2**20
