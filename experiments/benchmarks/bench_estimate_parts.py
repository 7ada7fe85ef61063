"""The parts of a study's time that `experiments.study.estimate` models, measured one unit group
at a time in this process (the data its constants are fitted to): each compilation, each
training segment, the tuners' timing replay, in CPU seconds (what the machine's load does not
change) and wall seconds, beside the model's figure for the same part.

    python -m experiments.benchmarks.bench_estimate_parts --out parts.json [--quick] [--only NAME ...]

Study shapes: smoke (three methods, each its own program, fast_compile), own (an own
environment, three methods fused, fast_compile), verdict_cartpole and verdict_pendulum (the
verdict preset's fused group, sweep and replays on one task, 10 iterations in two segments, so
that the first segment's compilation shows as its difference from the second), learn_unit
(cpu_learn's CartPole unit: 20 seeds x 100 iterations of 1024 frames). --quick: smoke and own.
Every part is timed between the engine's own progress events (`engine.run_units`' phase and
on_segment callbacks): "compile" is from "compiling ..." to the next event; a segment's run is
its own, and the first segment's compilation is the difference from the next segment of its
length. Prints a table per shape and writes JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from experiments.benchmarks.bench_estimate import OWN, learn_unit_file, thermostat
from experiments.study import engine, estimate, own_envs, presets, studyfile
from experiments.study.plan import unit_groups, unit_keys


def shapes(quick: bool) -> dict:
    """name -> the Plan of each study shape."""
    p = presets.PRESETS["verdict"]
    chosen = {"smoke": presets.resolve("smoke"),
              "own": presets.resolve(studyfile.loads(OWN), own=[own_envs.from_object(thermostat(), "thermostat")])}
    if not quick:
        for task in ("CartPole-v1", "Pendulum-v1"):
            chosen[f"verdict_{task.split('-')[0].lower()}"] = presets.resolve(dataclasses.replace(
                p, envs=(task,), iterations=10, eval_every=5, env_ppo={task: p.env_ppo[task]}))
        chosen["learn_unit"] = presets.resolve(studyfile.loads(learn_unit_file()))
    return chosen


class Clock:
    """(event, CPU seconds, wall seconds) of every progress event of a unit group."""

    def __init__(self):
        self.events = []
        self.mark("start")

    def mark(self, event: str) -> None:
        self.events.append((event, time.process_time(), time.perf_counter()))

    def parts(self) -> list[dict]:
        """One row per span between consecutive events, named by the event that opened it."""
        return [dict(part=a[0], cpu=round(b[1] - a[1], 2), wall=round(b[2] - a[2], 2))
                for a, b in zip(self.events, self.events[1:])]


def measure(plan) -> list[dict]:
    """Every unit group of `plan` run in turn, each part timed; with the model's figures."""
    keys, rows, done = unit_keys(plan), [], {}
    speed = estimate.contention()[0]
    for env, methods in unit_groups(plan):
        clock = Clock()
        results = engine.run_units(plan, env, methods, {m: keys[(env.label, m)] for m in methods},
                                   on_segment=lambda k, clock=clock: clock.mark(f"segment of {k}"),
                                   source=lambda m: done[m], phase=clock.mark)
        clock.mark("end")
        for r in results:
            done[r.meta["method"]] = r
        model = estimate.group_parts(plan, env, methods)
        rows.append(dict(env=env.label, methods=methods, parts=clock.parts(), model=model, contention=speed))
        print(f"  {env.label} / {'+'.join(methods)[:60]}: " + ", ".join(
            f"{p['part'][:28]} {p['cpu']:.1f} cpu {p['wall']:.1f} wall" for p in clock.parts()), file=sys.stderr)
        print(f"    model: {model}", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench_estimate_parts.json")
    ap.add_argument("--quick", action="store_true", help="smoke and own only")
    ap.add_argument("--only", nargs="+", help="only these shapes")
    args = ap.parse_args(argv)
    report = {}
    for name, plan in shapes(args.quick).items():
        if args.only and name not in args.only:
            continue
        print(name, file=sys.stderr, flush=True)
        report[name] = measure(plan)
        Path(args.out).write_text(json.dumps(report, indent=2))
    print("| shape | group | part | CPU s | wall s |")
    print("|---|---|---|---|---|")
    for name, groups in report.items():
        for g in groups:
            for p in g["parts"]:
                print(f"| {name} | {g['env']} / {'+'.join(g['methods'])[:40]} | {p['part']} | {p['cpu']:.1f} | "
                      f"{p['wall']:.1f} |")
    return report


if __name__ == "__main__":
    main()
