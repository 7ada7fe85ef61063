"""Any environment, by name or object: `agents.envs.make(env, **opts)`.

Names come from each library's own registry, imported only when needed:

    make("CartPole-v1")            # bare name: gymnax, then brax, then gymnasium
    make("gymnasium/CartPole-v1")  # a prefix gymnax/, brax/, gymnasium/ picks the backend
    make("hopper", backend="generalized", episode_length=500)
    resolve("Hopper-v4")           # EnvSpec(backend="gymnasium", id="Hopper-v4"); builds nothing
    names("brax")                  # ("brax/ant", "brax/fast", ...)

A bare name resolves in the order of `BACKENDS`: JAX backends first, so CartPole-v1 and
Pendulum-v1 (in gymnax and in gymnasium) are gymnax envs; an unknown name raises a
ValueError listing the closest names of every registry. Objects are accepted where a
name is: a gymnax `Environment` (`make(env, params=p)` or `make((env, p))`), a Brax
`Env`, a zero-argument factory returning a gymnasium `Env` (host path), and a
`JaxEnv` / `HostEnv` (returned unchanged).

Two kinds of result, same static description (obs_size, action_size, discrete, bounds),
and `backend` naming the library behind it ("gymnax" | "brax" | "gymnasium" | "custom"):

- `JaxEnv` (gymnax, Brax, or written by hand): pure single-env functions, vmapped by PPO;
      state, obs = env.reset(key)
      state, obs, reward, done = env.step(key, state, action)   # auto-resets when done
  obs (obs_size,) float32 (observations of any shape are flattened), reward float32 and
  done bool scalars; action () int32 (discrete) or (action_size,) float32. After `done`
  the returned obs is the first obs of the next episode. Termination and time-limit
  truncation are both `done`.
- `HostEnv` (gymnasium): built on the host as a `gymnasium.vector.SyncVectorEnv` with
  same-step auto-reset (`vector(num_envs)`), stepped by `agents.driver` while the PPO
  update and the tuner stay jitted.

Spaces: observations must be a Box (any shape, flattened to obs_size); actions a
Discrete (`action_size` = number of actions; gymnasium's `start` offset is added back)
or a Box (any shape, flattened to action_size). Any other space (Dict, Tuple,
MultiDiscrete, MultiBinary, a Discrete observation, ...) raises a ValueError naming the
env and the space. Action bounds `action_low` / `action_high` keep infinities: PPO clips
each action dimension only on the sides where its bound is finite.

Options of `make`: see the backend's module (gymnax_backend, brax_backend,
gymnasium_backend). An environment whose observations differ in size from its declared
observation space (gymnax, gymnasium, a hand-written JaxEnv's obs_size) is refused with
a ValueError naming it when it is made.

Modules: table (TABLE: one `Backend` record per library, in resolution order; names,
resolve, make), backend (the record, version checks, lazy imports), kinds (JaxEnv,
HostEnv), one module per backend.

`check_backends()` reports missing or too old backends (gymnax>=1.0.1: gymnax 0.0.x's
`step` returns 5 values, not 6) without importing them.
"""
from agents.envs.backend import Backend
from agents.envs.kinds import HostEnv, JaxEnv
from agents.envs.table import (
                               BACKENDS,
                               BRAX_BACKENDS,
                               MIN_VERSIONS,
                               TABLE,
                               EnvSpec,
                               check_backends,
                               closest,
                               make,
                               names,
                               resolve,
)

__all__ = ["BACKENDS", "BRAX_BACKENDS", "MIN_VERSIONS", "TABLE", "Backend", "EnvSpec", "HostEnv", "JaxEnv",
           "check_backends", "closest", "make", "names", "resolve"]
