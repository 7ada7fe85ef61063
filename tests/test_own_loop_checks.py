"""The own-loop API refuses what cannot take effect (issue 24 class 1) and what off-policy
tuning needs (issue 28): scheduled and integer optax hyperparameters, a `decide` that is
not a bool, documented tuner functions, greedy evaluation returns, repeated keys, and
messages naming the public function called."""
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hcjax

SPACE = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, "log")])
PARAMS = jnp.ones(3)
GRADS = jnp.asarray([1.0, -2.0, 0.5])


def first_update(tx, values):
    """The first update of `tx` from PARAMS and GRADS after setting `values`."""
    state = hcjax.optax.set_hyperparams(tx.init(PARAMS), values)
    return tx.update(GRADS, state, PARAMS)


def test_scheduled_hyperparameter_is_refused_naming_it():
    schedule = optax.linear_schedule(1e-3, 0.0, 100)
    tx = optax.chain(optax.clip_by_global_norm(0.5), optax.inject_hyperparams(optax.adam)(learning_rate=schedule))
    assert hcjax.optax.scheduled_names(tx.init(PARAMS)) == ("learning_rate",)
    with pytest.raises(ValueError, match=r"set_hyperparams: \['learning_rate'\] follow a schedule.*step_size"):
        first_update(tx, {"learning_rate": 4e-2})
    constant = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
    assert hcjax.optax.scheduled_names(constant.init(PARAMS)) == ()


def test_a_tuned_multiplier_scales_an_annealed_learning_rate():
    """The guide's recipe: the schedule anneals, the tuned step_size multiplies it."""
    schedule = optax.linear_schedule(1e-2, 0.0, 4)

    def run(step_size, updates=3):
        tx = optax.chain(optax.inject_hyperparams(optax.sgd)(learning_rate=schedule),
                         optax.inject_hyperparams(optax.scale)(step_size=1.0))
        state, out = hcjax.optax.set_hyperparams(tx.init(PARAMS), {"step_size": step_size}), []
        for _ in range(updates):
            update, state = tx.update(GRADS, state, PARAMS)
            out.append(np.asarray(update))
            # the rate in effect, by name: the one this SGD update used (update = -rate * gradient)
            np.testing.assert_allclose(-hcjax.optax.in_effect(state) * np.asarray(GRADS), out[-1], rtol=1e-6)
        return np.stack(out)

    plain, tuned = run(1.0), run(40.0)
    rates = np.asarray([schedule(t) for t in range(3)])  # 1e-2, 7.5e-3, 5e-3: annealed
    np.testing.assert_allclose(plain, -rates[:, None] * np.asarray(GRADS), rtol=1e-6)
    np.testing.assert_allclose(tuned, 40.0 * plain, rtol=1e-6)
    constant = optax.inject_hyperparams(optax.adam)(learning_rate=3e-4)  # no multiplier: the injected value
    assert float(hcjax.optax.in_effect(constant.init(PARAMS))) == pytest.approx(3e-4)
    with pytest.raises(ValueError, match=r"in_effect: 'lr' is not an injected hyperparameter.*'learning_rate'\]"):
        hcjax.optax.in_effect(constant.init(PARAMS), "lr")
    two = optax.chain(constant, optax.inject_hyperparams(optax.sgd)(learning_rate=1.0))
    with pytest.raises(ValueError, match=r"'learning_rate' is in 2 injected states"):
        hcjax.optax.in_effect(two.init(PARAMS))
    rates = jax.vmap(lambda lr: hcjax.optax.in_effect(hcjax.optax.set_hyperparams(constant.init(PARAMS),
                                                                                  {"learning_rate": lr})))
    np.testing.assert_allclose(rates(jnp.asarray([1e-3, 2e-3])), [1e-3, 2e-3], rtol=1e-6)  # one per agent


def test_integer_hyperparameters_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"\['learning_rate'\] are stored as integers.*learning_rate=1\.0"):
        first_update(optax.inject_hyperparams(optax.sgd)(learning_rate=1), {"learning_rate": 1e-4})
    adamw = optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3, weight_decay=0)
    with pytest.raises(ValueError, match=r"\['weight_decay'\] are stored as integers"):
        first_update(adamw, {"learning_rate": 1e-3, "weight_decay": 1e-4})
    update, state = first_update(adamw, {"learning_rate": 2e-3})  # the int is not set: nothing lost
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(2e-3)
    floats = optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)
    np.testing.assert_allclose(first_update(floats, {"learning_rate": 1e-4})[0], -1e-4 * GRADS, rtol=1e-6)


