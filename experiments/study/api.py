"""A study as a Python object; `hcjax run` is a thin layer over it.

    study = experiments.Study(envs=["CartPole-v1", my_env], methods=["hypercontroller", "fixed"],
                              seeds=3, iterations=50)
    result = study.run("runs/mine")          # resumes when runs/mine holds this study
    result.directory, result.units, result.summary, result.figures

Environments: registry names and `agents.envs.EnvSpec`s (names never import code), your own
environment objects or zero-argument factories (`own_envs`; a mapping {label: env} names
them), and importable factory references in `env_factories`. Every mistake found before the
work raises ValueError with the message `hcjax run` prints (exit status 2 there); a unit that
fails during the work is logged and the others run, then `StudyFailed` is raised (exit 1).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium.error
import jax

from agents import envs as agent_envs
from agents.envs.backend import problem as backend_problem
from agents.envs.table import BY_NAME as BACKENDS
from experiments.reporting import frames as dataframes
from experiments.reporting import plots, tables
from experiments.reporting.views import ran_as
from experiments.study import build, engine, estimate, own_envs, presets, processes, studyfile
from experiments.study import tensorboard as live_scalars
from experiments.study.build import DEFAULT_MEMORY_LIMIT_GIB
from experiments.study.checks import check, study_warnings
from experiments.study.plan import Plan, Preset, unit_keys
from experiments.study.progress import ticking
from experiments.study.store import StudyBusy, StudyDir
from hcjax import calls

PRESET_FIELDS = tuple(f.name for f in dataclasses.fields(Preset))
# a Study's own attributes (the others, Preset fields set on a Study, live in its `changes`)
STUDY_ATTRIBUTES = ("preset", "envs", "methods", "seeds", "iterations", "space", "env_factories", "changes")


class StudyFailed(RuntimeError):
    """Some units failed during the work (the others finished): `failures` (engine.UnitFailure
    each, with its exception) and `result` (what was written). Running again retries them."""

    def __init__(self, failures: list[engine.UnitFailure], result: StudyResult):
        super().__init__(f"{len(failures)} unit group(s) failed: " + "; ".join(str(f) for f in failures))
        self.failures, self.result = failures, result


@dataclasses.dataclass
class StudyResult:
    """What a run left in its study directory: `directory`, `manifest` (the manifest's JSON),
    `units` ((env label, method) of every finished unit), `summary` (the results table as
    text, '' without units), `figures` (name -> path of the figures and tables; {} without
    plotting), `estimate` (the frames and duration announced before the work)."""

    directory: Path
    manifest: dict
    units: list[tuple[str, str]]
    summary: str
    figures: dict[str, Path]
    estimate: estimate.Estimate

    def frames(self) -> dataframes.Results:
        """The study's results as pandas DataFrames (`experiments.load(self.directory)`):
        `.iterations`, `.evaluations`, `.lineage`."""
        return dataframes.load(self.directory)


class Study:
    """A study: environments x methods x seeds, `iterations` PPO iterations per run.

    preset: None (the study is the keyword arguments), a preset name (`hcjax presets`) or
    a Preset (e.g. `Study.from_file`'s); the keywords override it. envs: a list of registry
    names, EnvSpecs and your own environments (objects or zero-argument factories), or a
    mapping label -> any of these; env_factories: "[LABEL=]package.module:function"
    references (imported and called); space: hyperparameter entries (dicts of
    hcjax.Hyperparameter fields; default the paper's four); ppo: PPOConfig overrides
    (None: the preset's, or without a preset `presets.SMALL_PPO`; {} PPOConfig's defaults,
    the paper's sizes); `fields`: the other Preset fields (eval_every, tune_every, tuner,
    env_ppo, paths, fast_compile, fuse_methods, description, reductions).
    Nothing is checked or built until `plan`, `check` or `run`; an attribute changed after
    them (`study.seeds = 5`, `study.methods.append(...)`) takes effect at the next one."""

    def __init__(self, preset: str | Preset | None = None, *, envs=None,
                 env_factories: Sequence[str] | None = None, methods: Sequence[str] | None = None,
                 seeds: int | None = None, iterations: int | None = None,
                 space: Sequence[Mapping[str, Any]] | None = None, ppo: Mapping[str, Any] | None = None,
                 name: str | None = None, **fields):
        unknown = sorted(set(fields) - set(PRESET_FIELDS) - {"envs", "methods", "seeds", "iterations", "space"})
        if unknown:
            raise ValueError(f"Study: unknown field(s) {unknown}; allowed: {', '.join(PRESET_FIELDS)}")
        if preset is None:
            preset = Preset(name="study", envs=(), methods=(), seeds=None, iterations=None,
                                    ppo=dict(presets.SMALL_PPO))
        self.preset, self.envs, self.methods, self.seeds, self.iterations = preset, envs, methods, seeds, iterations
        self.space, self.env_factories = space, env_factories
        self.changes = dict(fields, **({} if ppo is None else {"ppo": dict(ppo)}),
                            **({} if name is None else {"name": name}))
        self._plan: Plan | None = None
        self._planned_from: tuple | None = None  # `_inputs()` when _plan was made
        self._builds: dict = {}  # own environments' builds when _plan was made (`own_envs.builds`)
        self._checked: float | None = None
        self._dropped: tuple[str, ...] = ()

    def __setattr__(self, name: str, value) -> None:
        """The study's own attributes as they are; another Preset field (eval_every, ppo, name,
        ...) goes into `changes` (so it takes effect at the next plan); anything else is refused."""
        if name.startswith("_") or name in STUDY_ATTRIBUTES:
            object.__setattr__(self, name, value)
        elif name in PRESET_FIELDS:
            self.changes[name] = dict(value) if name == "ppo" and value is not None else value
        else:
            raise AttributeError(f"Study has no field {name!r}; set one of {', '.join(STUDY_ATTRIBUTES)} or a "
                                 f"study field: {', '.join(f for f in PRESET_FIELDS if f not in STUDY_ATTRIBUTES)}")

    def __getattr__(self, name: str):
        """A Preset field set through `changes` (only asked when no attribute has the name)."""
        changes = self.__dict__.get("changes", {})
        if name in PRESET_FIELDS and name in changes:
            return changes[name]
        raise AttributeError(f"Study has no attribute {name!r}")

    @classmethod
    def from_file(cls, path: str | Path, **overrides) -> Study:
        """The study of a study file (TOML, `experiments.study.studyfile`), with overrides."""
        return cls(studyfile.load(path), **overrides)

    def _inputs(self) -> tuple:
        """What the plan is made from, copied: an attribute changed (or a list or dict of one
        changed in place) after `plan()` makes the next `plan()` anew. Environments are kept
        as (label, the object itself) pairs: an object is the same only as itself (its own ==
        may compare arrays)."""
        envs = self.envs
        pairs = list(envs.items()) if isinstance(envs, Mapping) else [(None, e) for e in envs] \
            if isinstance(envs, (list, tuple)) else [(None, envs)]
        return (tuple((label, _Same(e)) for label, e in pairs), self.preset, copy.deepcopy(self.methods), self.seeds,
                self.iterations, copy.deepcopy(self.space), copy.deepcopy(self.env_factories),
                copy.deepcopy(self.changes))

    def plan(self) -> Plan:
        """The validated plan (ValueError naming the field); builds your own environments.
        Kept until an attribute (preset, envs, methods, seeds, iterations, space,
        env_factories, changes) changes: then made anew, so the change takes effect. The own
        environments built with it are this study's wherever it is used (`own_envs.register`)."""
        inputs = self._inputs()
        if self._plan is not None and inputs == self._planned_from:
            own_envs.register(self._builds)  # this study's own objects, whatever another study gave since
            return self._plan
        self._plan, self._checked = None, None
        base = presets.PRESETS.get(self.preset, self.preset) if isinstance(self.preset, str) else self.preset
        if isinstance(base, Preset) and self.changes:
            base = dataclasses.replace(base, **self.changes)
        names, own = self._environments()
        self._plan = presets.resolve(base, envs=names, methods=self.methods, seeds=self.seeds,
                                     iterations=self.iterations, space=self.space,
                                     env_factories=self.env_factories, own=own)
        self._planned_from, self._builds = inputs, own_envs.builds(e.make for e in self._plan.envs)
        warn_few_seeds(self._plan)
        replaced = names is None and self.env_factories is not None and isinstance(base, Preset)
        self._dropped = tuple(base.envs) if replaced else ()  # the preset's, replaced by the factories
        return self._plan

    def _environments(self) -> tuple[list[str] | None, list[own_envs.Own]]:
        """(registry names or None, own environments) of `envs`."""
        if self.envs is None:
            return None, []
        items = list(self.envs.items()) if isinstance(self.envs, Mapping) else \
            [(None, e) for e in ([self.envs] if isinstance(self.envs, str) else self.envs)]
        names, own = [], []
        for label, env in items:
            if isinstance(env, agent_envs.EnvSpec):
                env = env.name
            if isinstance(env, str):
                if label is not None and label != env:
                    raise ValueError(f"envs: {label!r}: a registry name is its own label; give {env!r} in a list")
                names.append(env)
            else:
                own.append(own_envs.from_object(env, label))
        return names, own

    def check(self, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB,
              log: Callable[[str], None] | None = None) -> Plan:
        """Everything checked before any work (ValueError): the plan, every environment
        built (a missing optional dependency named; a traced reset and step with PPO's action
        form), PPO settings, tuners, memory, and every environment the estimate does not know
        run for a few steps (`probe_environments`: its cost, and whether it resets after done).
        log: receives a line as each step starts (None: silent)."""
        say = log or (lambda msg: None)
        if self._plan is None or self._checked != memory_limit_gib:
            say("checking the study: its environments, methods and space")
        plan = self.plan()
        if self._checked == memory_limit_gib:
            return plan
        if not (isinstance(memory_limit_gib, (int, float)) and memory_limit_gib > 0
                and math.isfinite(memory_limit_gib)):
            raise ValueError(f"--memory-limit-gib must be a finite number > 0, got {memory_limit_gib}")
        check_environments(plan, say)
        say(f"checking the PPO settings, tuners and memory of {len(plan.units)} unit(s)")
        check(plan, memory_limit_gib)
        probe_environments(plan, say)
        self._checked = memory_limit_gib
        return plan

    @contextlib.contextmanager
    def open(self, out: str | Path | None = None, *, resume: bool = True, progress: bool = True,
             tensorboard: bool = False, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB,
             log: Callable[[str], None] | None = None) -> Iterator[StudyRun]:
        """Check everything and take the study directory (default runs/<name>): its lock,
        manifest and finished units. Entering raises ValueError (or store.StudyBusy) on a
        mistake, before any work; the StudyRun it yields does the work (`execute`). Under
        jax.distributed every process's checks end with `processes.agree`: a process that
        failed them, or one given another study, stops all of them (processes.Disagreement)."""
        writer, started = jax.process_index() == 0, time.monotonic()
        with contextlib.ExitStack() as stack:
            try:
                run = self._take(stack, out, resume, progress, tensorboard, memory_limit_gib, log, writer)
                run.started = started
            except (ValueError, StudyBusy) as e:
                processes.refuse(e)  # the other processes stop with this message
                raise
            processes.agree(run.plan)
            yield run

    def _take(self, stack: contextlib.ExitStack, out, resume: bool, progress: bool, tensorboard: bool,
              memory_limit_gib: float, log, writer: bool) -> StudyRun:
        """`open`'s checks and the directory taken (its lock entered on `stack`) -> the StudyRun."""
        plan = self.check(memory_limit_gib, log or _to_stderr)
        if tensorboard and not live_scalars.available():
            raise ValueError('--tensorboard needs tensorboardX, which is not installed: '
                             'pip install "hcjax[tensorboard]"')
        store = StudyDir(out if out is not None else Path("runs") / plan.preset.name)
        if writer:
            stack.enter_context(store.lock())  # checks first that the directory can be written
        run = StudyRun(plan, store, writer, progress, tensorboard, memory_limit_gib, log, dropped=self._dropped)
        if writer and not resume and (store.read_manifest() is not None or store.units()):
            raise ValueError(f"{store.path} already holds a study; resume=True continues it, or choose "
                             f"another directory")
        if writer:
            own_envs.check_unchanged(plan.envs, _old_env_choices(store))
            run.keys, run.finished = engine.prepare(plan, store, run.log)
        else:
            run.keys, run.finished = unit_keys(plan), None
        return run

    def run(self, out: str | Path | None = None, *, resume: bool = True, progress: bool = True,
            plot: bool = True, tensorboard: bool = False, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB,
            log: Callable[[str], None] | None = None) -> StudyResult:
        """Run every unit not yet finished in `out` (see `open`), then write the figures and
        tables (plot); returns the StudyResult. StudyFailed when some units failed."""
        with self.open(out, resume=resume, progress=progress, tensorboard=tensorboard,
                       memory_limit_gib=memory_limit_gib, log=log) as run:
            return run.execute(plot=plot)


def warn_few_seeds(plan: Plan) -> str:
    """Warn (hcjax.calls.FewSeedsWarning), once per new plan and before any work, when the seeds its
    claims are made on (the test seeds; without them, the seeds) are fewer than hcjax.calls.MIN_SEEDS
    per method and environment; returns the message ('' when none)."""
    test = len(plan.test_ids)
    what = (f"each method's test seeds (test_seeds: {test}), where the verdict makes its claims" if test else
            f"each method's seeds (seeds = {plan.preset.seeds}), where its comparisons are made")
    return calls.warn_few_seeds(test or plan.preset.seeds, what, len(plan.envs), stacklevel=4, task="environment")


class _Same:
    """An environment as `Study._inputs` compares it: a name (str, EnvSpec) by value, anything
    else (your own object) by identity."""

    def __init__(self, env):
        self.env = env

    def __eq__(self, other) -> bool:
        a, b = self.env, other.env
        return a is b or isinstance(a, (str, agent_envs.EnvSpec)) and type(a) is type(b) and a == b

    __hash__ = None


def _old_env_choices(store: StudyDir) -> list[dict]:
    """The env_choices of the manifest in the directory ([] without one)."""
    choices = ((store.read_manifest() or {}).get("config") or {}).get("env_choices")
    return choices if isinstance(choices, list) else []


@dataclasses.dataclass
class StudyRun:
    """A checked study holding its directory (from `Study.open`): `execute` does the work."""

    plan: Plan
    store: StudyDir
    writer: bool
    progress: bool
    tensorboard: bool
    memory_limit_gib: float
    sink: Callable[[str], None] | None = None
    dropped: tuple[str, ...] = ()  # the preset's environments that env_factories replaced
    started: float | None = None  # time.monotonic() when the command began (the estimate counts it)
    keys: dict = dataclasses.field(default_factory=dict)
    finished: set | None = None

    def log(self, msg: str) -> None:
        """A line to stderr (or the caller's `log`) and to the study's run.log."""
        if self.sink is None:
            print(msg, file=sys.stderr, flush=True)
        else:
            self.sink(msg)
        if self.writer:
            self.store.log(msg)

    def execute(self, plot: bool = True) -> StudyResult:
        """The work: every unit not yet finished, then (plot) the figures and tables. An
        interruption (KeyboardInterrupt, a signal) is logged with how to resume and
        re-raised; our failure outside a unit is appended to run.log and re-raised."""
        plan, store = self.plan, self.store
        p = plan.preset
        started = f" ({len(p.start_from_poor)} method(s) also started from each)" if p.start_from_poor else ""
        protocol = "".join([f" + {len(p.poor_defaults)} poor default(s){started}" if p.poor_defaults else "",
                            f", every one again on {len(plan.test_ids)} test seed(s)" if plan.test_ids else ""])
        self.log(f"hcjax run: study {p.name}, {len(plan.envs)} env(s) x {len(p.methods)} method(s){protocol} x "
                 f"{p.seeds} seed(s), {p.iterations} iterations -> {store.path}")
        for e in plan.envs:
            runs_as = ran_as({"env": e.label, "make": e.make, "path": e.path})
            own = plan.timing(e)
            schedule = f"; its own schedule: {own.iterations} iterations, a decision every {own.tune_every}, an " \
                f"evaluation every {own.eval_every}" if e.schedule else ""
            self.log(f"  environment {runs_as}" + ("" if e.why == "given directly" else f" (why: {e.why})") + schedule)
        if self.dropped:
            self.log(f"  not run: the preset's {', '.join(self.dropped)} (env_factories / --env-factory without envs / "
                     f"--envs replace the preset's environments; name them in envs to run both)")
        finished = self.finished or set()
        done = estimate.checkpointed(plan, self.store, finished) if self.writer else {}
        began = self.started if self.started is not None else time.monotonic()
        guess = estimate.estimate(plan, finished=finished, done=done, plot=plot, spent=time.monotonic() - began)
        if done:
            groups = ", ".join(f"{env} / {group} from iteration {it}" for (env, group), it in done.items())
            self.log(f"  resuming: {groups}")
        self.log(guess.describe())
        for warning in study_warnings(plan):
            self.log(f"warning: {warning}")
        failures: list[engine.UnitFailure] = []
        try:
            engine.run(plan, store, self.keys, self.finished, progress=self.progress, log=self.log,
                       memory_limit_gib=self.memory_limit_gib, tensorboard=self.tensorboard, failures=failures)
        except Exception as e:
            if self.writer:
                store.log("".join(traceback.format_exception(e)))
            raise
        except BaseException as e:  # Ctrl-C or a signal turned into an exception: say how to resume
            done = sum(store.unit_path(env.label, m).exists() for env, m in plan.units)
            signum = getattr(e, "signum", None)
            what = "interrupted" if signum is None else f"terminated by signal {signum}"
            self.log(f"hcjax run: {what}; {done} of {len(plan.units)} units finished in {store.path}. "
                     f"Run the same command again to resume.")
            raise
        result = StudyResult(directory=store.path, manifest={}, units=[], summary="", figures={}, estimate=guess)
        if self.writer:
            units = store.units()
            result.manifest = store.read_manifest() or {}
            result.units = [(u.meta["env"], u.meta["method"]) for u in units]
            if units:
                result.summary = tables.summary(units)
                if plot:
                    result.figures = plots.plot(store.path, units)
        if failures:
            if self.writer:
                failed = sum(len(f.methods) for f in failures)
                self.log(f"hcjax run: {failed} of {len(plan.units)} units failed (the others finished or were "
                         f"already there):")
                for f in failures:
                    self.log(f"  {f}")
                self.log("Run the same command again to retry only the failed units (the finished ones are kept).")
            raise StudyFailed(failures, result)
        return result


def _to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def probe_environments(plan: Plan, log: Callable[[str], None] = lambda msg: None) -> None:
    """Run every environment of the plan that `build.measured` names for a few steps
    (`build.probe`: its cost, for the estimate), and refuse one that does not reset after
    `done`, returns NaN or infinity, or has states where its action mask allows no action
    (`agents.envs.check_probe`: ValueError naming the environment and the fix); `log` says each one."""
    for env in plan.envs:
        if build.measured(env):
            log(f"  probing {env.label}: compiling its step for {build.probe_batch(plan, env)} copies and running it")
            with ticking(log, f"  probing {env.label}: compiling its step"):
                found = build.probe(plan, env)
            log(f"  probed {env.label}: compiled in {found.compile_seconds:.1f} s, "
                f"{found.step_seconds * 1e3:.2g} ms a step of {found.batch} copies")
            agent_envs.check_probe(found)


def check_environments(plan: Plan, log: Callable[[str], None] = lambda msg: None) -> None:
    """Build every environment of the plan (cached for the run): one whose optional
    dependency is missing (gymnasium's DependencyNotInstalled, an ImportError, or its
    backend's package missing or too old) is the user's to install: ValueError naming it.
    `log` says each one as it is built."""
    for env in plan.envs:
        log(f"  building {env.label} ({env.path})")
        try:
            with ticking(log, f"  building {env.label}"):
                build.environment(env.make)
        except (ImportError, gymnasium.error.DependencyNotInstalled, RuntimeError) as e:
            backend = BACKENDS.get(env.path)
            missing = backend_problem(backend) if backend is not None else None
            if isinstance(e, RuntimeError) and missing is None:
                raise
            raise ValueError(f"environment {env.label} ({env.make}) cannot be made: a dependency is missing: "
                             f"{missing or e}") from None
