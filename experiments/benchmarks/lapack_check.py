"""Does this jax's XLA:CPU deadlock on concurrent batched LAPACK calls? A probe, with load.

    python -m experiments.benchmarks.lapack_check [--tries 3] [--load 2] [--timeout 180] [--out FILE]

jax 0.10.2's batched LAPACK kernels (`ParallelBatchMap`) park an intra-op pool thread per
call until its chunks finish; two such calls at once on a 2-thread pool waited for each
other forever (vmapped flax orthogonal inits of 16 3x256 networks hung 6 runs of 6,
64-agent GP decisions at N = 200 7 of 7). This script repeats both workloads with the
batched path forced (`hcjax.gp.lapack_batching(True)`), each try in a child process
stopped after `--timeout` seconds (a stopped try counts as hung), while `--load` busy-loop
processes keep every core contended, as on the shared machine where the hangs were seen.
It prints one row per workload (finished / hung / seconds of the finished tries) and
writes JSON atomically. Its verdict decides `hcjax.gp.SEQUENTIAL_JAX` (which jax versions
keep the one-matrix-at-a-time protection); the sequential path is timed beside it.
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax

import hcjax
from agents.networks import orthogonal
from experiments import deps
from experiments.benchmarks import bench_tuners
from experiments.benchmarks.timing import print_table, write_json_atomic
from hcjax import gp

WORKLOADS = ("orthogonal_init", "gp_ucb", "pb2")
COLUMNS = ["workload", "path", "jax", "finished", "hung", "median_s", "range_s"]


def orthogonal_init(batched: bool) -> float:
    """16 vmapped inits of a 3x256 MLP's orthogonal kernels (the QR of PPO's networks) ->
    seconds, with `agents.networks.orthogonal`: flax's initializer whose vmap path
    `lapack_batching` forces."""
    init = orthogonal(1.0)

    def init_one(key):
        return [init(k, (256, 256)) for k in jax.random.split(key, 3)]

    t0 = time.perf_counter()
    with gp.lapack_batching(batched):
        out = jax.jit(jax.vmap(init_one))(jax.random.split(jax.random.key(0), 16))
    jax.block_until_ready(out)
    return time.perf_counter() - t0


def gp_decisions(name: str, batched: bool, agents: int = 64, n: int = 200, decisions: int = 3) -> float:
    """`decisions` compiled ask + tell of `agents` vmapped GP tuners at buffer N -> median seconds."""
    call, _ = bench_tuners.prepare(name, n, agents, batched)
    return statistics.median(call(r) for r in range(decisions))


def child(workload: str, batched: bool) -> None:
    """One try in this (child) process: prints its seconds."""
    seconds = orthogonal_init(batched) if workload == "orthogonal_init" else gp_decisions(workload, batched)
    print(f"seconds={seconds:.6f}", flush=True)


def busy() -> None:
    """A busy loop: one core of load until terminated."""
    x = 0
    while True:
        x += 1


def one_try(workload: str, batched: bool, timeout: float) -> float | None:
    """Run one try in a child process -> its seconds, or None when stopped (hung or too slow)."""
    cmd = [sys.executable, "-m", "experiments.benchmarks.lapack_check", "--child", workload,
           "--batched" if batched else "--sequential"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"lapack_check child {workload} failed:\n{proc.stderr[-3000:]}")
    return float(proc.stdout.strip().splitlines()[-1].split("=")[1])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3, help="tries per workload and path")
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes run meanwhile")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds before a try counts as hung")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--quick", action="store_true", help="one try per workload and path")
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--batched", dest="batched", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sequential", dest="batched", action="store_false", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="bench_out/lapack_check.json")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.batched)
        return {}
    tries = 1 if args.quick else args.tries
    load = [multiprocessing.Process(target=busy, daemon=True) for _ in range(args.load)]
    for p in load:
        p.start()
    rows = []
    try:
        for workload in args.workloads:
            for batched in (True, False):
                seconds = [one_try(workload, batched, args.timeout) for _ in range(tries)]
                done = [s for s in seconds if s is not None]
                rows.append({"workload": workload, "path": "batched" if batched else "sequential",
                             "jax": jax.__version__, "finished": len(done), "hung": len(seconds) - len(done),
                             "median_s": f"{statistics.median(done):.3g}" if done else "-",
                             "range_s": f"{min(done):.3g}-{max(done):.3g}" if done else "-", "seconds": seconds})
                print(f"{workload} {rows[-1]['path']}: {len(done)} of {tries} finished", flush=True)
    finally:
        for p in load:
            p.terminate()
            p.join()
    print(f"\nbatched LAPACK under vmap on XLA:CPU, jax {jax.__version__}, {args.load} busy processes, "
          f"{args.timeout:.0f} s limit per try; hcjax protects this jax: {not gp.batched_on('cpu')}")
    print_table(rows, COLUMNS)
    payload = {"benchmark": "lapack_check", "device": deps.devices(), "versions": deps.versions(),
               "load_processes": args.load, "timeout_s": args.timeout, "rows": rows,
               "protected": not gp.batched_on("cpu"), "hcjax": hcjax.__version__}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