@pytest.fixture(scope="module")
def tuner():
    return hcjax.make_tuner("random", SPACE)


@pytest.mark.parametrize("decide", ["no", None, 1, 0.0, np.ones(2, bool), jnp.int32(1)])
def test_decide_must_be_a_bool(tuner, decide):
    state = tuner.init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"random\.step: decide must be a Python bool or a bool scalar array"):
        tuner.step(state, jax.random.PRNGKey(1), 0.5, decide)


def test_decide_accepts_bools_and_traced_bools(tuner):
    state = tuner.init(jax.random.PRNGKey(0))
    for decide in (True, np.bool_(False), jnp.bool_(True)):
        tuner.step(state, jax.random.PRNGKey(1), 0.5, decide)
    jax.jit(lambda s, i: tuner.step(s, jax.random.PRNGKey(1), 0.5, i % 2 == 0))(state, 3)


def test_tuner_functions_have_docstrings(tuner):
    for name, start in (("init", "init(key)"), ("ask", "ask(state, key)"), ("tell", "tell(state, objective)"),
                        ("values", "values(state)")):
        assert getattr(tuner, name).__doc__.startswith(start)
    assert "decide" in tuner.step.__doc__
    states = jax.vmap(tuner.init)(jax.random.split(jax.random.PRNGKey(0), 2))  # still jit/vmap-able
    assert jax.jit(jax.vmap(tuner.values))(states).shape == (2, 1)


def test_check_keys_refuses_repeated_keys():
    hcjax.check_keys(jax.random.split(jax.random.PRNGKey(0), 4))
    hcjax.check_keys(jax.random.split(jax.random.key(0), 4))  # typed keys
    reused = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1), jax.random.PRNGKey(0)])
    with pytest.raises(ValueError, match=r"keys\[0\] and keys\[2\] are the same key.*fold_in"):
        hcjax.check_keys(reused)
    with pytest.raises(ValueError, match=r"rngs must be a batch of PRNG keys.*shape \(2,\)"):
        hcjax.check_keys(jax.random.PRNGKey(0), "rngs")
    # what it guards against: tuners initialised from one key all start from the same configuration
    same = jax.vmap(hcjax.make_tuner("random", SPACE).init)(reused)
    assert same.values[0] == same.values[2]



def dqn_like(init_from, step_key, controlled=False):
    """jit(vmap(train)) shaped like upstream PureJaxRL's DQN: the seed's rng resets the
    environments, then `rng = jax.random.PRNGKey(0)` (its "dummy rng") replaces it, and the
    scan's key is split from that. init_from: 'dummy' or 'seed' (the vmapped argument);
    step_key: 'runner' (the dummy's descendants) or 'per-seed' (fold_in of the argument)."""
    tuner = hcjax.make_tuner("random", SPACE)
    tuner = hcjax.control.with_control(tuner, values=[2.5e-4]) if controlled else tuner

    def train(seed_rng, control):
        obs = jax.random.normal(seed_rng, (4,))  # stands for the environments reset from the seed's key
        rng = jax.random.PRNGKey(0)  # upstream: "use a dummy rng here"
        state = tuner.init(rng if init_from == "dummy" else seed_rng)
        state = hcjax.control.assign(state, control) if controlled else state

        def update(carry, i):
            state, rng, obs = carry
            rng, _rng = jax.random.split(rng)
            key = _rng if step_key == "runner" else jax.random.fold_in(seed_rng, i)
            obs = obs * 0.9 + 0.1 * jax.random.normal(jax.random.fold_in(seed_rng, i), (4,))
            state, values = tuner.step(state, key, obs.mean(), i % 2 == 0)  # an objective from per-seed data
            return (state, rng, obs), values

        return jax.lax.scan(update, (state, rng, obs), jnp.arange(6))[1]

    keys = jax.random.split(jax.random.PRNGKey(42), 4)
    hcjax.check_keys(keys)  # the vmapped keys are distinct: the host check cannot see the dummy
    return jax.jit(jax.vmap(train))(keys, hcjax.control.controls(4))


