"""The frames and duration of a study, estimated before anything is compiled.

A cost model calibrated on a 2-core CPU (numbers in docs/studies.md), scaled by a tiny
timed probe of this machine's current speed (`machine_speed`: a few small matrix products
against the calibration's time for them):

    seconds = sum over the unit groups still to run of
              compile + iterations x (agents x F x per_frame + steps x per_step + updates x per_update)
              + evaluations x (agents x eval_steps x per_eval_frame + eval_steps x per_step)

F: the rollout's frames per iteration (the largest batch: the rollout collects it whatever
batch size is tuned); steps = F / num_envs sequential environment steps; updates = epochs x
minibatches sequential gradient steps; per_frame: the environment's step (by backend) plus
the network's forward and backward passes (multiply-adds x (1 + 3 epochs)); compile: one
program per unit group (less with fast_compile; a fused group costs more). The frames
announced are seeds x iterations x F per unit: an upper bound when the batch size is tuned.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from agents.ppo import PPOConfig
from agents.ppo.config import largest_batch
from experiments.study import build
from experiments.study.plan import ppo_options, unit_groups
from experiments.study.presets import SMALL_PPO, Plan

# Calibrated on the 2-core CPU (docs/studies.md "How long"); seconds.
ENV_SECONDS = {"gymnax": 0.3e-6, "custom": 0.3e-6, "brax": 8e-6, "gymnasium": 400e-6}  # per frame and agent
MULTIPLY_ADD_SECONDS = 1.2e-10  # per multiply-add of the networks, forward or backward
STEP_SECONDS = 2.5e-4  # per sequential environment step (any number of agents)
UPDATE_SECONDS = 1.5e-3  # per sequential gradient step
COMPILE_SECONDS = {True: 12.0, False: 30.0}  # a program, by fast_compile
FUSED_COMPILE = 0.5  # a fused group's program costs this much more per extra method
PROBE_SECONDS = 0.004  # `machine_speed`'s probe on the calibration machine, idle


@dataclasses.dataclass(frozen=True)
class Estimate:
    """frames: the frames every unit still to run collects at most; seconds: the estimated
    duration here, compilation included; groups: programs to compile; speed: this machine's
    slowdown against the calibration's; small_ppo: the study left `ppo` out and got SMALL_PPO."""

    frames: int
    seconds: float
    groups: int
    speed: float
    small_ppo: bool

    def describe(self) -> str:
        """The line printed before the work."""
        text = (f"estimate: {self.frames:,} frames (at the largest batch) in {self.groups} program(s), about "
                f"{_duration(self.seconds)} on this machine (load x{self.speed:.1f} against the calibration)")
        if self.small_ppo:
            text += (f"; ppo left out: the small PPO {dict(SMALL_PPO)} (an empty [ppo] table / ppo={{}} gives the "
                     f"paper's 3x256, 10 epochs x 16 minibatches, several times slower)")
        return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def multiply_adds(config: PPOConfig, obs_size: int, action_size: int) -> int:
    """Multiply-adds of one forward pass of the actor and the critic on one observation."""
    total = 0
    for out in (action_size, 1):
        sizes = (obs_size,) + tuple(config.hidden_sizes) + (out,)
        total += sum(a * b for a, b in zip(sizes, sizes[1:]))
    return total


def largest_frames(config: PPOConfig, space) -> int:
    """The rollout's frames per iteration (the learner's max batch, rounded up to num_envs)."""
    if config.max_batch_size is not None:
        batch = config.max_batch_size
    elif "batch_size" in space.names:
        batch = largest_batch(space.hyperparameters[space.names.index("batch_size")])
    else:
        batch = config.batch_size
    return -(-batch // config.num_envs) * config.num_envs


def machine_speed(reps: int = 5) -> float:
    """This machine's slowdown now against the calibration (>= 0.5): the median time of a
    few small matrix products over PROBE_SECONDS."""
    a = np.random.default_rng(0).standard_normal((96, 96)).astype(np.float32)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        b = a
        for _ in range(40):
            b = np.tanh(b @ a)
        times.append(time.perf_counter() - t0)
    return max(0.5, float(np.median(times)) / PROBE_SECONDS)


def group_seconds(plan: Plan, env, n_methods: int) -> tuple[int, float]:
    """(frames, seconds at calibration speed) of one unit group."""
    p = plan.preset
    config = PPOConfig(**ppo_options(plan, env))
    built = build.environment(env.make)
    frames = largest_frames(config, plan.space)
    agents = n_methods * p.seeds
    net = multiply_adds(config, built.obs_size, max(built.action_size, 1)) * MULTIPLY_ADD_SECONDS
    per_frame = ENV_SECONDS.get(env.path, ENV_SECONDS["gymnax"]) + net * (1 + 3 * config.update_epochs)
    steps = frames / config.num_envs
    iteration = agents * frames * per_frame + steps * STEP_SECONDS + \
        config.update_epochs * config.num_minibatches * UPDATE_SECONDS
    evaluations = p.iterations // p.eval_every + 1
    evaluation = agents * config.eval_steps * (ENV_SECONDS.get(env.path, 0.0) + net) + \
        config.eval_steps * STEP_SECONDS
    compile_seconds = COMPILE_SECONDS[p.fast_compile] * (1 + FUSED_COMPILE * (n_methods - 1))
    return agents * p.iterations * frames, compile_seconds + p.iterations * iteration + evaluations * evaluation


def estimate(plan: Plan, finished: set[tuple[str, str]] = frozenset(), speed: float | None = None) -> Estimate:
    """The Estimate of the unit groups of `plan` not in `finished` ((env label, method))."""
    speed = machine_speed() if speed is None else speed
    frames, seconds, groups = 0, 0.0, 0
    for env, methods in unit_groups(plan):
        pending = [m for m in methods if (env.label, m) not in finished]
        if pending:
            f, s = group_seconds(plan, env, len(pending))
            frames, seconds, groups = frames + f, seconds + s, groups + 1
    return Estimate(frames=frames, seconds=seconds * speed, groups=groups, speed=speed,
                    small_ppo=dict(plan.preset.ppo) == dict(SMALL_PPO))
