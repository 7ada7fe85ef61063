"""Per-decision cost of every tuner: one compiled ask + tell, after warm-up.

    python -m experiments.benchmarks.bench_tuners [--quick] [--host-only] [--paths-only] [--out FILE]

For the GP methods (gp_ucb, pb2) the ring buffer has N = 50, 200, 1000 rows and is
pre-filled to N valid observations (their cost depends on N, O(N^3)); the other methods
do not depend on N. Each is timed for 1 agent and for 64 agents under `jax.vmap`
(median of repeats, `block_until_ready`). Every row names the backend and, for the GP
methods, the path of their vmapped LAPACK calls (`hcjax.gp.platform_batched`): the
default of the backend, "sequential" (one matrix at a time) on the CPU, "batched"
elsewhere. Prints a table with the ratio of each method to hypercontroller (same agent
count) and writes JSON atomically (temp file + os.replace). With the `compare` extra
(ray[tune], scikit-learn) installed it also times one decision of Ray Tune's PB2
selection (`_select_config`, one trial, 4 hyperparameters) at N = 50 and 200 and prints
its ratio to hcjax pb2; otherwise it says that the comparison is skipped.

Paths section: gp_ucb and pb2 with both paths forced (`hcjax.gp.lapack_batching`) at
the same size, 8 agents at N = 100 and 200 (sizes at which the batched path did not
deadlock XLA:CPU on 2 cores), plus 64 agents at N = 200 where batching is the default
(GPU, TPU); the two compiled decisions alternate call by call (which one goes first
alternates too), median and range of each, and the ratio batched / sequential;
`path_rows` in the JSON. On the CPU the section runs in a child process with a time
limit, so that a deadlock is reported (`paths_status`) instead of hanging the benchmark.

HostTuner section: median seconds of one `ask()` + `tell(x)` of `hcjax.HostTuner` (the
plain-Python API: values back to the host as a dict, the objective sent as a float)
for hypercontroller, fixed and gp_ucb with a buffer of 50 (filled during warm-up), one
call at a time after warm-up, with the state on the CPU (HostTuner's default) and, on a
machine with an accelerator, on it too; a second table, and `host_rows` in the JSON.
Target: hypercontroller with the state on the CPU <= 0.1 ms, with or without a GPU.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hcjax
from experiments import deps
from experiments.benchmarks.timing import print_table, write_json_atomic
from experiments.study.methods import GP_METHODS, METHODS, options
from hcjax import gp

OTHER_METHODS = tuple(m for m in METHODS if m not in GP_METHODS)  # per-agent tuners without a GP buffer


def prefill(tuner, n: int):
    """init(key) -> state whose ring buffer holds n valid observations of random configurations."""

    def fill(key):
        k_init, k_fill = jax.random.split(key)
        state = tuner.init(k_init)

        def step(state, key):
            k_u, k_y = jax.random.split(key)
            state = state.replace(current=jax.random.uniform(k_u, state.current.shape))
            return tuner.tell(state, jax.random.normal(k_y)), None

        state, _ = jax.lax.scan(step, state, jax.random.split(k_fill, n))
        return state

    return fill


def prepare(name: str, n: int | None, agents: int, batched: bool | None = None):
    """Compile one ask + tell of `name` for `agents` vmapped agents (the GP methods' LAPACK
    calls on the path `batched`, None: the backend's default) -> (call, compile seconds);
    call(r) runs decision r (fresh keys and objectives) on the carried state and returns
    its wall seconds."""
    space = hcjax.ppo_space()
    opts = options(name, buffer=n)
    tuner = hcjax.make_tuner(name, space, **opts)
    init = prefill(tuner, n) if name in GP_METHODS else tuner.init

    def decision(state, key, objective):
        state, values = tuner.ask(state, key)
        return tuner.tell(state, objective), values

    keys = jax.random.split(jax.random.key(0), agents)
    states = jax.jit(jax.vmap(init))(keys)
    step = jax.jit(jax.vmap(decision)) if agents > 1 else jax.jit(decision)
    if agents == 1:
        states = jax.tree_util.tree_map(lambda a: a[0], states)
    t0 = time.perf_counter()
    with gp.lapack_batching(batched):
        compiled = step.lower(states, keys if agents > 1 else keys[0],
                              jnp.zeros((agents,) if agents > 1 else ())).compile()
    compile_s = time.perf_counter() - t0
    carry = {"states": states}

    def call(r: int) -> float:
        k = jax.random.split(jax.random.key(r + 1), agents)
        obj = jax.random.normal(jax.random.key(10_000 + r), (agents,))
        args = (k, obj) if agents > 1 else (k[0], obj[0])
        t0 = time.perf_counter()
        states, values = compiled(carry["states"], *args)
        jax.block_until_ready((states, values))
        seconds = time.perf_counter() - t0
        carry["states"] = states
        assert np.all(np.isfinite(np.asarray(values)))
        return seconds

    return call, compile_s


def path_name(name: str, batched: bool | None = None) -> str:
    """"sequential" or "batched": the vmap path of a GP method's LAPACK calls on this
    backend (`batched` None: its default); "-" for the other methods."""
    if name not in GP_METHODS:
        return "-"
    if batched is None:
        batched = gp.batched_on(jax.default_backend())
    return "batched" if batched else "sequential"


def time_method(name: str, n: int | None, agents: int, repeats: int, warmup: int = 2,
                batched: bool | None = None) -> dict:
    """Median seconds of one ask + tell (compiled) for `agents` vmapped agents."""
    call, compile_s = prepare(name, n, agents, batched)
    times = [call(r) for r in range(warmup + repeats)][warmup:]
    return {"method": name, "N": n, "agents": agents, "backend": jax.default_backend(),
            "path": path_name(name, batched), "median_s": statistics.median(times), "min_s": min(times),
            "repeats": repeats, "compile_s": compile_s}


def time_ray_pb2(n: int, repeats: int) -> dict | None:
    """Median seconds of Ray Tune's PB2 `_select_config` on n observations, or None
    (ray[tune] or scikit-learn missing: Ray's PB2 needs both)."""
    if importlib.util.find_spec("sklearn") is None:  # ray's pb2 module imports, but cannot select
        return None
    try:
        from ray.tune.schedulers import pb2 as ray_pb2
    except Exception:  # noqa: BLE001 - any import failure means: not available
        return None
    select = getattr(ray_pb2, "_select_config", None) or getattr(ray_pb2, "select_config", None)
    if select is None:
        return None
    space = hcjax.ppo_space()
    rng = np.random.default_rng(0)
    bounds = {p.name: [p.low, p.high] for p in space.hyperparameters}
    hp = space.low + rng.uniform(size=(n, space.h)) * (space.high - space.low)
    y = rng.normal(size=n)
    reward_before = np.concatenate([[0.0], np.cumsum(y)[:-1]])
    X = np.column_stack([np.arange(n, dtype=float), reward_before, hp])
    newpoint = np.array([float(n), float(np.sum(y))])
    times = []
    with warnings.catch_warnings():  # scikit-learn's optimiser warns at its bounds on random data
        warnings.simplefilter("ignore")
        for _ in range(repeats):
            t0 = time.perf_counter()
            select(X, y, None, newpoint, bounds, 2)
            times.append(time.perf_counter() - t0)
    return {"method": "ray_pb2", "N": n, "agents": 1, "backend": "cpu (scikit-learn)", "path": "-",
            "median_s": statistics.median(times), "min_s": min(times), "repeats": repeats, "compile_s": 0.0}


COLUMNS = ["method", "N", "agents", "backend", "path", "ms_per_decision", "x_hypercontroller", "compile_s"]
HOST_METHODS = (("hypercontroller", {}), ("fixed", {}), ("gp_ucb", {"buffer": 50}))
HOST_COLUMNS = ["method", "N", "device", "host_ms_median", "host_ms_p10", "host_ms_p90", "calls"]


def host_devices() -> list[str]:
    """Where HostTuner's state is timed: "cpu" (its default), and the default backend too
    when that is an accelerator (the state on the GPU: every call pays round trips)."""
    return ["cpu"] + ([jax.default_backend()] if jax.default_backend() != "cpu" else [])


def time_host(name: str, opts: dict, calls: int, warmup: int = 100, device: str = "cpu") -> dict:
    """Seconds of one HostTuner ask() + tell(x) (Python dict out, Python float in), timed
    call by call after `warmup` calls (which also fill a GP buffer of <= warmup rows),
    with the tuner's state on `device`."""
    tuner = hcjax.HostTuner(name, hcjax.ppo_space(), seed=0, device=device, **opts)
    rng = np.random.default_rng(0)
    objectives = rng.normal(size=warmup + calls).tolist()
    times = []
    for i, x in enumerate(objectives):
        t0 = time.perf_counter()
        values = tuner.ask()
        tuner.tell(x)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    assert all(np.isfinite(v) for v in values.values())
    q10, q90 = np.quantile(times, [0.1, 0.9])
    return {"method": name, "N": opts.get("buffer"), "device": device, "median_s": statistics.median(times),
            "p10_s": float(q10),
            "p90_s": float(q90), "calls": calls}


def host_table(rows: list[dict]) -> list[dict]:
    """Rows of the HostTuner table, in milliseconds."""
    return [dict(r, host_ms_median=r["median_s"] * 1e3, host_ms_p10=r["p10_s"] * 1e3, host_ms_p90=r["p90_s"] * 1e3)
            for r in rows]


def with_ratios(rows: list[dict]) -> list[dict]:
    """Add ms_per_decision and x_hypercontroller (ratio to hypercontroller's median at the
    same agent count) to each row."""
    hc = {r["agents"]: r["median_s"] for r in rows if r["method"] == "hypercontroller"}
    for r in rows:
        r["ms_per_decision"] = r["median_s"] * 1e3
        r["x_hypercontroller"] = r["median_s"] / hc[r["agents"]] if r["agents"] in hc else float("nan")
    return rows


def time_pure(quick: bool) -> tuple[list[dict], list[dict]]:
    """The compiled ask + tell table (every method, 1 and 64 agents) and Ray Tune's rows."""
    repeats = 3 if quick else 10
    rows = []
    for agents in (1, 64):
        for name in OTHER_METHODS:
            rows.append(time_method(name, None, agents, repeats * 5))
            print(f"{name} agents={agents}: {rows[-1]['median_s'] * 1e3:.3f} ms", flush=True)
        for name in GP_METHODS:
            for n in (50, 200, 1000):
                if quick and agents > 1 and n == 1000:
                    continue
                reps = max(2, repeats // (4 if agents > 1 and n == 1000 else 1))
                rows.append(time_method(name, n, agents, reps))
                print(f"{name} N={n} agents={agents}: {rows[-1]['median_s'] * 1e3:.3f} ms", flush=True)
    ray_rows = [r for r in (time_ray_pb2(n, 3) for n in (50, 200)) if r is not None]
    if ray_rows:
        rows.extend(ray_rows)
        ours = {r["N"]: r["median_s"] for r in rows if r["method"] == "pb2" and r["agents"] == 1}
        for r in ray_rows:
            print(f"Ray Tune PB2 at N={r['N']}: {r['median_s'] * 1e3:.1f} ms per decision = "
                  f"{r['median_s'] / ours[r['N']]:.0f} x hcjax pb2")
    else:
        print("Ray Tune PB2 comparison skipped: ray[tune] and scikit-learn (the `compare` extra) "
              "are not both installed.")
    print_table(with_ratios(rows), COLUMNS)
    target = {r["method"]: r["median_s"] * 1e3 for r in rows
              if r["method"] in GP_METHODS and r["N"] == 1000 and r["agents"] == 1}
    for name, ms in target.items():
        print(f"target {name} N=1000, 1 agent <= 50 ms: {ms:.1f} ms ({'met' if ms <= 50 else 'NOT met'})")
    return rows, ray_rows


# Sizes (agents, N) of the paths section. With the batched path on a 2-core XLA:CPU, 8
# agents at N = 200 finished (3 of 3 pb2 runs) and 64 agents at N = 200 deadlocked (7 of
# 7 runs), so that size is timed only where batching is the default (GPU, TPU).
PATH_SIZES = ((8, 100), (8, 200))
PATH_SIZES_BATCHED_DEFAULT = ((64, 200),)
PATH_COLUMNS = ["method", "N", "agents", "backend", "sequential_ms", "batched_ms", "batched_x_sequential", "rounds"]


def time_paths(name: str, n: int, agents: int, rounds: int, warmup: int = 2) -> dict:
    """Both vmap paths of one GP method at one size, interleaved: each round runs one
    decision on each path, alternating which goes first -> median, min, max per path."""
    calls, compile_s = {}, {}
    for batched in (False, True):
        calls[batched], compile_s[batched] = prepare(name, n, agents, batched)
    times = {False: [], True: []}
    for r in range(warmup + rounds):
        for batched in ((False, True) if r % 2 == 0 else (True, False)):
            seconds = calls[batched](r)
            if r >= warmup:
                times[batched].append(seconds)
    row = {"method": name, "N": n, "agents": agents, "backend": jax.default_backend(), "rounds": rounds}
    for batched, key in ((False, "sequential"), (True, "batched")):
        t = times[batched]
        row.update({f"{key}_median_s": statistics.median(t), f"{key}_min_s": min(t), f"{key}_max_s": max(t),
                    f"{key}_compile_s": compile_s[batched]})
    row["batched_x_sequential"] = row["batched_median_s"] / row["sequential_median_s"]
    return row


def run_paths(quick: bool, out: str | None = None) -> list[dict]:
    """The paths section in this process; rows are written to `out` (JSON) after each size,
    so that what finished survives if the process is stopped."""
    sizes = PATH_SIZES + (PATH_SIZES_BATCHED_DEFAULT if gp.batched_on(jax.default_backend()) else ())
    rows = []
    for agents, n in sizes:
        for name in GP_METHODS:
            rows.append(time_paths(name, n, agents, rounds=5 if quick else 15))
            r = rows[-1]
            print(f"paths {name} N={n} agents={agents}: sequential {r['sequential_median_s'] * 1e3:.1f} ms, "
                  f"batched {r['batched_median_s'] * 1e3:.1f} ms", flush=True)
            if out:
                write_json_atomic(out, {"rows": rows})
    return rows


def paths_section(quick: bool, timeout_s: float) -> tuple[list[dict], str]:
    """The paths section -> (rows, status). Where batching is not the default (XLA:CPU) it
    runs in a child process stopped after `timeout_s`: the batched path may deadlock there."""
    if gp.batched_on(jax.default_backend()):
        return run_paths(quick), "ok"
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "paths.json")
        cmd = [sys.executable, "-m", "experiments.benchmarks.bench_tuners", "--paths-worker", out]
        cmd += ["--quick"] if quick else []
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
            output = proc.stdout
            status = "ok" if proc.returncode == 0 else f"child exited with {proc.returncode}: {proc.stderr[-2000:]}"
        except subprocess.TimeoutExpired as e:
            output = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            status = (f"stopped after {timeout_s:.0f} s: the sizes without a row did not finish "
                      "(too slow, or batched LAPACK calls deadlocked)")
        print(output, end="", flush=True)
        rows = json.loads(Path(out).read_text())["rows"] if os.path.exists(out) else []
    return rows, status


def paths_table(rows: list[dict]) -> list[dict]:
    """Rows of the paths table: milliseconds as 'median (min-max)'."""
    def ms(r, key):
        return (f"{r[key + '_median_s'] * 1e3:.3g} ({r[key + '_min_s'] * 1e3:.3g}-"
                f"{r[key + '_max_s'] * 1e3:.3g})")

    return [dict(r, sequential_ms=ms(r, "sequential"), batched_ms=ms(r, "batched")) for r in rows]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, N = 1000 only for one agent")
    parser.add_argument("--host-only", action="store_true", help="only the HostTuner table")
    parser.add_argument("--paths-only", action="store_true", help="only the sequential vs batched table")
    parser.add_argument("--paths-timeout", type=float, default=None,
                        help="seconds the paths section may take on the CPU (default 900, 1800 without --quick)")
    parser.add_argument("--paths-worker", metavar="FILE", help=argparse.SUPPRESS)  # the child of paths_section
    parser.add_argument("--out", default="bench_out/tuners.json")
    args = parser.parse_args(argv)
    if args.paths_worker:
        return {"rows": run_paths(args.quick, args.paths_worker)}
    only_host, only_paths = args.host_only, args.paths_only and not args.host_only
    rows, ray_rows = ([], []) if only_host or only_paths else time_pure(args.quick)
    path_rows, paths_status = [], "not run"
    if not only_host:
        timeout = args.paths_timeout or (900.0 if args.quick else 1800.0)
        path_rows, paths_status = paths_section(args.quick, timeout)
        print(f"\nGP vmap paths, both forced, interleaved: ms per decision, median (min-max); {paths_status}")
        print_table(paths_table(path_rows), PATH_COLUMNS)
    host_rows = []
    if not only_paths:
        host_rows = host_table([time_host(name, opts, 300 if args.quick else 2000, device=device)
                                for device in host_devices() for name, opts in HOST_METHODS])
        print("\nHostTuner: one ask() + tell(x) from Python, one agent, milliseconds, state on `device`")
        print_table(host_rows, HOST_COLUMNS)
        hc_host = next(r["host_ms_median"] for r in host_rows if r["method"] == "hypercontroller"
                       and r["device"] == "cpu")
        print(f"target HostTuner hypercontroller (state on the CPU, the default) <= 0.1 ms: {hc_host:.3f} ms "
              f"({'met' if hc_host <= 0.1 else 'NOT met'})")
    payload = {"benchmark": "tuners", "device": deps.devices(), "quick": args.quick, "rows": rows,
               "path_rows": paths_table(path_rows), "paths_status": paths_status, "host_rows": host_rows,
               "ray_compared": bool(ray_rows), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json_atomic(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
