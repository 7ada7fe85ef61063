"""The stages of agents.ppo.stages, each against a slow, obviously-correct reference:
the rollout with a traced n_steps (a Python loop), the epochs of minibatches (NumPy
permutation and slicing) and the iteration objective (NumPy)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.ppo import stages

E, MAX_STEPS = 3, 6


def counter_step(keys, state, action):
    """Batched toy env: state (E,) int counts up by action + 1; reward state / 2 plus a
    draw from the env key; done at >= 5 (then reset to 0); obs the new state."""
    new = state + action + 1
    reward = new.astype(jnp.float32) / 2 + jax.vmap(lambda k: jax.random.uniform(k))(keys)
    done = new >= 5
    new = jnp.where(done, 0, new)
    return new, new.astype(jnp.float32)[:, None], reward, done


def toy_act(obs, key):
    action = jax.random.bernoulli(key, 0.5, (E,)).astype(jnp.int32)
    return dict(obs_norm=obs * 2.0, action=action, env_action=action, logp=obs[:, 0] * 0.1 - 1.0, value=obs[:, 0] + 0.5)


@jax.jit
def one_step(key, state, obs):
    """The reference's step, compiled once (op by op, each of its primitives compiles on its
    own): (the next key, toy_act's outputs, counter_step's (state, obs, reward, done))."""
    key, k_act, k_env = jax.random.split(key, 3)
    out = toy_act(obs, k_act)
    return key, out, counter_step(jax.random.split(k_env, E), state, out["env_action"])


def loop_rollout(state, obs, running, key, n_steps):
    """The reference: one Python step at a time, masked steps written as zeros."""
    state, obs, running = np.asarray(state), np.asarray(obs), np.asarray(running)
    traj = {k: [] for k in ("obs", "raw_obs", "action", "logp", "value", "reward", "done", "valid", "ep_return",
                            "ep_done")}
    for t in range(MAX_STEPS):
        key, out, stepped = one_step(key, state, obs)
        out = {k: np.asarray(v) for k, v in out.items()}
        if t < n_steps:
            s, o, r, d = (np.asarray(x) for x in stepped)
            acc = running + r
            row = dict(obs=out["obs_norm"], raw_obs=obs, action=out["action"], logp=out["logp"], value=out["value"],
                       reward=r, done=d, valid=np.ones(E, bool), ep_return=np.where(d, acc, 0.0), ep_done=d)
            running = np.where(d, 0.0, acc)
            state, obs = s, o
        else:
            row = dict(obs=np.zeros_like(obs), raw_obs=np.zeros_like(obs), action=np.zeros(E, np.int32),
                       logp=np.zeros(E), value=np.zeros(E), reward=np.zeros(E), done=np.zeros(E, bool),
                       valid=np.zeros(E, bool), ep_return=np.zeros(E), ep_done=np.zeros(E, bool))
        for k, v in row.items():
            traj[k].append(v)
    return state, obs, running, {k: np.stack(v) for k, v in traj.items()}


@jax.jit
def traced_rollout(state, obs, running, key, n_steps):
    """stages.rollout of the toy env with a traced n_steps (MAX_STEPS rows): one compiled
    program for both rollout tests."""
    return stages.rollout(toy_act, counter_step, state, obs, running, key, n_steps, MAX_STEPS, E)


@pytest.mark.slow
def test_rollout_with_a_traced_n_steps_matches_a_python_loop():
    run = traced_rollout
    state0 = jnp.array([0, 2, 4], jnp.int32)
    obs0 = state0.astype(jnp.float32)[:, None]
    running0 = jnp.array([0.5, 0.0, 1.0], jnp.float32)
    key = jax.random.PRNGKey(3)
    for n_steps in (1, 4, MAX_STEPS, MAX_STEPS + 3):  # one compiled program for every n_steps
        state, obs, running, traj = run(state0, obs0, running0, key, jnp.int32(n_steps))
        ref_state, ref_obs, ref_running, ref = loop_rollout(state0, obs0, running0, key, n_steps)
        np.testing.assert_array_equal(np.asarray(state), ref_state)
        np.testing.assert_array_equal(np.asarray(obs), ref_obs)
        np.testing.assert_allclose(np.asarray(running), ref_running, rtol=1e-6)
        assert set(traj) == set(ref)
        for k in ref:
            np.testing.assert_allclose(np.asarray(traj[k]), ref[k], rtol=1e-6, err_msg=k)
        assert int(np.asarray(traj["valid"]).sum()) == E * min(n_steps, MAX_STEPS)
    assert run._cache_size() == 1


def test_rollout_past_n_steps_leaves_the_env_state_unchanged():
    after_two = traced_rollout(jnp.zeros(E, jnp.int32), jnp.zeros((E, 1)), jnp.zeros(E), jax.random.PRNGKey(0),
                               jnp.int32(2))
    rollout_two = jax.jit(lambda: stages.rollout(toy_act, counter_step, jnp.zeros(E, jnp.int32), jnp.zeros((E, 1)),
                                                 jnp.zeros(E), jax.random.PRNGKey(0), 2, 2, E))()
    for a, b in zip(jax.tree.leaves(after_two[:3]), jax.tree.leaves(rollout_two[:3])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- the epochs of minibatches ------------------------------------------------------------


def numpy_minibatches(order, n_valid, M, L):
    """[(rows, mask)] of one epoch: minibatch m = order[m n_valid // M : (m+1) n_valid // M]
    padded to L rows with the last index."""
    N = len(order)
    out = []
    for m in range(M):
        lo, hi = m * n_valid // M, (m + 1) * n_valid // M
        idx = [order[min(lo + j, N - 1)] for j in range(L)]
        out.append((np.asarray(idx), np.arange(L) < hi - lo))
    return out


@pytest.mark.parametrize("n_valid", [0, 1, 7, 23, 24])
def test_minibatch_rows_match_numpy_slicing(n_valid):
    N, M = 24, 4
    L = -(-N // M)
    valid = np.zeros(N, bool)
    valid[np.random.default_rng(n_valid).permutation(N)[:n_valid]] = True
    order = np.asarray(stages.epoch_order(jax.random.PRNGKey(1), jnp.asarray(valid)))
    assert sorted(order) == list(range(N))
    assert valid[order[:n_valid]].all() and not valid[order[n_valid:]].any()  # valid samples first
    # the permutation is argsort of uniform draws with masked samples at 2.0
    u = np.asarray(jax.random.uniform(jax.random.PRNGKey(1), (N,)))
    np.testing.assert_array_equal(order, np.argsort(np.where(valid, u, 2.0), kind="stable"))
    used = []
    for m, (rows, mask) in enumerate(numpy_minibatches(order, n_valid, M, L)):
        got_rows, got_mask, size = stages.minibatch_rows(jnp.asarray(order), jnp.int32(m), jnp.int32(n_valid), M, L)
        np.testing.assert_array_equal(np.asarray(got_rows), rows)
        np.testing.assert_array_equal(np.asarray(got_mask), mask)
        assert int(size) == mask.sum()
        used += list(rows[mask])
    assert sorted(used) == sorted(np.flatnonzero(valid))  # every valid sample exactly once


def test_epoch_order_is_the_stable_argsort_of_uniform_draws_on_random_masks():
    """epoch_order sorts integers; the reference sorts the float draws it stands for (NumPy,
    stable): equal bit for bit, one key and mask per vmapped agent, at a size where valid
    draws tie (2**23 values among 4096 samples) and with none or every sample valid."""
    n, rng = 4096, np.random.default_rng(0)
    keys = jax.random.split(jax.random.PRNGKey(3), 8)
    valid = rng.random((8, n)) < np.array([0.0, 0.1, 0.5, 0.9, 1.0, 1.0, 0.3, 0.7])[:, None]
    got = np.asarray(jax.jit(jax.vmap(stages.epoch_order))(keys, jnp.asarray(valid)))
    assert got.dtype == np.int32
    ties = 0
    for k, v, o in zip(keys, valid, got):
        u = np.asarray(jax.random.uniform(k, (n,)))
        np.testing.assert_array_equal(o, np.argsort(np.where(v, u, 2.0), kind="stable"))
        ties += v.sum() - len(np.unique(u[v]))
    assert ties > 0  # the stable order of equal draws was exercised


def counting(params, opt_state, batch, mask, ok):
    """An update for update_epochs: params count the uses per sample, opt_state the steps taken
    (only where ok: the minibatch is not empty)."""
    new = params.at[batch["index"]].add(mask.astype(jnp.float32))
    return jnp.where(ok, new, params), jnp.where(ok, opt_state + 1, opt_state), ok


def test_update_epochs_uses_every_valid_sample_once_per_epoch_and_rejects_non_finite_updates():
    """Every valid sample once per epoch; a step its update rejects (here: a NaN sample in
    the minibatch, as adam.step rejects a NaN loss) keeps the state; an accepted step that
    leaves a non-finite value undoes the iteration's epochs (the given state returned)."""
    N, M, epochs = 20, 3, 4
    L = -(-N // M)
    valid = jnp.asarray(np.arange(N) % 3 != 1)
    samples = dict(index=jnp.arange(N), poison=jnp.zeros(N).at[5].set(jnp.nan))
    keys = jax.random.split(jax.random.PRNGKey(0), epochs)

    def poisoned(params, opt_state, batch, mask, ok):  # rejects the minibatch holding sample 5
        return counting(params, opt_state, batch, mask, ok & ~jnp.any(mask & jnp.isnan(batch["poison"])))

    def overflowing(params, opt_state, batch, mask, ok):  # accepts it, and its result is not finite
        bad = jnp.any(mask & jnp.isnan(batch["poison"]))
        params, opt_state, ok = counting(params, opt_state, batch, mask, ok)
        return jnp.where(bad, jnp.inf, params), opt_state, ok

    @jax.jit
    def run(p):  # one program for the three updates
        return [stages.update_epochs(u, p, jnp.int32(0), samples, valid, keys, M, L)
                for u in (counting, poisoned, overflowing)]

    (params, opt_state, rejected), poison, overflow = run(jnp.ones(N))
    np.testing.assert_array_equal(np.asarray(params), 1 + epochs * np.asarray(valid, np.float32))
    assert int(opt_state) == epochs * M and not bool(rejected)
    params, opt_state, rejected = poison
    assert bool(rejected) and np.isfinite(np.asarray(params)).all()
    assert int(opt_state) == epochs * (M - 1)  # the minibatch holding sample 5 is rejected once per epoch
    assert float(np.asarray(params)[5]) == 1.0
    params, opt_state, rejected = overflow
    assert bool(rejected) and int(opt_state) == 0
    np.testing.assert_array_equal(np.asarray(params), np.ones(N))  # the epochs undone


def test_update_epochs_skips_empty_minibatches():
    N, M = 8, 4
    valid = jnp.asarray(np.arange(N) < 2)  # 2 valid samples, 4 minibatches: 2 are empty
    params, opt_state, rejected = jax.jit(lambda p: stages.update_epochs(  # one program, not one per primitive
        counting, p, jnp.int32(0), dict(index=jnp.arange(N)), valid, jax.random.split(jax.random.PRNGKey(2), 1), M,
        2))(jnp.zeros(N))
    assert int(opt_state) == 2 and not bool(rejected)  # skipped, not rejected: nothing diverged
    np.testing.assert_array_equal(np.asarray(params), np.asarray(valid, np.float32))


# ---- the iteration objective --------------------------------------------------------------


def numpy_objective(kind, reward, valid, ep_done, ep_return, prev_reward, prev_return, has_reward, has_return):
    ok = lambda x: np.isfinite(x) and abs(x) <= 1e15  # noqa: E731 - hcjax.tuner.valid_objective
    rewards = [float(r) for r, v in zip(reward.ravel(), valid.ravel()) if v]
    R = sum(rewards) / max(len(rewards), 1)
    R_valid = R if all(ok(r) for r in rewards) else np.nan
    ends = [float(x) for x, d in zip(ep_return.ravel(), ep_done.ravel()) if d]
    if ends:
        mean = sum(ends) / len(ends)
        episode = mean if (all(ok(r) for r in rewards) and ok(mean)) else np.nan
    else:
        episode = prev_return
    has_return_now = has_return or bool(ends)
    if kind == "reward_change":
        value, tell = R_valid - prev_reward, has_reward
    elif kind == "reward":
        value, tell = R_valid, True
    else:
        value, tell = episode - prev_return, has_return and has_return_now
    return dict(frames=len(rewards), train_reward=R, reward=R_valid, episode_return=episode,
                has_return=has_return_now, objective=value if tell else 0.0, tell=tell)


# one compiled program per kind for the 6 cases (op by op, each primitive compiles on its own)
iteration_objective = jax.jit(stages.iteration_objective, static_argnums=0)


@pytest.mark.parametrize("kind", ["reward_change", "reward", "return_change"])
@pytest.mark.parametrize("case", range(6))
def test_iteration_objective_matches_numpy(kind, case):
    rng = np.random.default_rng(case)
    T = 5
    reward = rng.normal(size=(T, E)).astype(np.float32)
    valid = np.arange(T)[:, None] < rng.integers(1, T + 1)
    valid = np.broadcast_to(valid, (T, E)).copy()
    ep_done = (rng.random((T, E)) < 0.3) & valid if case != 1 else np.zeros((T, E), bool)
    ep_return = np.where(ep_done, rng.normal(size=(T, E)) * 10, 0.0).astype(np.float32)
    if case == 2:
        reward[0, 0] = np.inf if valid[0, 0] else reward[0, 0]
    if case == 3:
        reward[-1, -1] = 1e30  # invalid only if the step is valid
    prev_reward, prev_return = np.float32(np.nan if case == 4 else 0.25), np.float32(np.nan if case == 4 else -3.0)
    has_reward, has_return = (False, False) if case == 4 else (True, case != 5)
    got = iteration_objective(kind, reward, valid, ep_done, ep_return, prev_reward, prev_return,
                              np.asarray(has_reward), np.asarray(has_return))
    want = numpy_objective(kind, reward, valid, ep_done, ep_return, prev_reward, prev_return, has_reward, has_return)
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k], np.float64), np.float64(v), rtol=1e-5, atol=1e-6, err_msg=k)
    assert got["objective"].dtype == jnp.float32


