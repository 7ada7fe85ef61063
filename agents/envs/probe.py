"""Run a JaxEnv for a few steps, compiled: what it costs (compilation, one step of a batch),
whether it resets after `done`, whether what it returns is finite, and whether its action mask
allows an action in every state it visits.

    found = probe(env, batch=48, steps=128)   # Probe: compile_seconds, step_seconds, ...
    check_probe(found)                        # ValueError naming what is wrong

A JaxEnv must reset itself where an episode ends (its step returns the next episode's first
state and observation where `done`). One that does not keeps returning `done` from a dead
episode, and PPO trains on it silently. Nothing in a JaxEnv's interface shows it, so the
probe runs `batch` copies for `steps` steps with uniformly random (legal) actions and looks
at `done`: a copy is stuck when its first episode lasted at least two steps and it said
`done` at each of the last STUCK_STEPS steps; the environment is stuck when at least half
of the copies that ended an episode are (`check_auto_reset`). A copy that walked on after a
`done` without a reset (its own step counter still running to a time limit, then `done`
for ever) counts as stuck once that limit has passed: the probe runs to the time limit + 3.
Limits: an environment whose random episodes all outlast the probe is not judged
(`ended` is 0); one whose episodes after the first mostly last one step looks stuck (a
one-step bandit whose first episode was longer); an environment that resets but with a fresh
episode that is already over is not told apart from one that does not.

The probe also counts the resets and steps whose observation or reward is NaN or infinite,
and the states whose action mask allows no action: `check_probe` refuses either, naming the
environment.
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
    second run's mean); episodes: episodes that ended; stuck: copies whose first episode
    lasted at least two steps and that said `done` at each of the last STUCK_STEPS steps;
    resumed: copies that said not-done after a `done` (a reset happened); ended: copies
    that ended an episode; no_action: states (of batch x steps) where the action mask
    allowed no action; nonfinite: copies x (reset + steps) whose observation or reward held
    NaN or infinity; compile_cpu_seconds, step_cpu_seconds: compile_seconds and step_seconds
    in this process's CPU time (what another process's load does not change)."""

    name: str
    batch: int
    steps: int
    compile_seconds: float
    step_seconds: float
    episodes: int
    stuck: int
    resumed: int
    ended: int = 0
    no_action: int = 0
    nonfinite: int = 0
    compile_cpu_seconds: float = float("nan")
    step_cpu_seconds: float = float("nan")


STUCK_STEPS = 3  # `done` at each of a copy's last steps, after a first episode of two steps or more: stuck


def _random_action(env: JaxEnv, key, state):
    """One uniformly random action (a legal one where the env has a mask), and whether the
    mask allowed any (True without a mask)."""
    if env.discrete:
        logits = jnp.zeros((env.action_size,), jnp.float32)
        legal = jnp.asarray(True)
        if env.action_mask is not None:
            mask = jnp.asarray(env.action_mask(state), bool)
            logits, legal = jnp.where(mask, logits, -jnp.inf), jnp.any(mask)
        return jax.random.categorical(key, logits).astype(jnp.int32), legal
    low, high = np.asarray(env.action_low), np.asarray(env.action_high)
    finite = np.isfinite(low) & np.isfinite(high)
    uniform = jax.random.uniform(key, (env.action_size,), minval=np.where(finite, low, 0.0),
                                 maxval=np.where(finite, high, 1.0))
    return jnp.where(finite, uniform, jax.random.normal(key, (env.action_size,))), jnp.asarray(True)


def _finite(obs, reward=0.0) -> jax.Array:
    return jnp.all(jnp.isfinite(jnp.asarray(obs, jnp.float32))) & jnp.isfinite(jnp.asarray(reward, jnp.float32))


def probe(env: JaxEnv, batch: int = 8, steps: int = 128, seed: int = 0) -> Probe:
    """Compile and run `batch` copies of `env` for `steps` steps with random actions (twice:
    the second run is timed); see the module docstring."""
    if not isinstance(env, JaxEnv):
        raise ValueError(f"probe: env must be a JaxEnv, got {type(env).__name__}")

    def one(key):
        k_reset, k_run = jax.random.split(key)
        state, obs = env.reset(k_reset)

        def body(state, t):
            k_act, k_env = jax.random.split(jax.random.fold_in(k_run, t))
            action, legal = _random_action(env, k_act, state)
            state, obs, reward, done = env.step(k_env, state, action)
            return state, (jnp.asarray(done, bool), legal, _finite(obs, reward))

        return _finite(obs), jax.lax.scan(body, state, jnp.arange(steps))[1]

    run = jax.jit(jax.vmap(one))
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = run.lower(keys).compile()
    compile_seconds, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    jax.block_until_ready(compiled(keys))
    t0, c0 = time.perf_counter(), time.process_time()
    start, (done, legal, finite) = jax.block_until_ready(compiled(keys))  # (batch,), (batch, steps) each
    step_seconds, step_cpu = (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps
    done = np.asarray(done)
    stuck = resumed = ended = 0
    for row in done:
        ends = np.flatnonzero(row)
        if ends.size == 0:
            continue
        first = int(ends[0])
        ended += 1
        resumed += bool(np.any(~row[first:]))
        stuck += first >= 1 and steps - first >= STUCK_STEPS and bool(np.all(row[-STUCK_STEPS:]))
    return Probe(name=env.name, batch=int(batch), steps=int(steps), compile_seconds=compile_seconds,
                 step_seconds=step_seconds, episodes=int(done.sum()), stuck=int(stuck), resumed=int(resumed),
                 ended=ended, no_action=int(np.sum(~np.asarray(legal))),
                 nonfinite=int(np.sum(~np.asarray(start)) + np.sum(~np.asarray(finite))),
                 compile_cpu_seconds=compile_cpu, step_cpu_seconds=step_cpu)


def check_auto_reset(found: Probe) -> None:
    """ValueError naming the environment when the probe found it stuck after `done`: at least
    half of the copies that ended an episode said done at each of the last STUCK_STEPS steps
    after a first episode of two steps or more (how to make its step reset)."""
    if found.stuck and 2 * found.stuck >= max(found.ended, 1):
        raise ValueError(f"environment {found.name!r} does not reset after done: {found.stuck} of the {found.ended} "
                         f"copies (of {found.batch}, run with random actions for {found.steps} steps) whose first "
                         f"episode ended said done at every one of the last {STUCK_STEPS} steps, so PPO would train "
                         f"on dead episodes. A JaxEnv's step must return the next episode's first state and "
                         f"observation where done: wrap it, step = agents.envs.auto_reset(reset, step) (a library's "
                         f"own object: make it with its auto_reset option on; docs/environment-libraries.md)")


def check_probe(found: Probe) -> None:
    """Every check of a probe's findings (ValueError naming the environment and saying that the
    probe ran it): non-finite observations or rewards, states whose action mask allows no
    action, and `check_auto_reset`."""
    ran = (f"(the probe ran {found.batch} copies with random legal actions for {found.steps} steps before any "
           f"work)")
    if found.nonfinite:
        raise ValueError(f"environment {found.name!r} returned NaN or infinite observations or rewards: "
                         f"{found.nonfinite} of {found.batch * (found.steps + 1)} resets and steps {ran}; PPO "
                         f"would train on them. Fix its reset and step (or clip what they return)")
    if found.no_action:
        raise ValueError(f"environment {found.name!r}: its action_mask allowed no action in {found.no_action} of "
                         f"{found.batch * found.steps} states {ran}, where PPO would draw an illegal action; "
                         f"action_mask(state) must allow at least one action in every state")
    check_auto_reset(found)
