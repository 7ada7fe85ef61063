"""Any environment, by name or object: `agents.envs.make(env, **opts)`.

Names come from each library's own registry, imported only when needed:

    make("CartPole-v1")            # bare name: gymnax, then brax, then gymnasium
    make("gymnasium/CartPole-v1")  # a prefix gymnax/, brax/, gymnasium/ picks the backend
    make("craftax/Craftax-Classic-Symbolic-v1")   # the optional JAX libraries: by prefix only
    make("jumanji/Snake-v1"); make("navix/Navix-Empty-5x5-v0"); make("xminigrid/MiniGrid-Empty-5x5")
    make("pgx/2048")
    make("hopper", backend="generalized", episode_length=500)
    resolve("Hopper-v4")           # EnvSpec(backend="gymnasium", id="Hopper-v4"); builds nothing
    names("brax")                  # ("brax/ant", "brax/fast", ...)

A bare name resolves in the order of `BACKENDS`: JAX backends first, so CartPole-v1 and
Pendulum-v1 (in gymnax and in gymnasium) are gymnax envs; an unknown name raises a
ValueError listing the closest names. The optional libraries (craftax, jumanji, navix,
xminigrid, pgx: each its own extra, `pip install "hcjax[jumanji]"`) answer only to their
prefix; a prefixed name whose library is missing is a ValueError naming its extra. Objects
are accepted where a name is: a gymnax `Environment` or any object with gymnax's interface
(craftax's; `make(env, params=p)` or `make((env, p))`), a Brax `Env`, a jumanji
`Environment`, a NAVIX `Environment`, an xminigrid `Environment` (or (env, params)), a pgx
`Env`, a zero-argument factory returning a gymnasium `Env` (host path), and a `JaxEnv` /
`HostEnv` (returned unchanged). Anything else runs through a hand-written `JaxEnv`
(docs/environment-libraries.md).

Two kinds of result, same static description (obs_size, action_size, discrete, bounds),
and `backend` naming the library behind it ("gymnax" | "brax" | "gymnasium" | "custom"):

- `JaxEnv` (gymnax, Brax, or written by hand): pure single-env functions, vmapped by PPO;
      state, obs = env.reset(key)
      state, obs, reward, done = env.step(key, state, action)   # auto-resets when done
  obs (obs_size,) float32 (observations of any shape, pytrees and dicts included, are
  flattened: `flatten_observation`), reward float32 and done bool scalars; action () int32
  (discrete) or (action_size,) float32. After `done` the returned obs is the first obs of
  the next episode (libraries without auto-reset get `auto_reset`). Termination and
  time-limit truncation are both `done`. `action_mask(state) -> (action_size,) bool`
  (optional): the legal actions, from the library where it has them (jumanji's
  observation's `action_mask`, pgx's `legal_action_mask`); PPO never samples an illegal one.
  Every JaxEnv `make` returns has passed `check_traced` (one traced reset and step with an
  action of PPO's form; ValueError naming it); `probe` runs one for a few steps (its costs,
  and whether it resets after done).
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

Modules: table (TABLE: one `Backend` record per library; names, resolve, make), backend
(the record, version checks, lazy imports, observation flattening, auto-reset), kinds
(JaxEnv, HostEnv), checks (the traced check), probe (the run check), one module per backend.

`check_backends()` reports missing or too old backends (gymnax>=1.0.1: gymnax 0.0.x's
`step` returns 5 values, not 6) without importing them.
"""
from agents.envs.backend import Backend, auto_reset, flatten_observation
from agents.envs.checks import check_traced
from agents.envs.kinds import HostEnv, JaxEnv
from agents.envs.probe import Probe, check_auto_reset, check_probe, probe
from agents.envs.table import (
                               BACKENDS,
                               BRAX_BACKENDS,
                               MIN_VERSIONS,
                               PREFIXES,
                               TABLE,
                               EnvSpec,
                               check_backends,
                               closest,
                               make,
                               names,
                               not_an_environment,
                               resolve,
)

__all__ = ["BACKENDS", "BRAX_BACKENDS", "MIN_VERSIONS", "PREFIXES", "TABLE", "Backend", "EnvSpec", "HostEnv",
           "JaxEnv", "Probe", "auto_reset", "check_auto_reset", "check_backends", "check_probe", "check_traced",
           "closest",
           "flatten_observation", "make", "names", "not_an_environment", "probe", "resolve"]
