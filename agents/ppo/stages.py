"""The stages of one PPO iteration as pure functions (jit- and vmap-able), each
taking what it needs as arguments; `agents.ppo.learner` binds them to one agent.

    rollout          max_steps env steps, steps t >= n_steps masked (env state kept)
    gae              advantages and value targets backwards through the mask
    update_epochs    epochs x minibatches of guarded updates over the valid samples
    ppo_loss         the masked clipped-surrogate loss of one minibatch
    iteration_objective   training reward, episode return and the tuner's objective
    episode_return   one evaluation episode
"""
from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from agents import networks as nets
from agents import threefry
from agents.wrappers import track_episodes
from hcjax.tuner import valid_objective

# ---- rollout ------------------------------------------------------------------------------


def rollout(act: Callable, env_step: Callable, env_state, obs, running, key, n_steps, max_steps: int,
            num_envs: int, action_mask: Callable | None = None):
    """`max_steps` steps of `num_envs` envs; steps t >= n_steps (traced int32) leave the
    env state, observations and running returns unchanged and are zero in the trajectory.

    act(obs (E, obs_size), key[, mask (E, n)]) -> dict(obs_norm, action, env_action, logp, value);
    env_step(keys (E, 2), env_state, env_action) -> (env_state, obs, reward (E,), done (E,));
    action_mask: None, or env_state -> (E, n) bool legal actions (then given to `act` and
    kept in the trajectory as `mask` (T, E, n), for the loss).
    Returns (env_state, obs, running (E,), traj): traj obs, raw_obs (T, E, obs_size);
    action (T, E[, a]); logp, value, reward, ep_return (T, E); done, valid, ep_done (T, E).
    Each step splits its key into (next, act, env) keys (drawing them all before the steps
    saves about 1% of a small agent's CPU time but changes every seed's stream, so the committed
    studies could not be resumed or reproduced: kept as it is, docs/benchmarks.md). The splits
    and `act`'s draws hash through `agents.threefry` (JAX's bits; `act` gets a typed key); the
    environment gets its keys (E,) in the form `key` came in (raw (E, 2) uint32 or typed).
    """
    E = num_envs

    def step(carry, t):
        env_state, obs, running, key = carry
        key, k_act, k_env = jax.random.split(key, 3)
        valid = t < n_steps
        mask = None if action_mask is None else action_mask(env_state)
        out = act(obs, k_act) if mask is None else act(obs, k_act, mask)

        def do(_):
            s, o, r, d = env_step(back(jax.random.split(k_env, E)), env_state, out["env_action"])
            return s, o, r.astype(jnp.float32), d.astype(bool)

        def skip(_):
            return env_state, obs, jnp.zeros((E,), jnp.float32), jnp.zeros((E,), bool)

        env_state2, obs2, reward, done = jax.lax.cond(valid, do, skip, None)
        running, ep_ret, ep_done = track_episodes(running, reward, done, valid)
        tr = dict(obs=out["obs_norm"], raw_obs=obs, action=out["action"], logp=out["logp"],
                  value=out["value"], reward=reward, done=done, valid=jnp.broadcast_to(valid, (E,)),
                  ep_return=ep_ret, ep_done=ep_done, **({} if mask is None else {"mask": mask}))
        tr = {k: jnp.where(valid.reshape((1,) * v.ndim), v, jnp.zeros_like(v)) for k, v in tr.items()}
        return (env_state2, obs2, running, key), tr

    key, back = threefry.fast(key)  # JAX's bits, hashed without its CPU loop (agents.threefry)
    (env_state, obs, running, _), traj = jax.lax.scan(step, (env_state, obs, running, key), jnp.arange(max_steps))
    return env_state, obs, running, traj


def episode_return(reset: Callable, step: Callable, policy: Callable, key, max_steps: int,
                   action_mask: Callable | None = None):
    """Return of one episode of at most `max_steps` steps of a single env:
    reset(key) -> (state, obs); step(key, state, action) -> (state, obs, reward, done);
    policy(obs, key) -> action, or with `action_mask` (state -> (n,) bool legal actions)
    policy(obs, key, mask) -> a legal action. Rewards after the first `done` are not counted.
    Step t's keys (env, policy) come from fold_in(key, t) with the step counter t carried by
    the scan (no xs): nothing of length max_steps is held, whatever max_steps. Those keys hash
    through `agents.threefry` (JAX's bits; `policy` gets a typed key, `step` one in the form
    `key` came in)."""
    k_reset, k_steps = jax.random.split(key)
    env_state, obs = reset(k_reset)
    k_steps, back = threefry.fast(k_steps)

    def body(carry, _):
        env_state, obs, ret, alive, t = carry
        k_env, k_act = jax.random.split(jax.random.fold_in(k_steps, t))
        action = policy(obs, k_act) if action_mask is None else policy(obs, k_act, action_mask(env_state))
        env_state, obs, r, d = step(back(k_env), env_state, action)
        return (env_state, obs, ret + jnp.where(alive, r, 0.0), alive & ~d, t + 1), None

    carry = (env_state, obs, jnp.zeros((), jnp.float32), jnp.asarray(True), jnp.zeros((), jnp.int32))
    (_, _, ret, _, _), _ = jax.lax.scan(body, carry, None, length=max_steps)
    return ret


