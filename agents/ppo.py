"""PureJaxRL-style PPO whose hyperparameters are traced values, any tuner in the loop.

    learner = make_learner(config, env, tuner)
    state = learner.init(key)                         # LearnerState
    state, metrics = learner.iterate(state, 10, 0)    # lax.scan of iterations 0..9
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
   objectives), `tuner.ask` after iterations t with (t + 1) % tune_every == 0; the
   asked values are used from the next iteration on. The ask runs only on those
   iterations: `iterate(state, n, start)` scans over the iteration numbers start,
   start + 1, ... (not over per-agent state), so under `vmap` the decision is an
   unbatched `lax.cond`, not a `where` that would compute every agent's ask every
   iteration and throw it away (`ask="every_iteration"` keeps that older loop, whose
   cost the benchmark measures; both give the same numbers).

Tuned hyperparameters. Any field of TUNABLE named in the tuner's space is a traced
value read from the tuner's (h,) values every iteration (one compilation serves every
value); the fields not in the space keep their PPOConfig value. learning_rate,
max_grad_norm and adam_eps reach the optimiser through `optax.inject_hyperparams`;
clip_eps, vf_coef and ent_coef the loss; gamma, gae_lambda and reward_scale GAE;
batch_size the rollout (see 1.); obs_clip the observation normalisation. A space
naming a static field (num_envs, hidden_sizes, update_epochs, ...) or an unknown
name, or bounds outside a field's allowed range, raises ValueError.

Objectives and invalid data. The objective (PPOConfig.objective) is computed from the
iteration's rewards: "reward_change" X_t = R_t - R_(t-1) with R_t the mean per-step
reward of the iteration's valid frames; "reward" X_t = R_t; "return_change" the change
of the mean return of the episodes finished in the iteration (the previous value when
none finished). An iteration with a non-finite reward or one above MAX_ABS_OBJECTIVE
(1e15) in magnitude gives an invalid (NaN) objective, and so does the next change
computed from it: the tuner ignores and counts it (never learns from it).
metrics["episode_return"] is NaN until an episode has finished.

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
from hcjax.tuner import valid_objective

OBJECTIVES = ("reward_change", "reward", "return_change")
METRIC_KEYS = ("train_reward", "objective", "hparams", "frames", "rejected", "episode_return")
ASK_MODES = ("when_deciding", "every_iteration")

# Allowed range (low, high or None, low excluded?) of every real-valued PPOConfig field.
REAL_FIELDS = {
    "learning_rate": (0.0, None, True), "clip_eps": (0.0, None, True), "gae_lambda": (0.0, 1.0, False),
    "gamma": (0.0, 1.0, False), "ent_coef": (0.0, None, False), "vf_coef": (0.0, None, False),
    "max_grad_norm": (0.0, None, True), "adam_eps": (0.0, None, True), "obs_clip": (0.0, None, True),
    "reward_scale": (0.0, None, True), "init_log_std": (-20.0, 5.0, False),
}
# Fields a tuner may set during training (traced values); every other field is static.
TUNABLE = ("learning_rate", "clip_eps", "gae_lambda", "batch_size", "ent_coef", "vf_coef", "gamma",
           "max_grad_norm", "reward_scale", "adam_eps", "obs_clip")
OPTIMIZER_HPARAMS = ("learning_rate", "max_grad_norm", "adam_eps")  # through optax.inject_hyperparams


def _in_range(field: str, v) -> bool:
    low, high, low_open = REAL_FIELDS[field]
    return (v > low if low_open else v >= low) and (high is None or v <= high)


def _range_text(field: str) -> str:
    low, high, low_open = REAL_FIELDS[field]
    return f"{'>' if low_open else '>='} {low}" + ("" if high is None else f" and <= {high}")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Static PPO configuration, validated at construction (ValueError naming the field).

    The TUNABLE fields are used only when the tuner's space does not contain a
    hyperparameter of that name (otherwise the tuner sets them). max_batch_size: the rollout's
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

        for f in REAL_FIELDS:
            v = getattr(self, f)
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            if not (ok and math.isfinite(v) and _in_range(f, v)):
                raise ValueError(f"PPOConfig.{f} must be a number {_range_text(f)}, got {v!r}")
        for f in ("num_iterations", "num_envs", "batch_size", "num_minibatches", "update_epochs",
                  "tune_every", "eval_steps"):
            integer(f, 1)
        if self.max_batch_size is not None:
            integer("max_batch_size", 1)
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

    init(key, tuner_state=None) -> LearnerState (tuner_key(key): the key init gives the
    tuner); iterate(state, num_iterations, start=None) -> (state,
    metrics with leading axis num_iterations); evaluate(state, key) -> scalar return
    (JAX envs only).
    Host path: act(state, obs (E, obs_size), t) -> dict(action, env_action, logp, value,
    obs_norm); value(state, obs) -> (E,); learn(state, traj, do_ask=None) -> (state,
    metrics of one iteration); n_steps(state) -> int32 valid rollout steps of the next iteration;
    mode(state, obs (..., obs_size)) -> deterministic env action (clipped mean / argmax).
    set_hparams(state, values (h,)) -> state with those hyperparameters in effect.
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
    tuner_key: Callable
    set_hparams: Callable


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


def check_space(space) -> None:
    """ValueError unless every hyperparameter of `space` names a TUNABLE field and its
    bounds lie in that field's allowed range."""
    static = [f.name for f in dataclasses.fields(PPOConfig) if f.name not in TUNABLE]
    for p in space.hyperparameters:
        if p.name not in TUNABLE:
            kind = "is a static PPOConfig field (fixed at compile time)" if p.name in static else \
                "is not a PPOConfig field"
            raise ValueError(f"tuner space: {p.name!r} {kind}; tunable fields: {', '.join(TUNABLE)}")
        if p.name == "batch_size":
            if not (p.integer and p.low >= 1):
                raise ValueError(f"tuner space: batch_size must be an integer hyperparameter with low >= 1, got {p}")
        elif not (_in_range(p.name, p.low) and _in_range(p.name, p.high)):
            raise ValueError(f"tuner space: {p.name} bounds [{p.low}, {p.high}] must be {_range_text(p.name)}")


