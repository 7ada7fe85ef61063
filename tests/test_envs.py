"""agents.envs: names from every registry, env objects, spaces, backend checks; Brax and
gymnasium host PPO smoke runs with HyperController (the README trains a custom env:
tests/test_readme.py)."""
import subprocess
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import environment, spaces

import hcjax
from agents import driver, envs
from agents import networks as nets
from agents.ppo import METRIC_KEYS, PPOConfig

# ---- names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name,backend,ident", [
    ("CartPole-v1", "gymnax", "CartPole-v1"),      # in gymnax and gymnasium: JAX first
    ("Pendulum-v1", "gymnax", "Pendulum-v1"),
    ("Acrobot-v1", "gymnax", "Acrobot-v1"),
    ("halfcheetah", "brax", "halfcheetah"),
    ("Hopper-v4", "gymnasium", "Hopper-v4"),
    ("gymnasium/CartPole-v1", "gymnasium", "CartPole-v1"),
    ("brax/ant", "brax", "ant"),
    ("gymnax/MountainCarContinuous-v0", "gymnax", "MountainCarContinuous-v0"),
    ("phys2d/CartPole-v1", "gymnasium", "phys2d/CartPole-v1"),  # a gymnasium namespace, not a prefix
])
def test_resolve_order_and_prefixes(name, backend, ident):
    spec = envs.resolve(name)
    assert (spec.backend, spec.id, spec.host) == (backend, ident, backend == "gymnasium")
    assert envs.resolve(spec.name) == spec  # "backend/id" round-trips


@pytest.mark.slow
def test_resolve_imports_only_what_it_needs():
    code = ("import sys; from agents import envs; "
            "envs.resolve('gymnasium/CartPole-v1'); a = ('gymnax' in sys.modules, 'brax' in sys.modules); "
            "envs.resolve('CartPole-v1'); b = ('gymnax' in sys.modules, 'brax' in sys.modules); print(a, b)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(False, False) (True, False)"


def test_names_per_backend_and_all():
    brax_names = envs.names("brax")
    assert {"brax/ant", "brax/hopper", "brax/humanoid", "brax/walker2d", "brax/halfcheetah"} <= set(brax_names)
    every = envs.names()
    assert {"gymnax/Acrobot-v1", "gymnasium/Hopper-v4", "gymnasium/CartPole-v1"} <= set(every)
    assert every.index("gymnax/CartPole-v1") < every.index("brax/ant") < every.index("gymnasium/CartPole-v1")
    assert all(envs.resolve(n).name == n for n in every)
    with pytest.raises(ValueError, match="backend must be one of"):
        envs.names("mujoco")


def test_unknown_names_suggest_closest():
    with pytest.raises(ValueError, match="unknown environment 'Hoper-v4'") as err:
        envs.make("Hoper-v4")
    assert "gymnasium/Hopper-v4" in str(err.value) and "brax/hopper" in str(err.value)
    with pytest.raises(ValueError, match="brax has no 'Hopper-v4'.*gymnasium/Hopper-v4"):
        envs.resolve("brax/Hopper-v4")
    with pytest.raises(ValueError, match="closest: gymnax/Acrobot-v1, gymnasium/Acrobot-v1"):
        envs.resolve("acrobot")
    with pytest.raises(ValueError, match="no close names"):
        envs.make("NoSuchEnv-v0")
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="envs.make"):
            envs.make(bad)


def test_options_are_validated():
    with pytest.raises(ValueError, match="backend must be one of"):
        envs.make("reacher", backend="nope")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['foo'\] for a Brax env"):
        envs.make("ant", foo=1)
    with pytest.raises(ValueError, match="episode_length must be an integer >= 1"):
        envs.make("brax/ant", episode_length=0)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['foo'\].*max_steps_in_episode"):
        envs.make("Pendulum-v1", foo=1)
    with pytest.raises(ValueError, match=r"gymnasium.make rejected the options \['foo'\]"):
        envs.make("gymnasium/CartPole-v1", foo=1)


# ---- gymnax -------------------------------------------------------------------------------


def zero_action(env):
    return jnp.zeros((), jnp.int32) if env.discrete else jnp.zeros((env.action_size,))