# ---- advantages ---------------------------------------------------------------------------


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


# ---- the epochs of minibatch updates ------------------------------------------------------


def all_finite(tree) -> jax.Array:
    """bool scalar: every inexact leaf of `tree` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def select(pred, a, b):
    """The pytree `a` where the bool scalar `pred`, else `b` (leaf by leaf)."""
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def epoch_order(key, valid) -> jax.Array:
    """(N,) int32 permutation of the samples: the valid ones (valid (N,) bool) first in a
    uniformly random order; ties in index order. The stable argsort of
    `where(valid, jax.random.uniform(key, (N,)), 2.0)`, computed by sorting integers: a
    uniform float32 is `1.m - 1` for the 23 bits m = bits >> 9 of the same draw, so its order
    is m's, and 2**23 sorts after every m. The same permutation, bit for bit
    (tests/test_ppo_stages.py), without the float comparator's extra work in every comparison
    (on the CPU, Pendulum-v1 at 16 vmapped agents: the update's epochs about 5% faster)."""
    m = jax.random.bits(key, valid.shape, jnp.uint32) >> 9
    sort_keys = jnp.where(valid, m, jnp.uint32(1 << 23))
    index = jnp.arange(valid.shape[0], dtype=jnp.int32)
    return jax.lax.sort((sort_keys, index), num_keys=1, is_stable=True)[1]


def minibatch_rows(order, m, n_valid, num_minibatches: int, length: int):
    """Minibatch m of an epoch: positions [m n_valid // M, (m+1) n_valid // M) of `order`
    (N,), gathered as `length` rows (clipped to N - 1) with a mask of the first `size`.
    Returns rows (length,) int, mask (length,) bool, size int32 scalar."""
    start = (m * n_valid) // num_minibatches
    size = ((m + 1) * n_valid) // num_minibatches - start
    pos = jnp.arange(length)
    rows = order[jnp.minimum(start + pos, order.shape[0] - 1)]
    return rows, pos < size, size


def update_epochs(update: Callable, params, opt_state, samples: dict, valid, epoch_keys, num_minibatches: int,
                  length: int, full: bool = False):
    """Epochs (one per key of epoch_keys (K, 2)) of `num_minibatches` guarded updates.

    samples: pytree of (N, ...) arrays; valid: (N,) bool; update(params, opt_state,
    batch (length, ...), mask (length,), ok) -> (params, opt_state, accepted): a step taken
    only where the bool scalar ok (the minibatch is not empty) and its own checks (a finite
    loss and gradient: `adam.step`) hold, the state kept otherwise. Every valid sample is in
    exactly one minibatch per epoch (`epoch_order`, `minibatch_rows`). After the epochs, a
    non-finite value in the parameters or the optimiser state (an accepted step that
    overflowed) undoes them all: the given params and opt_state are returned.
    full: the caller knows every sample valid and N = num_minibatches x length (a batch size
    that is not tuned): then each epoch gathers the samples (and `valid`, the loss's mask) once
    in `epoch_order` and cuts them into equal minibatches (with every sample valid, the same
    minibatches and steps as the general path, which gathers
    each minibatch's rows from a traced start: under vmap those are per-agent gathers, about 6%
    of a 2x64 agent's update on the CPU, issue 52).
    Returns (params, opt_state, rejected: bool, a non-empty minibatch's step rejected or the
    epochs undone).
    """
    n_valid = jnp.sum(valid.astype(jnp.int32))
    N = valid.shape[0]
    if full and N != num_minibatches * length:
        raise ValueError(f"update_epochs: full needs N = num_minibatches x length, got {N} != "
                         f"{num_minibatches} x {length}")

    def guarded(carry, batch, mask, ok):
        """One minibatch's update; rejected gathers a non-empty minibatch's refused step."""
        params, opt_state, rejected = carry
        params, opt_state, accepted = update(params, opt_state, batch, mask, ok)
        return (params, opt_state, rejected | (ok & ~accepted)), None

    def equal_minibatches(carry, key):
        order = epoch_order(key, valid)
        cut = jax.tree.map(lambda x: x[order].reshape((num_minibatches, length) + x.shape[1:]), (samples, valid))
        # ok: all True when the caller is right; else the invalid rows stay out of the loss
        carry, _ = jax.lax.scan(lambda c, xs: guarded(c, *xs, jnp.any(xs[1])), carry, cut)
        return carry, None

    def epoch(carry, key):
        order = epoch_order(key, valid)

        def minibatch(carry, m):
            rows, mask, size = minibatch_rows(order, m, n_valid, num_minibatches, length)
            return guarded(carry, jax.tree.map(lambda x: x[rows], samples), mask, size > 0)

        carry, _ = jax.lax.scan(minibatch, carry, jnp.arange(num_minibatches))
        return carry, None

    (new_params, new_opt, rejected), _ = jax.lax.scan(equal_minibatches if full else epoch,
                                                      (params, opt_state, jnp.asarray(False)), epoch_keys)
    finite = all_finite(new_params) & all_finite(new_opt)
    return select(finite, new_params, params), select(finite, new_opt, opt_state), rejected | ~finite


def ppo_loss(actor_apply, critic_apply, params, batch, mask, clip_eps, vf_coef, ent_coef, discrete,
             vf_clip_eps=None, normalize_advantage=True):
    """Masked PPO loss of one minibatch.

    batch: obs (B, obs_size), action (B,) or (B, a), logp (B,), adv (B,), target (B,), with
    vf_clip_eps value (B,) (the rollout's values), and (masked environments) mask (B, n) bool
    legal actions, applied to the logits (`networks.masked`: log-probabilities and entropy over
    the legal actions); mask: (B,) bool valid samples. normalize_advantage: True (advantages
    standardised over the valid samples), False (raw), or a traced bool scalar choosing.
    vf_clip_eps: None (value loss 0.5 (V - target)^2) or a scalar (ARLBench's clipped loss
    0.5 max((V - target)^2, (V_clip - target)^2), V_clip = value + clip(V - value, +-vf_clip_eps)).
    Returns (loss, aux dict of pg_loss, v_loss, entropy), every term a mean over valid samples.
    """
    w = mask.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(w), 1.0)
    dist = actor_apply(params["actor"], batch["obs"])
    if "mask" in batch:
        dist = nets.masked(dist, batch["mask"])
    logp = nets.log_prob(dist, batch["action"], discrete)
    ent = nets.entropy(dist, discrete)
    value = critic_apply(params["critic"], batch["obs"])
    adv = batch["adv"]
    if normalize_advantage is not False:
        mean = jnp.sum(w * adv) / n
        std = jnp.sqrt(jnp.sum(w * (adv - mean) ** 2) / n)
        standard = (adv - mean) / (std + 1e-8)
        adv = standard if normalize_advantage is True else jnp.where(normalize_advantage, standard, adv)
    ratio = jnp.exp(logp - batch["logp"])
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
    vl = 0.5 * (value - batch["target"]) ** 2
    if vf_clip_eps is not None:
        clipped = batch["value"] + jnp.clip(value - batch["value"], -vf_clip_eps, vf_clip_eps)
        vl = jnp.maximum(vl, 0.5 * (clipped - batch["target"]) ** 2)
    pg_loss = jnp.sum(jnp.where(mask, pg, 0.0)) / n
    v_loss = jnp.sum(jnp.where(mask, vl, 0.0)) / n
    entropy = jnp.sum(jnp.where(mask, ent, 0.0)) / n
    loss = pg_loss + vf_coef * v_loss - ent_coef * entropy
    return loss, dict(pg_loss=pg_loss, v_loss=v_loss, entropy=entropy)


