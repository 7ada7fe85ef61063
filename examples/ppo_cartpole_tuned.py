"""PPO on gymnax CartPole-v1 in the PureJaxRL style: the whole run is one jitted function,
seeds are vmapped (docs/own-training-loop.md: ppo_cartpole.py untuned, ppo_cartpole_tuned.py
with a tuner per seed, ppo_cartpole_pbt.py with population-based training over the seeds)."""
from typing import NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState
from gymnax.wrappers import LogWrapper

import hcjax
from agents.networks import orthogonal  # flax's orthogonal init, vmapped, can hang XLA:CPU with jax < 0.11

CONFIG = dict(LR=2.5e-4, NUM_ENVS=4, NUM_STEPS=128, TOTAL_TIMESTEPS=2e5, UPDATE_EPOCHS=4, NUM_MINIBATCHES=4,
              GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01, VF_COEF=0.5, MAX_GRAD_NORM=0.5)
SPACE = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, "log", default=CONFIG["LR"]),
                     hcjax.Hyperparameter("clip_eps", 0.1, 0.4, default=CONFIG["CLIP_EPS"])])
TUNER = hcjax.control.with_control(hcjax.make_tuner("hypercontroller", SPACE))  # controls run the defaults


class ActorCritic(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, x):
        def dense(n, scale):
            return nn.Dense(n, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)

        pi = nn.tanh(dense(64, np.sqrt(2))(nn.tanh(dense(64, np.sqrt(2))(x))))
        v = nn.tanh(dense(64, np.sqrt(2))(nn.tanh(dense(64, np.sqrt(2))(x))))
        return dense(self.action_dim, 0.01)(pi), dense(1, 1.0)(v)[..., 0]


class Transition(NamedTuple):
    done: jnp.ndarray
    action: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    log_prob: jnp.ndarray
    obs: jnp.ndarray
    info: dict


def log_prob_of(logits, action):
    return jnp.take_along_axis(jax.nn.log_softmax(logits), action[..., None], -1)[..., 0]


def make_train(config):
    num_updates = int(config["TOTAL_TIMESTEPS"]) // (config["NUM_STEPS"] * config["NUM_ENVS"])
    batch_size = config["NUM_STEPS"] * config["NUM_ENVS"]
    env, env_params = gymnax.make("CartPole-v1")
    env = LogWrapper(env)
    network = ActorCritic(env.action_space(env_params).n)

    def train(rng, control):  # control: this agent runs the defaults (hcjax.control.controls)
        rng, _rng = jax.random.split(rng)
        params = network.init(_rng, jnp.zeros(env.observation_space(env_params).shape))
        tx = optax.chain(
            optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
            optax.inject_hyperparams(optax.adam)(config["LR"], eps=1e-5),
        )
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        rng, _rng = jax.random.split(rng)
        reset_keys = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)

        def _update_step(carry, update_i):
            runner_state, (tuner_state, level) = carry
            hp = SPACE.as_dict(TUNER.values(tuner_state))
            def _env_step(runner_state, unused):
                train_state, env_state, last_obs, rng = runner_state
                rng, _rng, _rng2 = jax.random.split(rng, 3)
                logits, value = network.apply(train_state.params, last_obs)
                action = jax.random.categorical(_rng, logits)
                step_keys = jax.random.split(_rng2, config["NUM_ENVS"])
                obsv, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                    step_keys, env_state, action, env_params)
                done = terminated | truncated  # as PureJaxRL: no bootstrapping at the time limit
                transition = Transition(done, action, value, reward, log_prob_of(logits, action), last_obs, info)
                return (train_state, env_state, obsv, rng), transition

            runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])
            train_state, env_state, last_obs, rng = runner_state
            train_state = train_state.replace(opt_state=hcjax.optax.set_hyperparams(train_state.opt_state, hp))
            _, last_val = network.apply(train_state.params, last_obs)

            def _gae(carry, t):
                gae, next_value = carry
                delta = t.reward + config["GAMMA"] * next_value * (1 - t.done) - t.value
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - t.done) * gae
                return (gae, t.value), gae

            _, advantages = jax.lax.scan(_gae, (jnp.zeros_like(last_val), last_val), traj_batch, reverse=True)
            targets = advantages + traj_batch.value

            def _update_minibatch(train_state, batch):
                traj, advantage, target = batch

                def _loss_fn(params):
                    logits, value = network.apply(params, traj.obs)
                    log_prob = log_prob_of(logits, traj.action)
                    v_clipped = traj.value + (value - traj.value).clip(-config["CLIP_EPS"], config["CLIP_EPS"])
                    value_loss = 0.5 * jnp.maximum((value - target) ** 2, (v_clipped - target) ** 2).mean()
                    ratio = jnp.exp(log_prob - traj.log_prob)
                    gae = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
                    clipped = jnp.clip(ratio, 1.0 - hp["clip_eps"], 1.0 + hp["clip_eps"])
                    actor_loss = -jnp.minimum(ratio * gae, clipped * gae).mean()
                    entropy = -(jax.nn.softmax(logits) * jax.nn.log_softmax(logits)).sum(-1).mean()
                    return actor_loss + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy

                return train_state.apply_gradients(grads=jax.grad(_loss_fn)(train_state.params)), None

            def _update_epoch(update_state, unused):
                train_state, rng = update_state
                rng, _rng = jax.random.split(rng)
                permutation = jax.random.permutation(_rng, batch_size)
                batch = (traj_batch, advantages, targets)
                batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:])[permutation], batch)
                minibatches = jax.tree.map(lambda x: x.reshape((config["NUM_MINIBATCHES"], -1) + x.shape[1:]), batch)
                train_state, _ = jax.lax.scan(_update_minibatch, train_state, minibatches)
                return (train_state, rng), None

            (train_state, rng), _ = jax.lax.scan(_update_epoch, (train_state, rng), None, config["UPDATE_EPOCHS"])
            objective, level = hcjax.objectives.return_change(
                level, traj_batch.info["returned_episode_returns"], traj_batch.info["returned_episode"])
            tuner_state, _ = TUNER.step(tuner_state, rng, objective, update_i % 4 == 0)
            return ((train_state, env_state, last_obs, rng), (tuner_state, level)), {**traj_batch.info, **hp}

        rng, _rng = jax.random.split(rng)
        tuner_state = hcjax.control.assign(TUNER.init(rng), control)
        runner_state = ((train_state, env_state, obsv, _rng), (tuner_state, hcjax.objectives.NO_LEVEL))
        runner_state, metrics = jax.lax.scan(_update_step, runner_state, jnp.arange(num_updates))
        return {"runner_state": runner_state, "metrics": metrics}

    return train


if __name__ == "__main__":
    rngs, controls = jax.random.split(jax.random.PRNGKey(42), 8), hcjax.control.controls(8)  # 4 tuned, 4 controls
    hcjax.check_keys(rngs)
    out = jax.block_until_ready(jax.jit(jax.vmap(make_train(CONFIG)))(rngs, controls))
    info = out["metrics"]  # leaves (seeds, updates, steps, envs)
    done, returns = info["returned_episode"], info["returned_episode_returns"]
    last = (returns * done)[:, -10:].sum((1, 2, 3)) / done[:, -10:].sum((1, 2, 3))
    print("mean return of the episodes finished in the last 10 updates, per seed:", np.round(np.asarray(last), 1))
    print(hcjax.control.report(last, controls, hyperparameters={k: info[k][:, -1] for k in SPACE.names}))
