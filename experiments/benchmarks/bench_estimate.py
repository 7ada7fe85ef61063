"""The estimate line of `hcjax run` against the wall time of the whole command (issues 23, 51):
each study run end to end by the real command in a fresh process (imports, building, the
environment probe, compilation, training, evaluation, figures), the estimate read from the
line the command announces.

    python -m experiments.benchmarks.bench_estimate --out estimate.json [--quick] [--only NAME ...]

Study shapes: smoke (`--preset smoke`, the README's command); own (an environment written
here, `thermostat` below, in the docs' tiny study: three methods fused, 2 seeds, 20
iterations); verdict_1env (the verdict preset reduced to CartPole-v1 and 20 iterations: its
fused programs, sweep and replays); one tiny study per environment library installed
(craftax, jumanji, navix, xminigrid, pgx: `fixed`, one seed, two iterations, as the tests run
them); and verdict_committed, the committed `results/verdict_study` (44 min of both cores: not
rerun) against the estimate of its plan at the contention its run announced. Per row: the
estimate announced, the wall time taken, their ratio (the target: within [0.5, 2]), the
seconds to the command's first line of output and its longest silence. --quick: smoke and own.
Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from agents.envs import JaxEnv
from experiments.study import estimate, presets, studyfile

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = {"craftax": "craftax/Craftax-Classic-Symbolic-v1", "jumanji": "jumanji/Snake-v1",
             "navix": "navix/Navix-Empty-5x5-v0", "xminigrid": "xminigrid/MiniGrid-Empty-5x5", "pgx": "pgx/2048"}
TINY_LIBRARY = """methods = ["fixed"]
seeds = 1
iterations = 2
eval_every = 2
fast_compile = true

[ppo]
num_envs = 2
hidden_sizes = [8]
update_epochs = 1
num_minibatches = 2
batch_size = 8
eval_steps = 8

[[space]]
name = "learning_rate"
low = 1e-4
high = 1e-2
scale = "log"
"""
OWN = """methods = ["hypercontroller", "random", "fixed"]
seeds = 2
iterations = 20
eval_every = 10
fuse_methods = true
fast_compile = true

[ppo]
num_envs = 8
hidden_sizes = [32, 32]
update_epochs = 2
num_minibatches = 4
eval_steps = 50

[[space]]
name = "learning_rate"
low = 1e-4
high = 1e-2
scale = "log"
default = 1e-3

[[space]]
name = "batch_size"
low = 64
high = 256
integer = true
default = 128
"""


def thermostat() -> JaxEnv:
    """A room heated towards 21 degrees (obs (1,): the distance to it; cool, off or heat), 50
    steps an episode: the kind of environment a user writes (docs/own-environment.md's, as a JaxEnv)."""
    def reset(key):
        state = (jax.random.uniform(key, (), minval=10.0, maxval=30.0), jnp.int32(0))
        return state, jnp.stack([state[0] - 21.0])

    def step(key, state, action):
        temperature, t = state
        temperature = temperature + action.astype(jnp.float32) - 1.0 + 0.05 * (15.0 - temperature)
        reward, done = -jnp.abs(21.0 - temperature), t + 1 >= 50
        fresh, _ = reset(key)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, (temperature, t + 1))
        return state, jnp.stack([state[0] - 21.0]), reward, done

    return JaxEnv(name="thermostat", obs_size=1, action_size=3, discrete=True, reset=reset, step=step,
                  max_episode_steps=50)


def learn_unit_file() -> str:
    """A cpu_learn unit as a study file: CartPole-v1, `fixed`, 20 seeds x 100 iterations of 1024
    frames, 2x64 networks (its time is the training's, not the compilation's)."""
    p = presets.PRESETS["cpu_learn"]
    return studyfile.dumps(dataclasses.replace(p, name="learn_unit", envs=("CartPole-v1",), methods=("fixed",),
                                               env_ppo={"CartPole-v1": p.env_ppo["CartPole-v1"]}))


def verdict_one_env() -> str:
    """The verdict preset as a study file reduced to CartPole-v1 and 20 iterations (its fused
    programs, its sweep and its replays, each compiled as in the whole study)."""
    p = presets.PRESETS["verdict"]
    return studyfile.dumps(dataclasses.replace(p, name="verdict_1env", envs=("CartPole-v1",), iterations=20,
                                               env_ppo={"CartPole-v1": p.env_ppo["CartPole-v1"]}))


def studies(tmp: Path, quick: bool) -> dict[str, list[str]]:
    """name -> `hcjax run` arguments (without --out)."""
    (tmp / "own.toml").write_text(OWN)
    (tmp / "library.toml").write_text(TINY_LIBRARY)
    chosen = {"smoke": ["--preset", "smoke"],
              "own": ["--config", str(tmp / "own.toml"),
                      "--env-factory", "thermostat=experiments.benchmarks.bench_estimate:thermostat"]}
    if not quick:
        (tmp / "verdict_1env.toml").write_text(verdict_one_env())
        chosen["verdict_1env"] = ["--config", str(tmp / "verdict_1env.toml")]
        (tmp / "learn_unit.toml").write_text(learn_unit_file())
        chosen["learn_unit"] = ["--config", str(tmp / "learn_unit.toml")]
        for lib, name in LIBRARIES.items():
            if importlib.util.find_spec(lib) is not None:
                chosen[lib] = ["--config", str(tmp / "library.toml"), "--envs", name]
    return chosen