# ---- the iteration's objective ------------------------------------------------------------


def iteration_objective(objective: str, reward, valid, ep_done, ep_return, prev_reward, prev_return, has_reward,
                        has_return) -> dict:
    """What one iteration tells the tuner, from its trajectory (T, E) arrays.

    R: mean reward of the valid frames; R_valid: R, NaN if any valid reward is invalid
    (`hcjax.tuner.valid_objective`); episode_return: mean return of the episodes that
    finished (NaN if invalid; prev_return when none finished). objective (float32):
    "reward_change" R_valid - prev_reward, "reward" R_valid, "return_change"
    episode_return - prev_return; 0 where `tell` (bool) is False (no previous level).
    Returns dict(frames, train_reward, reward, episode_return, has_return, objective, tell).
    """
    frames = jnp.sum(valid.astype(jnp.int32))
    rewards_ok = jnp.all(jnp.where(valid, valid_objective(reward), True))
    R = jnp.sum(jnp.where(valid, reward, 0.0)) / jnp.maximum(frames, 1).astype(jnp.float32)
    R_valid = jnp.where(rewards_ok, R, jnp.nan)
    n_ep = jnp.sum(ep_done.astype(jnp.float32))
    ep_mean = jnp.sum(jnp.where(ep_done, ep_return, 0.0)) / jnp.maximum(n_ep, 1.0)
    ep_ok = rewards_ok & valid_objective(ep_mean)
    has_return_now = has_return | (n_ep > 0)
    ep_ret = jnp.where(n_ep > 0, jnp.where(ep_ok, ep_mean, jnp.nan), prev_return)
    if objective == "reward_change":
        value, tell = R_valid - prev_reward, has_reward
    elif objective == "reward":
        value, tell = R_valid, jnp.asarray(True)
    else:
        value, tell = ep_ret - prev_return, has_return & has_return_now
    value = jnp.where(tell, value, 0.0).astype(jnp.float32)
    return dict(frames=frames, train_reward=R, reward=R_valid, episode_return=ep_ret, has_return=has_return_now,
                objective=value, tell=tell)