def test_update_epochs_full_takes_the_general_paths_minibatches_and_masks_invalid_rows():
    """full=True (equal minibatches cut from one gather per epoch) against the general path:
    with every sample valid, the same minibatches in the same order (a recording update: params
    hold the rows seen per step, opt_state the step count); with invalid samples, each valid
    sample is used once per epoch and the invalid ones never; N not M x L is refused."""
    N, M, epochs = 24, 4, 3
    L = N // M
    keys = jax.random.split(jax.random.PRNGKey(2), epochs)
    samples = dict(index=jnp.arange(N))

    def recording(params, opt_state, batch, mask, ok):
        row = jnp.where(mask, batch["index"], -1)
        return params.at[opt_state].set(jnp.sort(row)), jnp.where(ok, opt_state + 1, opt_state), ok

    @jax.jit
    def run(valid):
        start = (jnp.zeros((epochs * M, L), jnp.int32), jnp.int32(0))
        return [stages.update_epochs(recording, *start, samples, valid, keys, M, L, full=full)[:2]
                for full in (False, True)]

    (general, steps), (full, full_steps) = run(jnp.ones(N, bool))
    np.testing.assert_array_equal(np.asarray(full), np.asarray(general))
    assert int(steps) == int(full_steps) == epochs * M
    valid = np.arange(N) % 5 != 2
    (_, _), (seen, _) = run(jnp.asarray(valid))
    per_epoch = np.asarray(seen).reshape(epochs, M * L)
    for rows in per_epoch:
        assert sorted(rows[rows >= 0]) == list(np.flatnonzero(valid))
    with pytest.raises(ValueError, match="full needs N"):
        stages.update_epochs(recording, jnp.zeros((1, 5)), jnp.int32(0), dict(index=jnp.arange(10)),
                             jnp.ones(10, bool), keys, 3, 4, full=True)
