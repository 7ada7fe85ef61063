"""The frames and duration of a whole study command, estimated before its work: the seconds
already spent (the imports, the checks, building the environments, the probes: measured) plus
a cost model of what is left, made in CPU seconds of the reference machine (this project's
2-core CPU) and turned into wall seconds for this machine now:

    seconds = spent + machine x (serial x (3/4 c + 1/4) + parallel x (c / 2 + 1/4))

serial: tracing and compiling the programs, the tuners' timing replay, the figures (mostly one
thread: XLA compiles parts of a program in parallel); parallel: the compiled training and
evaluation, which XLA spreads over both cores (idle: 3/4 of their CPU seconds in wall time;
with L other busy threads on 2 cores it gets 2/(L+2) of them). c: how much slower than idle
one thread runs now, (L+1)/2 on 2 cores (`contention`); machine: the reference's single-thread
speed over this CPU's (`contention` measures both). Per unit group still to run, with A agents
(its units' rows), F frames per iteration (the largest batch: the rollout collects it whatever
batch size is tuned), T iterations and E evaluations left, D = T / tune_every decisions, its
tuners (b of them: the branches of a fused program), each compiled program counted once per
process (the evaluation per environment and agent count, a tuner's timing programs per kind):

    serial    BUILD + INIT + 2 BRANCH x (b - 1) + EVALUATION[fast_compile]
              + lengths x SEGMENT[fast_compile] x (1 + its tuners' TUNERS[kind][0])
              + ENV_COMPILE x the probe's compilation (an environment `build.measured` names)
              + its tuners' TUNERS[kind][1] + D x each unit's rows x TUNERS[kind][2] + T x TIMING_CALL
    parallel  T x (A x F x per_frame + F / num_envs x STEP + epochs x minibatches x UPDATE)
              + E x (A x eval_episodes x eval_steps x per_eval_frame + eval_steps x EVAL_STEP)
              + D x A x its tuners' TUNERS[kind][3]   (a fused program decides every branch for all)

per_frame: the environment's step (ENV_CPU by backend, or the probe's measured step, charged
per sequential step of the copies a program steps) plus the networks' multiply-adds x (1 + 3
epochs) x MULTIPLY_ADD (a forward pass in the rollout, forward and backward in each epoch);
lengths: the distinct segment lengths (each its own program). At the end, the figures
(FIGURES, when plotting); without the seconds spent, STARTUP for the imports and checks. The
constants are fitted to the parts `experiments.benchmarks.bench_estimate_parts` measures
(gymnax, an own environment, fused and single programs, fast_compile or not); Brax's and
gymnasium's per-frame costs come from the earlier model and were not measured again.
`bench_estimate` checks the whole against the wall time of real commands (docs/benchmarks.md).
The frames announced are seeds x iterations x F per unit: an upper bound when the batch size is
tuned. Resuming, the estimate covers what is left: the unit groups not finished, each from the
iteration its checkpoint holds.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np

from agents.ppo import PPOConfig
from agents.ppo.config import largest_batch
from experiments.study import build, protocol
from experiments.study.methods import is_population
from experiments.study.plan import Plan, ppo_options, reads_results, segments, unit_groups, unit_seeds
from experiments.study.presets import SMALL_PPO

# CPU seconds on the reference machine (experiments.benchmarks.bench_estimate_parts, docs/benchmarks.md).
BUILD = 0.3  # making a unit group's learner and tuners
BRANCH = 0.15  # each further tuner of a fused program: its building, and its part of the initial state's program
INIT = 1.3  # compiling the initial state (always with fast_compile)
EVALUATION = {True: 1.0, False: 3.0}  # compiling an evaluation program, by fast_compile
SEGMENT = {True: 4.0, False: 8.0}  # compiling a training segment of a tuner-less learner, by fast_compile
# per tuner kind: its share of a training segment's compilation; compiling its timing replay (once per process);
# its timing replay per decision and agent; its decisions inside the training program per decision and agent (a
# fused program computes every branch for every agent)
TUNERS = {"static": (0.0, 0.2, 0.0, 0.0), "schedule": (0.05, 0.0, 0.0, 0.0), "simple": (0.05, 0.5, 1e-5, 1e-5),
          "hypercontroller": (0.3, 1.5, 1e-4, 1e-4), "gp": (0.55, 6.0, 0.013, 0.014),
          "population": (0.3, 3.0, 1e-3, 1e-3)}
TIMING_CALL = 3e-3  # the timing replay's host calls, per iteration and unit
ENV_COMPILE = 2.5  # a probed environment's compilation, per the probe's: in the initial state, evaluation, segment
ENV_CPU = {"gymnax": 0.3e-6, "custom": 0.3e-6, "brax": 8e-6, "gymnasium": 400e-6}  # per frame and agent (host: serial)
MULTIPLY_ADD = 4.75e-11  # per multiply-add of the networks, forward or backward
STEP = 1e-4  # per sequential step of the rollout (any number of agents)
EVAL_STEP = 5e-5  # per sequential step of an evaluation
UPDATE = 5e-4  # per sequential gradient step
FIGURES = (1.0, 0.05)  # the summary, figures and tables at the end: once, and per unit
STARTUP = 3.0  # imports, checks, building (when the estimate is made without the seconds spent)
REFERENCE_RATE = 1.37e5  # `contention`'s probe iterations per CPU second on the reference machine


@dataclasses.dataclass(frozen=True)
class Estimate:
    """frames: the frames every unit still to run collects at most; seconds: the estimated
    duration of the whole command, what is spent included; spent: the seconds already spent
    when it was made; groups: programs to compile; speed: this machine's contention (1 idle);
    machine: the reference's single-thread speed over this CPU's (1 on the reference);
    small_ppo: the study runs the small default PPO (SMALL_PPO)."""

    frames: int
    seconds: float
    groups: int
    speed: float
    small_ppo: bool
    spent: float = 0.0
    machine: float = 1.0

    def describe(self) -> str:
        """The line printed before the work."""
        left = max(self.seconds - self.spent, 0.0)
        total = _duration(self.seconds) + (f" ({self.seconds:.0f} s)" if self.seconds >= 90 else "")
        text = (f"estimate: {self.frames:,} frames (at the largest batch) in {self.groups} program(s), about {total} "
                f"in all on this machine: {self.spent:.0f} s spent (loading, checks, probes), {_duration(left)} to go "
                f"(contention x{self.speed:.1f}; the model: experiments/study/estimate.py)")
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


def contention(samples: int = 5, seconds: float = 0.04) -> tuple[float, float]:
    """(contention, machine) of this machine now. contention (>= 1): how much slower than idle
    one thread runs, the mean of two readings: the median over `samples` probes of wall time
    over CPU time of `seconds` of single-threaded work (other processes take the cores
    meanwhile; quick to follow the load, noisy) and (the 1-minute load average + 1) per core
    (steady, slow to follow). machine: REFERENCE_RATE over the probes' iterations per CPU
    second (the reference CPU's single-thread speed over this one's)."""
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    ratios, rates = [], []
    for _ in range(samples):
        wall, cpu, n = time.perf_counter(), time.process_time(), 0
        b = a
        while time.process_time() - cpu < seconds:
            for _ in range(20):
                b = np.tanh(b @ a)
            n += 20
        used = max(time.process_time() - cpu, 1e-9)
        ratios.append((time.perf_counter() - wall) / used)
        rates.append(n / used)
    probe = float(np.median(ratios))
    load = (os.getloadavg()[0] + 1) / (os.cpu_count() or 1) if hasattr(os, "getloadavg") else probe
    return max(1.0, (probe + load) / 2), REFERENCE_RATE / float(np.median(rates))


def tuner_kind(method: str) -> str:
    """The kind of a unit's tuner, for its costs (TUNERS)."""
    k = protocol.kind(method)
    if k.replay or k.base == protocol.SWEEP:
        return "schedule"
    if protocol.is_static(k.base):
        return "static"
    if is_population(method):
        return "population"
    return {"hypercontroller": "hypercontroller", "gp_ucb": "gp", "pb2": "gp"}.get(k.base, "simple")


