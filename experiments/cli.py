"""The `hcjax` command (also `python -m experiments`): run, plot, verdict, export, replay, bench, presets, info.

Its usage is argparse's help (`hcjax --help`, `hcjax run --help`, ...): `parser()` below
is the one place it is written, exit statuses included (EXIT_STATUS).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

from agents.envs import backend as agent_backend
from agents.envs import table as agent_table
from experiments import deps
from experiments.benchmarks import bench as bench_scripts
from experiments.reporting import export, plots, tables, verdict
from experiments.study import api, interrupts, presets, processes, schedules, studyfile, unfinished
from experiments.study.build import DEFAULT_MEMORY_LIMIT_GIB
from experiments.study.files import check_writable_dir
from experiments.study.spacetext import parse_hyperparameter
from experiments.study.store import StudyBusy, StudyDir
from hcjax.calls import FewSeedsWarning
from hcjax.extras import PROVIDED_BY, install_hint

EXIT_STATUS = """exit status: 0 done; 2 the user's mistake (bad arguments or configuration, an --out
that is a file, unwritable, in use by another run, or holding another study, a link or a
file in the way inside it, an environment's missing optional dependency), always
detected before any work starts, with a message naming the field and the allowed
values; 1 our failure during the work, reported with the exception's type, message and
location (the full traceback is appended to DIR/run.log); 130 interrupted (Ctrl-C), 143
terminated (SIGTERM; 129 for SIGHUP), with how many units finished: rerunning the same
command resumes. `hcjax run` starts no other process, so nothing outlives it. Under
--distributed every process checks the study and they compare environments, study and
units before any work (a difference, or one process's mistake, is exit 2 on every
process, naming the process); when one process stops during the work (fails, is
interrupted, is killed), the others stop within seconds with a message and exit 1."""

# Third-party warnings that say nothing about this run (filtered here, never in the library).
KNOWN_WARNINGS = (
    (UserWarning, r"Brax System, piplines and environments are not actively being maintained"),
    (DeprecationWarning, r"JAXopt is no longer maintained"),
    (DeprecationWarning, r"builtin type (SwigPyPacked|SwigPyObject|swigvarlink) has no __module__ attribute"),
    (DeprecationWarning, r".*The environment \S+ is out of date"),  # gymnasium, for the paper's -v4 tasks
)


# Lines third-party packages print on import (mujoco.mjx when warp, a GPU-only
# package, is absent), dropped while the CLI imports them.
KNOWN_PRINTS = ("Failed to import warp:", "Failed to import mujoco_warp:")


@contextlib.contextmanager
def _without_known_prints():
    """Drop the KNOWN_PRINTS lines from stdout while the block runs (imports)."""
    real = sys.stdout

    class Filter(io.TextIOBase):
        pending = ""

        def write(self, text):
            self.pending += text
            *lines, self.pending = self.pending.split("\n")
            for line in lines:
                if not line.startswith(KNOWN_PRINTS):
                    real.write(line + "\n")
            return len(text)

        def flush(self):
            real.flush()

    sys.stdout = quiet = Filter()
    try:
        yield
    finally:
        sys.stdout = real
        if quiet.pending and not quiet.pending.startswith(KNOWN_PRINTS):
            real.write(quiet.pending)


class UsageError(Exception):
    """The user's mistake, found before any work started: exit status 2."""


def _names(values: list[str] | None) -> list[str] | None:
    """Accept `--envs a b` and `--envs a,b`."""
    if values is None:
        return None
    return [n for v in values for n in v.split(",") if n.strip()]


