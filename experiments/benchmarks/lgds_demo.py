"""Regret of every tuner on the paper's synthetic LGDS problems.

    python -m experiments.benchmarks.lgds_demo [--seeds 256] [--n 1000] [--methods ...]

All methods play the same problems with the same keys (h hyperparameters of d arms,
asked and told every step); prints method, mean total regret, standard error and the
ratio to random, and writes JSON.
"""
from __future__ import annotations

import argparse
import time

import jax

import hcjax
from experiments.benchmarks.timing import print_table, write_json_atomic
from experiments.study.methods import options
from hcjax import lgds


def method_options(name: str, *, d: int, n: int, gp_buffer: int) -> dict:
    """Per-method options for an LGDS run of n steps (decisions) on grids of d arms (methods table)."""
    return options(name, decisions=n, buffer=gp_buffer, arms=d)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=None, help=f"default: all of {hcjax.available()}")
    parser.add_argument("--seeds", type=int, default=256)
    parser.add_argument("--n", type=int, default=1000, help="steps per problem")
    parser.add_argument("--h", type=int, default=2)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--gp-buffer", type=int, default=200, help="ring-buffer size of gp_ucb and pb2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench_out/lgds.json")
    args = parser.parse_args(argv)
    methods = args.methods or list(hcjax.available())
    for field in ("seeds", "n", "h", "d", "gp_buffer"):
        if getattr(args, field) < (2 if field == "d" else 1):
            flag = field.replace("_", "-")
            raise ValueError(f"lgds_demo: --{flag} must be positive (d >= 2), got {getattr(args, field)}")
    space = hcjax.unit_space(args.h)
    tuners = {m: hcjax.make_tuner(m, space, **method_options(m, d=args.d, n=args.n, gp_buffer=args.gp_buffer))
              for m in methods}
    rows, results = [], {}
    for name, tuner in tuners.items():
        start = time.perf_counter()
        results[name] = lgds.regret_table({name: tuner}, jax.random.PRNGKey(args.seed), seeds=args.seeds, n=args.n,
                                          h=args.h, d=args.d)[name]
        results[name]["seconds"] = time.perf_counter() - start
    reference = results.get("random", {}).get("mean")
    for name, r in sorted(results.items(), key=lambda kv: kv[1]["mean"]):
        rows.append({"method": name, "mean_regret": r["mean"], "std_error": r["se"],
                     "vs_random": r["mean"] / reference if reference else "", "seconds": r["seconds"]})
    print(f"LGDS regret: h={args.h}, d={args.d}, n={args.n}, {args.seeds} seeds (lower is better)")
    print_table(rows, ["method", "mean_regret", "std_error", "vs_random", "seconds"])
    report = {"h": args.h, "d": args.d, "n": args.n, "seeds": args.seeds, "gp_buffer": args.gp_buffer,
              "rows": rows, "totals": {k: v["totals"] for k, v in results.items()}}
    write_json_atomic(args.out, report)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