@pytest.mark.parametrize("init_from, step_key, message", [
    ("dummy", "runner", r"random\.step: every agent under jax\.vmap got the same key"),
    ("seed", "runner", r"random\.step: every agent under jax\.vmap got the same key.*fold_in\(seed_key, update_i\)"),
    ("dummy", "per-seed", r"random\.step: every agent under jax\.vmap has the same tuner state.*TUNER\.init\(rng\)"),
])
def test_keys_shared_the_way_upstream_dqn_shares_them_are_refused(init_from, step_key, message):
    with pytest.raises(ValueError, match=message):
        dqn_like(init_from, step_key)


def test_a_per_seed_step_key_gives_every_agent_its_own_draws():
    values = np.asarray(dqn_like("seed", "per-seed"))  # (agents, updates, h): the guide's fix runs
    assert len({v.tobytes() for v in values[:, 0]}) == 4 and len({v.tobytes() for v in values[:, -1]}) == 4
    with pytest.raises(ValueError, match=r"control\(random\)\.step: every agent under jax\.vmap has the same tuner"):
        dqn_like("dummy", "per-seed", controlled=True)  # the controls' `which` differs, the tuned states do not
    dqn_like("seed", "per-seed", controlled=True)
    fixed = hcjax.make_tuner("fixed", SPACE)  # its state ignores the key: the same for every agent, by design
    run = jax.vmap(lambda k, o: fixed.step(fixed.init(k), jax.random.fold_in(k, 1), o, True)[1])
    np.testing.assert_allclose(run(jax.random.split(jax.random.PRNGKey(0), 3), jnp.arange(3.0)),
                               np.broadcast_to(SPACE.default, (3, 1)), rtol=1e-6)
    step = jax.vmap(hcjax.make_tuner("random", SPACE).step, in_axes=(0, None, 0, None))  # one key for all: refused
    states = jax.vmap(hcjax.make_tuner("random", SPACE).init)(jax.random.split(jax.random.PRNGKey(0), 2))
    with pytest.raises(ValueError, match=r"same key"):
        step(states, jax.random.PRNGKey(1), jnp.ones(2), True)

def test_shape_errors_name_the_function_called():
    with pytest.raises(ValueError, match=r"^return_change: episode_returns and done"):
        hcjax.objectives.return_change(hcjax.objectives.NO_LEVEL, jnp.zeros(3), jnp.zeros(2, bool))
    with pytest.raises(ValueError, match=r"^mean_return: episode_returns and done"):
        hcjax.objectives.mean_return(jnp.zeros(3), jnp.zeros(2, bool))
    with pytest.raises(ValueError, match=r"greedy_returns\.episodes must be an integer >= 1"):
        hcjax.objectives.greedy_returns(jax.random.PRNGKey(0), Walk(), 3, walk_policy, 0, 5)


class Walk:
    """A tiny gymnax-style environment: start at 0, 1 or 2 (from the reset key); each step
    moves 1 + action and earns the new position; terminated at position >= goal (the env
    params), truncated after 4 steps; auto-resets like gymnax. `old_api`: gymnax < 1.0's
    5-tuple step."""

    def __init__(self, old_api=False):
        self.old_api = old_api

    def reset(self, key, goal):
        pos = jax.random.randint(key, (), 0, 3)
        return jnp.float32(pos)[None], (pos, jnp.int32(0))

    def step(self, key, state, action, goal):
        pos, t = state[0] + 1 + action, state[1] + 1
        terminated, truncated = pos >= goal, t >= 4
        done = terminated | truncated
        obs_reset, state_reset = self.reset(key, goal)
        state_next = jax.tree.map(lambda r, s: jnp.where(done, r, s), state_reset, (pos, t))
        obs = jnp.where(done, obs_reset, jnp.float32(pos)[None])
        if self.old_api:
            return obs, state_next, jnp.float32(pos), done, {}
        return obs, state_next, jnp.float32(pos), terminated, truncated, {}


def walk_policy(obs):
    return (obs[0] % 2 == 0).astype(jnp.int32)  # step 2 from even positions, 1 from odd