def parser() -> argparse.ArgumentParser:
    """The `hcjax` command's arguments and its usage text."""
    ap = argparse.ArgumentParser(prog="hcjax", description="HyperController study: run, plot, bench.",
                                 epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a study (resumes in an existing --out)")
    which = run.add_mutually_exclusive_group()
    which.add_argument("--preset", default=None, help=f"one of {', '.join(presets.PRESETS)} (default smoke)")
    which.add_argument("--config", help="a study file (TOML; see `hcjax presets --toml NAME` for the format)")
    run.add_argument("--space", nargs="+", metavar="NAME=LOW:HIGH[:log][:int][:default=V]|NAME=A,B,..[:default=V]",
                     help="the tuned hyperparameters (tunable PPOConfig fields), replacing the study's space; "
                          "commas give a categorical's options")
    run.add_argument("--envs", nargs="+", help="environments: names from the gymnax, Brax or gymnasium registries "
                                               "(optionally prefixed gymnax/, brax/, gymnasium/), of the optional "
                                               "libraries by prefix (craftax/, jumanji/, navix/, xminigrid/, "
                                               "pgx/), or the paper's")
    run.add_argument("--env-factory", nargs="+", metavar="[LABEL=]MODULE:FUNCTION",
                     help="your own environments: importable zero-argument factories, imported and CALLED "
                          "(this runs your code, like Hydra's _target_); never read from --envs")
    run.add_argument("--methods", nargs="+", help=f"methods; known: {', '.join(presets.ALL_METHODS)}")
    run.add_argument("--seeds", type=int,
                     help="number of seeds (1 .. 2**31: seed ids 0 .. n-1, stored as int32), the same for every method")
    run.add_argument("--iterations", type=int, help="PPO iterations per run (>= 1)")
    run.add_argument("--out", help="study directory (default runs/<preset>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars or progress lines")
    run.add_argument("--no-plot", action="store_true", help="do not write figures and tables at the end")
    run.add_argument("--tensorboard", action="store_true",
                     help="live scalars per unit and seed under OUT/tensorboard/ "
                          "(tensorboard --logdir OUT/tensorboard)")
    run.add_argument("--memory-limit-gib", type=float, default=DEFAULT_MEMORY_LIMIT_GIB,
                     help="refuse a unit estimated to need more memory than this "
                          f"(GiB, default {DEFAULT_MEMORY_LIMIT_GIB:g})")
    run.add_argument("--distributed", action="store_true",
                     help="one process of a multi-process run: jax.distributed.initialize() first, with the "
                          "three options below or, without them, the cluster's environment (e.g. SLURM)")
    run.add_argument("--coordinator", metavar="HOST:PORT", help="--distributed: process 0's address")
    run.add_argument("--num-processes", type=int, help="--distributed: the number of processes")
    run.add_argument("--process-id", type=int, help="--distributed: this process's id (0 writes the results)")

    plot = sub.add_parser("plot", help="write the figures and tables of a study directory")
    plot.add_argument("dir")

    judge = sub.add_parser("verdict", help="does tuning help? a study's verdict on its test seeds (Markdown)")
    judge.add_argument("dir")
    judge.add_argument("--json", metavar="FILE", help="also write every number, sentence and flag to FILE (JSON)")

    bench = sub.add_parser("bench", help="run the benchmark scripts, write one JSON + Markdown report")
    bench.add_argument("--out", default="bench_out", help="report directory (default bench_out/)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats (each script's --quick)")
    bench.add_argument("--only", nargs="+", choices=bench_scripts.SCRIPTS, metavar="SCRIPT",
                       help=f"run only these scripts (of {', '.join(bench_scripts.SCRIPTS)})")

    tidy = sub.add_parser("export", help="write a study's units as tidy tables (CSV; Parquet with pyarrow)")
    tidy.add_argument("dir")
    tidy.add_argument("--out", help="directory of the tables (default DIR/export)")
    tidy.add_argument("--format", nargs="+", choices=export.FORMATS, default=["csv"],
                      help="csv (default) and/or parquet")

    again = sub.add_parser("replay", help="rerun the hyperparameter schedules a finished unit found on new seeds")
    again.add_argument("dir", help="the study directory holding the unit")
    again.add_argument("--unit", required=True, help="the unit's name, <env>__<method> as in DIR/units/")
    again.add_argument("--seeds", type=int, nargs="+", required=True,
                       help="seed ids of the new agents (distinct, in [0, 2**31 - 1]: stored as int32); seed j "
                            "replays the unit's seed row j mod its seed count")
    again.add_argument("--out", required=True, help="study directory the replayed unit is saved in")
    again.add_argument("--env-factory", metavar="MODULE:FUNCTION",
                       help="for a unit of your own environment: the factory that makes it (imported and CALLED); "
                            "default the factory the unit recorded")
    again.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")

    shown = sub.add_parser("presets", help="print the presets and their reductions from the paper")
    shown.add_argument("--toml", metavar="NAME", help="print preset NAME as a study file instead")
    sub.add_parser("info", help="print the versions of hcjax and its dependencies, and the devices")
    return ap


def describe_presets() -> str:
    """Every preset, its environments (those of a library not installed named with the extra
    that brings it), methods, sizes, space and reductions from the paper."""
    lines = []
    for p in presets.PRESETS.values():
        chosen = [presets.choose_env(name, p, installed=False) for name in p.envs]
        lines.append(f"{p.name}: {p.description}")
        lines.append(f"  envs: {', '.join(f'{e.label} -> {e.make} ({_library(e.path)})' for e in chosen)}")
        lines.append(f"  methods: {', '.join(p.methods)}; seeds {p.seeds}; iterations {p.iterations}; "
                     f"PPO {dict(p.ppo)}")
        lines.append(f"  space: {', '.join(_describe_hyperparameter(h) for h in p.space)}")
        for r in p.reductions:
            lines.append(f"  - {r}")
    return "\n".join(lines)


def _library(backend: str) -> str:
    """The backend's name, and the extra to install when it is not installed."""
    missing = agent_backend.problem(agent_table.BY_NAME[backend])
    return backend if missing is None else f"{backend}, not installed: {install_hint(PROVIDED_BY[backend])}"


def _describe_hyperparameter(h: dict) -> str:
    if "options" in h:
        return f"{h['name']}={','.join(str(o) for o in h['options'])}"
    flags = (":log" if h.get("scale") == "log" else "") + (":int" if h.get("integer") else "")
    return f"{h['name']}={h['low']:g}:{h['high']:g}{flags}"


def cmd_presets(args) -> int:
    if args.toml is None:
        with _without_known_prints():
            text = describe_presets()
        print(text)
        return 0
    if args.toml not in presets.PRESETS:
        raise UsageError(f"unknown preset {args.toml!r}; allowed: {', '.join(presets.PRESETS)}")
    print(studyfile.dumps(presets.PRESETS[args.toml]), end="")
    return 0


def _say(msg: str) -> None:
    """A line of `hcjax run`'s progress before its study directory is open (stderr)."""
    print(msg, file=sys.stderr, flush=True)


def _in_config(args, error: ValueError) -> str:
    """The message of a configuration error, naming the study file it came from."""
    text = str(error)
    if args.config and not text.startswith("--config"):
        return f"--config {args.config}: {text}"
    return text


def study_of(args) -> api.Study:
    """The Study of `hcjax run`'s arguments (nothing checked yet)."""
    try:
        preset = studyfile.load(args.config) if args.config else (args.preset or "smoke")
    except ValueError as e:
        raise UsageError(_in_config(args, e)) from None
    space = None if args.space is None else [parse_hyperparameter(a) for a in args.space]
    return api.Study(preset, envs=_names(args.envs), env_factories=args.env_factory, methods=_names(args.methods),
                     seeds=args.seeds, iterations=args.iterations, space=space)


def cmd_run(args) -> int:
    factories_from_here()
    if args.distributed:  # before anything starts JAX's backend (importing gymnax does)
        try:
            processes.start(args.coordinator, args.num_processes, args.process_id)
        except ValueError as e:
            raise UsageError(e) from None
        return run_distributed(args)
    if args.coordinator or args.num_processes is not None or args.process_id is not None:
        raise UsageError("--coordinator, --num-processes and --process-id need --distributed")
    return run_study(args)


def run_distributed(args) -> int:
    """`hcjax run --distributed` once jax.distributed runs: the study under the processes'
    watchdog (`experiments.study.processes`). A mistake found before any work is told to the
    other processes, which stop with it (exit 2 on every one); a run that stops during the
    work (a failure, Ctrl-C, a signal) tells the others and exits at once with its status
    (JAX's shutdown barrier would wait for a process that is gone, then abort)."""
    with processes.watchdog():
        try:
            status = run_study(args)
        except UsageError as e:  # the original ValueError (its context) may have told the others already
            processes.refuse(e.__context__ if getattr(e.__context__, "told_peers", False) else e)
            raise
    if status != 0:
        processes.leave({1: "its run failed (see above)", 130: "interrupted"}.get(
            status, f"terminated by signal {status - 128}"), status)
    return status


def run_study(args) -> int:
    # -- checks: any problem here is the user's (exit 2); nothing is compiled yet --
    try:
        study = study_of(args)
        with _without_known_prints(), warnings.catch_warnings(record=True) as said:  # names import the registries
            warnings.simplefilter("always", FewSeedsWarning)
            study.check(args.memory_limit_gib, log=_say)
    except ValueError as e:
        raise UsageError(_in_config(args, e)) from None
    for w in said:  # a study too small for a claim: said before any work, and the run goes on
        if issubclass(w.category, FewSeedsWarning):
            print(f"hcjax run: warning: {w.message}", file=sys.stderr, flush=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    with contextlib.ExitStack() as stack:
        try:
            run = stack.enter_context(study.open(args.out, progress=not args.no_progress,
                                                 tensorboard=args.tensorboard,
                                                 memory_limit_gib=args.memory_limit_gib))
        except (StudyBusy, ValueError) as e:
            raise UsageError(e) from None
        run.started = args.started  # the estimate counts the whole command
        return _run_locked(args, run)


def _run_locked(args, run: api.StudyRun) -> int:
    # -- the work: from here on a failure is ours (exit 1) --
    try:
        result = run.execute(plot=not args.no_plot)
    except (KeyboardInterrupt, interrupts.Terminated) as e:
        return interrupts.exit_status(e)
    except api.StudyFailed as e:
        processes.leave_if_lost([f.error for f in e.failures], run.store.log if run.writer else None)
        if run.writer:
            _print_result(e.result, run.store)
            for f in e.failures:
                _report_failure(f.error, run.store.log_path)
        return 1
    except Exception as e:  # noqa: BLE001 - reported with its cause, exit 1
        if (stop := interrupts.within(e)) is not None:  # Ctrl-C that surfaced as another exception
            return interrupts.exit_status(stop)
        processes.leave_if_lost([e], run.store.log if run.writer else None)
        _report_failure(e, run.store.log_path if run.writer else None)
        return 1
    if run.writer:  # only process 0 writes and reports
        _print_result(result, run.store)
    return 0


def _print_result(result: api.StudyResult, store: StudyDir) -> None:
    """The summary table and where the figures went (stdout)."""
    if not result.units:
        print(f"no finished units in {store.units_dir}", flush=True)
        return
    print(result.summary, flush=True)
    if result.figures:
        paths = result.figures
        print(f"figures: {', '.join(str(p) for k, p in paths.items() if str(p).endswith('.png'))}")
        print(f"tables: {paths['results']}, {paths['success']}; report: {paths['report']}", flush=True)


def _report_failure(e: BaseException, log_path) -> None:
    """One short report of our failure: type, message, where it was raised, the last frames."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    print(f"hcjax: failed: {type(e).__name__}: {e}{where}", file=sys.stderr)
    short = "".join(traceback.format_list(frames[-3:]))
    print("most recent calls:\n" + short.rstrip(), file=sys.stderr)
    if log_path is not None:
        print(f"full traceback: {log_path}", file=sys.stderr, flush=True)


def finished_units(args) -> tuple[StudyDir, list]:
    """The study directory `args.dir` and its finished units (UsageError when it has none)."""
    store = StudyDir(args.dir)
    try:
        if not store.path.is_dir():
            raise ValueError(f"{store.path} is not a study directory")
        units = store.units()
        if not units:
            raise ValueError(f"{args.command}: no finished units in {store.units_dir}; "
                             f"run `hcjax run --out {store.path}` first")
    except ValueError as e:
        raise UsageError(e) from None
    return store, units


def cmd_plot(args) -> int:
    store, units = finished_units(args)
    try:
        store.check_plot_writable()  # a read-only directory, a link or a file in the way: before any figure
    except ValueError as e:
        raise UsageError(e) from None
    paths = plots.plot(store.path, units)
    print(Path(paths["results"]).read_text())
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def cmd_verdict(args) -> int:
    store, units = finished_units(args)
    try:  # units missing, no test seeds, or a --json FILE that cannot be written: before any work
        unfinished.check(store, units)
        result = verdict.verdict(units, json_path=args.json)
    except ValueError as e:
        raise UsageError(e) from None
    print(result.markdown, end="")
    return 0


def cmd_export(args) -> int:
    store, units = finished_units(args)
    out = Path(args.out) if args.out else store.path / "export"
    if "parquet" in args.format and export.pyarrow is None:
        raise UsageError('--format parquet needs pyarrow, which is not installed: pip install "hcjax[export]"')
    try:  # the default, DIR/export, is inside the study: no link planted there is followed
        check_writable_dir(out, "--out", root=None if args.out else store.path)
    except ValueError as e:
        raise UsageError(e) from None
    try:
        paths = export.write(units, out, args.format)
    except ValueError as e:
        raise UsageError(e) from None
    for path in paths:
        print(path)
    return 0


def factories_from_here() -> None:
    """Let factory references import modules of the current folder, as `python -m experiments`
    does (there the folder comes first on sys.path; here it comes last: an installed package
    keeps its name)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())


def cmd_replay(args) -> int:
    factories_from_here()
    try:
        check_writable_dir(args.out, "--out")
        result = schedules.replay(args.dir, args.unit, args.seeds, out=args.out, envs=args.env_factory,
                                  progress=not args.no_progress)
    except (ValueError, StudyBusy) as e:
        raise UsageError(e) from None
    path = StudyDir(args.out).unit_path(result.meta["env"], result.meta["method"])
    print(f"replayed {args.unit} on seeds {list(args.seeds)}: {path}")
    print("The source unit (its own seeds) and the replay (the new seeds):\n")
    print(tables.summary([schedules.source_unit(args.dir, args.unit), result]), flush=True)
    return 0


def cmd_bench(args) -> int:
    try:
        check_writable_dir(args.out, "--out")  # a file or an unwritable place: before any benchmark
    except ValueError as e:
        raise UsageError(e) from None
    report = bench_scripts.run(Path(args.out), quick=args.quick, scripts=args.only or bench_scripts.SCRIPTS)
    print(f"bench report: {report['paths']['json']}, {report['paths']['markdown']}")
    return 0 if all(r["status"] in ("ok", "missing") for r in report["benchmarks"].values()) else 1


def cmd_info(args) -> int:
    return deps.info()


COMMANDS = {"run": cmd_run, "plot": cmd_plot, "verdict": cmd_verdict, "export": cmd_export, "replay": cmd_replay,
            "bench": cmd_bench, "info": cmd_info, "presets": cmd_presets}


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """The command; started: time.monotonic() when the process began (`hcjax run`'s estimate
    counts the seconds since; default now)."""
    # gymnasium.logger (imported with experiments.study.api's gymnasium.error) put its own
    # DeprecationWarning filter first on import: these go before it
    for category, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    ap = parser()
    args = ap.parse_args(argv)  # bad arguments: argparse exits with status 2
    args.started = time.monotonic() if started is None else started
    previous = {}  # the handlers before, put back on return: a caller's process (a test's) keeps its own
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, interrupts.on_signal)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # an ignored SIGINT stays ignored
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupts.on_signal)
    unraisable_hook = sys.unraisablehook
    sys.unraisablehook = interrupts.quiet_hook(unraisable_hook)
    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"hcjax {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, interrupts.Terminated, Exception) as e:  # noqa: BLE001 - our failure, or a stop
        stop = interrupts.within(e)  # a stop itself, or one that surfaced as another exception
        if stop is None:
            _report_failure(e, None)
            return 1
        print(f"hcjax {args.command}: {interrupts.describe(stop)}", file=sys.stderr)
        return interrupts.exit_status(stop)
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: a handler not set from Python, nothing to put back
                signal.signal(signum, handler)
        interrupts.clear()
        sys.unraisablehook = unraisable_hook


if __name__ == "__main__":
    sys.exit(main())
