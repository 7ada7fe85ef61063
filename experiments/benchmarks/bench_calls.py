"""How often two groups drawn from one distribution are called "better" or "worse": the A/A
false-call rate of hcjax.calls (the exact stratified permutation test) beside the percentile
bootstrap's rule it replaced ("better" / "worse" where the 95% interval excludes 1/2).

    python -m experiments.benchmarks.bench_calls [--trials 2000] [--reps 1000] [--tasks 1 2 4 6]
                                                 [--sizes 2 ... 20] [--no-bootstrap] [--out FILE]

Per task count T and group size n (n + n runs per task; tasks of different reward scales),
`trials` A/A pairs of standard normal groups. The call: `hcjax.calls.decide`, vectorised over the
trials. The bootstrap: per trial, `reps` resamples of each group's runs on each task (multinomial
draw counts, the same distribution as hcjax.stats' resampling), the mean over tasks of P(X > Y) +
0.5 P(X = Y) of each, its 2.5th-97.5th percentile interval (NumPy's linear interpolation), called
where it excludes 1/2. Prints a table per rule (rows: T, columns: n) and writes JSON (default
bench_out/calls.json) atomically. The bootstrap costs about 97 CPU s for --sizes 2 3 4 6 8 10 20
(docs/studies.md#how-many-seeds quotes that run) and several minutes for every size; the call
about 1 CPU second.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from experiments.benchmarks.timing import print_table, write_json_atomic
from hcjax import calls


def groups(rng, tasks: int, n: int, trials: int) -> tuple[list, list]:
    """`trials` A/A pairs: per task (trials, n) arrays for each group, tasks of different scales."""
    scale = rng.uniform(0.1, 100.0, tasks)
    return [s * rng.normal(size=(trials, n)) for s in scale], [s * rng.normal(size=(trials, n)) for s in scale]


def call_rate(xs, ys) -> float:
    verdicts, *_ = calls.decide(xs, ys)
    return float(np.isin(verdicts, ["better", "worse"]).mean())


def bootstrap_rate(rng, xs, ys, reps: int, chunk: int = 200) -> float:
    """The share of trials whose stratified percentile-bootstrap interval of the mean P(X > Y)
    excludes 1/2."""
    trials, n = xs[0].shape
    called = 0
    for start in range(0, trials, chunk):
        part = slice(start, min(start + chunk, trials))
        b = part.stop - part.start
        boot = np.zeros((b, reps))
        for x, y in zip(xs, ys):
            x, y = x[part], y[part]
            wins = (x[:, :, None] > y[:, None, :]) + 0.5 * (x[:, :, None] == y[:, None, :])  # (b, n, n)
            cx = rng.multinomial(n, np.full(n, 1.0 / n), size=(b, reps)).astype(np.float64)
            cy = rng.multinomial(n, np.full(n, 1.0 / n), size=(b, reps)).astype(np.float64)
            boot += np.einsum("bri,bij,brj->br", cx, wins, cy, optimize=True) / (n * n)
        lo, hi = np.percentile(boot / len(xs), [2.5, 97.5], axis=1)
        called += int(((lo > 0.5) | (hi < 0.5)).sum())
    return called / trials


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--tasks", type=int, nargs="+", default=[1, 2, 4, 6])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(range(2, 21)))
    ap.add_argument("--no-bootstrap", action="store_true", help="only the call (the bootstrap costs minutes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench_out") / "calls.json")
    args = ap.parse_args(argv)
    rules = ["call"] + ([] if args.no_bootstrap else ["bootstrap"])
    rates = {rule: {} for rule in rules}
    start = time.process_time()
    for tasks in args.tasks:
        for n in args.sizes:
            rng = np.random.default_rng([args.seed, tasks, n])
            xs, ys = groups(rng, tasks, n, args.trials)
            rates["call"][(tasks, n)] = call_rate(xs, ys)
            if "bootstrap" in rates:
                rates["bootstrap"][(tasks, n)] = bootstrap_rate(rng, xs, ys, args.reps)
    for rule in rules:
        print(f"\nA/A rate of 'better' or 'worse', {rule} ({args.trials} trials; columns: runs per group)")
        print_table([{"tasks": t, **{str(n): f"{rates[rule][(t, n)]:.3f}" for n in args.sizes}} for t in args.tasks],
                    ["tasks"] + [str(n) for n in args.sizes])
    print(f"\n{time.process_time() - start:.0f} CPU s")
    write_json_atomic(args.out, {"trials": args.trials, "reps": args.reps, "seed": args.seed,
                                 "min_seeds": calls.MIN_SEEDS, "min_interval": calls.MIN_INTERVAL,
                                 "rates": {rule: [{"tasks": t, "n": n, "rate": r} for (t, n), r in rates[rule].items()]
                                           for rule in rules}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