def reference_returns(key, env, goal, episodes, max_steps):
    """One episode at a time, one Python step at a time (the helper's reset keys)."""
    reset_key, _ = jax.random.split(key)
    out = []
    for episode_key in jax.random.split(reset_key, episodes):
        obs, state = env.reset(episode_key, goal)
        total = 0.0
        for _ in range(max_steps):
            result = env.step(jax.random.PRNGKey(0), state, walk_policy(obs), goal)
            obs, state, total = result[0], result[1], total + float(result[2])
            if bool(result[3] | result[4]) if len(result) == 6 else bool(result[3]):
                break
        out.append(total)
    return np.float32(out)


@pytest.mark.parametrize("old_api", [False, True])
@pytest.mark.parametrize("goal, max_steps", [(6, 10), (50, 10), (50, 2)])  # terminated, truncated, cut at max_steps
@pytest.mark.slow
def test_greedy_returns_against_a_python_loop(old_api, goal, max_steps):
    env, key = Walk(old_api), jax.random.PRNGKey(7)
    got = jax.jit(lambda k, g: hcjax.objectives.greedy_returns(k, env, g, walk_policy, 6, max_steps))(key, goal)
    expected = reference_returns(key, env, goal, 6, max_steps)
    assert got.shape == (6,) and got.dtype == jnp.float32 and len(set(expected.tolist())) > 1
    np.testing.assert_array_equal(got, expected)
    objective, level = hcjax.objectives.return_change(jnp.float32(1.0), got)  # every entry a finished episode
    np.testing.assert_allclose([objective, level], [expected.mean() - 1.0, expected.mean()], rtol=1e-6)


def test_the_guides_schedule_recipe_runs():
    """docs/own-training-loop.md's learning-rate schedule block: the tuned multiplier
    scales the annealed rate (Adam's first step is -rate per parameter)."""
    guide = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "own-training-loop.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL) if "linear_schedule" in b]
    scope = {}
    exec(block, scope)
    np.testing.assert_allclose(scope["updates"], -4.0 * 2.5e-4 * np.ones(3), rtol=1e-4)
    assert float(scope["opt_state"][2].hyperparams["step_size"]) == 4.0  # kept across the update
    assert float(scope["learning_rate"]) == pytest.approx(4.0 * 2.5e-4)  # what the guide logs: the rate in effect
    later, _ = scope["tx"].update(jnp.ones(3), scope["opt_state"], scope["params"])
    assert np.all(np.abs(np.asarray(later)) < 4.0 * 2.5e-4)  # the schedule still anneals under the multiplier
    assert scope["space"].names == ("step_size",)


class FloatFlags(Walk):
    """Walk whose step returns its done flags as float32 (0.0 / 1.0), as some hand-written envs do."""

    def step(self, key, state, action, goal):
        obs, state, reward, terminated, truncated, info = super().step(key, state, action, goal)
        return obs, state, reward, terminated.astype(jnp.float32), truncated.astype(jnp.float32), info


def test_greedy_returns_names_its_argument_for_a_step_count_past_int32_and_float_done_flags():
    """Issue 41: max_steps = 2**31 overflowed the int32 step counter, and float done flags
    failed inside the loop (`|` of floats), neither naming what was wrong."""
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"greedy_returns\.max_steps must be an integer in \[1, 2147483647\]"):
        hcjax.objectives.greedy_returns(key, Walk(), 3, walk_policy, 2, 2**31)
    with pytest.raises(ValueError, match=r"greedy_returns: env\.step's terminated must be bool.*float32"):
        hcjax.objectives.greedy_returns(key, FloatFlags(), 3, walk_policy, 2, 5)


def test_set_hyperparams_refuses_non_finite_values_and_keeps_the_old_one_when_traced():
    """Issue 41: NaN or inf was stored (and every later update became NaN). A concrete value
    is refused naming it; a traced one (a tuner's, under jit) cannot raise, so the stored
    value stays where the new one is not finite."""
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.5)
    state = tx.init(PARAMS)
    for bad in (float("nan"), np.inf, jnp.float32(-np.inf)):
        with pytest.raises(ValueError, match=r"set_hyperparams: 'learning_rate' must be finite"):
            hcjax.optax.set_hyperparams(state, {"learning_rate": bad})
    kept = jax.jit(hcjax.optax.set_hyperparams)(state, {"learning_rate": jnp.float32(np.nan)})
    assert float(kept.hyperparams["learning_rate"]) == 0.5
    changed = jax.jit(hcjax.optax.set_hyperparams)(state, {"learning_rate": jnp.float32(0.25)})
    assert float(changed.hyperparams["learning_rate"]) == 0.25
