"""The frames and duration of a study, estimated before anything is compiled.

A cost model calibrated on the 2-core CPU (docs/studies.md, "How long a study takes"),
times this machine's current contention (`contention`: wall time over CPU time of five
40 ms single-threaded probes, the median; 1 on an idle machine, about 4 with 15 busy processes
on 2 cores):

    seconds = STARTUP + sum over the unit groups still to run of
              compile + iterations x (agents x F x per_frame + steps x STEP + updates x UPDATE)
              + evaluations x (agents x eval_episodes x eval_steps x per_eval_frame + eval_steps x STEP)

F: the rollout's frames per iteration (the largest batch: the rollout collects it whatever
batch size is tuned); steps = F / num_envs sequential environment steps; updates = epochs x
minibatches sequential gradient steps; per_frame: the environment's step (by backend) plus
the networks' multiply-adds x (1 + 3 epochs) (a forward pass in the rollout, forward and
backward in each epoch); compile: one program per unit group (less with fast_compile, more
for a fused group). The frames announced are seeds x iterations x F per unit: an upper
bound when the batch size is tuned.

An environment the model was not calibrated on (your own, or an optional library's:
`build.measured`) is measured instead: `build.probe` compiles and runs it (a batch of
agents x num_envs copies) before the estimate, and the estimate charges its measured step
(per iteration: steps x the batch's step; per evaluation: eval_steps x the step scaled to
agents x eval_episodes copies) in place of ENV_SECONDS and STEP_SECONDS, and its compilation
twice (the training segment and the evaluation each hold the environment's step). Resuming,
the estimate covers what is left: the unit groups not finished, each from the iteration its
checkpoint holds.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from agents.ppo import PPOConfig
from agents.ppo.config import largest_batch
from experiments.study import build, protocol
from experiments.study.plan import Plan, ppo_options, unit_groups, unit_seeds
from experiments.study.presets import SMALL_PPO

# Calibrated on the 2-core CPU from three runs (smoke, the smallest study, a cpu_learn unit),
# measured at contention about 3.5 and divided by it; seconds.
ENV_SECONDS = {"gymnax": 0.3e-6, "custom": 0.3e-6, "brax": 8e-6, "gymnasium": 400e-6}  # per frame and agent
MULTIPLY_ADD_SECONDS = 1.2e-10  # per multiply-add of the networks, forward or backward
STEP_SECONDS = 3e-5  # per sequential environment step (any number of agents)
UPDATE_SECONDS = 3e-4  # per sequential gradient step
COMPILE_SECONDS = {True: 28.0, False: 35.0}  # a program, by fast_compile (it saves little at these sizes)
FUSED_COMPILE = 0.5  # a fused group's program costs this much more per extra method
STARTUP_SECONDS = 8.0  # imports, environments, checks


@dataclasses.dataclass(frozen=True)
class Estimate:
    """frames: the frames every unit still to run collects at most; seconds: the estimated
    duration here, compilation included; groups: programs to compile; speed: this machine's
    contention (1 idle); small_ppo: the study runs the small default PPO (SMALL_PPO)."""

    frames: int
    seconds: float
    groups: int
    speed: float
    small_ppo: bool

    def describe(self) -> str:
        """The line printed before the work."""
        text = (f"estimate: {self.frames:,} frames (at the largest batch) in {self.groups} program(s), about "
                f"{_duration(self.seconds)} on this machine (contention x{self.speed:.1f}; the model: "
                f"experiments/study/estimate.py)")
        if self.small_ppo:
            text += (f"; ppo: the small default PPO {dict(SMALL_PPO)} (an empty [ppo] table / ppo={{}} gives the "
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


def contention(samples: int = 5, seconds: float = 0.04) -> float:
    """How much slower than idle this machine runs now (>= 1): the median over `samples`
    probes of wall time over CPU time of `seconds` of single-threaded work (other processes
    take the cores meanwhile; one probe alone is noisy)."""
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    ratios = []
    for _ in range(samples):
        wall, cpu = time.perf_counter(), time.process_time()
        b = a
        while time.process_time() - cpu < seconds:
            for _ in range(20):
                b = np.tanh(b @ a)
        ratios.append((time.perf_counter() - wall) / max(time.process_time() - cpu, 1e-9))
    return max(1.0, float(np.median(ratios)))


def group_seconds(plan: Plan, env, methods: list[str], speed: float = 1.0, done: int = 0) -> tuple[int, float]:
    """(frames, seconds at calibration speed) of one unit group from iteration `done` on (its
    units' rows are its agents; a fused group's program grows with its distinct methods); an
    environment `build.measured` names is charged its probe's measured costs (taken at
    contention `speed`)."""
    p = plan.preset
    config = PPOConfig(**ppo_options(plan, env))
    built = build.environment(env.make)
    frames = largest_frames(config, plan.space)
    agents = sum(len(unit_seeds(plan, m)) for m in methods)
    n_methods = len({protocol.kind(m).base for m in methods})
    net = multiply_adds(config, built.obs_size, max(built.action_size, 1)) * MULTIPLY_ADD_SECONDS
    steps = frames / config.num_envs
    compile_seconds = COMPILE_SECONDS[p.fast_compile] * (1 + FUSED_COMPILE * (n_methods - 1))
    if build.measured(env):  # its own step, measured: per step of agents x num_envs copies
        found = build.probe(plan, env)
        step = found.step_seconds / speed * agents * config.num_envs / found.batch
        iteration = agents * frames * net * (1 + 3 * config.update_epochs) + steps * step
        evaluation = agents * config.eval_episodes * config.eval_steps * net + \
            config.eval_steps * step * config.eval_episodes / config.num_envs
        compile_seconds += 2 * found.compile_seconds / speed
    else:
        per_frame = ENV_SECONDS.get(env.path, ENV_SECONDS["gymnax"]) + net * (1 + 3 * config.update_epochs)
        iteration = agents * frames * per_frame + steps * STEP_SECONDS
        evaluation = agents * config.eval_episodes * config.eval_steps * (ENV_SECONDS.get(env.path, 0.0) + net) + \
            config.eval_steps * STEP_SECONDS
    iteration += config.update_epochs * config.minibatches(frames) * UPDATE_SECONDS
    timing = plan.timing(env)
    left = max(timing.iterations - done, 0)
    evaluations = left // timing.eval_every + 1
    return agents * left * frames, compile_seconds + left * iteration + evaluations * evaluation


def estimate(plan: Plan, finished: set[tuple[str, str]] = frozenset(), speed: float | None = None,
             done: dict[tuple[str, str], int] | None = None) -> Estimate:
    """The Estimate of the unit groups of `plan` not in `finished` ((env label, method)); done:
    (env label, "+".join(methods)) -> iterations a group's checkpoint holds (`checkpointed`)."""
    speed = contention() if speed is None else speed
    frames, seconds, groups = 0, STARTUP_SECONDS, 0
    for env, methods in unit_groups(plan):
        pending = [m for m in methods if (env.label, m) not in finished]
        if pending:
            f, s = group_seconds(plan, env, pending, speed, (done or {}).get((env.label, "+".join(pending)), 0))
            frames, seconds, groups = frames + f, seconds + s, groups + 1
    return Estimate(frames=frames, seconds=seconds * speed, groups=groups, speed=speed,
                    small_ppo=dict(plan.preset.ppo) == dict(SMALL_PPO))


def checkpointed(plan: Plan, store, finished: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """(env label, "+".join(methods)) -> the iterations the checkpoint of each unit group not
    finished holds in `store` (a StudyDir), for `estimate`'s `done` (unreadable: none)."""
    done = {}
    for env, methods in unit_groups(plan):
        group = "+".join(m for m in methods if (env.label, m) not in finished)
        path = store.checkpoint_path(env.label, group) if group else None
        if path is not None and path.is_file():
            try:
                with np.load(path) as z:
                    done[env.label, group] = int(z["record/done"])
            except (OSError, ValueError, KeyError):
                pass
    return done
