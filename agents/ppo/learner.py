"""One PPO agent: its state (LearnerState), its pure functions (Learner), and
make_learner, which binds the stages of `agents.ppo.stages` to a config, an env and a
tuner (see the package docstring for the iteration)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from agents import envs
from agents import networks as nets
from agents.ppo import adam, stages
from agents.ppo.config import OPTIMIZER_HPARAMS, PPOConfig, check_batch_options, check_space, max_rollout_steps
from agents.wrappers import ObsStats, init_obs_stats, normalize_obs, update_obs_stats
from hcjax.population import Population, exploit_in_place
from hcjax.tuner import Tuner

# LearnerState fields a donor gives the agent it replaces (with its hyperparameters).
INHERITED = ("params", "opt_state", "obs_stats", "prev_reward", "has_reward", "prev_return", "has_return")


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
    metrics with leading axis num_iterations); evaluate(state, key) -> scalar mean return of
    config.eval_episodes episodes (JAX envs only).
    Host path: act(state, obs (E, obs_size), t) -> dict(action, env_action, logp, value,
    obs_norm); value(state, obs) -> (E,); learn(state, traj, do_ask=None) -> (state,
    metrics of one iteration); n_steps(state) -> int32 valid rollout steps of the next iteration;
    mode(state, obs (..., obs_size), mask=None) -> deterministic env action (clipped mean /
    argmax over the legal actions of `mask`); eval_action(state, obs, key, mask=None) -> the
    evaluation policy's env action (config.eval_policy). Environments with an action mask
    (`JaxEnv.action_mask`) have it applied in the rollout, the loss and the evaluation.
    set_hparams(state, values (h,)) -> state with those hyperparameters in effect.
    exploit(states, parents (n,), values (n, h)) -> batched states (agents leading) where
    every agent i with parents[i] != i continues from its donor's network, optimiser,
    observation statistics and objective levels, all with `values` in effect.
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
    eval_action: Callable
    tuner_key: Callable
    set_hparams: Callable
    exploit: Callable


class Parts(NamedTuple):
    """The static pieces the learner's functions share: max_steps rollout steps,
    num_samples = max_steps x num_envs, num_minibatches M (`PPOConfig.minibatches`),
    minibatch_length = ceil(num_samples / M), index: hyperparameter name -> position in the
    tuner's values; clip_values: the value loss is clipped (vf_clip_eps set or tuned); flat: the
    optimiser's layout (`make_optimizer`; its state's, stepped by `adam.step`); full: every
    iteration fills all max_steps rollout steps (batch size not tuned) and the num_samples cut
    into M equal minibatches (`stages.update_epochs`' full)."""

    config: PPOConfig
    env: Any
    tuner: Any
    per_agent: bool
    index: dict
    max_steps: int
    num_samples: int
    num_minibatches: int
    minibatch_length: int
    clip_values: bool
    flat: bool
    full: bool
    actor: nets.Actor
    critic: nets.Critic
    opt: Any
    action_low: jax.Array
    action_high: jax.Array


# The flat optimiser's size limit: networks (actor and critic together) of at most this many
# parameters get `make_optimizer(flat=True)`. Measured per update on the CPU (a clipped-Adam step
# of an actor and a critic, 64 samples): flat 0.9x the per-array time at 351 parameters, 0.7x at
# 11k, 1.3x at 39k, 1.6x at 143k and 274k (the paper's 3x256 networks: one PPO agent ran at half
# the frames per second, issue 44); the crossover lies near 20k. That is one agent: vmapped over
# 16 or 256 agents of 9k parameters, per array was 18% and 12% faster (PPOConfig.optimizer_layout
# chooses; "auto" applies this limit, which cannot know how many agents a vmap will batch).
FLAT_MAX_PARAMS = 16384


def make_optimizer(learning_rate, max_grad_norm, adam_eps, flat: bool):
    """PPO's optimiser: gradients clipped to a global norm, then Adam. flat: on one vector of
    every parameter (`optax.flatten`), the same elementwise arithmetic as per weight array (the
    global norm sums in another order: equal to float32 rounding); a training program compiles
    in 0.80-0.95x the time (one Adam update instead of one per array;
    experiments/benchmarks/bench_compile.py), and its state holds flat moment vectors. It costs
    a concatenation and a split of every parameter per update, so make_learner takes it only
    for small networks (FLAT_MAX_PARAMS). The learner initialises it here and steps its state
    with `adam.step` (the same arithmetic, a rejected step fused into it)."""
    tx = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=adam_eps))
    return optax.flatten(tx) if flat else tx


