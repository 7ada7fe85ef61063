"""Shared pytest settings: one persistent JAX compilation cache per session, and a profile of
where the suite's time goes.

Writing a test (almost all of the suite's time is XLA compilation):
- Reuse a shared configuration first: a study, learner or tuner the suite already compiles (the
  tiny studies of tests/cli_runs.py: WALK_PAIR, WALK_TUNED, FUSED_STUDY of test_schedule_replay)
  comes from the session's persistent compilation cache; a test needing its own shape says why.
  Each file may lower at most its budget of XLA programs (tests/compile_budget.py, the creep
  guard: tests/compile_budget.json, raised on purpose with --compile-budget=update).
- Compile once, use many times: build the learner or tuner and its `jax.jit` functions in a
  module-scoped fixture (tests/test_ppo.py's `cartpole`), and let tests that only need a
  run's outputs share one run (tests/test_population_study.py's `study`). A new jitted
  closure is a new compilation, even of the same program. Outside `jit`, every jnp operation
  is a compilation of its own, and so is `jnp.asarray`/`jax.device_put` of a NumPy array of a
  new shape (jax 0.11): jit a reference, an init or a decode, and pass NumPy arrays straight
  into jitted functions (tests/test_population.py: 226 -> 113 compilations).
- Sizes: the smallest that still shows the point: one hidden layer of 8-16 units, 2-4 envs,
  1 epoch of 2 minibatches, a handful of iterations, GP tuners with buffer/candidates of 16.
  Only a claim about learning needs a learning-sized run; say why in its docstring.
- `hcjax` in a subprocess (tests/cli_runs.py) costs an interpreter and its own compilations
  (the persistent cache below saves the repeated ones): share one run through a fixture. Where
  the environment is not the point (signals, kill and resume, processes), run tests/tiny_env.py's
  walker (`tiny_study(..., envs=(), env_factories=(WALK,))`): no gymnax import (about 2.7 CPU s
  of seaborn, pandas and scipy at gymnax's import). Its programs are not smaller: PPO's update
  dominates a tiny study's compilation, and the walker, an environment of your own, adds a probe
  program that CartPole does not (measured 2026-11-29: 12.2 against 11.8 CPU s in process).
- The suite compiles with XLA's backend optimisation off (JAX_DISABLE_MOST_OPTIMIZATIONS=1,
  set here for the workers and subprocesses unless already set; =0 tests the build users run):
  a third less compilation time, the same programs. A test that trains long enough for optimised
  code to repay its compilation is marked `@pytest.mark.optimized` (or wraps its work in
  `optimized()`: better only the long-running program's compilation, since a program run once,
  an init or an evaluation, compiles about 3x cheaper at the lowest level); a test must not
  depend on how XLA rounds (compare across programs with a float32 tolerance, not bit for bit).
- Mark a test `@pytest.mark.slow` when it costs over about 2 s of CPU (the profile below says),
  and every test sharing its costly fixture; `-m "not slow"` is the quick tier for development.
  Every test still runs in the full suite.
- The session's compilation cache is a temporary directory, removed at the end; set
  HCJAX_TEST_JAX_CACHE=DIR to keep one between runs (entries are keyed by the program, so a
  stale entry is never used for a changed program).
- HCJAX_TEST_PROFILE=DIR writes DIR/<worker>.jsonl: one line per test (with its fixtures'
  setup) with its wall seconds, the CPU seconds of this process and of the subprocesses it
  waited for, the XLA compilations it ran (count, seconds, persistent-cache hits, each one's
  name and seconds) and its seconds of tracing and lowering; `python -m tests.profile_summary DIR`
  tabulates them, with the programs compiled most often. CPU seconds and compilations do not
  depend on the machine's load; wall seconds do.
"""
from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests import compile_budget

_PROFILE_DIR = os.environ.get("HCJAX_TEST_PROFILE")
# JAX's persistent compilation cache for the whole session: the controller makes it, the xdist
# workers and the `hcjax` subprocesses of tests/cli_runs.py inherit it through the environment
_CACHE_VAR = "HCJAX_TEST_JAX_CACHE"
# XLA without most of its optimisation passes (jax_disable_most_optimizations): a third less
# compilation time for the same programs; "0" (or HCJAX_TEST... set by the user) compiles as users do
_FAST_VAR = "JAX_DISABLE_MOST_OPTIMIZATIONS"


# The costliest files first (CPU seconds from HCJAX_TEST_PROFILE on a 2-core CPU, about 30-135 s
# each; the multi-process ones use both cores), so that under `--dist loadfile` the two workers
# finish together: xdist's default order (files with the most tests first) left the
# multi-process files, which have few tests, for one worker at the end (a 90 s tail).
# Files not named here follow in pytest's order. Rank again from the profile when a file's cost moves.
COSTLIEST_FIRST = (
    "test_env_craftax.py", "test_env_libraries.py", "test_ppo.py", "test_distributed.py", "test_baselines.py",
    "test_population.py", "test_experiments.py", "test_own_loop_example.py", "test_study_cli.py", "test_study_api.py",
    "test_population_processes.py", "test_reliability_round5_processes.py", "test_packaging.py", "test_envs.py",
    "test_protocol.py", "test_gp.py",
    "test_population_study.py", "test_choice.py", "test_studyfile.py", "test_plots.py", "test_schedule_replay.py",
    "test_readme.py", "test_own_loop_api.py", "test_host_tuner.py", "test_reliability_study.py", "test_controller.py",
    "test_lgds.py", "test_make_train_eval.py", "test_action_masks.py", "test_agents_population.py",
)