def make_learner(config: PPOConfig, env, tuner, *, ask: str = "when_deciding") -> Learner:
    """Build the pure functions of one PPO agent on `env` (anything `agents.envs.make`
    accepts: a name, an environment object, a JaxEnv/HostEnv) with `tuner` in the loop.

    tuner: an `hcjax.Tuner` (every agent its own: told every iteration, asked when
    deciding), or an `hcjax.Population` (population-based training): then the agent has
    no tuner of its own (`tuner_state` None, nothing told or asked), its hyperparameters
    start at the space's defaults and are set from outside with `set_hparams` by the
    loop that steps the population over the agent axis (agents.driver).
    ask: "when_deciding" (default) runs `tuner.ask` only on the iterations that decide;
    "every_iteration" computes it every iteration and keeps it only when deciding (the
    earlier loop: the same numbers at a higher cost, kept for the benchmark).
    """
    from agents import envs
    from hcjax.population import Population
    from hcjax.tuner import Tuner

    if not isinstance(config, PPOConfig):
        raise ValueError(f"make_learner: config must be a PPOConfig, got {type(config).__name__}")
    if ask not in ASK_MODES:
        raise ValueError(f"make_learner: ask must be one of {ASK_MODES}, got {ask!r}")
    if not isinstance(tuner, (Tuner, Population)):
        raise ValueError(f"make_learner: tuner must be an hcjax.Tuner or hcjax.Population, got {type(tuner).__name__}")
    per_agent = isinstance(tuner, Tuner)
    env = envs.make(env)
    space = tuner.space
    check_space(space)
    idx = {n: i for i, n in enumerate(space.names)}
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

    def hp(values, name):
        """The value of TUNABLE field `name` in effect: the tuner's, else the config's."""
        if name in idx:
            return values[idx[name]]
        return jnp.asarray(float(getattr(config, name)), jnp.float32)

    def make_opt(learning_rate, max_grad_norm, adam_eps):
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=adam_eps))

    opt = optax.inject_hyperparams(make_opt)(**{n: float(getattr(config, n)) for n in OPTIMIZER_HPARAMS})

    def set_opt_hparams(opt_state, values):
        hps = dict(opt_state.hyperparams)
        for n in OPTIMIZER_HPARAMS:
            hps[n] = jnp.asarray(hp(values, n), jnp.float32)
        return opt_state._replace(hyperparams=hps)

    def norm(stats, obs, values):
        return normalize_obs(stats, obs, hp(values, "obs_clip")) if config.normalize_obs else obs

    def n_steps_of(hparams):
        batch = jnp.round(hp(hparams, "batch_size")).astype(jnp.int32)
        return jnp.clip((batch + E - 1) // E, 1, max_steps).astype(jnp.int32)

    def env_action(action):
        return action if discrete else nets.clip_action(action, low, high)

    # -- init --
    def tuner_key(key):
        """The key `init(key)` initialises the tuner with."""
        return jax.random.split(key, 6)[2]

    def init(key, tuner_state=None) -> LearnerState:
        """A fresh agent; tuner_state: the tuner's initial state (default
        tuner.init(tuner_key(key)), e.g. a stacked tuner's state with its method chosen)."""
        k_actor, k_critic, k_tuner, k_ask, k_env, k_next = jax.random.split(key, 6)
        dummy = jnp.zeros((env.obs_size,), jnp.float32)
        params = {"actor": actor.init(k_actor, dummy), "critic": critic.init(k_critic, dummy)}
        if not per_agent:  # a population sets the values from outside (set_hparams)
            tuner_state, values = None, jnp.asarray(space.default, jnp.float32)
        else:
            if tuner_state is None:
                tuner_state = tuner.init(k_tuner)
            tuner_state, values = tuner.ask(tuner_state, k_ask)
            values = jnp.asarray(values, jnp.float32)
        opt_state = set_opt_hparams(opt.init(params), values)
        if env.host:
            env_state = obs = ep_running = None
        else:
            env_state, obs = jax.vmap(env.reset)(jax.random.split(k_env, E))
            ep_running = jnp.zeros((E,), jnp.float32)
        nan = jnp.full((), jnp.nan, jnp.float32)
        return LearnerState(params=params, opt_state=opt_state, obs_stats=init_obs_stats(env.obs_size),
                            env_state=env_state, obs=obs, ep_running=ep_running, tuner_state=tuner_state,
                            hparams=values, iteration=jnp.zeros((), jnp.int32), prev_reward=nan,
                            prev_return=nan, has_reward=jnp.asarray(False), has_return=jnp.asarray(False),
                            key=k_next)

    # -- acting --
    def act_with(state, obs, key):
        obs_n = norm(state.obs_stats, obs, state.hparams)
        dist = actor.apply(state.params["actor"], obs_n)
        action = nets.sample(key, dist, discrete)
        return dict(action=action, env_action=env_action(action), logp=nets.log_prob(dist, action, discrete),
                    value=critic.apply(state.params["critic"], obs_n), obs_norm=obs_n)

    def act(state, obs, t):
        """Host path: obs (E, obs_size) raw -> actions etc. for rollout step t."""
        key = jax.random.fold_in(jax.random.fold_in(state.key, 7), t)
        return act_with(state, jnp.asarray(obs, jnp.float32), key)

    def mode(state, obs):
        dist = actor.apply(state.params["actor"], norm(state.obs_stats, jnp.asarray(obs, jnp.float32), state.hparams))
        return env_action(nets.mode(dist, discrete))

    def value(state, obs):
        return critic.apply(state.params["critic"], norm(state.obs_stats, jnp.asarray(obs, jnp.float32), state.hparams))

    # -- rollout (JAX envs) --
    def rollout(state, key):
        n_steps = n_steps_of(state.hparams)

        def step(carry, t):
            env_state, obs, running, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            valid = t < n_steps
            out = act_with(state, obs, k_act)

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
        traj["last_value"] = critic.apply(state.params["critic"], norm(state.obs_stats, obs, state.hparams))
        return state.replace(env_state=env_state, obs=obs, ep_running=running), traj

    # -- learning from a trajectory (shared by both paths) --
    def loss_fn(params, batch, mask, hparams):
        return ppo_loss(actor.apply, critic.apply, params, batch, mask, hp(hparams, "clip_eps"),
                        hp(hparams, "vf_coef"), hp(hparams, "ent_coef"), discrete)

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def decide(tuner_state, hparams, key, do_ask):
        """(tuner state, values in effect) after asking when `do_ask` (a bool scalar)."""
        def asked(ts):
            ts, values = tuner.ask(ts, key)
            return ts, jnp.asarray(values, jnp.float32)

        if ask == "every_iteration":
            asked_state, values = asked(tuner_state)
            return _select(do_ask, asked_state, tuner_state), jnp.where(do_ask, values, hparams)
        return jax.lax.cond(do_ask, asked, lambda ts: (ts, hparams), tuner_state)

    def learn(state, traj, do_ask=None):
        """One PPO update from a trajectory, the tuner's tell, and its ask when deciding.

        traj: obs, raw_obs (T, E, obs_size); action (T, E[, a]); logp, value, reward,
        ep_return (T, E) float; done, valid, ep_done (T, E) bool; last_value (E,).
        do_ask: bool scalar, ask the tuner after this iteration (None: when
        (state.iteration + 1) % tune_every == 0; pass an unbatched value under vmap so
        that only deciding iterations pay for the ask)."""
        key, k_epochs, k_ask, k_next = jax.random.split(state.key, 4)
        hparams = state.hparams
        valid = traj["valid"]
        reward = traj["reward"]
        adv, target = gae(reward * hp(hparams, "reward_scale"), traj["value"], traj["done"], valid,
                          traj["last_value"], hp(hparams, "gamma"), hp(hparams, "gae_lambda"))
        flat = dict(obs=traj["obs"], action=traj["action"], logp=traj["logp"], adv=adv, target=target)
        flat = jax.tree.map(lambda x: x.reshape((N,) + x.shape[2:]), flat)
        vflat = valid.reshape(N)
        n_valid = jnp.sum(vflat.astype(jnp.int32))
        opt_state = set_opt_hparams(state.opt_state, hparams)

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
                grads, _ = grad_fn(params, batch, mask, hparams)
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

        # training reward and episode returns of this iteration; invalid data -> NaN
        frames = n_valid
        rewards_ok = jnp.all(jnp.where(valid, valid_objective(reward), True))
        R = jnp.sum(jnp.where(valid, reward, 0.0)) / jnp.maximum(frames, 1).astype(jnp.float32)
        R_valid = jnp.where(rewards_ok, R, jnp.nan)
        n_ep = jnp.sum(traj["ep_done"].astype(jnp.float32))
        ep_mean = jnp.sum(jnp.where(traj["ep_done"], traj["ep_return"], 0.0)) / jnp.maximum(n_ep, 1.0)
        ep_ok = rewards_ok & valid_objective(ep_mean)
        has_return_now = state.has_return | (n_ep > 0)
        ep_return = jnp.where(n_ep > 0, jnp.where(ep_ok, ep_mean, jnp.nan), state.prev_return)

        if config.objective == "reward_change":
            objective, do_tell = R_valid - state.prev_reward, state.has_reward
        elif config.objective == "reward":
            objective, do_tell = R_valid, jnp.asarray(True)
        else:
            objective, do_tell = ep_return - state.prev_return, state.has_return & has_return_now
        objective = jnp.where(do_tell, objective, 0.0).astype(jnp.float32)
        if per_agent:
            tuner_state = _select(do_tell, tuner.tell(state.tuner_state, objective), state.tuner_state)
            if do_ask is None:
                do_ask = (state.iteration + 1) % config.tune_every == 0
            tuner_state, new_hparams = decide(tuner_state, hparams, k_ask, do_ask)
        else:
            tuner_state, new_hparams = None, hparams

        metrics = dict(train_reward=R, objective=objective, hparams=hparams, frames=frames,
                       rejected=rejected.astype(jnp.int32), episode_return=ep_return)
        state = state.replace(params=params, opt_state=opt_state, obs_stats=stats, tuner_state=tuner_state,
                              hparams=new_hparams, iteration=state.iteration + 1, prev_reward=R_valid,
                              prev_return=ep_return, has_reward=jnp.asarray(True), has_return=has_return_now,
                              key=k_next)
        return state, metrics

    def iterate(state, num_iterations: int, start=None):
        """`num_iterations` iterations in one lax.scan -> (state, metrics (num_iterations, ...)).

        start: the number of the first iteration (an int or an unbatched int32 scalar:
        the same for every agent of a vmapped batch), so that the tuner asks only on the
        deciding iterations; None reads state.iteration (per agent: under vmap every
        iteration then computes the ask)."""
        if env.host:
            raise ValueError(f"iterate: {env.name} is a host (gymnasium) env; use agents.driver.run")

        def one_iteration(state, it):
            key, k_roll = jax.random.split(state.key)
            state, traj = rollout(state.replace(key=key), k_roll)
            do_ask = None if it is None else (it + 1) % config.tune_every == 0
            return learn(state, traj, do_ask)

        its = None if start is None else jnp.asarray(start, jnp.int32) + jnp.arange(num_iterations, dtype=jnp.int32)
        return jax.lax.scan(one_iteration, state, its, length=num_iterations)

    def evaluate(state, key):
        """Deterministic (mean-action) return of one episode of at most eval_steps steps."""
        if env.host:
            raise ValueError(f"evaluate: {env.name} is a host (gymnasium) env; use agents.driver.evaluate_host")
        k_reset, k_steps = jax.random.split(key)
        env_state, obs = env.reset(k_reset)

        def step(carry, k):
            env_state, obs, ret, alive = carry
            env_state, obs, r, d = env.step(k, env_state, mode(state, obs))
            return (env_state, obs, ret + jnp.where(alive, r, 0.0), alive & ~d), None

        carry = (env_state, obs, jnp.zeros((), jnp.float32), jnp.asarray(True))
        (_, _, ret, _), _ = jax.lax.scan(step, carry, jax.random.split(k_steps, config.eval_steps))
        return ret

    def set_hparams(state, values):
        """The agent with hyperparameters `values` (h,) in effect from its next iteration
        (the optimiser's injected ones too): how a population explores."""
        values = jnp.asarray(values, jnp.float32)
        return state.replace(hparams=values, opt_state=set_opt_hparams(state.opt_state, values))

    return Learner(config=config, env=env, tuner=tuner, max_steps=max_steps, init=init, iterate=iterate,
                   evaluate=evaluate, act=act, value=value, learn=learn,
                   n_steps=lambda state: n_steps_of(state.hparams), mode=mode, tuner_key=tuner_key,
                   set_hparams=set_hparams)


def make_train(config: PPOConfig, env, tuner) -> Callable:
    """train(key) -> (final LearnerState, metrics with leading axis config.num_iterations)."""
    learner = make_learner(config, env, tuner)

    def train(key):
        return learner.iterate(learner.init(key), config.num_iterations, 0)

    return train
