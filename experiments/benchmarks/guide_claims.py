"""The own-training-loop guide's claims, re-measured: a tuned example against its control group
on fresh seed sets (docs/own-training-loop.md quotes what this prints).

    python -m experiments.benchmarks.guide_claims --example ppo --keys 7 8 9 [--agents 40] [--out FILE]

For each key k, `agents` agents from jax.random.split(PRNGKey(k), agents), every second a
control (hcjax.control.controls), run as the example's own __main__ runs them (one jitted vmap),
scored as it scores them (ppo: the mean return of the episodes finished in the last 10 updates;
dqn: the mean greedy return of the last 3 evaluations), with each agent's final hyperparameters.
Agent i of key k is named seed 100 k + i. Prints `hcjax.control.report` per key and over all
keys pooled (one task: every key's agents are more seeds of CartPole). Each key's scores are
written to the JSON (default bench_out/guide_<example>.json) atomically as soon as it finishes,
and a key already there is not run again (an interrupted run resumes); --steps overrides the
example's TOTAL_TIMESTEPS (a key measured at other steps is run again).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import jax
import numpy as np

import hcjax
from experiments.benchmarks.bench_own_loop import load_example
from experiments.benchmarks.timing import write_json_atomic

EXAMPLES = {"ppo": "ppo_cartpole_tuned", "dqn": "dqn_cartpole_tuned"}


def scores_of(example: str, out: dict) -> np.ndarray:
    """(agents,) each agent's score, as the example's __main__ computes it."""
    info = out["metrics"]
    if example == "ppo":
        done, returns = np.asarray(info["returned_episode"]), np.asarray(info["returned_episode_returns"])
        return (returns * done)[:, -10:].sum((1, 2, 3)) / done[:, -10:].sum((1, 2, 3))
    greedy = np.asarray(info["greedy_return"], np.float64)
    evaluated = greedy[:, ~np.isnan(greedy).any(0)]
    return evaluated[:, -3:].mean(1)


def run_key(example: str, module, config: dict, key: int, agents: int) -> dict:
    """One seed set: scores, controls, final hyperparameters, wall and CPU seconds."""
    rngs, controls = jax.random.split(jax.random.PRNGKey(key), agents), hcjax.control.controls(agents)
    hcjax.check_keys(rngs)
    wall, cpu = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(jax.jit(jax.vmap(module.make_train(config)))(rngs, controls))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    final = {name: np.asarray(out["metrics"][name])[:, -1].astype(float).tolist() for name in module.SPACE.names}
    return {"key": key, "steps": float(config["TOTAL_TIMESTEPS"]), "scores": scores_of(example, out).tolist(),
            "controls": controls.tolist(), "seeds": [100 * key + i for i in range(agents)], "final": final,
            "wall_seconds": wall, "cpu_seconds": cpu, "load": os.getloadavg()}


def report(runs: list[dict]):
    """hcjax.control.report over the given seed sets pooled."""
    cat = lambda k: np.concatenate([np.asarray(r[k]) for r in runs])  # noqa: E731
    names = runs[0]["final"]
    return hcjax.control.report(cat("scores"), cat("controls").astype(bool), seeds=cat("seeds"),
                                hyperparameters={n: np.concatenate([r["final"][n] for r in runs]) for n in names})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", choices=sorted(EXAMPLES), required=True)
    ap.add_argument("--keys", type=int, nargs="+", default=[7, 8, 9])
    ap.add_argument("--agents", type=int, default=40)
    ap.add_argument("--steps", type=float, default=None, help="TOTAL_TIMESTEPS (default: the example's)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    module = load_example(EXAMPLES[args.example])
    config = dict(module.CONFIG, **({} if args.steps is None else {"TOTAL_TIMESTEPS": args.steps}))
    path = args.out or Path("bench_out") / f"guide_{args.example}.json"
    done = json.loads(path.read_text())["runs"] if path.is_file() else []
    done = [r for r in done if r["steps"] == float(config["TOTAL_TIMESTEPS"])]
    for key in args.keys:
        if any(r["key"] == key for r in done):
            continue
        done.append(run_key(args.example, module, config, key, args.agents))
        write_json_atomic(path, {"example": args.example, "config": config, "runs": done})
        print(f"key {key}: {done[-1]['wall_seconds']:.0f} s wall, {done[-1]['cpu_seconds']:.0f} s CPU", flush=True)
    mine = [r for r in done if r["key"] in args.keys]
    for r in mine:
        print(f"PRNGKey({r['key']}): {report([r])}")
    print(f"keys {', '.join(str(r['key']) for r in mine)} pooled: {report(mine)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
