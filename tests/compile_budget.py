"""The creep guard: each test file may lower at most its budget of XLA programs
(tests/compile_budget.json), so a change that makes the suite compile more fails in the run
that made it, with the file's name and count, whatever the machine's load.

The count is of programs lowered to XLA (jax.monitoring's jaxpr-to-MLIR event) by the test
process while the file's tests and fixtures run, of functions outside jax itself (the project's,
a test's, another library's: jax's own one-operation programs, run eagerly, are left out, see
`_jax_internal`), not of backend compilations: a persistent-
cache hit is lowered but not compiled, so the count does not depend on which worker or
which earlier run filled the cache. At each file's start the process drops its in-memory
programs (jax.clear_caches(), the study programs and probes of experiments.study), so a
file's count is what it lowers when run alone, whatever ran before it in the same worker: the
persistent cache makes the programs that files share cheap again. Not counted: what the `hcjax`
subprocesses of tests/cli_runs.py compile (the profile's child CPU seconds hold them).

The budget has one table per jax minor version (the counts differ between versions). Under a
version without a table the counts are printed, not checked. A file over its budget, or
without one, fails the run; the budget changes only on purpose:

    python -m pytest -q -n 2 --dist loadfile --compile-budget=update      # every file
    python -m pytest -q -p no:xdist tests/test_x.py --compile-budget=update  # one file

records the counts of the files that ran whole (no test deselected) and passed, keeps the
others' budgets, and drops the files that no longer exist. `--compile-budget=off` checks nothing.
"""
from __future__ import annotations

import importlib.util
import json
import operator
import sys
from collections import Counter
from pathlib import Path

import pytest

BUDGET = Path(__file__).with_name("compile_budget.json")
_JAX_DIR = str(Path(importlib.util.find_spec("jax").origin).parent) + "/"  # .../site-packages/jax/
_LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
# what a process keeps beyond jax's own caches that saves a later file a lowering, dropped at each
# file's start: (module, the function that drops it): the study programs, the environment probes
_PROGRAM_CACHES = (("experiments.study.programs", "clear"), ("experiments.study.build", "_probe.cache_clear"))


def add_option(parser) -> None:
    parser.addoption("--compile-budget", choices=("check", "update", "off"), default="check",
                     help="check each test file's count of programs lowered against tests/compile_budget.json "
                          "(check), record this run's counts there (update), or neither (off)")


def table_name() -> str:
    """The budget's table for this jax: 'jax 0.11' (the minor version)."""
    import jax

    return "jax " + ".".join(jax.__version__.split(".")[:2])


def fresh_process_caches() -> None:
    """Drop the programs this process keeps in memory (jax's caches, the study programs and
    environment probes): a file then lowers what it would lower alone."""
    import jax

    jax.clear_caches()
    for name, drop in _PROGRAM_CACHES:
        if name in sys.modules:
            operator.attrgetter(drop)(sys.modules[name])()


def _importing() -> bool:
    """Whether this lowering runs while a module is imported: a module's import-time programs
    belong to it, not to the file whose test happened to import it first (a run of one file
    imports during its tests what the README's command imported while collecting every file:
    test_readme alone lowered one program more)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _jax_internal() -> bool:
    """Whether the program being lowered is one of jax's own functions (an operation run
    eagerly: jit(clip), jit(convert_element_type), jit(_threefry_seed), ...). Such a program is
    lowered by the first caller in a process and often reached through a cached result (an
    environment, a grid) that an earlier file of the worker built, so its count depended on the
    order files ran in (test_reliability_paths lowered 4, 7 and 9); it is not counted. A
    program of the project's functions, a test's lambda or another library's is. Read from
    jax's lowering frame (`_cached_lowering_to_hlo`'s `closed_jaxpr`); where that frame is not
    found (another jax) the program is counted."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "_cached_lowering_to_hlo":
        frame = frame.f_back
    jaxpr = frame.f_locals.get("closed_jaxpr") if frame is not None else None
    info = getattr(jaxpr, "_debug_info", None) or getattr(getattr(jaxpr, "jaxpr", None), "_debug_info", None)
    source = getattr(info, "func_src_info", None) or ""
    return _JAX_DIR in source


