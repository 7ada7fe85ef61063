"""DQN on gymnax CartPole-v1 in the PureJaxRL style: the whole run is one jitted function,
seeds are vmapped, one flat scan over updates (docs/own-training-loop.md: dqn_cartpole.py
untuned, dqn_cartpole_tuned.py with a tuner per seed). Every EVAL_EVERY updates the greedy
policy is evaluated (hcjax.objectives.greedy_returns) inside a lax.cond."""
from typing import NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState

import hcjax

CONFIG = dict(LR=2.5e-4, NUM_ENVS=4, BUFFER_SIZE=10000, BATCH_SIZE=64, TOTAL_TIMESTEPS=5e4, EPS_START=1.0,
              EPS_FINISH=0.05, EPS_ANNEAL_TIME=2.5e4, LEARNING_STARTS=1000, TARGET_UPDATE_INTERVAL=100, GAMMA=0.99,
              EVAL_EVERY=500, EVAL_EPISODES=4)
# log ranges a factor 2.5 (learning rate) and 4 (floor) either side of the default, the middle of d=3 arms
SPACE = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 6.25e-4, "log", default=CONFIG["LR"]),
                     hcjax.Hyperparameter("eps_floor", 0.0125, 0.2, "log", default=CONFIG["EPS_FINISH"])])
TUNER = hcjax.control.with_control(hcjax.make_tuner("hypercontroller", SPACE, d=3))  # controls: the defaults


class QNetwork(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(64)(x))
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(self.action_dim)(x)


class Buffer(NamedTuple):  # a circular replay buffer of NUM_ENVS transitions per update
    obs: jnp.ndarray
    action: jnp.ndarray
    reward: jnp.ndarray
    next_obs: jnp.ndarray
    done: jnp.ndarray
    size: jnp.ndarray


def make_train(config):
    num_updates = int(config["TOTAL_TIMESTEPS"]) // config["NUM_ENVS"]
    env, env_params = gymnax.make("CartPole-v1")
    network = QNetwork(env.action_space(env_params).n)
    obs_shape = env.observation_space(env_params).shape

    def train(rng, control):  # control: this agent runs the defaults (hcjax.control.controls)
        rng, _rng = jax.random.split(rng)
        params = network.init(_rng, jnp.zeros(obs_shape))
        tx = optax.inject_hyperparams(optax.adam)(config["LR"])
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        n = config["BUFFER_SIZE"]
        buffer = Buffer(jnp.zeros((n, *obs_shape)), jnp.zeros(n, jnp.int32), jnp.zeros(n), jnp.zeros((n, *obs_shape)),
                        jnp.zeros(n, bool), jnp.int32(0))
        rng, _rng = jax.random.split(rng)
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(_rng, config["NUM_ENVS"]), env_params)

        def greedy(params, obs):
            return jnp.argmax(network.apply(params, obs), -1)

        def _update_step(carry, update_i):
            (train_state, target_params, buffer, env_state, last_obs, rng), (tuner_state, level) = carry
            hp = SPACE.as_dict(TUNER.values(tuner_state))
            rng, _rng, _rng2, _rng3, _rng4, _rng5 = jax.random.split(rng, 6)
            timestep = update_i * config["NUM_ENVS"]
            eps = jnp.maximum(hp["eps_floor"], config["EPS_START"] - timestep / config["EPS_ANNEAL_TIME"])
            explore = jax.random.uniform(_rng, (config["NUM_ENVS"],)) < eps
            random_action = jax.random.randint(_rng2, (config["NUM_ENVS"],), 0, env.action_space(env_params).n)
            action = jnp.where(explore, random_action, greedy(train_state.params, last_obs))
            obsv, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(_rng3, config["NUM_ENVS"]), env_state, action, env_params)
            done = terminated | truncated  # as PureJaxRL: no bootstrapping at the time limit
            at = (update_i * config["NUM_ENVS"]) % config["BUFFER_SIZE"]
            buffer = Buffer(*(jax.lax.dynamic_update_slice_in_dim(b, x.astype(b.dtype), at, 0) for b, x in
                              zip(buffer[:5], (last_obs, action, reward, obsv, done))),
                            jnp.minimum(buffer.size + config["NUM_ENVS"], config["BUFFER_SIZE"]))

            def _learn(train_state):
                i = jax.random.randint(_rng4, (config["BATCH_SIZE"],), 0, buffer.size)
                next_q = jnp.max(network.apply(target_params, buffer.next_obs[i]), -1)
                target = buffer.reward[i] + config["GAMMA"] * (1 - buffer.done[i]) * next_q

                def _loss_fn(params):
                    q = jnp.take_along_axis(network.apply(params, buffer.obs[i]), buffer.action[i][:, None], -1)[:, 0]
                    return jnp.mean((q - target) ** 2)

                return train_state.apply_gradients(grads=jax.grad(_loss_fn)(train_state.params))

            train_state = train_state.replace(opt_state=hcjax.optax.set_hyperparams(train_state.opt_state, hp))
            train_state = jax.lax.cond(timestep >= config["LEARNING_STARTS"], _learn, lambda s: s, train_state)
            target_params = jax.tree.map(lambda t, p: jnp.where(update_i % config["TARGET_UPDATE_INTERVAL"] == 0, p, t),
                                         target_params, train_state.params)
            evaluating = update_i % config["EVAL_EVERY"] == config["EVAL_EVERY"] - 1  # unbatched: the cond stays
            greedy_return = jax.lax.cond(  # the greedy policy's returns every EVAL_EVERY updates, else NaN
                evaluating,
                lambda: hcjax.objectives.greedy_returns(_rng5, env, env_params, lambda o: greedy(train_state.params, o),
                                                        config["EVAL_EPISODES"], env_params.max_steps_in_episode),
                lambda: jnp.full(config["EVAL_EPISODES"], jnp.nan))
            objective, level = hcjax.objectives.return_change(level, greedy_return)  # NaN between evaluations
            tuner_state = jax.lax.cond(evaluating, lambda s: TUNER.step(s, _rng5, objective, True)[0], lambda s: s,
                                       tuner_state)
            runner_state = (train_state, target_params, buffer, env_state, obsv, rng), (tuner_state, level)
            return runner_state, {"greedy_return": greedy_return.mean(), "eps": eps, **hp}

        rng, _rng = jax.random.split(rng)
        runner_state = ((train_state, params, buffer, env_state, obsv, _rng),
                        (hcjax.control.assign(TUNER.init(rng), control), hcjax.objectives.NO_LEVEL))
        runner_state, metrics = jax.lax.scan(_update_step, runner_state, jnp.arange(num_updates))
        return {"runner_state": runner_state, "metrics": metrics}

    return train


if __name__ == "__main__":
    rngs, controls = jax.random.split(jax.random.PRNGKey(42), 8), hcjax.control.controls(8)  # 4 tuned, 4 controls
    hcjax.check_keys(rngs)
    out = jax.block_until_ready(jax.jit(jax.vmap(make_train(CONFIG)))(rngs, controls))
    greedy = np.asarray(out["metrics"]["greedy_return"], np.float64)  # (seeds, updates), NaN between evaluations
    evaluated = greedy[:, ~np.isnan(greedy).any(0)]
    print("greedy return of the last 3 evaluations, per seed:", np.round(evaluated[:, -3:], 1).tolist())
    final = {k: out["metrics"][k][:, -1] for k in SPACE.names}  # each agent's hyperparameters at the end
    print(hcjax.control.report(evaluated[:, -3:].mean(1), controls, hyperparameters=final))