def pytest_addoption(parser):
    compile_budget.add_option(parser)


def pytest_collection_modifyitems(config, items):
    """Orders the files by COSTLIEST_FIRST (the tests of a file keep their order)."""
    rank = {name: i for i, name in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_configure(config):
    # xdist schedules files in the collected order (COSTLIEST_FIRST), not by their number of tests
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # a worker that crashed (the guard against hangs in pyproject.toml ends one) is not replaced:
    # xdist would start a new one that runs the same test again, up to 8 times under -n 2
    if getattr(config.option, "maxworkerrestart", "") is None:  # not given on the command line
        config.option.maxworkerrestart = "0"
    if not hasattr(config, "workerinput") and _CACHE_VAR not in os.environ:  # the controller (or a lone process)
        os.environ[_CACHE_VAR] = tempfile.mkdtemp(prefix="hcjax-test-jax-cache-")
        config._hcjax_cache_made = True
    # inherited by the xdist workers and the `hcjax` subprocesses (tests/cli_runs.py)
    os.environ.setdefault(_FAST_VAR, "1")
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_VAR])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)
    jax.config.update("jax_disable_most_optimizations", os.environ[_FAST_VAR] == "1")
    compile_budget.register(config)  # the creep guard: programs lowered per file against tests/compile_budget.json


@contextlib.contextmanager
def optimized():
    """XLA's full optimisation for what runs inside (and the subprocesses started there),
    for runs long enough that optimised code repays its longer compilation."""
    import jax

    before = os.environ[_FAST_VAR]
    os.environ[_FAST_VAR] = "0"
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        os.environ[_FAST_VAR] = before
        jax.config.update("jax_disable_most_optimizations", before == "1")


@pytest.fixture(autouse=True)
def _optimized_when_marked(request):
    """A test marked `optimized` runs under `optimized()` (its module fixtures do not: wrap
    their work in `optimized()` where they train long)."""
    if request.node.get_closest_marker("optimized") is None:
        yield
    else:
        with optimized():
            yield


def pytest_unconfigure(config):
    if getattr(config, "_hcjax_cache_made", False):
        shutil.rmtree(os.environ.pop(_CACHE_VAR), ignore_errors=True)


class _CompileCounter:
    """Counts the backend compilations JAX reports through jax.monitoring (with the name and
    seconds of each), those of them that the persistent cache answered, and the seconds spent
    tracing to a jaxpr and lowering to MLIR."""

    def __init__(self):
        import jax

        self.count, self.seconds, self.cache_hits, self.trace_s, self.lower_s = 0, 0.0, 0, 0.0, 0.0
        self.lowered = 0
        self.names: list[tuple[str, float]] = []
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        jax.monitoring.register_event_listener(self._on_event)

    def _on_event(self, event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1

    def _on_duration(self, event: str, seconds: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.count += 1
            self.seconds += seconds
            self.names.append((str(kwargs.get("fun_name", "?")), round(seconds, 3)))
        elif event == "/jax/core/compile/jaxpr_trace_duration":
            self.trace_s += seconds
        elif event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            self.lowered += 1
            self.lower_s += seconds


if _PROFILE_DIR:
    _counter = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """Times the test with its fixtures' setup and teardown; appends its line at once (a run
        cut short keeps what it measured)."""
        global _counter
        if _counter is None:
            _counter = _CompileCounter()
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        count, seconds, hits, wall = _counter.count, _counter.seconds, _counter.cache_hits, time.perf_counter()
        traced, lowered, lowerings = _counter.trace_s, _counter.lower_s, _counter.lowered
        yield
        own2, children2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        line = {
            "test": item.nodeid,
            "wall_s": round(time.perf_counter() - wall, 3),
            "cpu_s": round(own2.ru_utime + own2.ru_stime - own.ru_utime - own.ru_stime, 3),
            "child_cpu_s": round(children2.ru_utime + children2.ru_stime - children.ru_utime - children.ru_stime, 3),
            "lowered": _counter.lowered - lowerings,
            "compiles": _counter.count - count,
            "compile_s": round(_counter.seconds - seconds, 3),
            "cache_hits": _counter.cache_hits - hits,
            "trace_s": round(_counter.trace_s - traced, 3),
            "lower_s": round(_counter.lower_s - lowered, 3),
            "compiled": _counter.names[count:],
        }
        out = Path(_PROFILE_DIR)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