def network_size(actor: nets.Actor, critic: nets.Critic, obs_size: int) -> int:
    """The number of parameters of the actor and the critic together (shapes only: nothing runs)."""
    dummy = jax.ShapeDtypeStruct((obs_size,), jnp.float32)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    shapes = [jax.eval_shape(net.init, key, dummy) for net in (actor, critic)]
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(shapes))


def make_learner(config: PPOConfig, env, tuner) -> Learner:
    """Build the pure functions of one PPO agent on `env` (anything `agents.envs.make`
    accepts: a name, an environment object, a JaxEnv/HostEnv) with `tuner` in the loop.

    tuner: an `hcjax.Tuner` (every agent its own: told every iteration, asked only on
    deciding iterations), or an `hcjax.Population` (population-based training): then the
    agent has no tuner of its own (`tuner_state` None, nothing told or asked), its
    hyperparameters start at the space's defaults and are set from outside by the loop
    that steps the population over the agent axis (`Learner.exploit`, agents.population).
    """
    if not isinstance(config, PPOConfig):
        raise ValueError(f"make_learner: config must be a PPOConfig, got {type(config).__name__}")
    if not isinstance(tuner, (Tuner, Population)):
        raise ValueError(f"make_learner: tuner must be an hcjax.Tuner or hcjax.Population, got {type(tuner).__name__}")
    env = envs.make(env)
    space = tuner.space
    check_space(space)
    check_batch_options(config, space)
    index = {n: i for i, n in enumerate(space.names)}
    max_steps = max_rollout_steps(config, space)
    N = max_steps * config.num_envs
    M = config.minibatches(N)
    if N < M:
        raise ValueError(f"PPOConfig.num_minibatches must be <= max batch {N} (num_envs x max_steps), got {M}")
    actor = nets.Actor(env.action_size, env.discrete, config.hidden_sizes, config.activation, config.init_log_std)
    critic = nets.Critic(config.hidden_sizes, config.activation)
    flat = config.optimizer_layout == "flat" or (
        config.optimizer_layout == "auto" and network_size(actor, critic, env.obs_size) <= FLAT_MAX_PARAMS)
    opt = optax.inject_hyperparams(make_optimizer, static_args=("flat",))(
        flat=flat, **{n: float(getattr(config, n)) for n in OPTIMIZER_HPARAMS})
    p = Parts(config=config, env=env, tuner=tuner, per_agent=isinstance(tuner, Tuner), index=index,
              max_steps=max_steps, num_samples=N, num_minibatches=M, minibatch_length=-(-N // M),
              clip_values=config.vf_clip_eps is not None or "vf_clip_eps" in index, flat=flat,
              full="batch_size" not in index and -(-config.batch_size // config.num_envs) >= max_steps and N % M == 0,
              actor=actor,
              critic=critic, opt=opt,
              action_low=jnp.asarray(env.action_low), action_high=jnp.asarray(env.action_high))
    bound = {name: functools.partial(fn, p) for name, fn in dict(
        init=init, iterate=iterate, evaluate=evaluate, act=act, value=value, learn=learn, n_steps=n_steps,
        mode=mode, eval_action=eval_action, set_hparams=set_hparams, exploit=exploit).items()}
    return Learner(config=config, env=env, tuner=tuner, max_steps=max_steps, tuner_key=tuner_key, **bound)


def make_train(config: PPOConfig, env, tuner, eval_every: int | None = None) -> Callable:
    """train(key) -> (final LearnerState, metrics with leading axis config.num_iterations)
    of one agent with its own `tuner` (an hcjax.Tuner). A Population acts on many agents
    at once: it is refused (ValueError); `agents.driver.run` trains one.

    eval_every: also evaluate after every `eval_every` iterations and after the last (as
    a study does): train(key) -> (state, metrics, evaluations) with evaluations
    {"iteration": (E,) int32 iterations done, "eval_return": (E,) float32}, each the mean
    return of config.eval_episodes episodes of at most config.eval_steps steps with
    config.eval_policy (`Learner.evaluate`, the study's evaluator) with the key
    `eval_key(key, iteration)`. The evaluations draw no key of the training: the state
    and metrics are those of train without them. JAX environments only. The program holds
    one iteration and one evaluation (in a lax.cond where one is due) whatever eval_every."""
    if isinstance(tuner, Population):
        raise ValueError(f"make_train: trains one agent, and population method {tuner.name!r} acts on the agent "
                         f"axis; run it with agents.driver.run(config, env, population, keys)")
    if eval_every is not None and (isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"make_train: eval_every must be None (no evaluations) or an integer >= 1, got {eval_every!r}")
    learner = make_learner(config, env, tuner)
    T = config.num_iterations
    if eval_every is None:
        return lambda key: learner.iterate(learner.init(key), T, 0)
    every = min(eval_every, T)
    done = np.arange(1, T + 1)
    evaluated = (done % every == 0) | (done == T)  # (T,) static: the iterations an evaluation follows

    def train(key):
        def body(state, xs):  # one iteration, then an evaluation where one is due
            start, due = xs
            state, metrics = learner.iterate(state, 1, start)
            ret = jax.lax.cond(due, lambda s: learner.evaluate(s, eval_key(key, start + 1)).astype(jnp.float32),
                               lambda s: jnp.float32(jnp.nan), state)
            return state, (metrics, ret)

        state, (metrics, returns) = jax.lax.scan(
            body, learner.init(key), (jnp.arange(T, dtype=jnp.int32), jnp.asarray(evaluated)))
        metrics = jax.tree.map(lambda m: m[:, 0], metrics)
        return state, metrics, {"iteration": jnp.asarray(done[evaluated], jnp.int32),
                                "eval_return": returns[np.flatnonzero(evaluated)]}

    return train


def eval_key(key, iteration):
    """The key of the evaluation after `iteration` iterations of the agent of `key` (its
    training never draws it): what a study's units and make_train(eval_every=...) use."""
    return jax.random.fold_in(jax.random.fold_in(key, 1), iteration)


# ---- the bound functions (first argument: the learner's Parts) ----------------------------


def hparam(p: Parts, values, name: str):
    """The value of TUNABLE field `name` in effect: the tuner's (values (h,); a categorical's
    option value, `Space.natural`), else the config's."""
    if name in p.index:
        return p.tuner.space.natural(values)[p.index[name]]
    return jnp.asarray(float(getattr(p.config, name)), jnp.float32)


def _set_opt_hparams(p: Parts, opt_state, values):
    hps = dict(opt_state.hyperparams)
    for n in OPTIMIZER_HPARAMS:
        hps[n] = jnp.asarray(hparam(p, values, n), jnp.float32)
    return opt_state._replace(hyperparams=hps)


def _norm(p: Parts, stats, obs, values):
    return normalize_obs(stats, obs, hparam(p, values, "obs_clip")) if p.config.normalize_obs else obs


def _n_steps_of(p: Parts, hparams):
    E = p.config.num_envs
    batch = jnp.round(hparam(p, hparams, "batch_size")).astype(jnp.int32)
    return jnp.clip((batch + E - 1) // E, 1, p.max_steps).astype(jnp.int32)


def n_steps(p: Parts, state):
    """int32 valid rollout steps of the agent's next iteration (from its batch size)."""
    return _n_steps_of(p, state.hparams)


def _env_action(p: Parts, action):
    return action if p.env.discrete else nets.clip_action(action, p.action_low, p.action_high)


def tuner_key(key):
    """The key `init(key)` initialises the tuner with."""
    return jax.random.split(key, 6)[2]


def init(p: Parts, key, tuner_state=None) -> LearnerState:
    """A fresh agent; tuner_state: the tuner's initial state (default
    tuner.init(tuner_key(key)), e.g. a stacked tuner's state with its method chosen)."""
    env, space = p.env, p.tuner.space
    k_actor, k_critic, k_tuner, k_ask, k_env, k_next = jax.random.split(key, 6)
    dummy = jnp.zeros((env.obs_size,), jnp.float32)
    params = {"actor": p.actor.init(k_actor, dummy), "critic": p.critic.init(k_critic, dummy)}
    if not p.per_agent:  # a population sets the values from outside (set_hparams)
        tuner_state, values = None, jnp.asarray(space.default, jnp.float32)
    else:
        if tuner_state is None:
            tuner_state = p.tuner.init(k_tuner)
        tuner_state, values = p.tuner.ask(tuner_state, k_ask)
        values = jnp.asarray(values, jnp.float32)
    opt_state = _set_opt_hparams(p, p.opt.init(params), values)
    if env.host:
        env_state = obs = ep_running = None
    else:
        env_state, obs = jax.vmap(env.reset)(jax.random.split(k_env, p.config.num_envs))
        ep_running = jnp.zeros((p.config.num_envs,), jnp.float32)
    nan = jnp.full((), jnp.nan, jnp.float32)
    return LearnerState(params=params, opt_state=opt_state, obs_stats=init_obs_stats(env.obs_size),
                        env_state=env_state, obs=obs, ep_running=ep_running, tuner_state=tuner_state,
                        hparams=values, iteration=jnp.zeros((), jnp.int32), prev_reward=nan,
                        prev_return=nan, has_reward=jnp.asarray(False), has_return=jnp.asarray(False),
                        key=k_next)


def _mask_fn(p: Parts):
    """The environment's legal-action mask (state -> (n,) bool), or None (every action legal)."""
    return getattr(p.env, "action_mask", None)


def _act_with(p: Parts, state, obs, key, mask=None):
    obs_n = _norm(p, state.obs_stats, obs, state.hparams)
    dist = nets.masked(p.actor.apply(state.params["actor"], obs_n), mask)
    action = nets.sample(key, dist, p.env.discrete)
    return dict(action=action, env_action=_env_action(p, action), logp=nets.log_prob(dist, action, p.env.discrete),
                value=p.critic.apply(state.params["critic"], obs_n), obs_norm=obs_n)


def act(p: Parts, state, obs, t):
    """Host path: obs (E, obs_size) raw -> actions etc. for rollout step t."""
    key = jax.random.fold_in(jax.random.fold_in(state.key, 7), t)
    return _act_with(p, state, jnp.asarray(obs, jnp.float32), key)


def _policy(p: Parts, state, obs, mask):
    """The actor's distribution for raw obs (..., obs_size), masked by `mask` (..., n) or None."""
    obs_n = _norm(p, state.obs_stats, jnp.asarray(obs, jnp.float32), state.hparams)
    return nets.masked(p.actor.apply(state.params["actor"], obs_n), mask)


def mode(p: Parts, state, obs, mask=None):
    """Deterministic env action (clipped mean / argmax; with `mask` (..., n) bool the argmax
    over the legal actions) for raw obs (..., obs_size)."""
    return _env_action(p, nets.mode(_policy(p, state, obs, mask), p.env.discrete))


def value(p: Parts, state, obs):
    """Critic values (E,) of raw obs (E, obs_size)."""
    obs = _norm(p, state.obs_stats, jnp.asarray(obs, jnp.float32), state.hparams)
    return p.critic.apply(state.params["critic"], obs)


def _collect(p: Parts, state, key):
    """The JAX-env rollout of the agent's next iteration -> (state, traj with last_value)."""
    env_state, obs, running, traj = stages.rollout(
        functools.partial(_act_with, p, state), jax.vmap(p.env.step), state.env_state, state.obs,
        state.ep_running, key, _n_steps_of(p, state.hparams), p.max_steps, p.config.num_envs,
        None if _mask_fn(p) is None else jax.vmap(_mask_fn(p)))
    traj["last_value"] = p.critic.apply(state.params["critic"], _norm(p, state.obs_stats, obs, state.hparams))
    return state.replace(env_state=env_state, obs=obs, ep_running=running), traj


def _loss(p: Parts, params, batch, mask, hparams):
    normalize = p.config.normalize_advantage
    if "normalize_advantage" in p.index:  # traced: the option's value, 0 or 1
        normalize = hparam(p, hparams, "normalize_advantage") > 0.5
    return stages.ppo_loss(p.actor.apply, p.critic.apply, params, batch, mask, hparam(p, hparams, "clip_eps"),
                           hparam(p, hparams, "vf_coef"), hparam(p, hparams, "ent_coef"), p.env.discrete,
                           hparam(p, hparams, "vf_clip_eps") if p.clip_values else None, normalize)


def _sgd_step(p: Parts, hparams, params, opt_state, batch, mask, ok):
    (loss, _), grads = jax.value_and_grad(functools.partial(_loss, p), has_aux=True)(params, batch, mask, hparams)
    return adam.step(opt_state, params, grads, ok & jnp.isfinite(loss), p.flat)


def _tune(p: Parts, state, objective, tell, hparams, key, do_ask):
    """(tuner state, values in effect): told `objective` when `tell`, asked when `do_ask`
    (a bool scalar; an unbatched one under vmap runs the ask only when deciding)."""
    if not p.per_agent:
        return None, hparams
    tuner_state = stages.select(tell, p.tuner.tell(state.tuner_state, objective), state.tuner_state)
    if do_ask is None:
        do_ask = (state.iteration + 1) % p.config.tune_every == 0

    def asked(ts):
        ts, values = p.tuner.ask(ts, key)
        return ts, jnp.asarray(values, jnp.float32)

    return jax.lax.cond(do_ask, asked, lambda ts: (ts, hparams), tuner_state)


def learn(p: Parts, state, traj, do_ask=None):
    """One PPO update from a trajectory, the tuner's tell, and its ask when deciding.

    traj: obs, raw_obs (T, E, obs_size); action (T, E[, a]); logp, value, reward,
    ep_return (T, E) float; done, valid, ep_done (T, E) bool; last_value (E,).
    do_ask: bool scalar, ask the tuner after this iteration (None: when
    (state.iteration + 1) % tune_every == 0; pass an unbatched value under vmap so
    that only deciding iterations pay for the ask)."""
    cfg, N = p.config, p.num_samples
    key, k_epochs, k_ask, k_next = jax.random.split(state.key, 4)
    hparams, valid, reward = state.hparams, traj["valid"], traj["reward"]
    adv, target = stages.gae(reward * hparam(p, hparams, "reward_scale"), traj["value"], traj["done"], valid,
                             traj["last_value"], hparam(p, hparams, "gamma"), hparam(p, hparams, "gae_lambda"))
    samples = dict(obs=traj["obs"], action=traj["action"], logp=traj["logp"], adv=adv, target=target,
                   **({"mask": traj["mask"]} if "mask" in traj else {}),
                   **({"value": traj["value"]} if p.clip_values else {}))
    samples = jax.tree.map(lambda x: x.reshape((N,) + x.shape[2:]), samples)
    params, opt_state, rejected = stages.update_epochs(
        functools.partial(_sgd_step, p, hparams), state.params, _set_opt_hparams(p, state.opt_state, hparams),
        samples, valid.reshape(N), jax.random.split(k_epochs, cfg.update_epochs), p.num_minibatches,
        p.minibatch_length, full=p.full)
    stats = update_obs_stats(state.obs_stats, traj["raw_obs"], valid) if cfg.normalize_obs else state.obs_stats
    out = stages.iteration_objective(cfg.objective, reward, valid, traj["ep_done"], traj["ep_return"],
                                     state.prev_reward, state.prev_return, state.has_reward, state.has_return)
    tuner_state, new_hparams = _tune(p, state, out["objective"], out["tell"], hparams, k_ask, do_ask)
    metrics = dict(train_reward=out["train_reward"], objective=out["objective"], hparams=hparams,
                   frames=out["frames"], rejected=rejected.astype(jnp.int32), episode_return=out["episode_return"])
    state = state.replace(params=params, opt_state=opt_state, obs_stats=stats, tuner_state=tuner_state,
                          hparams=new_hparams, iteration=state.iteration + 1, prev_reward=out["reward"],
                          prev_return=out["episode_return"], has_reward=jnp.asarray(True),
                          has_return=out["has_return"], key=k_next)
    return state, metrics


def iterate(p: Parts, state, num_iterations: int, start=None):
    """`num_iterations` iterations in one lax.scan -> (state, metrics (num_iterations, ...)).

    start: the number of the first iteration (an int or an unbatched int32 scalar:
    the same for every agent of a vmapped batch), so that the tuner asks only on the
    deciding iterations; None reads state.iteration (per agent: under vmap every
    iteration then computes the ask)."""
    if p.env.host:
        raise ValueError(f"iterate: {p.env.name} is a host (gymnasium) env; use agents.driver.run")

    def one_iteration(state, it):
        key, k_roll = jax.random.split(state.key)
        state, traj = _collect(p, state.replace(key=key), k_roll)
        do_ask = None if it is None else (it + 1) % p.config.tune_every == 0
        return learn(p, state, traj, do_ask)

    its = None if start is None else jnp.asarray(start, jnp.int32) + jnp.arange(num_iterations, dtype=jnp.int32)
    return jax.lax.scan(one_iteration, state, its, length=num_iterations)


def eval_action(p: Parts, state, obs, key, mask=None):
    """The evaluation policy's env action for raw obs (..., obs_size): PPOConfig.eval_policy
    "greedy" (`mode`: the clipped mean / the argmax; `key` unused) or "sampled" (a draw from
    the policy with `key`, clipped to the bounds); with `mask` (..., n) bool, over the legal
    actions only."""
    if p.config.eval_policy == "greedy":
        return mode(p, state, obs, mask)
    return _env_action(p, nets.sample(key, _policy(p, state, obs, mask), p.env.discrete))


def evaluate(p: Parts, state, key):
    """float32 mean return of config.eval_episodes episodes of at most config.eval_steps
    steps, each from its own reset (keys split from `key`, vmapped), acting with
    config.eval_policy (`eval_action`)."""
    if p.env.host:
        raise ValueError(f"evaluate: {p.env.name} is a host (gymnasium) env; use agents.driver.run "
                         f"(it evaluates host envs on the host)")
    one = functools.partial(stages.episode_return, p.env.reset, p.env.step, functools.partial(eval_action, p, state),
                            max_steps=p.config.eval_steps, action_mask=_mask_fn(p))
    returns = jax.vmap(one)(jax.random.split(key, p.config.eval_episodes))
    return jnp.mean(returns.astype(jnp.float32))


def set_hparams(p: Parts, state, values):
    """The agent with hyperparameters `values` (h,) in effect from its next iteration
    (the optimiser's injected ones too): how a population explores."""
    values = jnp.asarray(values, jnp.float32)
    return state.replace(hparams=values, opt_state=_set_opt_hparams(p, state.opt_state, values))


def exploit(p: Parts, states, parents, values):
    """Batched states (n agents leading): agent i continues from agent parents[i]'s
    INHERITED fields (written in place, only the replaced rows, when the states are
    donated to the jitted call), then every agent gets values[i] (n, h) in effect."""
    states = states.replace(**exploit_in_place({f: getattr(states, f) for f in INHERITED}, parents))
    return jax.vmap(functools.partial(set_hparams, p))(states, values)
