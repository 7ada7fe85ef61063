"""The estimate line of `hcjax run` against measured wall time (issue 23): three studies, each
run end to end by the real command in a fresh process (imports, compilation, training,
evaluation; no figures), the estimate taken just before it with the contention of that moment.

    python -m experiments.benchmarks.bench_estimate --out estimate.json [--quick]

smoke: `--preset smoke`; smallest: the documented smallest study (CartPole, fixed + random,
no [ppo], 3 seeds x 50 iterations); learn_unit: a cpu_learn-sized unit (cpu_learn's CartPole
settings, `fixed`, 20 seeds x 100 iterations). --quick: smoke only. Prints a table (estimate,
measured, ratio) and writes JSON. A ratio within [0.5, 2] is the target.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.study import estimate, presets, studyfile
from experiments.study.plan import Plan, Preset

SMALLEST = 'envs = ["CartPole-v1"]\nmethods = ["fixed", "random"]\n'


def learn_unit_file() -> str:
    """cpu_learn as a study file with one environment (CartPole-v1) and one method (fixed)."""
    p = presets.PRESETS["cpu_learn"]
    one = Preset(name="learn_unit", envs=("CartPole-v1",), methods=("fixed",), seeds=p.seeds,
                         iterations=p.iterations, eval_every=p.eval_every, tune_every=p.tune_every, space=p.space,
                         ppo=p.ppo, tuner=p.tuner, env_ppo={"CartPole-v1": p.env_ppo["CartPole-v1"]},
                         fuse_methods=p.fuse_methods)
    return studyfile.dumps(one)


def studies(tmp: Path, quick: bool) -> dict[str, tuple[list[str], Plan]]:
    """name -> (`hcjax run` arguments, plan)."""
    (tmp / "smallest.toml").write_text(SMALLEST)
    (tmp / "learn_unit.toml").write_text(learn_unit_file())
    chosen = {"smoke": (["--preset", "smoke"], presets.resolve("smoke"))}
    if not quick:
        chosen["smallest"] = (["--config", tmp / "smallest.toml", "--seeds", "3", "--iterations", "50"],
                              presets.resolve(studyfile.loads(SMALLEST), seeds=3, iterations=50))
        chosen["learn_unit"] = (["--config", tmp / "learn_unit.toml"], presets.resolve(studyfile.loads(
            (tmp / "learn_unit.toml").read_text())))
    return chosen


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench_estimate.json")
    ap.add_argument("--quick", action="store_true", help="smoke only")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hcjax-estimate-") as tmp:
        tmp = Path(tmp)
        for name, (run_args, plan) in studies(tmp, args.quick).items():
            guess = estimate.estimate(plan)
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "experiments", "run", *map(str, run_args), "--out",
                                   str(tmp / name), "--no-plot", "--no-progress"], capture_output=True, text=True)
            seconds = time.perf_counter() - t0
            if done.returncode != 0:
                raise RuntimeError(f"{name}: hcjax run exited {done.returncode}: {done.stderr[-2000:]}")
            line = next((x for x in done.stderr.splitlines() if x.startswith("estimate:")), "")
            rows.append(dict(study=name, frames=guess.frames, estimate_seconds=round(guess.seconds, 1),
                             measured_seconds=round(seconds, 1), ratio=round(seconds / guess.seconds, 2),
                             contention=round(guess.speed, 2), load_average=round(load, 1), line=line))
    print("| study | frames | estimate (s) | measured (s) | measured / estimate | contention | load |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['study']} | {r['frames']:,} | {r['estimate_seconds']:.0f} | {r['measured_seconds']:.0f} | "
              f"{r['ratio']:.2f} | {r['contention']:.1f} | {r['load_average']:.1f} |")
    report = {"rows": rows, "cpu_count": os.cpu_count()}
    Path(args.out).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
