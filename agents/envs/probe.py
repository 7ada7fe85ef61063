"""Run a JaxEnv for a few steps, compiled: what it costs (compilation, one step of a batch)
and whether it resets after `done`.

    found = probe(env, batch=48, steps=128)   # Probe: compile_seconds, step_seconds, ...
    check_auto_reset(found)                   # ValueError when it never resets after done

A JaxEnv must reset itself where an episode ends (its step returns the next episode's first
state and observation where `done`). One that does not keeps returning `done` from a dead
episode, and PPO trains on it silently. Nothing in a JaxEnv's interface shows it, so the
probe runs `batch` copies for `steps` steps with uniformly random (legal) actions and looks
at `done`: an environment is stuck when an episode of at least two steps ended and the
environment said `done` at every step after it (at least two). Limits: an environment
whose random episodes all outlast the probe is not judged (`episodes` is 0); one whose
episodes after the first all last exactly one step looks stuck (a one-step bandit whose
first episode was longer); an environment that resets but with a fresh episode that is
already over is not told apart from one that does not.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from agents.envs.kinds import JaxEnv


@dataclasses.dataclass(frozen=True)
class Probe:
    """name, batch (copies), steps; compile_seconds: compiling the probe's program (reset
    and `steps` steps of the batch); step_seconds: one step of the batch, compiled (the
    second run's mean); episodes: episodes that ended; stuck: copies that said `done` at
    every step after an episode of at least two steps ended; resumed: copies that said
    not-done after a `done` (a reset happened); compile_cpu_seconds, step_cpu_seconds: the
    same in this process's CPU time (what another process's load does not change)."""

    name: str
    batch: int
    steps: int
    compile_seconds: float
    step_seconds: float
    episodes: int
    stuck: int
    resumed: int
    compile_cpu_seconds: float = float("nan")
    step_cpu_seconds: float = float("nan")


def _random_action(env: JaxEnv, key, state):
    """One uniformly random action (a legal one where the env has a mask)."""
    if env.discrete:
        logits = jnp.zeros((env.action_size,), jnp.float32)
        if env.action_mask is not None:
            logits = jnp.where(env.action_mask(state), logits, -jnp.inf)
        return jax.random.categorical(key, logits).astype(jnp.int32)
    low, high = np.asarray(env.action_low), np.asarray(env.action_high)
    finite = np.isfinite(low) & np.isfinite(high)
    uniform = jax.random.uniform(key, (env.action_size,), minval=np.where(finite, low, 0.0),
                                 maxval=np.where(finite, high, 1.0))
    return jnp.where(finite, uniform, jax.random.normal(key, (env.action_size,)))


def probe(env: JaxEnv, batch: int = 8, steps: int = 128, seed: int = 0) -> Probe:
    """Compile and run `batch` copies of `env` for `steps` steps with random actions (twice:
    the second run is timed); see the module docstring."""
    if not isinstance(env, JaxEnv):
        raise ValueError(f"probe: env must be a JaxEnv, got {type(env).__name__}")

    def one(key):
        k_reset, k_run = jax.random.split(key)
        state, _ = env.reset(k_reset)

        def body(state, t):
            k_act, k_env = jax.random.split(jax.random.fold_in(k_run, t))
            state, _, _, done = env.step(k_env, state, _random_action(env, k_act, state))
            return state, jnp.asarray(done, bool)

        return jax.lax.scan(body, state, jnp.arange(steps))[1]

    run = jax.jit(jax.vmap(one))
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = run.lower(keys).compile()
    compile_seconds, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    jax.block_until_ready(compiled(keys))
    t0, c0 = time.perf_counter(), time.process_time()
    done = np.asarray(jax.block_until_ready(compiled(keys)))  # (batch, steps)
    step_seconds, step_cpu = (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps
    stuck = resumed = 0
    for row in done:
        ends = np.flatnonzero(row)
        if ends.size == 0:
            continue
        first = int(ends[0])
        resumed += bool(np.any(~row[first:]))
        stuck += first >= 1 and steps - first >= 3 and bool(np.all(row[first:]))
    return Probe(name=env.name, batch=int(batch), steps=int(steps), compile_seconds=compile_seconds,
                 step_seconds=step_seconds, episodes=int(done.sum()), stuck=int(stuck), resumed=int(resumed),
                 compile_cpu_seconds=compile_cpu, step_cpu_seconds=step_cpu)


def check_auto_reset(found: Probe) -> None:
    """ValueError naming the environment when the probe found it stuck after `done` (some
    copies stuck, none that reset): how to make its step reset."""
    if found.stuck and not found.resumed:
        raise ValueError(f"environment {found.name!r} does not reset after done: {found.stuck} of {found.batch} "
                         f"copies run with random actions said done at every step after their first episode ended "
                         f"(within {found.steps} steps), so PPO would train on a dead episode. A JaxEnv's step must "
                         f"return the next episode's first state and observation where done: wrap it, "
                         f"step = agents.envs.auto_reset(reset, step) (docs/environment-libraries.md)")
