"""PPO: loss vs NumPy, masking (GAE, gradient, normalisation), frames, learning, vmap, guard."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents import envs, networks as nets, ppo
from agents.wrappers import init_obs_stats, update_obs_stats

# ---- configuration ---------------------------------------------------------------------


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="objective.*reward_change"):
        ppo.PPOConfig(objective="nope")
    with pytest.raises(ValueError, match="num_envs"):
        ppo.PPOConfig(num_envs=0)
    with pytest.raises(ValueError, match="gae_lambda"):
        ppo.PPOConfig(gae_lambda=1.5)
    with pytest.raises(ValueError, match="hidden_sizes"):
        ppo.PPOConfig(hidden_sizes=[64])
    cfg = ppo.PPOConfig()
    assert (cfg.hidden_sizes, cfg.ent_coef, cfg.gamma, cfg.update_epochs, cfg.batch_size, cfg.tune_every) == (
        (256, 256, 256), 1e-4, 0.99, 10, 1000, 5)


# ---- loss vs a slow NumPy reference ----------------------------------------------------


def numpy_loss(mean, log_std, value, batch, mask, clip_eps, vf_coef, ent_coef):
    """Per-sample Python loops; Gaussian policy."""
    idx = [i for i in range(len(mask)) if mask[i]]
    adv = np.array([batch["adv"][i] for i in idx], np.float64)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg, vl, ent = [], [], []
    for j, i in enumerate(idx):
        a, mu, ls = batch["action"][i].astype(np.float64), mean[i].astype(np.float64), log_std.astype(np.float64)
        logp = np.sum(-0.5 * ((a - mu) / np.exp(ls)) ** 2 - ls - 0.5 * np.log(2 * np.pi))
        ratio = np.exp(logp - batch["logp"][i])
        pg.append(-min(ratio * adv[j], np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv[j]))
        vl.append(0.5 * (value[i] - batch["target"][i]) ** 2)
        ent.append(np.sum(ls + 0.5 * (1 + np.log(2 * np.pi))))
    return np.mean(pg) + vf_coef * np.mean(vl) - ent_coef * np.mean(ent)


def make_nets(obs_size=5, act=2, discrete=False):
    actor = nets.Actor(act, discrete, (16, 16))
    critic = nets.Critic((16, 16))
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    params = {"actor": actor.init(k1, jnp.zeros(obs_size)), "critic": critic.init(k2, jnp.zeros(obs_size))}
    params["actor"]["params"]["log_std"] = jnp.array([0.3, -0.5])
    return actor, critic, params


def random_batch(key, B, obs_size=5, act=2):
    ks = jax.random.split(key, 5)
    return dict(obs=jax.random.normal(ks[0], (B, obs_size)), action=jax.random.normal(ks[1], (B, act)),
                logp=jax.random.normal(ks[2], (B,)) - 2.0, adv=jax.random.normal(ks[3], (B,)),
                target=jax.random.normal(ks[4], (B,)))


def test_loss_matches_numpy_reference():
    actor, critic, params = make_nets()
    batch = random_batch(jax.random.PRNGKey(1), 24)
    mask = np.arange(24) < 17
    loss, aux = ppo.ppo_loss(actor.apply, critic.apply, params, batch, jnp.asarray(mask), 0.2, 0.5, 0.01, False)
    mean, log_std = actor.apply(params["actor"], batch["obs"])
    value = critic.apply(params["critic"], batch["obs"])
    np_batch = {k: np.asarray(v) for k, v in batch.items()}
    ref = numpy_loss(np.asarray(mean), np.asarray(log_std), np.asarray(value), np_batch, mask, 0.2, 0.5, 0.01)
    np.testing.assert_allclose(float(loss), ref, rtol=1e-4, atol=1e-5)


def test_categorical_log_prob_and_entropy():
    logits = jnp.array([[0.1, 2.0, -1.0]])
    p = np.exp(np.asarray(logits[0])) / np.exp(np.asarray(logits[0])).sum()
    np.testing.assert_allclose(nets.log_prob(logits, jnp.array([1]), True), [np.log(p[1])], rtol=1e-5)
    np.testing.assert_allclose(nets.entropy(logits, True), [-(p * np.log(p)).sum()], rtol=1e-5)


def test_masked_padded_gradient_equals_unpadded():
    actor, critic, params = make_nets()
    batch = random_batch(jax.random.PRNGKey(2), 40)
    loss = lambda p, b, m: ppo.ppo_loss(actor.apply, critic.apply, p, b, m, 0.2, 0.5, 0.01, False)[0]
    ref = jax.grad(loss)(params, {k: v[:25] for k, v in batch.items()}, jnp.ones(25, bool))
    # padding holds garbage (large but finite values) that the mask must exclude
    padded = {k: v.at[25:].set(37.0) for k, v in batch.items()}
    got = jax.grad(loss)(params, padded, jnp.arange(40) < 25)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, ref)


# ---- GAE and normalisation through the mask ----------------------------------------------


def loop_gae(r, v, d, last_v, gamma, lam):
    T = len(r)
    adv = np.zeros(T)
    gae, next_v = 0.0, last_v
    for t in reversed(range(T)):
        nonterm = 1.0 - d[t]
        delta = r[t] + gamma * next_v * nonterm - v[t]
        gae = delta + gamma * lam * nonterm * gae
        adv[t], next_v = gae, v[t]
    return adv


def test_gae_with_mask_matches_loop_and_ignores_padding():
    rng = np.random.default_rng(0)
    T, E, n = 12, 3, 7
    r, v = rng.normal(size=(T, E)).astype(np.float32), rng.normal(size=(T, E)).astype(np.float32)
    d = rng.random((T, E)) < 0.2
    last_v = rng.normal(size=E).astype(np.float32)
    valid = np.broadcast_to((np.arange(T) < n)[:, None], (T, E))
    adv, target = ppo.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(d), jnp.asarray(valid), jnp.asarray(last_v),
                          0.99, 0.9)
    for e in range(E):
        ref = loop_gae(r[:n, e], v[:n, e], d[:n, e], last_v[e], 0.99, 0.9)
        np.testing.assert_allclose(adv[:n, e], ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(target[:n, e], ref + v[:n, e], rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(adv[n:]) == 0)
    # changing masked transitions changes nothing
    r2, v2, d2 = r.copy(), v.copy(), d.copy()
    r2[n:], v2[n:], d2[n:] = 1e3, -1e3, True
    adv2, _ = ppo.gae(jnp.asarray(r2), jnp.asarray(v2), jnp.asarray(d2), jnp.asarray(valid), jnp.asarray(last_v),
                      0.99, 0.9)
    np.testing.assert_array_equal(adv2, adv)


def test_obs_stats_use_valid_rows_only():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 4, 3)).astype(np.float32) * 3 + 1
    mask = np.zeros((10, 4), bool)
    mask[:6] = True
    stats = update_obs_stats(init_obs_stats(3), jnp.asarray(x), jnp.asarray(mask))
    x2 = x.copy()
    x2[6:] = 1e6
    stats2 = update_obs_stats(init_obs_stats(3), jnp.asarray(x2), jnp.asarray(mask))
    jax.tree.map(np.testing.assert_array_equal, stats, stats2)
    valid = x[:6].reshape(-1, 3)
    np.testing.assert_allclose(stats.mean, valid.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stats.var, valid.var(0), rtol=1e-3, atol=1e-3)
    # two updates equal one update on the union
    s_a = update_obs_stats(update_obs_stats(init_obs_stats(3), jnp.asarray(x[:3]), jnp.ones((3, 4), bool)),
                           jnp.asarray(x[3:6]), jnp.ones((3, 4), bool))
    np.testing.assert_allclose(s_a.mean, stats.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s_a.var, stats.var, rtol=1e-4, atol=1e-4)
    empty = update_obs_stats(stats, jnp.asarray(x2), jnp.zeros((10, 4), bool))
    jax.tree.map(np.testing.assert_array_equal, empty, stats)


# ---- CartPole: one compiled learner shared by several tests -------------------------------

CP_BATCH = 500  # not a multiple of num_envs=8: 63 steps x 8 envs = 504 frames
CP_ITERS = 120  # frame budget: 120 x 504 = 60,480 frames per seed
CP_SEG = 10


@pytest.fixture(scope="module")
def cartpole():
    env = envs.make("CartPole-v1")
    space = hcjax.ppo_space(batch_size=(256, 1024))
    tuner = hcjax.make_tuner("fixed", space, values=[1e-3, 0.2, 0.95, CP_BATCH])
    cfg = ppo.PPOConfig(num_iterations=CP_ITERS, num_envs=8, max_batch_size=512, num_minibatches=4,
                        update_epochs=4, hidden_sizes=(64, 64), ent_coef=0.0, eval_steps=500)
    learner = ppo.make_learner(cfg, env, tuner)
    return dict(learner=learner, init=jax.jit(learner.init),
                segment=jax.jit(lambda s: learner.iterate(s, CP_SEG)), evaluate=jax.jit(learner.evaluate))


def test_frames_equal_batch_size_up_to_one_env_step(cartpole):
    state = cartpole["init"](jax.random.PRNGKey(0))
    _, m = cartpole["segment"](state)
    assert m["hparams"].shape == (CP_SEG, 4) and np.all(m["hparams"][:, 3] == CP_BATCH)
    frames = np.asarray(m["frames"])
    assert np.all((frames >= CP_BATCH) & (frames < CP_BATCH + 8)) and np.all(frames == 504)


def test_cartpole_fixed_learns_two_seeds(cartpole):
    """>= 400 mean deterministic return over the last 3 evaluations (3 episodes each)
    within 60,480 frames, seeds 0 and 1."""
    for seed in (0, 1):
        state = cartpole["init"](jax.random.PRNGKey(seed))
        evals = []
        for i in range(CP_ITERS // CP_SEG):
            state, m = cartpole["segment"](state)
            if i >= CP_ITERS // CP_SEG - 3:
                evals.append(np.mean([cartpole["evaluate"](state, jax.random.PRNGKey(100 * i + j)) for j in range(3)]))
        assert np.mean(evals) >= 400, (seed, evals)
        assert int(state.iteration) == CP_ITERS and np.all(np.asarray(m["rejected"]) == 0)


def test_vmapped_agents_equal_separate_runs(cartpole):
    keys = jax.random.split(jax.random.PRNGKey(7), 4)
    vstate = jax.jit(jax.vmap(cartpole["learner"].init))(keys)
    vstate, vm = jax.jit(jax.vmap(lambda s: cartpole["learner"].iterate(s, CP_SEG)))(vstate)
    for i in range(4):
        state, m = cartpole["segment"](cartpole["init"](keys[i]))
        for name in ppo.METRIC_KEYS:
            np.testing.assert_allclose(vm[name][i], m[name], rtol=1e-4, atol=1e-4, err_msg=name)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a[i], b, rtol=1e-4, atol=1e-4),
                     vstate.params, state.params)


def test_divergence_guard_rejects_and_training_goes_on(cartpole):
    """Inject an absurd learning rate (3e38, in effect until the fixed tuner re-asks at
    iteration 5): non-finite updates are rejected, params stay finite, training goes on."""
    state = cartpole["init"](jax.random.PRNGKey(3))
    state, _ = cartpole["segment"](state)
    state = state.replace(hparams=state.hparams.at[0].set(3e38))
    state, m = cartpole["segment"](state)
    rejected = np.asarray(m["rejected"])
    assert rejected[:5].sum() >= 1, rejected
    assert np.all(rejected[5:] == 0), rejected  # back to lr 1e-3 from the tuner
    assert bool(ppo.all_finite(state.params)) and bool(ppo.all_finite(state.opt_state))
    np.testing.assert_allclose(m["hparams"][5:, 0], 1e-3, rtol=1e-6)
    assert np.all(np.isfinite(np.asarray(m["train_reward"])))


# ---- Pendulum --------------------------------------------------------------------------------


def test_pendulum_fixed_improves():
    """Seed 0, 100 iterations x 1024 frames = 102,400 frames: the mean deterministic
    return of the last 2 evaluations (4 episodes each) beats the untrained policy's by >= 400."""
    env = envs.make("Pendulum-v1")
    space = hcjax.ppo_space(batch_size=(256, 2048))
    tuner = hcjax.make_tuner("fixed", space, values=[1e-3, 0.2, 0.95, 1024])
    cfg = ppo.PPOConfig(num_iterations=100, num_envs=16, max_batch_size=1024, num_minibatches=16,
                        update_epochs=10, hidden_sizes=(64, 64), reward_scale=0.1, ent_coef=0.0, eval_steps=200)
    learner = ppo.make_learner(cfg, env, tuner)
    segment = jax.jit(lambda s: learner.iterate(s, 10))
    evaluate = jax.jit(learner.evaluate)
    ev = lambda s, i: float(np.mean([evaluate(s, jax.random.PRNGKey(1000 * i + j)) for j in range(4)]))
    state = jax.jit(learner.init)(jax.random.PRNGKey(0))
    first = ev(state, 0)
    last = []
    for i in range(10):
        state, m = segment(state)
        if i >= 8:
            last.append(ev(state, i + 1))
    assert np.mean(last) >= first + 400, (first, last)
    np.testing.assert_array_equal(np.asarray(m["frames"]), 1024)