@pytest.mark.parametrize("name,discrete,obs_size", [("CartPole-v1", True, 4), ("Pendulum-v1", False, 3),
                                                    ("Acrobot-v1", True, 6), ("Breakout-MinAtar", True, 400)])
def test_gymnax_reset_step(name, discrete, obs_size):
    env = envs.make(name)
    assert env.discrete == discrete and env.obs_size == obs_size and not env.host and env.backend == "gymnax"

    @jax.jit
    def reset_step(reset_key, step_key):  # one program (op by op, reset compiles each of its primitives)
        state, obs = env.reset(reset_key)
        return (obs, *env.step(step_key, state, zero_action(env))[1:])

    obs, obs2, r, d = reset_step(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    assert obs.shape == (obs_size,) and obs.dtype == jnp.float32  # MinAtar's (10, 10, 4) flattened
    assert obs2.shape == (obs_size,) and r.shape == () and r.dtype == jnp.float32 and d.dtype == jnp.bool_


def test_gymnax_params_overrides_truncate():
    env = envs.make("Pendulum-v1", max_steps_in_episode=7)
    assert env.max_episode_steps == 7
    step = jax.jit(env.step)
    state, _ = env.reset(jax.random.PRNGKey(0))
    dones = []
    for t in range(8):
        state, _, _, d = step(jax.random.PRNGKey(t), state, jnp.zeros(1))
        dones.append(bool(d))
    assert dones == [False] * 6 + [True, False]  # done at step 7, then a fresh episode


def test_gymnax_objects_with_params():
    import gymnax

    raw, params = gymnax.make("Acrobot-v1")
    for env in (envs.make((raw, params.replace(max_steps_in_episode=5))),
                envs.make(raw, params=params, max_steps_in_episode=5)):
        assert env.backend == "gymnax" and env.discrete and env.action_size == 3 and env.max_episode_steps == 5
    assert envs.make(raw).max_episode_steps == 500
    with pytest.raises(ValueError, match="params given twice"):
        envs.make((raw, params), params=params)


class FiveValueStep(environment.Environment):
    """A gymnax env whose step has gymnax 0.0.x's shape: (obs, state, reward, done, info)."""

    def reset_env(self, key, params):
        return jnp.zeros(2), environment.EnvState(time=0)

    def step(self, key, state, action, params=None):
        return jnp.zeros(2), state, 0.0, False, {}

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,))


def test_gymnax_version_guard(monkeypatch):
    assert envs.check_backends() == []
    # the installed gymnax is fine, this env's step is not: refused when made (its traced step)
    with pytest.raises(ValueError, match=r"gymnax step returned 5 values.*gymnax>=1\.0\.1"):
        envs.make(FiveValueStep())
    real = envs.backend.installed_version
    monkeypatch.setattr(envs.backend, "installed_version",
                        lambda p: {"gymnax": "0.0.9", "brax": None}.get(p, real(p)))
    problems = envs.check_backends()
    assert len(problems) == 2
    assert problems[0].startswith("gymnax 0.0.9 is installed") and "gymnax>=1.0.1" in problems[0]
    assert problems[1].startswith("brax is not installed") and "brax>=0.14" in problems[1]
    with pytest.raises(RuntimeError, match=r"gymnax 0\.0\.9 is installed; agents.envs needs gymnax>=1\.0\.1"):
        envs.make("CartPole-v1")


