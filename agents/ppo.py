"""PureJaxRL-style PPO whose four hyperparameters are traced values, any tuner in the loop.

    learner = make_learner(config, env, tuner)
    state = learner.init(key)                         # LearnerState
    state, metrics = learner.iterate(state, 10)       # lax.scan of 10 iterations
    ret = learner.evaluate(state, key)                # deterministic episode return
    train = make_train(config, env, tuner)            # train(key) -> (state, metrics)
    jax.jit(jax.vmap(train))(keys)                    # N agents, own nets/optimisers/tuners

One iteration (all inside one jitted function):
1. rollout: a scan over `max_steps` = ceil(max_batch_size / num_envs) steps of the
   `num_envs` envs; steps t >= n_steps = ceil(batch_size / num_envs) (batch_size traced,
   from the tuner) leave the env state unchanged and are masked, so the iteration
   collects n_steps * num_envs valid frames (the chosen batch size up to one step of
   all envs). Observations are normalised with the statistics frozen at the start of
   the iteration; the statistics are updated after the update, by valid frames only.
2. GAE backwards through the mask (masked steps pass the bootstrap value through).
3. `update_epochs` epochs x `num_minibatches` (M) minibatches: a permutation puts the
   n_valid valid samples first (argsort of uniform keys, masked ones pushed to the end);
   minibatch m takes valid samples [m n_valid // M, (m+1) n_valid // M) through a
   fixed-size gather of L = ceil(max_batch / M) indices, masked beyond its size, so
   every valid sample is used exactly once per epoch and the compute is that of the
   maximum batch. Advantages are normalised per minibatch over its valid samples.
4. `tuner.tell(objective)` every iteration (from the second on for the "change"
   objectives), `tuner.ask` every `tune_every` iterations; the asked values are used
   from the next iteration on.

Divergence guard: each minibatch step whose new parameters or optimiser state would
contain a non-finite value is rejected (parameters and optimiser state are kept);
metrics["rejected"] is 1 for an iteration with any rejected step. Training goes on.

Loss: clipped surrogate + vf_coef * 0.5 * (V - target)^2 (unclipped value loss,
vf_coef 0.5) - ent_coef * entropy; Adam (eps 1e-5) after global-norm clipping 1.0.
Termination and time-limit truncation are both treated as terminal (no bootstrap).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from agents import networks as nets
from agents.wrappers import ObsStats, init_obs_stats, normalize_obs, track_episodes, update_obs_stats

OBJECTIVES = ("reward_change", "reward", "return_change")
HP_NAMES = ("learning_rate", "clip_eps", "gae_lambda", "batch_size")
METRIC_KEYS = ("train_reward", "objective", "hparams", "frames", "rejected", "episode_return")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Static PPO configuration, validated at construction (ValueError naming the field).

    learning_rate, clip_eps, gae_lambda, batch_size are used only when the tuner's space
    does not contain a hyperparameter of that name. max_batch_size: the rollout's
    fixed maximum (None: the space's batch_size upper bound, else batch_size); a batch
    size above it is clipped to it (metrics "frames" shows what was collected).
    reward_scale multiplies rewards for GAE and the value targets only (metrics and the
    objective use raw rewards). num_minibatches must not exceed the maximum batch.
    """

    num_iterations: int = 1000
    num_envs: int = 8
    batch_size: int = 1000
    max_batch_size: int | None = None
    num_minibatches: int = 16
    update_epochs: int = 10
    learning_rate: float = 3e-4
    clip_eps: float = 0.2
    gae_lambda: float = 0.95
    gamma: float = 0.99
    ent_coef: float = 1e-4
    vf_coef: float = 0.5
    max_grad_norm: float = 1.0
    adam_eps: float = 1e-5
    hidden_sizes: tuple = (256, 256, 256)
    activation: str = "tanh"
    init_log_std: float = 0.0
    normalize_obs: bool = True
    obs_clip: float = 10.0
    reward_scale: float = 1.0
    tune_every: int = 5
    objective: str = "reward_change"
    eval_steps: int = 1000

    def __post_init__(self):
        def integer(field, low, value=None):
            v = getattr(self, field) if value is None else value
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
                raise ValueError(f"PPOConfig.{field} must be an integer >= {low}, got {v!r}")

        def real(field, low, high=None, low_open=False):
            v = getattr(self, field)
            ok = isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
            ok = ok and (v > low if low_open else v >= low) and (high is None or v <= high)
            if not ok:
                rng = f"{'>' if low_open else '>='} {low}" + ("" if high is None else f" and <= {high}")
                raise ValueError(f"PPOConfig.{field} must be a number {rng}, got {v!r}")

        for f in ("num_iterations", "num_envs", "batch_size", "num_minibatches", "update_epochs",
                  "tune_every", "eval_steps"):
            integer(f, 1)
        if self.max_batch_size is not None:
            integer("max_batch_size", 1)
        real("learning_rate", 0.0, low_open=True)
        real("clip_eps", 0.0, low_open=True)
        real("gae_lambda", 0.0, 1.0)
        real("gamma", 0.0, 1.0)
        real("ent_coef", 0.0)
        real("vf_coef", 0.0)
        real("max_grad_norm", 0.0, low_open=True)
        real("adam_eps", 0.0, low_open=True)
        real("obs_clip", 0.0, low_open=True)
        real("reward_scale", 0.0, low_open=True)
        real("init_log_std", -20.0, 5.0)
        hs = self.hidden_sizes
        if not isinstance(hs, tuple) or not all(isinstance(w, int) and w >= 1 for w in hs):
            raise ValueError(f"PPOConfig.hidden_sizes must be a tuple of integers >= 1, got {hs!r}")
        if self.activation not in nets.ACTIVATIONS:
            raise ValueError(f"PPOConfig.activation must be one of {sorted(nets.ACTIVATIONS)}, got {self.activation!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"PPOConfig.objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if not isinstance(self.normalize_obs, bool):
            raise ValueError(f"PPOConfig.normalize_obs must be True or False, got {self.normalize_obs!r}")


@struct.dataclass
class LearnerState:
    """One agent. params {"actor", "critic"}; opt_state (optax, lr injected);
    obs_stats: ObsStats; env_state: batched env state (num_envs leading; None on the
    host path); obs: (num_envs, obs_size) raw last observations (None on the host path);
    ep_running: (num_envs,) running episode returns (None on the host path);
    tuner_state; hparams: (h,) values in effect; iteration: int32 iterations done;
    prev_reward, prev_return: float32; has_reward, has_return: bool; key."""

    params: Any
    opt_state: Any
    obs_stats: ObsStats
    env_state: Any
    obs: Any
    ep_running: Any
    tuner_state: Any
    hparams: jax.Array
    iteration: jax.Array
    prev_reward: jax.Array
    prev_return: jax.Array
    has_reward: jax.Array
    has_return: jax.Array
    key: jax.Array


class Learner(NamedTuple):
    """Pure functions of one agent (jit- and vmap-able).

    init(key) -> LearnerState; iterate(state, num_iterations) -> (state, metrics with
    leading axis num_iterations); evaluate(state, key) -> scalar return (JAX envs only).
    Host path: act(state, obs (E, obs_size), t) -> dict(action, env_action, logp, value,
    obs_norm); value(state, obs) -> (E,); learn(state, traj) -> (state, metrics of one
    iteration); n_steps(state) -> int32 valid rollout steps of the next iteration;
    mode(state, obs (..., obs_size)) -> deterministic env action (clipped mean / argmax).
    """

    config: PPOConfig
    env: Any
    tuner: Any
    max_steps: int
    init: Callable
    iterate: Callable
    evaluate: Callable
    act: Callable
    value: Callable
    learn: Callable
    n_steps: Callable
    mode: Callable


# ---- pure building blocks (tested directly) ---------------------------------------------


def gae(reward, value, done, valid, last_value, gamma, lam):
    """Generalised advantage estimation through a validity mask.

    reward, value, done, valid: (T, E); last_value: (E,) value of the observation after
    the last valid step. Masked steps output 0 and pass the carry through unchanged, so
    the advantages of valid steps do not depend on masked ones.
    Returns advantages (T, E) and value targets (T, E) (= advantages + values).
    """
    def body(carry, x):
        next_gae, next_value = carry
        r, v, d, m = x
        nonterminal = 1.0 - d.astype(jnp.float32)
        delta = r + gamma * next_value * nonterminal - v
        adv = delta + gamma * lam * nonterminal * next_gae
        carry = (jnp.where(m, adv, next_gae), jnp.where(m, v, next_value))
        return carry, jnp.where(m, adv, 0.0)

    init = (jnp.zeros_like(last_value), last_value)
    _, adv = jax.lax.scan(body, init, (reward, value, done, valid), reverse=True)
    return adv, jnp.where(valid, adv + value, 0.0)


def ppo_loss(actor_apply, critic_apply, params, batch, mask, clip_eps, vf_coef, ent_coef, discrete):
    """Masked PPO loss of one minibatch.

    batch: obs (B, obs_size), action (B,) or (B, a), logp (B,), adv (B,), target (B,);
    mask: (B,) bool. Advantages are standardised over the valid samples. Returns
    (loss, aux dict of pg_loss, v_loss, entropy), every term a mean over valid samples.
    """
    w = mask.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(w), 1.0)
    dist = actor_apply(params["actor"], batch["obs"])
    logp = nets.log_prob(dist, batch["action"], discrete)
    ent = nets.entropy(dist, discrete)
    value = critic_apply(params["critic"], batch["obs"])
    adv = batch["adv"]
    mean = jnp.sum(w * adv) / n
    std = jnp.sqrt(jnp.sum(w * (adv - mean) ** 2) / n)
    adv = (adv - mean) / (std + 1e-8)
    ratio = jnp.exp(logp - batch["logp"])
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
    vl = 0.5 * (value - batch["target"]) ** 2
    pg_loss = jnp.sum(jnp.where(mask, pg, 0.0)) / n
    v_loss = jnp.sum(jnp.where(mask, vl, 0.0)) / n
    entropy = jnp.sum(jnp.where(mask, ent, 0.0)) / n
    loss = pg_loss + vf_coef * v_loss - ent_coef * entropy
    return loss, dict(pg_loss=pg_loss, v_loss=v_loss, entropy=entropy)


