"""The `hcjax` command (also `python -m experiments`).

    hcjax run --preset {smoke,cpu,paper} [--envs E ...] [--methods M ...] [--seeds N]
              [--iterations N] [--out DIR] [--no-progress] [--no-plot] [--distributed]
              [--stall-timeout S] [--idle-timeout S] [--max-restarts N] [--no-watchdog]
    hcjax plot DIR
    hcjax bench [--out DIR] [--quick]
    hcjax presets

`run` runs the study in a worker process and restarts it (it resumes) when it makes no
progress for --stall-timeout seconds (XLA:CPU sometimes never completes a vmapped Brax
program; see `supervise`). It validates the whole configuration before anything is compiled (a bad env, method,
preset or count exits with status 2 and a message naming the field and the allowed
values), resumes in an existing DIR (finished units are skipped), then writes the
figures and tables (as `hcjax plot DIR`) and prints the results table.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from experiments import presets


def _names(values: list[str] | None) -> list[str] | None:
    """Accept `--envs a b` and `--envs a,b`."""
    if values is None:
        return None
    return [n for v in values for n in v.split(",") if n.strip()]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hcjax", description="HyperController study: run, plot, bench.")
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a study preset (resumes in an existing --out)")
    run.add_argument("--preset", default="smoke", help=f"one of {', '.join(presets.PRESETS)} (default smoke)")
    run.add_argument("--envs", nargs="+", help=f"environments; known: {', '.join(presets.KNOWN_ENVS)}")
    run.add_argument("--methods", nargs="+", help=f"methods; known: {', '.join(presets.METHODS)}")
    run.add_argument("--seeds", type=int, help="number of seeds (>= 1), the same for every method")
    run.add_argument("--iterations", type=int, help="PPO iterations per run (>= 1)")
    run.add_argument("--out", help="study directory (default results/<preset>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.add_argument("--no-plot", action="store_true", help="do not write figures and tables at the end")
    run.add_argument("--distributed", action="store_true",
                     help="call jax.distributed.initialize() first (multi-host: one process per host)")
    run.add_argument("--stall-timeout", type=float, default=900.0,
                     help="restart the run (resuming) after this many seconds without progress (default 900)")
    run.add_argument("--idle-timeout", type=float, default=120.0,
                     help="restart sooner when the worker also used no CPU for this many seconds (default 120)")
    run.add_argument("--max-restarts", type=int, default=1,
                     help="restarts of one stalled unit before it is skipped (default 1)")
    run.add_argument("--no-watchdog", action="store_true", help="run in this process, without the restarter")

    plot = sub.add_parser("plot", help="write Figures 1-2 and the tables of a study directory")
    plot.add_argument("dir")

    bench = sub.add_parser("bench", help="run the benchmark scripts, write one JSON + Markdown report")
    bench.add_argument("--out", default="bench_out", help="report directory (default bench_out/)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats (each script's --quick)")

    sub.add_parser("presets", help="print the presets and their reductions from the paper")
    return ap


def describe_presets() -> str:
    lines = []
    for p in presets.PRESETS.values():
        plan = presets.resolve(p.name)
        lines.append(f"{p.name}: {p.description}")
        lines.append(f"  envs: {', '.join(f'{e.label} -> {e.make} ({e.path})' for e in plan.envs)}")
        lines.append(f"  methods: {', '.join(p.methods)}; seeds {p.seeds}; iterations {p.iterations}; "
                     f"batch size {p.batch_size}; PPO {dict(p.ppo)}")
        for r in p.reductions:
            lines.append(f"  - {r}")
    return "\n".join(lines)


WORKER = "HCJAX_RUN_WORKER"


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) of process `pid` from /proc; -1 if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return -1.0


def supervise(argv: list[str], out: Path, stall_timeout: float, max_restarts: int = 1,
              idle_timeout: float = 120.0) -> int:
    """Run `hcjax run ARGV` in a worker process; restart it (it resumes) when its
    heartbeat file is older than `stall_timeout` seconds, or older than `idle_timeout`
    seconds while the worker used less than one CPU second in that time (the signature
    of the hang below: background threads still tick a few milliseconds).

    XLA:CPU sometimes never completes a vmapped PPO program here (every thread idle in
    a futex wait, no CPU used): at random for some Brax units, every time for PB2 on
    Brax Reacher. Killing the worker loses only the unit in flight. A unit that stalls
    more than `max_restarts` times is marked stalled (OUT/units/<unit>.stalled.json)
    and skipped, so the rest of the study still runs; its table cells stay empty.
    """
    import json
    import subprocess
    import time

    from experiments import results

    env = dict(os.environ, **{WORKER: "1"})
    beat, inflight = out / results.HEARTBEAT, out / results.INFLIGHT
    stalls: dict[str, int] = {}
    while True:
        start = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "experiments", *argv], env=env)
        try:
            cpu_mark, busy = cpu_seconds(proc.pid), time.time()
            while proc.poll() is None:
                time.sleep(0.5)
                now = time.time()
                last = max(start, beat.stat().st_mtime if beat.exists() else start)
                used = cpu_seconds(proc.pid)
                if used - cpu_mark >= 1.0:  # a full CPU second since the mark: working
                    cpu_mark, busy = used, now
                # no heartbeat for stall_timeout, or for idle_timeout while (almost) no CPU was used
                if now - last > stall_timeout or (used >= 0 and now - max(last, busy) > idle_timeout):
                    break
            else:
                return proc.returncode
        except BaseException:
            proc.kill()
            raise
        proc.kill()
        proc.wait()
        unit = inflight.read_text().strip() if inflight.exists() and inflight.stat().st_mtime >= start else ""
        stalls[unit] = stalls.get(unit, 0) + 1
        print(f"hcjax run: no progress for {time.time() - last:.0f} s in {unit or 'start-up'} "
              f"(stall {stalls[unit]}); restarting the run (finished units are kept)", file=sys.stderr, flush=True)
        if stalls[unit] > max_restarts:
            if not unit:
                print("hcjax run: the worker stalls before its first unit; giving up", file=sys.stderr)
                return 1
            marker = results.stalled_path(out, unit)
            results.atomic_write_text(marker, json.dumps({"unit": unit, "stalls": stalls[unit],
                                                          "stall_timeout_s": stall_timeout}))
            print(f"hcjax run: {unit} stalled {stalls[unit]} times; skipping it ({marker})",
                  file=sys.stderr, flush=True)


def cmd_run(args, ap, argv) -> int:
    try:
        plan = presets.resolve(args.preset, envs=_names(args.envs), methods=_names(args.methods),
                               seeds=args.seeds, iterations=args.iterations)
    except ValueError as e:
        ap.error(str(e))
    out = Path(args.out or Path("results") / plan.preset.name)
    if os.environ.get(WORKER):  # a supervised worker: show life before the slow imports
        from experiments import results

        out.mkdir(parents=True, exist_ok=True)
        results.heartbeat(out)
    if not (args.no_watchdog or args.distributed or os.environ.get(WORKER)):
        for name in ("stall_timeout", "idle_timeout"):
            if not getattr(args, name) > 0:
                ap.error(f"--{name.replace('_', '-')} must be > 0 seconds, got {getattr(args, name)}")
        return supervise(argv, out, args.stall_timeout, max(0, args.max_restarts), args.idle_timeout)
    if args.distributed:
        import jax

        jax.distributed.initialize()  # coordinator, process count and id from the environment
    from experiments import runner

    try:
        runner.check(plan)
    except ValueError as e:
        ap.error(str(e))
    print(f"hcjax run: preset {plan.preset.name}, {len(plan.envs)} env(s) x {len(plan.preset.methods)} "
          f"method(s) x {plan.preset.seeds} seed(s), {plan.preset.iterations} iterations -> {out}", flush=True)
    for e in plan.envs:
        print(f"  {e.label}: {e.make} ({e.path}) - {e.why}", flush=True)
    try:
        runner.run(plan, out, progress=not args.no_progress)
    except ValueError as e:
        ap.error(str(e))
    import jax

    if jax.process_index() != 0:  # only process 0 writes and reports
        return 0
    print(runner.summary(out), flush=True)
    if not args.no_plot and runner.R.load_units(out):
        from experiments import plots

        paths = plots.plot(out)
        print(f"figures: {paths['fig1_tuning_time']}, {paths['fig1_iterations']}, {paths['fig2_final']}")
        print(f"tables: {paths['results']}, {paths['success']}; report: {paths['report']}", flush=True)
    return 0


def cmd_plot(args, ap) -> int:
    from experiments import plots

    try:
        paths = plots.plot(args.dir)
    except ValueError as e:
        ap.error(str(e))
    print(Path(paths["results"]).read_text())
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def cmd_bench(args, ap) -> int:
    from experiments import bench

    report = bench.run(Path(args.out), quick=args.quick)
    print(f"bench report: {report['paths']['json']}, {report['paths']['markdown']}")
    return 0 if all(r["status"] in ("ok", "missing") for r in report["benchmarks"].values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.command == "run":
        return cmd_run(args, ap, list(sys.argv[1:] if argv is None else argv))
    if args.command == "plot":
        return cmd_plot(args, ap)
    if args.command == "bench":
        return cmd_bench(args, ap)
    if args.command == "presets":
        print(describe_presets())
        return 0
    ap.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
