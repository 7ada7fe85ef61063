"""Populations owned by agents/: Learner.exploit copies donors, agents.driver.run steps
an hcjax.Population (lineage returned), make_train and run refuse what they cannot run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents import driver, ppo
from tests.tiny_env import make_walk

TINY = dict(num_envs=2, batch_size=16, num_minibatches=2, update_epochs=1, hidden_sizes=(8,), eval_steps=20)


N_AGENTS = 4
WALK_ENV = make_walk()  # one JaxEnv object for the run and the learner


@pytest.fixture(scope="module")
def pbt_run():
    """(space, config, result) of one driver run of PBT over 4 agents, shared by the tests below:
    6 iterations, a population step every 2, an evaluation every 3, all in segments of one
    iteration (one compiled segment program: lengths 2 and 1 would be two), on tests/tiny_env.py's
    walker (the environment is not the point; it compiles less than CartPole)."""
    space = hcjax.ppo_space(batch_size=(16, 32))
    cfg = ppo.PPOConfig(num_iterations=6, tune_every=2, **TINY)
    result = driver.run(cfg, WALK_ENV, hcjax.make_population("pbt", space), jax.random.split(
        jax.random.PRNGKey(1), N_AGENTS), eval_every=3, segment=1)
    return space, cfg, result


@pytest.mark.slow
def test_learner_exploit_copies_the_donors_fields_and_sets_every_agents_values(pbt_run):
    space, cfg, result = pbt_run
    learner = ppo.make_learner(cfg, WALK_ENV, hcjax.make_population("pbt", space))
    n = N_AGENTS
    states = result.states  # 4 trained agents
    parents = jnp.array([0, 0, 2, 2], jnp.int32)
    values = jnp.asarray(np.stack([np.asarray(space.default, np.float32) * (1 + 0.1 * i) for i in range(n)]))

    @jax.jit  # the exploit and the field-by-field reference in one program
    def exploited(states, parents, values):
        return learner.exploit(states, parents, values), {
            field: hcjax.exploit(getattr(states, field), parents) for field in ppo.INHERITED}

    new, wanted = exploited(states, parents, values)
    for field in ppo.INHERITED:
        for a, b in zip(jax.tree.leaves(getattr(new, field)), jax.tree.leaves(wanted[field])):
            if a.dtype != jnp.float32 or field != "opt_state":
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=field)
    for field in ("env_state", "obs", "ep_running", "iteration", "key"):  # the agent's own
        for a, b in zip(jax.tree.leaves(getattr(new, field)), jax.tree.leaves(getattr(states, field))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=field)
    np.testing.assert_array_equal(np.asarray(new.hparams), np.asarray(values))
    lr = space.names.index("learning_rate")
    np.testing.assert_array_equal(np.asarray(new.opt_state.hyperparams["learning_rate"]), np.asarray(values[:, lr]))
    # the optimiser's moments come from the donor
    mu_new, mu_old = jax.tree.leaves(new.opt_state.inner_state), jax.tree.leaves(states.opt_state.inner_state)
    for a, b in zip(mu_new, mu_old):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[np.asarray(parents)])


@pytest.mark.slow
def test_driver_runs_pbt_on_a_population(pbt_run):
    """Before: run(cfg, env, make_population("pbt", space), keys) trained every agent at the
    space's defaults, silently. Now the population steps and its lineage is returned."""
    space, _, result = pbt_run
    n = N_AGENTS
    np.testing.assert_array_equal(result.lineage_iteration, [2, 4])
    assert result.lineage_parent.shape == (n, 2) and result.lineage_objective.shape == (n, 2)
    assert ((result.lineage_parent >= 0) & (result.lineage_parent < n)).all()
    assert (result.lineage_parent != np.arange(n)[:, None]).any()  # someone was replaced
    hparams = result.metrics["hparams"]  # (n, T, h)
    assert hparams.shape == (n, 6, space.h)
    assert not np.allclose(hparams, np.asarray(space.default, np.float32))  # not the defaults
    assert len({tuple(h) for h in hparams[:, 0]}) > 1  # every agent its own values from the start
    np.testing.assert_array_equal(result.eval_iterations, [3, 6])
    # the objective ranked at iteration 2: the mean training reward of iterations 0 and 1
    np.testing.assert_allclose(result.lineage_objective[:, 0], result.metrics["train_reward"][:, :2].mean(axis=1),
                               rtol=1e-6)


def test_make_train_refuses_a_population_and_run_refuses_anything_else():
    space = hcjax.ppo_space(batch_size=(16, 32))
    cfg = ppo.PPOConfig(num_iterations=2, **TINY)
    with pytest.raises(ValueError, match="make_train.*pbt.*agents.driver.run"):
        ppo.make_train(cfg, "CartPole-v1", hcjax.make_population("pbt", space))
    with pytest.raises(ValueError, match="tuner_or_population must be an hcjax.Tuner or an hcjax.Population, got str"):
        driver.run(cfg, "CartPole-v1", "pbt", jax.random.split(jax.random.PRNGKey(0), 2))
    with pytest.raises(ValueError, match="JAX environments only"):
        driver.run(cfg, "gymnasium/CartPole-v1", hcjax.make_population("pbt", space),
                   jax.random.split(jax.random.PRNGKey(0), 2))
