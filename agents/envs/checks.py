"""The check every JaxEnv passes when it is made: one traced reset and one traced step with
an action of the form PPO gives (`jax.eval_shape`: nothing is compiled or computed), so that
a wrong action form, observation or state is a ValueError naming the environment before
any program of a study is compiled, instead of an error inside the environment's code
after minutes of compilation."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.envs.kinds import JaxEnv

MULTI_DISCRETE = ("PPO gives one discrete action: give its JaxEnv action_size n1 * n2 * ... and decode the "
                  "action in its step (a1, a2 = divmod(action, n2); jnp.unravel_index(action, (n1, n2, ...)) "
                  "for more), its mask "
                  "flattened the same way (docs/environment-libraries.md)")
FLATTEN = "flatten it in its reset and step with agents.envs.flatten_observation(obs)"


def action_form(env: JaxEnv) -> jax.ShapeDtypeStruct:
    """The action PPO gives one environment: () int32 in [0, action_size) (discrete), or
    (action_size,) float32 (continuous)."""
    if env.discrete:
        return jax.ShapeDtypeStruct((), jnp.int32)
    return jax.ShapeDtypeStruct((env.action_size,), jnp.float32)


def _describe(tree) -> str:
    return str(jax.tree.map(lambda x: f"{x.dtype}{list(x.shape)}", tree))


def _check_array(where: str, what: str, value, shape: tuple, fix: str) -> None:
    if not isinstance(value, jax.ShapeDtypeStruct):
        raise ValueError(f"{where}: {what} must be one array of shape {shape}, got a pytree {_describe(value)}; {fix}")
    if tuple(value.shape) != shape:
        raise ValueError(f"{where}: {what} must have shape {shape}, got {tuple(value.shape)}; {fix}")


def check_traced(env: JaxEnv) -> None:
    """ValueError naming `env` unless reset(key) -> (state, obs (obs_size,)), step(key, state,
    action of PPO's form) -> (state of reset's structure, obs (obs_size,), reward (), done
    ()), and action_mask(state) -> (action_size,) bool, traced with jax.eval_shape."""
    where = f"environment {env.name!r}"
    key = jax.random.PRNGKey(0)
    try:
        state, obs = jax.eval_shape(env.reset, key)
    except Exception as err:  # noqa: BLE001 - any failure of the environment's code is its mistake to name
        raise ValueError(f"{where}: reset(key) -> (state, obs) failed when traced: {type(err).__name__}: {err}") \
            from None
    _check_array(where, "reset's observation", obs, (env.obs_size,), FLATTEN)
    form = action_form(env)
    try:
        out = jax.eval_shape(env.step, key, state, form)
    except Exception as err:  # noqa: BLE001
        hint = f". If it takes several discrete choices at once (a multi-discrete action), {MULTI_DISCRETE}"
        raise ValueError(f"{where}: step(key, state, action) failed when traced with the action PPO gives "
                         f"({form.dtype}{list(form.shape)}: {'an index of action_size' if env.discrete else 'a vector'}"
                         f"): {type(err).__name__}: {err}" + (hint if env.discrete else "")) from None
    if not isinstance(out, tuple) or len(out) != 4:
        raise ValueError(f"{where}: step must return (state, obs, reward, done), got {_describe(out)}")
    new_state, new_obs, reward, done = out
    _check_array(where, "step's observation", new_obs, (env.obs_size,), FLATTEN)
    _check_array(where, "step's reward", reward, (), "return one number per step")
    _check_array(where, "step's done", done, (), "return one flag per step (termination or time limit)")
    before, after = jax.tree.structure(state), jax.tree.structure(new_state)
    same = before == after and all(a.shape == b.shape and a.dtype == b.dtype for a, b in
                                   zip(jax.tree.leaves(state), jax.tree.leaves(new_state)))
    if not same:
        raise ValueError(f"{where}: step returns a state unlike reset's (PPO carries it through lax.scan): reset "
                         f"{_describe(state)}, step {_describe(new_state)}")
    if env.action_mask is not None:
        try:
            mask = jax.eval_shape(env.action_mask, state)
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"{where}: action_mask(state) failed when traced: {type(err).__name__}: {err}") from None
        _check_array(where, "action_mask(state)", mask, (env.action_size,), "one flag per action, True where legal")
        if mask.dtype != jnp.bool_:
            raise ValueError(f"{where}: action_mask(state) must be bool (True where legal), got {mask.dtype}")