def group_parts(plan: Plan, env, methods: list[str], done: int = 0, first: tuple[bool, set] = (True, frozenset()),
                speed: float = 1.0) -> dict[str, float]:
    """{"frames", "serial", "parallel"}: the frames and the CPU seconds (reference machine) of one
    unit group from iteration `done` on. first: (whether its evaluation program is the first of
    its environment and agent count, the tuner kinds whose timing programs exist already);
    speed: the contention its environment's probe (if any) was taken at."""
    p, timing = plan.preset, plan.timing(env)
    config = PPOConfig(**ppo_options(plan, env))
    built = build.environment(env.make)
    frames = largest_frames(config, plan.space)
    agents = sum(len(unit_seeds(plan, m)) for m in methods)
    if reads_results(methods[0]) or methods == [protocol.SWEEP]:
        kinds = ["schedule"]  # one schedule tuner holds every row
    else:  # a fused program: one branch per base method (its tuning and test units share it)
        kinds = [tuner_kind(base) for base in dict.fromkeys(protocol.kind(m).base for m in methods)]
    branches = len(kinds)
    net = multiply_adds(config, built.obs_size, max(built.action_size, 1)) * MULTIPLY_ADD
    env_step, step = ENV_CPU.get(env.path, ENV_CPU["gymnax"]), STEP
    serial = BUILD + INIT + 2 * BRANCH * (branches - 1) + (EVALUATION[p.fast_compile] if first[0] else 0.0)
    lengths = len(set(segments(timing.iterations, timing.eval_every)))
    serial += lengths * SEGMENT[p.fast_compile] * (1 + sum(TUNERS[k][0] for k in kinds))
    eval_step = EVAL_STEP
    if build.measured(env):  # its own step, measured: per sequential step of the copies a program steps at once
        found = build.probe(plan, env)
        cpu = found.compile_cpu_seconds if math.isfinite(found.compile_cpu_seconds) else found.compile_seconds / speed
        serial += ENV_COMPILE * cpu
        copy = (found.step_cpu_seconds if math.isfinite(found.step_cpu_seconds) else found.step_seconds / speed) \
            / found.batch
        env_step, step = 0.0, STEP + copy * agents * config.num_envs
        eval_step = EVAL_STEP + copy * agents * config.eval_episodes
    left = max(timing.iterations - done, 0)
    decisions = left / timing.tune_every
    serial += sum(TUNERS[k][1] for k in set(kinds) - first[1])
    serial += decisions * sum(len(unit_seeds(plan, m)) * TUNERS[tuner_kind(m)][2] for m in methods)
    serial += left * TIMING_CALL * sum(tuner_kind(m) != "schedule" for m in methods)
    deciding = decisions * agents * sum(TUNERS[k][3] for k in kinds)
    if built.host:  # gymnasium: every environment steps on the host, one thread
        serial += left * agents * frames * ENV_CPU["gymnasium"]
        env_step = 0.0
    iteration = agents * frames * (env_step + net * (1 + 3 * config.update_epochs)) + frames / config.num_envs * \
        step + config.update_epochs * config.minibatches(frames) * UPDATE
    evaluation = agents * config.eval_episodes * config.eval_steps * (env_step + net) + config.eval_steps * eval_step
    ends = set(range(timing.eval_every, timing.iterations + 1, timing.eval_every)) | {timing.iterations}
    evaluations = sum(end > done for end in ends)
    parallel = left * iteration + evaluations * evaluation + deciding
    return dict(frames=agents * left * frames, serial=serial, parallel=parallel)