ANNOUNCED = re.compile(r"about ([\d.]+) (s|min|h)\b")
PRECISE = re.compile(r"\((\d+) s\b")


def announced_seconds(line: str) -> float | None:
    """The seconds an estimate line announces: its exact figure "(N s" when it has one, else
    its rounded "about N s|min|h"."""
    exact = PRECISE.search(line)
    if exact:
        return float(exact.group(1))
    rounded = ANNOUNCED.search(line)
    return None if rounded is None else float(rounded.group(1)) * {"s": 1, "min": 60, "h": 3600}[rounded.group(2)]


class Contention:
    """The machine's contention (`estimate.contention`) sampled every `every_s` seconds in a
    thread while a command runs: the load the estimate could not see when it was made."""

    def __init__(self, every_s: float = 5.0):
        self.samples, self.every_s, self.stop = [], every_s, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self.stop.wait(self.every_s):
            self.samples.append(estimate.contention()[0])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def run_command(args: list[str], out: Path) -> dict:
    """Run `hcjax run ARGS --out OUT` in a fresh process (progress as in a redirected log);
    the wall time and CPU time, the time of each line of its output, the estimate line, and
    the contention sampled while it ran."""
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with Contention() as during:
        proc = subprocess.Popen([sys.executable, "-m", "experiments", "run", *args, "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=out.parent)
        try:
            stamped = [(time.perf_counter() - t0, line.rstrip("\n")) for line in proc.stdout]
            code = proc.wait()
        finally:  # stopped (Ctrl-C, SIGTERM) or failed: the command does not outlive the benchmark
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    if code != 0:
        raise RuntimeError(f"hcjax run {' '.join(args)} exited {code}: " + "\n".join(x for _, x in stamped[-30:]))
    times = [0.0] + [t for t, _ in stamped] + [seconds]
    said_at, line = next(((t, x) for t, x in stamped if x.startswith("estimate:")), (None, ""))
    return dict(measured_seconds=seconds, cpu_seconds=round(cpu, 1), estimate_at=said_at,
                contention_during=round(float(np.mean(during.samples)), 2) if during.samples else None,
                first_line_seconds=stamped[0][0] if stamped else seconds,
                longest_silence_seconds=max(b - a for a, b in zip(times, times[1:])),
                line=line, announced_seconds=announced_seconds(line), output=[f"{t:7.1f} {x}" for t, x in stamped])


def committed_verdict() -> dict | None:
    """The committed verdict study: its estimate now (at the contention its run announced)
    against its run's wall time (run.log's first to last line: after the checks, before the
    figures)."""
    log = ROOT / "results" / "verdict_study" / "run.log"
    if not log.is_file():
        return None
    lines = log.read_text().splitlines()
    stamp = lambda x: datetime.datetime.fromisoformat(x.split(" ", 1)[0])
    said = next(x for x in lines if " estimate:" in x)
    speed = float(re.search(r"contention x([\d.]+)", said).group(1))
    # run.log spans the work after the checks, without the figures: the estimate of the same
    guess = estimate.estimate(presets.resolve("verdict"), speed=speed, machine=1.0, spent=0.0, plot=False)
    measured = (stamp(lines[-1]) - stamp(lines[0])).total_seconds()
    return dict(study="verdict_committed", announced_then=announced_seconds(said), contention=speed,
                announced_seconds=guess.seconds, measured_seconds=measured, line=guess.describe())


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench_estimate.json")
    ap.add_argument("--quick", action="store_true", help="smoke and own only")
    ap.add_argument("--only", nargs="+", help="only these rows (names as in the table)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # run the finally blocks
    rows = []
    with tempfile.TemporaryDirectory(prefix="hcjax-estimate-") as tmp:
        tmp = Path(tmp)
        for name, run_args in studies(tmp, args.quick).items():
            if args.only and name not in args.only:
                continue
            load = os.getloadavg()[0]
            row = dict(study=name, args=run_args, load_average=round(load, 1), **run_command(run_args, tmp / name))
            rows.append(row)
            print(f"{name}: announced {row['announced_seconds']} s, took {row['measured_seconds']:.0f} s",
                  file=sys.stderr, flush=True)
    if not args.quick and (not args.only or "verdict_committed" in args.only):
        committed = committed_verdict()
        if committed is not None:
            rows.append(committed)
    for r in rows:
        said = r.get("announced_seconds")
        r["ratio"] = None if not said else round(r["measured_seconds"] / said, 2)
    print("| study | announced (s) | taken (s) | taken / announced | first line (s) | longest silence (s) | load |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [r["study"], _num(r.get("announced_seconds")), _num(r["measured_seconds"]),
                 "-" if r["ratio"] is None else f"{r['ratio']:.2f}", _num(r.get("first_line_seconds"), 1),
                 _num(r.get("longest_silence_seconds")), _num(r.get("load_average"), 1)]
        print("| " + " | ".join(cells) + " |")
    report = {"rows": rows, "cpu_count": os.cpu_count()}
    Path(args.out).write_text(json.dumps(report, indent=2))
    return report


def _num(x, digits: int = 0) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


if __name__ == "__main__":
    main()
