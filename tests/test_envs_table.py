"""agents.envs as one table of backends: the table drives names, resolution and make;
unknown EnvSpecs and observations that differ from their declared space are refused with
a ValueError naming the environment; a host env's evaluate names what to use instead."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import environment, spaces

import hcjax
from agents import envs, ppo


def test_one_record_per_backend_drives_names_and_checks():
    assert envs.BACKENDS == ("gymnax", "brax", "gymnasium")  # bare names: in this order
    assert {b.name for b in envs.TABLE if b.bare} == set(envs.BACKENDS)
    assert set(envs.PREFIXES) == set(envs.BACKENDS) | {"craftax", "jumanji", "navix", "xminigrid", "pgx"}
    assert {k: envs.MIN_VERSIONS[k] for k in ("gymnax", "brax", "gymnasium")} == \
        {"gymnax": "1.0.1", "brax": "0.14", "gymnasium": "1.2"}
    assert [b.name for b in envs.TABLE if b.host] == ["gymnasium"]
    for b in envs.TABLE:  # craftax's objects are gymnax-like: the gymnax backend takes them
        assert isinstance(b, envs.Backend) and (b.described or b.name == "craftax") and callable(b.make_named)
    assert envs.EnvSpec("gymnasium", "CartPole-v1").host and not envs.EnvSpec("brax", "ant").host


def test_an_unknown_env_spec_is_a_value_error():
    with pytest.raises(ValueError, match="unknown environment 'gymnax/Nope-v0'.*gymnax has no 'Nope-v0'"):
        envs.make(envs.EnvSpec("gymnax", "Nope-v0"))
    with pytest.raises(ValueError, match="EnvSpec backend must be one of.*got 'mujoco'"):
        envs.make(envs.EnvSpec("mujoco", "Hopper"))
    assert envs.make(envs.EnvSpec("gymnax", "CartPole-v1")).obs_size == 4


class WrongShapeGymnax(environment.Environment):
    """Declares a (3,) observation space and returns (2,) observations."""

    def reset_env(self, key, params):
        return jnp.zeros(2), environment.EnvState(time=0)

    def step_env(self, key, state, action, params):
        return jnp.zeros(2), state, jnp.float32(0.0), jnp.bool_(False), {}

    def get_obs(self, state, params=None, key=None):
        return jnp.zeros(2)

    @property
    def name(self):
        return "WrongShapeGymnax"

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (3,))


class WrongShapeGym(gym.Env):
    """Declares a (3,) observation space and returns (5,) observations."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(5, np.float32), {}

    def step(self, action):
        return np.zeros(5, np.float32), 0.0, True, False, {}


def test_observations_that_differ_from_the_declared_space_are_refused_when_made():
    with pytest.raises(ValueError, match=r"'WrongShapeGymnax'.*observations have shape \(2,\).*declares shape \(3,\)"):
        envs.make(WrongShapeGymnax())
    with pytest.raises(ValueError, match=r"'WrongShapeGym'.*observations have shape \(5,\).*declares shape \(3,\)"):
        envs.make(WrongShapeGym)

    def reset(key):
        return 0, jnp.zeros(4)

    def step(key, state, action):
        return state, jnp.zeros(4), jnp.float32(0), jnp.bool_(False)

    custom = envs.JaxEnv(name="four", obs_size=2, action_size=2, discrete=True, reset=reset, step=step)
    with pytest.raises(ValueError, match=r"'four'.*observation must have shape \(2,\), got \(4,\)"):
        envs.make(custom)
    with pytest.raises(ValueError, match="'four'"):
        ppo.make_learner(ppo.PPOConfig(), custom, hcjax.make_tuner("fixed", hcjax.ppo_space()))
    fine = envs.JaxEnv(name="four", obs_size=4, action_size=2, discrete=True, reset=reset, step=step)
    assert envs.make(fine) is fine


def test_evaluating_a_host_env_names_the_driver():
    cfg = ppo.PPOConfig(num_envs=2, batch_size=8, num_minibatches=2, hidden_sizes=(4,))
    learner = ppo.make_learner(cfg, "gymnasium/CartPole-v1", hcjax.make_tuner("fixed", hcjax.ppo_space()))
    with pytest.raises(ValueError, match="host \\(gymnasium\\) env; use agents.driver.run") as err:
        learner.evaluate(None, jax.random.PRNGKey(0))
    assert "evaluate_host" not in str(err.value)


@pytest.mark.slow
def test_the_names_known_without_a_library_are_its_registry():
    """known.NAMES answers names of brax and the optional libraries while they are not
    installed: each list is the installed library's registry (the dev extra installs them all
    on Python 3.12; elsewhere those present are checked)."""
    from agents.envs import backend, known, table

    checked = []
    for name, ids in known.NAMES.items():
        lib = table.BY_NAME[name]
        if backend.is_installed(lib.package):
            assert set(lib.registry()) == set(ids), f"update agents/envs/known.py: {name}'s registry changed"
            checked.append(name)
    assert "brax" in checked  # the dev install has brax at least


def test_a_library_not_installed_answers_from_its_known_names(monkeypatch):
    from agents.envs import backend

    real = backend.installed_version
    monkeypatch.setattr(backend, "installed_version", lambda p: None if p in ("brax", "navix") else real(p))
    with pytest.raises(ValueError, match=r"'halfcheetah'.*an environment of brax; brax is not installed.*\[brax\]"):
        envs.resolve("halfcheetah")
    with pytest.raises(ValueError, match=r"closest: gymnasium/Hopper-v4.*in libraries not installed: brax/hopper "
                                         r"\(pip install \"hcjax\[brax\]\"\)"):
        envs.resolve("Hoper-v4")
    with pytest.raises(ValueError, match=r"'Navix-Empty-5x5-v0' is navix/Navix-Empty-5x5-v0.*navix is not installed"):
        envs.resolve("Navix-Empty-5x5-v0")
    assert envs.resolve("halfcheetah", installed=False) == envs.EnvSpec("brax", "halfcheetah")  # to describe it
    assert not any(n.startswith(("brax/", "navix/")) for n in envs.names())  # only what make accepts
    assert envs.resolve("CartPole-v1").backend == "gymnax"