def wall(serial: float, parallel: float, speed: float, machine: float = 1.0) -> float:
    """Wall seconds of `serial` and `parallel` CPU seconds (reference machine) at contention `speed`."""
    return machine * (serial * (0.75 * speed + 0.25) + parallel * (0.5 * speed + 0.25))


def estimate(plan: Plan, finished: set[tuple[str, str]] = frozenset(), speed: float | None = None,
             done: dict[tuple[str, str], int] | None = None, spent: float | None = None, plot: bool = True,
             machine: float | None = None) -> Estimate:
    """The Estimate of the unit groups of `plan` not in `finished` ((env label, method)); done:
    (env label, "+".join(methods)) -> iterations a group's checkpoint holds (`checkpointed`);
    spent: the seconds the command has run so far (None: STARTUP, modelled); plot: the
    figures are written at the end; speed, machine: `contention()`'s, measured now when None."""
    if speed is None or machine is None:
        measured = contention()
        speed, machine = speed or measured[0], machine or measured[1]
    frames, parallel, groups = 0, 0.0, 0
    serial = FIGURES[0] + FIGURES[1] * len(plan.units) if plot else 0.0
    evaluations, timed = set(), set()
    for env, methods in unit_groups(plan):
        pending = [m for m in methods if (env.label, m) not in finished]
        if pending:
            agents = sum(len(unit_seeds(plan, m)) for m in pending)
            parts = group_parts(plan, env, pending, (done or {}).get((env.label, "+".join(pending)), 0),
                                ((env.label, agents) not in evaluations, set(timed)), speed)
            evaluations.add((env.label, agents))
            timed |= {tuner_kind(m) for m in pending}
            frames, serial, parallel = frames + parts["frames"], serial + parts["serial"], parallel + parts["parallel"]
            groups += 1
    if spent is None:
        serial += STARTUP
    seconds = (spent or 0.0) + wall(serial, parallel, speed, machine)
    return Estimate(frames=int(frames), seconds=seconds, groups=groups, speed=speed, machine=machine,
                    spent=spent or 0.0, small_ppo=dict(plan.preset.ppo) == dict(SMALL_PPO))


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
