"""Peak memory of `hcjax export` on fabricated unit files: 1 M iteration rows by default.

    python -m experiments.benchmarks.bench_export_memory [--rows N] [--code DIR ...] [--out FILE]

Writes `units` unit files of `seeds` x `iterations` random numbers (4 hyperparameters,
an evaluation every 10 iterations) into a temporary study directory, then runs `python
-m experiments export` on it in a fresh process for each `--code` checkout (default:
this one; give an older checkout to compare, e.g. one made by `git archive`), and once
on a one-unit study of 1,000 rows (the interpreter and imports alone). Reported per
checkout: the child's peak resident memory (ru_maxrss), its seconds, and the peak's
growth per row over the 1,000-row run. Memory is not timing: one run each. Writes JSON
(default bench_out/export_memory.json) atomically.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.benchmarks.timing import print_table, write_json_atomic
from experiments.study.store import StudyDir, UnitResult

CHECKOUT = Path(__file__).resolve().parents[2]
SPACE = [{"name": "learning_rate", "low": 1e-4, "high": 1e-2, "scale": "log", "default": 1e-3},
         {"name": "clip_eps", "low": 0.1, "high": 0.5, "default": 0.2},
         {"name": "gae_lambda", "low": 0.9, "high": 1.0, "default": 0.95},
         {"name": "batch_size", "low": 256, "high": 2048, "integer": True, "default": 1024}]


def fabricate(directory: Path, units: int, seeds: int, iterations: int, seed: int = 0) -> int:
    """Write `units` random unit files into directory/units; returns the iteration rows."""
    rng = np.random.default_rng(seed)
    store = StudyDir(directory)
    E = iterations // 10
    for k in range(units):
        def f32(*shape):
            return rng.standard_normal(shape).astype(np.float32)

        hparams = np.stack([rng.uniform(1e-4, 1e-2, (seeds, iterations)), rng.uniform(0.1, 0.5, (seeds, iterations)),
                            rng.uniform(0.9, 1.0, (seeds, iterations)),
                            rng.integers(256, 2049, (seeds, iterations))], axis=-1).astype(np.float32)
        config = {"eval_every": 10, "tune_every": 5, "space": SPACE, "seeds": seeds, "iterations": iterations}
        store.save_unit(UnitResult(
            seeds=np.arange(seeds, dtype=np.int32), train_reward=f32(seeds, iterations),
            objective=f32(seeds, iterations), hparams=hparams,
            frames=rng.integers(256, 2049, (seeds, iterations)).astype(np.int64),
            rejected=np.zeros((seeds, iterations), np.int32), episode_return=f32(seeds, iterations),
            eval_iteration=np.arange(10, iterations + 1, 10, dtype=np.int32), eval_reward=f32(seeds, E),
            tuner_time=rng.uniform(0, 1e-3, iterations), meta={
                "env": "Fabricated-v0", "method": f"method{k}", "config": config, "study_key": "fabricated",
                "hparam_names": [e["name"] for e in SPACE], "segment_seconds": list(rng.uniform(1, 2, E))}))
    return units * seeds * iterations


def peak_of_export(code: Path, study: Path, out: Path) -> dict:
    """Run `python -m experiments export study --out out` with `code` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(code))
    script = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
              "rc = subprocess.call([sys.executable, '-m', 'experiments', 'export', sys.argv[1], '--out', sys.argv[2]],"
              " stdout=subprocess.DEVNULL); "
              "print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    line = subprocess.run([sys.executable, "-c", script, str(study), str(out)], env=env, capture_output=True,
                          text=True, check=True, cwd=study.parent).stdout.split()  # not this checkout's cwd
    rc, seconds, kib = int(line[0]), float(line[1]), int(line[2])
    if rc != 0:
        raise RuntimeError(f"export with {code} exited {rc}")
    return {"seconds": seconds, "peak_mib": kib / 1024}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="iteration rows (units x 100 seeds x 1000)")
    parser.add_argument("--code", nargs="+", default=[str(CHECKOUT)], help="checkouts whose export is measured")
    parser.add_argument("--out", default="bench_out/export_memory.json")
    args = parser.parse_args(argv)
    seeds, iterations = 100, 1000
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big", Path(tmp) / "small"
        n = fabricate(big, max(1, args.rows // (seeds * iterations)), seeds, iterations)
        n_small = fabricate(small, 1, 10, 100)
        for i, code in enumerate(args.code):
            base = peak_of_export(Path(code), small, Path(tmp) / f"out_small{i}")
            full = peak_of_export(Path(code), big, Path(tmp) / f"out_big{i}")
            rows.append({"code": code, "rows": n, "peak_mib": full["peak_mib"], "seconds": full["seconds"],
                         "peak_mib_1k_rows": base["peak_mib"],
                         "bytes_per_row": (full["peak_mib"] - base["peak_mib"]) * 2**20 / (n - n_small)})
    print_table(rows, ["code", "rows", "peak_mib", "seconds", "peak_mib_1k_rows", "bytes_per_row"])
    report = {"rows": rows, "load": os.getloadavg(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "maxrss_self_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    write_json_atomic(args.out, report)
    return report


if __name__ == "__main__":
    main()