# ---- Brax ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_brax_registry_env_reset_step():
    # outside the paper's list, and one of Brax's cheapest to compile; reset and one step in one program
    env = envs.make("brax/inverted_pendulum", episode_length=100)
    assert (env.backend, env.obs_size, env.action_size, env.max_episode_steps) == ("brax", 4, 1, 100)
    np.testing.assert_array_equal(env.action_low, -np.ones(1))

    @jax.jit
    def reset_step(reset_key, step_key):
        state, obs = env.reset(reset_key)
        return (obs, *env.step(step_key, state, jnp.zeros(1))[1:])

    obs, obs2, r, d = reset_step(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    assert obs.shape == obs2.shape == (4,) and r.dtype == jnp.float32 and d.dtype == jnp.bool_
    assert np.all(np.isfinite(obs2)) and not bool(d)


@pytest.mark.slow
def test_brax_env_objects():
    from brax import envs as brax_envs
    from brax.envs.wrappers import training

    raw = brax_envs.get_environment("inverted_pendulum", backend="positional")  # the cheapest to build
    env = envs.make(raw, episode_length=50)
    described = (env.backend, env.name, env.obs_size, env.action_size, env.max_episode_steps)
    assert described == ("brax", "InvertedPendulum", 4, 1, 50)
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[0]  # traced, not compiled
    _, obs, r, d = jax.eval_shape(env.step, jax.random.PRNGKey(0), state, jnp.zeros(1))
    assert obs.shape == (4,) and d.dtype == jnp.bool_
    wrapped = training.AutoResetWrapper(training.EpisodeWrapper(raw, 77, 1))
    assert envs.make(wrapped).max_episode_steps == 77
    with pytest.raises(ValueError, match="already has an EpisodeWrapper"):
        envs.make(wrapped, episode_length=10)
    with pytest.raises(ValueError, match="unbatched"):
        envs.make(training.VmapWrapper(raw, 2))
    with pytest.raises(ValueError, match="only episode_length"):
        envs.make(raw, backend="spring")


# ---- gymnasium ----------------------------------------------------------------------------


class Echo(gym.Env):
    """Echoes the action it received (as its env sees it) in the first observation entries;
    terminates after 3 steps."""

    def __init__(self, observation_space, action_space):
        self.observation_space, self.action_space = observation_space, action_space
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.zeros(self.observation_space.shape, np.float32)
        a = np.asarray(action, np.float32)
        assert a.shape == self.action_space.shape and self.action_space.contains(action)
        obs.reshape(-1)[: a.size] = a.reshape(-1)
        return obs, 1.0, self.t >= 3, False, {}


def test_gymnasium_registry_env_on_host():
    env = envs.make("Hopper-v4")  # outside the paper's list
    assert env.host and env.backend == "gymnasium" and (env.obs_size, env.action_size) == (11, 3)
    assert env.max_episode_steps == 1000 and env.kwargs == {}
    vec = env.vector(2)
    try:
        obs, _ = vec.reset(seed=0)
        obs, r, term, trunc, _ = vec.step(np.zeros((2, 3), np.float32))
        assert obs.shape == (2, 11) and r.shape == (2,)
    finally:
        vec.close()


def test_gymnasium_factory_shapes_and_unbounded_actions():
    box = gym.spaces.Box(-np.inf, np.inf, (2, 2), np.float32)
    env = envs.make(lambda: Echo(gym.spaces.Box(-9.0, 9.0, (2, 3), np.float32), box))
    assert env.host and env.backend == "gymnasium" and env.max_episode_steps is None
    assert (env.obs_size, env.action_size, env.discrete) == (6, 4, False)
    assert np.all(env.action_low == -np.inf) and np.all(env.action_high == np.inf)
    # PPO clips only at finite bounds: an unbounded action passes unchanged
    big = jnp.asarray([1e6, -1e6, 3.0, -2.0])
    np.testing.assert_array_equal(nets.clip_action(big, env.action_low, env.action_high), big)
    vec = env.vector(2)
    try:
        obs, _ = vec.reset(seed=0)
        assert obs.shape == (2, 6)
        action = np.arange(8, dtype=np.float32).reshape(2, 4)
        obs, *_ = vec.step(action)  # flat (4,) actions reach Echo as (2, 2)
        np.testing.assert_array_equal(obs[:, :4], action)
    finally:
        vec.close()
    single = env.single()
    single.reset(seed=0)
    assert single.step(np.ones(4, np.float32))[0].shape == (6,)


def test_gymnasium_discrete_start_offset():
    env = envs.make(lambda: Echo(gym.spaces.Box(-9.0, 9.0, (3,), np.float32), gym.spaces.Discrete(3, start=-1)))
    assert env.discrete and env.action_size == 3 and env.action_low.shape == (0,)
    vec = env.vector(3)
    try:
        vec.reset(seed=0)
        obs, *_ = vec.step(np.array([0, 1, 2], np.int32))  # PPO's 0..n-1 become -1..1
        np.testing.assert_array_equal(obs[:, 0], [-1.0, 0.0, 1.0])
    finally:
        vec.close()


@pytest.mark.parametrize("obs_space,action_space,match", [
    (gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,))}), gym.spaces.Discrete(2), "observation space Dict"),
    (gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiDiscrete([2, 3]), "action space MultiDiscrete"),
    (gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiBinary(3), "action space MultiBinary"),
    (gym.spaces.Discrete(4), gym.spaces.Discrete(2), "observation space Discrete"),
])
def test_unsupported_spaces_raise_naming_env_and_space(obs_space, action_space, match):
    def echo_factory():
        return Echo(obs_space, action_space)

    with pytest.raises(ValueError, match=rf"envs.make\('Echo'\): unsupported {match}"):
        envs.make(echo_factory)


