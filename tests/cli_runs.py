"""For tests that run the `hcjax` command in a subprocess: start it, wait for what it
writes, finish it; and the small study files they run (CartPole, or tests/tiny_env.py's walker),
with the suite's shared configurations of them (WALK_PAIR, WALK_TUNED)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# tests/tiny_env.py's walker as a study file's own environment, labelled "walk" (no gymnax)
WALK = "walk=tests.tiny_env:make_walk"
# The shared tiny studies (docs/development.md#writing-a-test): `tiny_study(**WALK_PAIR, iterations=2)`.
# Runs of one configuration compile one set of programs, which the session's persistent
# compilation cache then gives every other run of it, in a test process or an `hcjax` subprocess;
# so a test whose point is not the configuration runs one of these (any number of iterations,
# a multiple of eval_every; a subset of the methods; another label for the walker).
# WALK_PAIR: test_study_cli's interrupted runs; WALK_TUNED: its checkpointed, killed and resumed runs.
WALK_PAIR = dict(methods=["fixed", "random"], seeds=1, eval_every=2, eval_steps=16, envs=(), env_factories=(WALK,))
WALK_TUNED = dict(methods=["hypercontroller"], seeds=2, eval_every=2, eval_steps=16, envs=(), env_factories=(WALK,))


def hcjax(args, devices: int | None = None, environ: dict | None = None, **kw) -> subprocess.Popen:
    """Start `python -m experiments ARGS` (stdout and stderr together, as text), with one
    CPU device or `devices` forced ones, sharing the test session's persistent compilation cache
    (made by tests/conftest.py: the same small studies compile the same programs); `kw` goes to
    Popen (e.g. start_new_session); `environ`: more environment variables."""
    return python(["-m", "experiments", *args], devices, environ, **kw)


def python(args, devices: int | None = None, environ: dict | None = None, **kw) -> subprocess.Popen:
    """Start `python ARGS` (a script, or -m MODULE) in the repository as `hcjax` starts (see there).
    Every program goes into the persistent cache, however quick its compilation (minimum 0 s):
    a rerun or resume of the same small study then compiles nothing (measured on the 10-iteration
    CartPole study of test_study_cli, cached rerun: 9.3 CPU s with 0, 12.3 with 0.3; the first run
    costs the same, 19 s). `environ`: more environment variables."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_COMPILATION_CACHE_DIR=os.environ["HCJAX_TEST_JAX_CACHE"],
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", **(environ or {}))
    env.pop("XLA_FLAGS", None)
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return subprocess.Popen([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def finish(proc: subprocess.Popen, timeout: float = 240) -> str:
    """The output of a run that must exit 0; a run still going after `timeout` seconds is
    killed (no process outlives the test) and the test fails with what it printed."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"still running after {timeout} s:\n{out}") from None
    assert proc.returncode == 0, out
    return out


def wait_for_file(proc: subprocess.Popen, path: Path, timeout: float = 240) -> None:
    """Return once `path` exists; fail if `proc` exits first or time runs out."""
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.time() < deadline, f"{path.name} was not written in time"
        time.sleep(0.1)


def wait_for_checkpoint(procs: list[subprocess.Popen], ckpt: Path, at_least: int, timeout: float = 300) -> None:
    """Return as soon as the unit checkpoint `ckpt` holds `at_least` iterations. Every
    save is an atomic rename (a new inode), so each saved version is read once, at once:
    a fast run cannot slip past the wanted segment between two looks."""
    deadline, seen = time.time() + timeout, None
    while True:
        assert all(p.poll() is None for p in procs), [p.communicate()[0] for p in procs]
        assert time.time() < deadline, "no checkpoint in time"
        try:
            inode = os.stat(ckpt).st_ino
            if inode != seen:
                with np.load(ckpt) as z:
                    if int(z["record/done"]) >= at_least:
                        return
                seen = inode
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.001)


def study_of(text: str):
    """The experiments.Study of a study file's text (e.g. `tiny_study(...)`'s), to run in this process."""
    import experiments
    from experiments.study import studyfile

    return experiments.Study(studyfile.loads(text))


def tiny_study(methods, seeds: int, iterations: int, eval_every: int, hidden: int = 16, batch_high: int = 64,
               eval_steps: int = 100, extra: str = "", tune_every: int = 2, envs=("CartPole-v1",),
               env_factories=()) -> str:
    """A study file: gymnax CartPole-v1 (or `envs`, and importable `env_factories` such as
    WALK), a tiny PPO (4 envs, one hidden layer of `hidden`, 1 epoch of 2 minibatches, deciding
    every `tune_every` iterations), learning rate and batch size in [16, batch_high] tuned;
    `extra`: more TOML (e.g. tuner options)."""
    factories = f"env_factories = {json.dumps(list(env_factories))}\n" if env_factories else ""
    return f"""
envs = {json.dumps(list(envs))}
{factories}methods = {list(methods)!r}
seeds = {seeds}
iterations = {iterations}
eval_every = {eval_every}
tune_every = {tune_every}
fast_compile = true

[ppo]
num_envs = 4
hidden_sizes = [{hidden}]
update_epochs = 1
num_minibatches = 2
objective = "return_change"
eval_steps = {eval_steps}

[[space]]
name = "learning_rate"
low = 1e-4
high = 1e-2
scale = "log"

[[space]]
name = "batch_size"
low = 16
high = {batch_high}
integer = true
{extra}"""
