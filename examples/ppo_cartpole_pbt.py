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
SPACE = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, "log"),
                     hcjax.Hyperparameter("clip_eps", 0.1, 0.4)])
POPULATION = hcjax.make_population("pbt", SPACE, min_gap=0.0)  # ties (all agents at 500) copy nothing


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
    batch_size = config["NUM_STEPS"] * config["NUM_ENVS"]
    env, env_params = gymnax.make("CartPole-v1")
    env = LogWrapper(env)
    network = ActorCritic(env.action_space(env_params).n)

    def init(rng):  # networks, optimiser and envs, no update: the runner_state of the first interval
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
        rng, _rng = jax.random.split(rng)
        return (train_state, env_state, obsv, _rng)

    def train(hp, runner_state):  # one PBT interval: config["READY"] updates with one agent's values hp
        def _update_step(runner_state, unused):
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
            return (train_state, env_state, last_obs, rng), traj_batch.info

        train_state = runner_state[0].replace(opt_state=hcjax.optax.set_hyperparams(runner_state[0].opt_state, hp))
        runner_state = (train_state, *runner_state[1:])
        runner_state, metrics = jax.lax.scan(_update_step, runner_state, None, config["READY"])
        return {"runner_state": runner_state, "metrics": metrics}

    return init, train


def run_pbt(config, rng, n_agents):
    """PBT over n_agents seeds: num_updates / READY intervals, exploit and explore between them."""
    num_updates = int(config["TOTAL_TIMESTEPS"]) // (config["NUM_STEPS"] * config["NUM_ENVS"])
    config = dict(config, READY=hcjax.population.interval(num_updates, config["READY"]))  # READY divides the run
    init, train = (jax.jit(jax.vmap(f)) for f in make_train(config))  # the updates compile once, for every interval

    @jax.jit  # everything between two intervals in one program (op by op, each op would compile on its own)
    def explore(out, objective, pop_state, key):
        info = out["metrics"]  # leaves (n_agents, READY, steps, envs)
        now = jax.vmap(hcjax.objectives.mean_return)(info["returned_episode_returns"], info["returned_episode"])
        objective = jnp.where(jnp.isnan(now), objective, now)  # finite: the last mean return of finished episodes
        pop_key, agents_key = jax.random.split(key)
        pop_state, values, parents = POPULATION.step(pop_state, pop_key, objective)
        train_state, env_state, obsv, _ = hcjax.exploit(out["runner_state"], parents)
        keys = jax.random.split(agents_key, n_agents)  # fresh keys: a copy must not replay its donor
        return objective, pop_state, values, parents, (train_state, env_state, obsv, keys)

    rng, _rng = jax.random.split(rng)
    pop_state, values = jax.jit(POPULATION.init, static_argnums=1)(_rng, n_agents)  # values: (n_agents, h)
    out = train(SPACE.as_dict(values), init(jax.random.split(rng, n_agents)))
    objective, history = jnp.zeros(n_agents), [{**out["metrics"], "values": values}]
    for interval in range(1, num_updates // config["READY"]):
        objective, pop_state, values, parents, runner_state = explore(out, objective, pop_state,
                                                                      jax.random.fold_in(rng, interval))
        out = train(SPACE.as_dict(values), runner_state)
        history.append({**out["metrics"], "values": values, "parents": parents, "objective": objective})
    return out, history

if __name__ == "__main__":
    out, _ = run_pbt(dict(CONFIG, READY=10), jax.random.PRNGKey(42), 4)
    info = out["metrics"]  # leaves (seeds, updates, steps, envs)
    done, returns = info["returned_episode"], info["returned_episode_returns"]
    last = (returns * done)[:, -10:].sum((1, 2, 3)) / done[:, -10:].sum((1, 2, 3))
    print("mean return of the episodes finished in the last 10 updates, per seed:", np.round(np.asarray(last), 1))