def test_unsupported_spaces_in_registries():
    with pytest.raises(ValueError, match=r"envs.make\('Blackjack-v1'\): unsupported observation space Tuple"):
        envs.make("Blackjack-v1")
    with pytest.raises(ValueError, match=r"envs.make\('FrozenLake-misc'\): unsupported observation space Discrete"):
        envs.make("FrozenLake-misc")


def test_objects_refused_or_returned_unchanged():
    with pytest.raises(ValueError, match="pass a factory"):
        envs.make(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="a factory must return a gymnasium Env, got int"):
        envs.make(lambda: 3)
    with pytest.raises(ValueError, match="a factory takes no options"):
        envs.make(lambda: gym.make("CartPole-v1"), render_mode="rgb_array")
    host = envs.make(lambda: gym.make("CartPole-v1"))
    assert host.name == "CartPole-v1" and envs.make(host) is host
    jax_env = envs.make("CartPole-v1")
    assert envs.make(jax_env) is jax_env
    with pytest.raises(ValueError, match="already built"):
        envs.make(jax_env, backend="spring")


def test_jax_env_fields_are_validated():
    def reset(key):
        return 0, jnp.zeros(2)

    def step(key, state, action):
        return state, jnp.zeros(2), jnp.float32(0), jnp.bool_(False)

    env = envs.JaxEnv(name="line", obs_size=2, action_size=2, discrete=False, reset=reset, step=step,
                      action_low=[-1.0, -np.inf])
    assert env.backend == "custom" and not env.host and env.max_episode_steps is None
    np.testing.assert_array_equal(env.action_high, [np.inf, np.inf])  # None: unbounded
    np.testing.assert_array_equal(nets.clip_action(jnp.asarray([-5.0, -5.0]), env.action_low, env.action_high),
                                  [-1.0, -5.0])
    bad = [dict(obs_size=0), dict(action_low=[0.0, 0.0, 0.0]), dict(action_low=2.0, action_high=1.0),
           dict(discrete="yes"), dict(step=None), dict(backend="mujoco"), dict(max_episode_steps=0)]
    fields = ["obs_size", "action_low", "action_low must be <=", "discrete", "step", "backend", "max_episode_steps"]
    for kw, field in zip(bad, fields):
        with pytest.raises(ValueError, match=field):
            envs.JaxEnv(**{**dict(name="line", obs_size=2, action_size=2, discrete=False, reset=reset, step=step),
                           **kw})


# ---- training smoke runs --------------------------------------------------------------------


def replay_tuner(tuner, init_key, objectives, tune_every, host):
    """Re-run the tuner outside PPO with PPO's key schedule: (iters, h) values in effect."""
    _, _, k_tuner, k_ask, _, key = jax.random.split(init_key, 6)
    ts = tuner.init(k_tuner)
    ts, values = tuner.ask(ts, k_ask)
    used = []
    for i, x in enumerate(objectives):
        used.append(np.asarray(values))
        if not host:
            key, _ = jax.random.split(key)
        _, _, k_ask, key = jax.random.split(key, 4)
        if i > 0:  # reward_change: nothing is told in the first iteration
            ts = tuner.tell(ts, jnp.float32(x))
        if (i + 1) % tune_every == 0:
            ts, values = tuner.ask(ts, k_ask)
    return np.stack(used)