def all_finite(tree) -> jax.Array:
    """bool scalar: every inexact leaf of `tree` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _select(pred, a, b):
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


# ---- the learner ------------------------------------------------------------------------


def make_learner(config: PPOConfig, env, tuner) -> Learner:
    """Build the pure functions of one PPO agent on `env` with `tuner` in the loop."""
    if not isinstance(config, PPOConfig):
        raise ValueError(f"make_learner: config must be a PPOConfig, got {type(config).__name__}")
    space = tuner.space
    names = tuple(space.names)
    idx = {n: names.index(n) for n in HP_NAMES if n in names}
    if config.max_batch_size is not None:
        max_batch = config.max_batch_size
    elif "batch_size" in idx:
        max_batch = int(space.high[idx["batch_size"]])
    else:
        max_batch = config.batch_size
    E = config.num_envs
    M = config.num_minibatches
    max_steps = -(-max_batch // E)
    N = max_steps * E
    if N < M:
        raise ValueError(f"PPOConfig.num_minibatches must be <= max batch {N} (num_envs x max_steps), got {M}")
    L = -(-N // M)
    discrete = env.discrete
    actor = nets.Actor(env.action_size, discrete, config.hidden_sizes, config.activation, config.init_log_std)
    critic = nets.Critic(config.hidden_sizes, config.activation)
    low, high = jnp.asarray(env.action_low), jnp.asarray(env.action_high)
    defaults = dict(learning_rate=config.learning_rate, clip_eps=config.clip_eps,
                    gae_lambda=config.gae_lambda, batch_size=float(config.batch_size))

    def hp(values, name):
        if name in idx:
            return values[idx[name]]
        return jnp.asarray(defaults[name], jnp.float32)

    def make_opt(learning_rate):
        return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                           optax.adam(learning_rate, eps=config.adam_eps))

    opt = optax.inject_hyperparams(make_opt)(learning_rate=config.learning_rate)

    def set_lr(opt_state, lr):
        hps = dict(opt_state.hyperparams)
        hps["learning_rate"] = jnp.asarray(lr, jnp.float32)
        return opt_state._replace(hyperparams=hps)

    def norm(stats, obs):
        return normalize_obs(stats, obs, config.obs_clip) if config.normalize_obs else obs

    def n_steps_of(hparams):
        batch = jnp.round(hp(hparams, "batch_size")).astype(jnp.int32)
        return jnp.clip((batch + E - 1) // E, 1, max_steps).astype(jnp.int32)

    def env_action(action):
        return action if discrete else nets.clip_action(action, low, high)

    # -- init --
    def init(key) -> LearnerState:
        k_actor, k_critic, k_tuner, k_ask, k_env, k_next = jax.random.split(key, 6)
        dummy = jnp.zeros((env.obs_size,), jnp.float32)
        params = {"actor": actor.init(k_actor, dummy), "critic": critic.init(k_critic, dummy)}
        tuner_state = tuner.init(k_tuner)
        tuner_state, values = tuner.ask(tuner_state, k_ask)
        values = jnp.asarray(values, jnp.float32)
        opt_state = set_lr(opt.init(params), hp(values, "learning_rate"))
        if env.host:
            env_state = obs = ep_running = None
        else:
            env_state, obs = jax.vmap(env.reset)(jax.random.split(k_env, E))
            ep_running = jnp.zeros((E,), jnp.float32)
        zero = jnp.zeros((), jnp.float32)
        return LearnerState(params=params, opt_state=opt_state, obs_stats=init_obs_stats(env.obs_size),
                            env_state=env_state, obs=obs, ep_running=ep_running, tuner_state=tuner_state,
                            hparams=values, iteration=jnp.zeros((), jnp.int32), prev_reward=zero,
                            prev_return=zero, has_reward=jnp.asarray(False), has_return=jnp.asarray(False),
                            key=k_next)

    # -- acting --
    def act_with(params, stats, obs, key):
        obs_n = norm(stats, obs)
        dist = actor.apply(params["actor"], obs_n)
        action = nets.sample(key, dist, discrete)
        return dict(action=action, env_action=env_action(action), logp=nets.log_prob(dist, action, discrete),
                    value=critic.apply(params["critic"], obs_n), obs_norm=obs_n)

    def act(state, obs, t):
        """Host path: obs (E, obs_size) raw -> actions etc. for rollout step t."""
        key = jax.random.fold_in(jax.random.fold_in(state.key, 7), t)
        return act_with(state.params, state.obs_stats, jnp.asarray(obs, jnp.float32), key)

    def mode(state, obs):
        dist = actor.apply(state.params["actor"], norm(state.obs_stats, jnp.asarray(obs, jnp.float32)))
        return env_action(nets.mode(dist, discrete))

    def value(state, obs):
        return critic.apply(state.params["critic"], norm(state.obs_stats, jnp.asarray(obs, jnp.float32)))

    # -- rollout (JAX envs) --
    def rollout(state, key):
        n_steps = n_steps_of(state.hparams)

        def step(carry, t):
            env_state, obs, running, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            valid = t < n_steps
            out = act_with(state.params, state.obs_stats, obs, k_act)

            def do(_):
                s, o, r, d = jax.vmap(env.step)(jax.random.split(k_env, E), env_state, out["env_action"])
                return s, o, r.astype(jnp.float32), d.astype(bool)

            def skip(_):
                return env_state, obs, jnp.zeros((E,), jnp.float32), jnp.zeros((E,), bool)

            env_state2, obs2, reward, done = jax.lax.cond(valid, do, skip, None)
            running, ep_ret, ep_done = track_episodes(running, reward, done, valid)
            tr = dict(obs=out["obs_norm"], raw_obs=obs, action=out["action"], logp=out["logp"],
                      value=out["value"], reward=reward, done=done, valid=jnp.broadcast_to(valid, (E,)),
                      ep_return=ep_ret, ep_done=ep_done)
            tr = {k: jnp.where(valid.reshape((1,) * v.ndim), v, jnp.zeros_like(v)) for k, v in tr.items()}
            return (env_state2, obs2, running, key), tr

        carry = (state.env_state, state.obs, state.ep_running, key)
        (env_state, obs, running, _), traj = jax.lax.scan(step, carry, jnp.arange(max_steps))
        traj["last_value"] = critic.apply(state.params["critic"], norm(state.obs_stats, obs))
        return state.replace(env_state=env_state, obs=obs, ep_running=running), traj

    # -- learning from a trajectory (shared by both paths) --
    def loss_fn(params, batch, mask, clip_eps):
        return ppo_loss(actor.apply, critic.apply, params, batch, mask, clip_eps, config.vf_coef,
                        config.ent_coef, discrete)

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def learn(state, traj):
        """traj: obs, raw_obs (T, E, obs_size); action (T, E[, a]); logp, value, reward,
        ep_return (T, E) float; done, valid, ep_done (T, E) bool; last_value (E,)."""
        key, k_epochs, k_ask, k_next = jax.random.split(state.key, 4)
        hparams = state.hparams
        lr, clip_eps, lam = hp(hparams, "learning_rate"), hp(hparams, "clip_eps"), hp(hparams, "gae_lambda")
        valid = traj["valid"]
        reward = traj["reward"]
        adv, target = gae(reward * config.reward_scale, traj["value"], traj["done"], valid,
                          traj["last_value"], config.gamma, lam)
        flat = dict(obs=traj["obs"], action=traj["action"], logp=traj["logp"], adv=adv, target=target)
        flat = jax.tree.map(lambda x: x.reshape((N,) + x.shape[2:]), flat)
        vflat = valid.reshape(N)
        n_valid = jnp.sum(vflat.astype(jnp.int32))
        opt_state = set_lr(state.opt_state, lr)

        def epoch(carry, k):
            perm = jnp.argsort(jnp.where(vflat, jax.random.uniform(k, (N,)), 2.0))

            def minibatch(carry, m):
                params, opt_state, rejected = carry
                start = (m * n_valid) // M
                size = ((m + 1) * n_valid) // M - start
                pos = jnp.arange(L)
                rows = perm[jnp.minimum(start + pos, N - 1)]
                mask = pos < size
                batch = jax.tree.map(lambda x: x[rows], flat)
                grads, _ = grad_fn(params, batch, mask, clip_eps)
                updates, new_opt = opt.update(grads, opt_state, params)
                new_params = optax.apply_updates(params, updates)
                finite = all_finite(new_params) & all_finite(new_opt)
                accept = finite & (size > 0)
                params = _select(accept, new_params, params)
                opt_state = _select(accept, new_opt, opt_state)
                return (params, opt_state, rejected | ~finite), None

            carry, _ = jax.lax.scan(minibatch, carry, jnp.arange(M))
            return carry, None

        (params, opt_state, rejected), _ = jax.lax.scan(
            epoch, (state.params, opt_state, jnp.asarray(False)), jax.random.split(k_epochs, config.update_epochs))

        stats = update_obs_stats(state.obs_stats, traj["raw_obs"], valid) if config.normalize_obs else state.obs_stats

        # training reward and episode returns of this iteration
        frames = n_valid
        R = jnp.sum(jnp.where(valid, reward, 0.0)) / jnp.maximum(frames, 1).astype(jnp.float32)
        n_ep = jnp.sum(traj["ep_done"].astype(jnp.float32))
        ep_mean = jnp.sum(jnp.where(traj["ep_done"], traj["ep_return"], 0.0)) / jnp.maximum(n_ep, 1.0)
        has_return_now = state.has_return | (n_ep > 0)
        ep_return = jnp.where(n_ep > 0, ep_mean, state.prev_return)

        if config.objective == "reward_change":
            objective, do_tell = R - state.prev_reward, state.has_reward
        elif config.objective == "reward":
            objective, do_tell = R, jnp.asarray(True)
        else:
            objective, do_tell = ep_return - state.prev_return, state.has_return & has_return_now
        objective = jnp.where(do_tell, objective, 0.0).astype(jnp.float32)
        tuner_state = _select(do_tell, tuner.tell(state.tuner_state, objective), state.tuner_state)
        do_ask = (state.iteration + 1) % config.tune_every == 0
        asked_state, asked = tuner.ask(tuner_state, k_ask)
        tuner_state = _select(do_ask, asked_state, tuner_state)
        new_hparams = jnp.where(do_ask, jnp.asarray(asked, jnp.float32), hparams)

        metrics = dict(train_reward=R, objective=objective, hparams=hparams, frames=frames,
                       rejected=rejected.astype(jnp.int32), episode_return=ep_return)
        state = state.replace(params=params, opt_state=opt_state, obs_stats=stats, tuner_state=tuner_state,
                              hparams=new_hparams, iteration=state.iteration + 1, prev_reward=R,
                              prev_return=ep_return, has_reward=jnp.asarray(True), has_return=has_return_now,
                              key=k_next)
        return state, metrics

    def one_iteration(state, _):
        key, k_roll = jax.random.split(state.key)
        state, traj = rollout(state.replace(key=key), k_roll)
        return learn(state, traj)

    def iterate(state, num_iterations: int):
        if env.host:
            raise ValueError(f"iterate: {env.name} is a host (gymnasium) env; use agents.driver.run")
        return jax.lax.scan(one_iteration, state, None, length=num_iterations)

    def evaluate(state, key):
        """Deterministic (mean-action) return of one episode of at most eval_steps steps."""
        if env.host:
            raise ValueError(f"evaluate: {env.name} is a host (gymnasium) env; use agents.driver.evaluate_host")
        k_reset, k_steps = jax.random.split(key)
        env_state, obs = env.reset(k_reset)

        def step(carry, k):
            env_state, obs, ret, alive = carry
            dist = actor.apply(state.params["actor"], norm(state.obs_stats, obs))
            env_state, obs, r, d = env.step(k, env_state, env_action(nets.mode(dist, discrete)))
            return (env_state, obs, ret + jnp.where(alive, r, 0.0), alive & ~d), None

        carry = (env_state, obs, jnp.zeros((), jnp.float32), jnp.asarray(True))
        (_, _, ret, _), _ = jax.lax.scan(step, carry, jax.random.split(k_steps, config.eval_steps))
        return ret

    return Learner(config=config, env=env, tuner=tuner, max_steps=max_steps, init=init, iterate=iterate,
                   evaluate=evaluate, act=act, value=value, learn=learn,
                   n_steps=lambda state: n_steps_of(state.hparams), mode=mode)


def make_train(config: PPOConfig, env, tuner) -> Callable:
    """train(key) -> (final LearnerState, metrics with leading axis config.num_iterations)."""
    learner = make_learner(config, env, tuner)

    def train(key):
        return learner.iterate(learner.init(key), config.num_iterations)

    return train