class Counting:
    """In each process that runs tests: the programs lowered per test file (and their names)."""

    def __init__(self, config):
        import jax

        self.config = config
        self.file: str | None = None
        self.files: dict[str, dict] = {}  # file -> {"lowered": n, "names": Counter, "whole": bool}
        self.deselected: set[str] = set()
        self.failed: set[str] = set()
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)

    def _on_duration(self, event: str, seconds: float, **kwargs) -> None:
        if event == _LOWERED and self.file is not None and not _importing() and not _jax_internal():
            row = self.files[self.file]
            row["lowered"] += 1
            row["names"][str(kwargs.get("fun_name", "?"))] += 1

    def pytest_deselected(self, items):
        self.deselected.update(item.nodeid.split("::")[0] for item in items)

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid.split("::")[0])

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        file = item.nodeid.split("::")[0]
        if file != self.file:  # the previous file's module fixtures were torn down with its last test
            self.file = None
            fresh_process_caches()
            self.files.setdefault(file, {"lowered": 0, "names": Counter()})
            self.file = file
        yield

    def counts(self) -> dict[str, dict]:
        """file -> {"lowered", "whole": no test deselected and none failed, "names": the 8 names
        lowered most}, JSON-ready."""
        return {f: {"lowered": r["lowered"], "whole": f not in self.deselected and f not in self.failed,
                    "names": r["names"].most_common(8)} for f, r in self.files.items()}

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        if hasattr(self.config, "workerinput"):  # an xdist worker: its counts go to the controller
            self.config.workeroutput["hcjax_lowered"] = json.dumps(self.counts())


class Guard:
    """In the process that reports (the xdist controller, or the lone process): gathers the
    counts, compares them with the budget, fails the run or rewrites the budget."""

    def __init__(self, config, mode: str, counting: Counting | None):
        self.config, self.mode, self.counting = config, mode, counting
        self.counts: dict[str, dict] = {}
        self.lines: list[str] = []

    @pytest.hookimpl(optionalhook=True)  # an xdist hook
    def pytest_testnodedown(self, node, error):
        self.counts.update(json.loads(getattr(node, "workeroutput", {}).get("hcjax_lowered", "{}")))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.counting is not None:
            self.counts.update(self.counting.counts())
        if not self.counts:
            return
        budget = json.loads(BUDGET.read_text()) if BUDGET.exists() else {}
        table = table_name()
        if self.mode == "update":
            self.lines = self._update(budget, table)
            return
        total = f"{sum(r['lowered'] for r in self.counts.values())} programs lowered in {len(self.counts)} files"
        if budget.get(table) is None:
            self.lines = [f"compile budget: no table for {table} in {BUDGET.name} (it has: "
                          f"{', '.join(k for k in budget if k.startswith('jax')) or 'none'}); not checked: {total}; "
                          f"record them with --compile-budget=update"]
            return
        self.lines = check(self.counts, budget[table])
        if self.lines and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        under = [f for f, r in self.counts.items() if r["whole"] and r["lowered"] < budget[table].get(f, 0)]
        self.lines.append(f"compile budget [{table}]: {total}, {len(self.lines)} over"
                          + (f"; under budget (lower it with --compile-budget=update): {', '.join(sorted(under))}"
                             if under else ""))

    def _update(self, budget: dict, table: str) -> list[str]:
        rows = dict(budget.get(table, {}))
        whole = {f: r["lowered"] for f, r in self.counts.items() if r["whole"]}
        rows.update(whole)
        root = Path(self.config.rootpath)
        rows = {f: n for f, n in sorted(rows.items()) if (root / f).exists()}
        budget[table] = rows
        tmp = BUDGET.with_suffix(".tmp")
        tmp.write_text(json.dumps(budget, indent=1, sort_keys=True) + "\n")
        tmp.replace(BUDGET)
        partial = sorted(set(self.counts) - set(whole))
        skipped = f"; not recorded (a test deselected or failed): {', '.join(partial)}" if partial else ""
        return [f"compile budget: recorded {len(whole)} files ({sum(whole.values())} programs) in {BUDGET.name} "
                f"[{table}]{skipped}"]

    def pytest_terminal_summary(self, terminalreporter):
        for line in self.lines:
            terminalreporter.write_line(line, red=line.startswith("compile budget exceeded"))


def check(counts: dict[str, dict], budget: dict) -> list[str]:
    """One line per file over its budget or without one."""
    lines = []
    for file, row in sorted(counts.items()):
        allowed = budget.get(file)
        if allowed is None or row["lowered"] > allowed:
            names = ", ".join(f"{name} x{n}" for name, n in row["names"])
            what = "no budget" if allowed is None else f"budget {allowed}"
            lines.append(f"compile budget exceeded: {file} lowered {row['lowered']} XLA programs ({what}); "
                         f"most lowered: {names}. Share a configuration (docs/development.md#writing-a-test), "
                         f"or record the new count on purpose: python -m pytest -p no:xdist {file} "
                         f"--compile-budget=update")
    return lines


def register(config) -> None:
    """Registers the counting (in every process that runs tests) and the guard (where the
    run reports), per --compile-budget."""
    mode = config.getoption("--compile-budget")
    if mode == "off":
        return
    runs_tests = hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no"
    counting = Counting(config) if runs_tests else None
    if counting is not None:
        config.pluginmanager.register(counting, "hcjax-compile-counting")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Guard(config, mode, counting), "hcjax-compile-guard")