@pytest.fixture(scope="module")
def smoke_tuner():
    """(HyperController on PPO's space, the same tuner with init, ask and tell jitted): the
    tuner of both smoke runs below and their reference, whose three small programs are then
    compiled once for the module (op by op, every primitive is compiled on its own: about 4
    CPU s; the jitted three cost about 1.2 CPU s to compile)."""
    tuner = hcjax.make_tuner("hypercontroller", hcjax.ppo_space(batch_size=(16, 64)), d=4)
    return tuner, tuner._replace(init=jax.jit(tuner.init), ask=jax.jit(tuner.ask), tell=jax.jit(tuner.tell))


def check_hparams_used(result, reference, keys, cfg, host):
    """The run's values iteration by iteration against `reference` (the run's tuner, jitted:
    smoke_tuner's second element) replayed on the run's objectives."""
    m = result.metrics
    assert set(m) == set(METRIC_KEYS)
    n, iters = m["frames"].shape
    assert iters == cfg.num_iterations and m["hparams"].shape == (n, iters, 4)
    for i in range(n):
        expect = replay_tuner(reference, keys[i], m["objective"][i], cfg.tune_every, host)
        np.testing.assert_allclose(m["hparams"][i], expect, rtol=1e-6)
    # the batch size used is the frames collected (up to one step of all envs)
    batch = m["hparams"][..., 3]
    np.testing.assert_array_equal(m["frames"], np.ceil(batch / cfg.num_envs) * cfg.num_envs)
    assert len(np.unique(batch)) > 1  # HyperController did change the batch size
    # the learning rate in the optimiser is the last one asked
    lr = np.asarray(result.states.opt_state.hyperparams["learning_rate"])
    np.testing.assert_allclose(lr, m["hparams"][:, -1, 0], rtol=1e-6)
    assert np.all(np.isfinite(m["train_reward"]))
    # episode_return: NaN until an agent's first episode ends, finite from then on
    finished = np.isfinite(m["episode_return"])
    assert np.all(np.diff(finished.astype(int), axis=1) >= 0)


@pytest.mark.slow
def test_brax_smoke_hypercontroller(smoke_tuner):
    """PPO with HyperController on a Brax registry env through agents.envs (its State, wrappers,
    [-1, 1] actions): Brax's own unit-test env `fast`, which has no physics to compile (a physics
    step costs about 5 CPU s to compile per program, and PPO compiles three; the physics of
    inverted_pendulum is compiled in test_brax_registry_env_reset_step)."""
    env = envs.make("brax/fast", episode_length=20)
    assert (env.backend, env.obs_size, env.action_size, env.max_episode_steps) == ("brax", 2, 1, 20)
    tuner, reference = smoke_tuner
    cfg = PPOConfig(num_iterations=8, num_envs=4, num_minibatches=4, update_epochs=2, hidden_sizes=(32, 32),
                    tune_every=2, eval_steps=50)
    keys = jax.random.split(jax.random.PRNGKey(3), 1)
    seen = []
    # one segment of 8 iterations, then one evaluation (Brax compiles are slow on CPU)
    result = driver.run(cfg, env, tuner, keys, eval_every=8, callback=lambda info: seen.append(info.iteration))
    assert seen == [8]
    assert result.eval_returns.shape == (1, 1) and np.all(np.isfinite(result.eval_returns))
    check_hparams_used(result, reference, keys, cfg, host=False)
    # episodes of 20 steps end within 8 iterations of at least 16 / 4 = 4 steps (batch sizes 16 to 64, 4 envs)
    assert np.isfinite(result.metrics["episode_return"][:, -1]).all()


@pytest.mark.slow
def test_gymnasium_host_smoke_hypercontroller(smoke_tuner):
    env = envs.make("BipedalWalker-v3")
    assert env.host and env.obs_size == 24 and env.action_size == 4
    tuner, reference = smoke_tuner
    cfg = PPOConfig(num_iterations=6, num_envs=2, num_minibatches=2, update_epochs=2, hidden_sizes=(32, 32),
                    tune_every=2, eval_steps=30)
    keys = jax.random.split(jax.random.PRNGKey(4), 2)
    result = driver.run(cfg, env, tuner, keys, eval_every=4)
    # every 4 iterations and after the last, although 6 is no multiple of 4
    assert result.eval_iterations.tolist() == [4, 6]
    assert result.eval_returns.shape == (2, 2) and np.all(np.isfinite(result.eval_returns))
    check_hparams_used(result, reference, keys, cfg, host=True)
