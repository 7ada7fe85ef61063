"""The `hcjax` command's edges: exit statuses, signals, one writer per study directory,
configuration checks, corrupt files, file modes, progress output, warnings, `hcjax info`.

Most tests call `cli.main` in this process (no compilation where the check happens
before any work); the real runs are studies of tests/tiny_env.py's walker (1 seed, 2 iterations,
`fixed` and `random`, or the checkpoint test's `hypercontroller`: no gymnax import in a subprocess),
in this process where a signal or a kill does not need another.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from experiments import cli, deps
from experiments.study import engine, interrupts, programs, progress
from experiments.study import store as R
from experiments.study.progress import Progress
from tests.cli_runs import ROOT, WALK, finish, hcjax, python, tiny_study, wait_for_checkpoint, wait_for_file
from tests.test_plots import unit as synthetic_unit

MINI = ["run", "--preset", "smoke", "--seeds", "1", "--iterations", "2", "--no-plot", "--no-progress"]
# the real runs: two units on tests/tiny_env.py's walker (the point is the exit status, the directory or the
# process group, not CartPole: no gymnax import in a subprocess, a small program), one seed, one segment of
# 2 iterations. The in-process runs below compile `fixed` (the Ctrl-C test, then kept for mini_study: the
# factory's environment is built once) and `random` (adding a method) once; the subprocess of the second
# Ctrl-C test loads `fixed` from the persistent compilation cache.
INTERRUPTED = tiny_study(["fixed", "random"], seeds=1, iterations=2, eval_every=2, eval_steps=16, envs=(),
                         env_factories=(WALK,))


def main(args, capsys):
    """cli.main(args) -> (exit status, stdout, stderr)."""
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def walked(tmp_path_factory) -> list[str]:
    """`hcjax run` arguments of the INTERRUPTED study file (add --methods, --out)."""
    path = tmp_path_factory.mktemp("walk") / "study.toml"
    path.write_text(INTERRUPTED)
    return ["run", "--config", str(path), "--no-plot", "--no-progress"]


@pytest.fixture(scope="module")
def mini_study(tmp_path_factory, walked):
    """A finished one-unit study (the walker, fixed, 1 seed, 2 iterations)."""
    out = tmp_path_factory.mktemp("mini")
    assert cli.main(walked + ["--methods", "fixed", "--out", str(out)]) == 0
    return out


def copy_of(study: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(study, target)
    (target / R.StudyDir.LOCK).unlink(missing_ok=True)
    return target


# ---- exit statuses -------------------------------------------------------------------------


def test_a_failure_inside_training_exits_1_with_its_cause(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise ValueError("not enough values to unpack (expected 6, got 5)")

    monkeypatch.setattr(engine, "run_units", broken)
    code, _, err = main(MINI + ["--methods", "fixed", "--out", str(tmp_path)], capsys)
    assert code == 1, err
    assert "hcjax: failed: ValueError: not enough values to unpack (expected 6, got 5) at " in err
    assert "test_study_cli.py" in err and "in broken" in err  # where it was raised
    assert "usage:" not in err and "error: argument" not in err  # not reported as a usage error
    log = (tmp_path / R.StudyDir.LOG).read_text()
    assert f"full traceback: {tmp_path / R.StudyDir.LOG}" in err
    assert "Traceback (most recent call last)" in log and "raise ValueError" in log


def test_ctrl_c_exits_130_saying_how_to_resume(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "run_units", interrupted)
    code, _, err = main(MINI + ["--methods", "fixed", "random", "--out", str(tmp_path)], capsys)
    assert code == 130
    assert "interrupted; 0 of 2 units finished in" in err and "Run the same command again to resume" in err
    assert "Traceback" not in err


def test_sigterm_exits_143_saying_how_to_resume(tmp_path, monkeypatch, capsys):
    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(engine, "run_units", killed)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code, _, err = main(MINI + ["--methods", "fixed", "--out", str(tmp_path)], capsys)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 143 and "terminated by signal 15; 0 of 1 units finished" in err


def test_main_puts_back_the_callers_signal_handlers(capsys):
    """cli.main handles SIGTERM and SIGHUP while it runs, and only then: a process that
    calls it (a test, a notebook) keeps its own handlers."""
    mine = lambda signum, frame: None  # noqa: E731
    before = {s: signal.signal(s, mine) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        code, out, _ = main(["presets", "--toml", "smoke"], capsys)
        assert code == 0 and "seeds = 2" in out
        assert all(signal.getsignal(s) is mine for s in before)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_ctrl_c_dropped_where_python_ignores_exceptions_still_stops_the_run(walked, tmp_path, capsys, monkeypatch):
    """The KeyboardInterrupt of Ctrl-C raised inside a callback whose exceptions Python drops
    (as JAX's garbage-collection callback did: "Exception ignored in ...", the run then went on
    to its end and exited 0): the run stops before the next unit group, exit 130, without
    Python's report of the dropped exception."""
    real = Progress.update

    class Dropping:  # Ctrl-C's handler runs in a finaliser: Python reports and drops what it raises
        def __del__(self):
            interrupts.on_signal(signal.SIGINT, None)

    def update(self, *args, **kwargs):  # the first segment's progress: Ctrl-C arrives then
        if not getattr(update, "fired", False):
            update.fired = True
            Dropping()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Progress, "update", update)
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's own report (not pytest's)
    code, _, err = main(walked + ["--methods", "fixed", "random", "--out", str(tmp_path)], capsys)
    assert update.fired and code == 130, err
    assert "interrupted; 1 of 2 units finished" in err
    assert "Exception ignored" not in err and "Traceback" not in err
    assert not R.StudyDir(tmp_path).unit_path("walk", "random").exists()
    interrupts.check()  # nothing left recorded for this process's next command


def test_a_ctrl_c_that_python_turned_into_a_system_error_is_a_stop_not_a_failed_unit(walked, tmp_path, capsys,
                                                                                    monkeypatch):
    """Ctrl-C whose KeyboardInterrupt was raised inside a C function's callback (numpy asking a
    JAX dtype for `__numpy_dtype__`, as a CI run caught on Python 3.11): Python raises a
    SystemError caused by it. The run stops with exit 130 and says how to resume; the unit is not
    recorded as failed (it was exit 1, "FAILED walk / random: SystemError")."""
    def run_units(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as stop:
            raise SystemError("<function _ScalarMeta.__numpy_dtype__> returned a result with an exception set") \
                from stop

    monkeypatch.setattr(engine, "run_units", run_units)
    code, _, err = main(walked + ["--methods", "fixed", "--out", str(tmp_path)], capsys)
    assert code == 130, err
    assert "interrupted; 0 of 1 units finished" in err and "FAILED" not in err and "SystemError" not in err
    assert interrupts.within(ValueError()) is None  # nothing left recorded


def test_within_finds_the_stop_behind_an_exception():
    """interrupts.within: the KeyboardInterrupt along causes and contexts (cycles included);
    None for an ordinary failure."""
    stop = KeyboardInterrupt()
    wrapped = SystemError("callback")
    wrapped.__cause__ = stop
    outer = RuntimeError("outer")
    outer.__context__ = wrapped
    assert interrupts.within(wrapped) is stop and interrupts.within(outer) is stop
    plain = ValueError("x")
    plain.__context__ = TypeError("y")
    plain.__context__.__context__ = plain  # a cycle ends the walk
    assert interrupts.within(plain) is None


@pytest.mark.slow
def test_ctrl_c_of_a_real_run_leaves_no_process(tmp_path):
    """SIGINT to the whole process group (what a terminal's Ctrl-C does) during the second
    unit: exit 130 after the first unit was saved, and nothing of the group survives. After
    the Ctrl-C test above: `fixed` comes from the persistent cache; `random` is compiled, so
    the SIGINT always finds the second unit in flight."""
    out, study = tmp_path / "s", tmp_path / "study.toml"
    study.write_text(INTERRUPTED)
    # A terminal's foreground job: SIGINT at its default, even where this test itself was
    # started in the background by a non-interactive shell (which ignores SIGINT, and the
    # run would inherit that and rightly keep ignoring it).
    proc = hcjax(["run", "--config", study, "--out", out, "--no-plot", "--no-progress"], start_new_session=True,
                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for_file(proc, R.StudyDir(out).unit_path("walk", "fixed"))
    os.killpg(proc.pid, signal.SIGINT)
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, log
    assert "interrupted; 1 of 2 units finished" in log and "Traceback" not in log
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no process of the run's group is left


# ---- the study directory ----------------------------------------------------------------------


def test_a_second_run_on_the_same_directory_is_refused_naming_the_holder(tmp_path, capsys):
    with R.StudyDir(tmp_path).lock():
        t0 = time.perf_counter()
        code, _, err = main(MINI + ["--methods", "fixed", "--out", str(tmp_path)], capsys)
    assert code == 2 and time.perf_counter() - t0 < 30
    assert f"in use by another hcjax run (pid {os.getpid()} on" in err
    assert not (tmp_path / "units").exists()


@pytest.mark.parametrize("kind", ["file", "uncreatable", "unwritable"])
def test_an_out_that_cannot_be_written_is_a_usage_error(kind, tmp_path, capsys):
    out = {"file": tmp_path / "f", "uncreatable": Path("/proc/hcjax-study"), "unwritable": Path("/proc/1")}[kind]
    if kind == "file":
        out.write_text("not a directory")
    code, _, err = main(MINI + ["--methods", "fixed", "--out", str(out)], capsys)
    assert code == 2
    said = {"file": "is an existing file", "uncreatable": "cannot be created", "unwritable": "is not writable"}
    assert said[kind] in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_another_configuration_into_a_study_is_refused(mini_study, walked, capsys):
    before = (mini_study / R.StudyDir.MANIFEST).read_bytes()
    code, _, err = main(walked + ["--methods", "fixed", "--seeds", "2", "--out", str(mini_study)], capsys)
    assert code == 2 and "holds a study with a different configuration" in err and "seeds: 1 -> 2" in err
    code, _, err = main(["run", "--preset", "cpu", "--envs", "CartPole-v1", "--methods", "fixed",
                         "--no-plot", "--out", str(mini_study)], capsys)
    assert code == 2 and "different configuration" in err
    assert (mini_study / R.StudyDir.MANIFEST).read_bytes() == before  # nothing rewritten


@pytest.mark.slow
def test_files_get_the_users_umask(mini_study):
    mask = os.umask(0)
    os.umask(mask)
    for path in (mini_study / R.StudyDir.MANIFEST, R.StudyDir(mini_study).unit_path("walk", "fixed")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path


@pytest.mark.slow
def test_a_corrupt_unit_is_skipped_by_plot_and_recomputed_by_run(mini_study, walked, tmp_path, capsys):
    study = copy_of(mini_study, tmp_path)
    path = R.StudyDir(study).unit_path("walk", "fixed")
    path.write_bytes(path.read_bytes()[:100])  # truncated
    code, _, err = main(["plot", str(study)], capsys)
    assert code == 2 and f"{path}: unreadable unit file" in err and "skipped" in err
    assert "no finished units" in err
    code, _, err = main(walked + ["--methods", "fixed", "--out", str(study)], capsys)
    assert code == 0, err
    moved = list((study / "units" / "corrupt").glob("walk__fixed.npz.*"))
    assert len(moved) == 1 and moved[0].stat().st_size == 100
    assert f"moved {path} to {moved[0]}" in err and "done walk / fixed" in err
    assert R.load_unit(path).train_reward.shape == (1, 2)


@pytest.mark.slow
def test_a_corrupt_manifest_is_named_with_the_fix(mini_study, walked, tmp_path, capsys):
    study = copy_of(mini_study, tmp_path)
    manifest = study / R.StudyDir.MANIFEST
    manifest.write_text('{"config": ')
    for args in (walked + ["--methods", "fixed", "--out", str(study)], ["plot", str(study)]):
        code, _, err = main(args, capsys)
        assert code == 2, err
        assert f"{manifest} is corrupt" in err and f"mv {manifest} {manifest}.bad" in err


def test_plot_refuses_to_mix_study_configurations(tmp_path, capsys):
    rng = np.random.default_rng(0)
    store = R.StudyDir(tmp_path)
    for method, seeds in (("fixed", 3), ("random", 5)):
        u = synthetic_unit("A", method, seeds, rng)
        u.meta["config"] = {"env": "A", "method": method, "seeds": seeds, "iterations": 20}
        store.save_unit(u)
    code, _, err = main(["plot", str(tmp_path)], capsys)
    assert code == 2 and "mixes units of different study configurations" in err
    assert "A__fixed" in err and "A__random" in err


@pytest.mark.slow
def test_adding_a_method_to_a_study_keeps_both(mini_study, walked, tmp_path, capsys):
    study = copy_of(mini_study, tmp_path)
    code, _, err = main(walked + ["--methods", "random", "--out", str(study)], capsys)
    assert code == 0, err
    manifest = json.loads((study / R.StudyDir.MANIFEST).read_text())
    assert manifest["config"]["methods"] == ["fixed", "random"] and len(manifest["runs"]) == 2
    assert sorted(u.meta["method"] for u in R.StudyDir(study).units()) == ["fixed", "random"]


# ---- output ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_factory_alone_replaces_the_presets_tasks_and_every_phase_is_said(tmp_path, capsys):
    """`--env-factory` without `--envs` trains the factory's environment only (the header says the
    preset's CartPole-v1 is not run), and a run in a log says each phase as it starts: the checks,
    building, the probe, each compilation (no silent minutes)."""
    code, _, err = main(["run", "--preset", "smoke", "--env-factory", "walk=tests.tiny_env:make_walk", "--methods",
                         "fixed", "--seeds", "1", "--iterations", "2", "--out", str(tmp_path), "--no-plot"], capsys)
    assert code == 0, err
    assert [(u.meta["env"], u.meta["method"]) for u in R.StudyDir(tmp_path).units()] == [("walk", "fixed")]
    said = ["checking the study", "building walk (custom)", "probing walk", "probed walk: compiled in",
            "not run: the preset's CartPole-v1", "estimate:", "walk/fixed: 0/2 it", "compiling the initial state",
            "compiling the evaluation", "compiling the training segment (2 iteration(s))", "walk/fixed: 2/2 it",
            "done walk / fixed"]
    at = [err.find(w) for w in said]
    assert -1 not in at and at == sorted(at), err  # each said, in this order


def test_progress_writes_plain_lines_when_not_on_a_terminal():
    stream = io.StringIO()
    with Progress(10, "units", "unit", stream=stream, every_s=0.0) as bar:
        for _ in range(10):
            bar.update(1)
    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert text.splitlines()[-1].startswith("units: 10/10 unit")
    quiet = io.StringIO()
    with Progress(10, "units", stream=quiet, every_s=3600.0) as bar:
        for _ in range(10):
            bar.update(1)
    assert len(quiet.getvalue().splitlines()) == 1  # only the final line


@pytest.mark.slow
def test_the_first_line_comes_before_jax_is_imported():
    """Every command's first line (on stderr: stdout stays the command's own) is printed before
    anything heavy is imported: `python -X importtime` lists each import as it finishes, and
    the line comes before the first of jax's. (Its seconds on a busy CPU: the benchmark's
    "first line" column, docs/benchmarks.md, not a timed assertion.)"""
    from experiments import entry

    assert set(entry.COMMANDS) == set(cli.COMMANDS)
    assert entry.first_line(["run", "--help"]) is None and entry.first_line([]) is None
    out = finish(python(["-X", "importtime", "-m", "experiments", "presets", "--toml", "smoke"]))
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if not line.startswith("import time:"))
    assert lines[first] == "hcjax presets: loading jax and the libraries ...", out[:3000]
    jax_at = next(i for i, line in enumerate(lines)
                  if line.startswith("import time:") and line.split("|")[-1].strip().startswith(("jax", "hcjax")))
    assert first < jax_at and 'name = "smoke"' in out


def test_progress_repeats_a_phase_while_nothing_advances():
    stream = io.StringIO()
    with Progress(4, "walk/fixed", stream=stream, every_s=0.05) as bar:
        bar.phase("compiling the training segment")
        deadline = time.monotonic() + 30  # a heartbeat thread: on a busy CPU it may come late, never not at all
        while stream.getvalue().count("compiling") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        bar.update(4)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "walk/fixed: 0/4 it (0 s) compiling the training segment"
    assert sum("compiling" in line for line in lines) >= 2 and lines[-1].startswith("walk/fixed: 4/4 it")
    ticks = []
    with progress.ticking(ticks.append, "  probing walk: compiling its step", every_s=0.05):
        deadline = time.monotonic() + 30
        while not ticks and time.monotonic() < deadline:
            time.sleep(0.05)
    count = len(ticks)
    time.sleep(0.2)
    assert count >= 1 and len(ticks) == count and ticks[0].startswith("  probing walk: compiling its step (")
    said, kept = [], {}

    def keep(name, build):
        if name not in kept:
            kept[name] = build()
        return kept[name]

    program = programs.announced(keep, said.append)
    assert program(("segment", 5), lambda: "compiled") == "compiled" == program(("segment", 5), lambda: "again")
    program("init", lambda: "a jit object")  # not compiled by its making
    assert said == ["compiling the training segment (5 iteration(s))"]  # once: a kept program is not built again


def test_progress_draws_a_bar_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    with Progress(3, "units", stream=stream) as bar:
        bar.update(3)
    assert "\r" in stream.getvalue() and "3/3" in stream.getvalue()


def test_the_cli_filters_known_third_party_warnings_and_the_library_does_not(capsys):
    import agents.envs  # noqa: F401 - importing the library must not touch the filters
    import hcjax  # noqa: F401

    brax = "Brax System, piplines and environments are not actively being maintained. Please see MJX"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.warn(brax, UserWarning)
        assert len(seen) == 1  # nothing filters it before the CLI runs
        assert cli.main(["presets"]) == 0
        warnings.warn(brax, UserWarning)
        warnings.warn("something else", UserWarning)
    capsys.readouterr()
    assert [str(w.message) for w in seen] == [brax, "something else"]


@pytest.mark.slow
def test_the_cli_filter_outlasts_gymnasiums_own_filter():
    """gymnasium.logger puts a DeprecationWarning filter first when it is imported (lazily, after
    the CLI set its filters): an out-of-date gymnasium id still makes no warning under the CLI."""
    # `hcjax info` imports gymnasium after setting the filters, as `presets` does, without gymnax (2.6 CPU s, not 7)
    script = ("from experiments import cli; cli.main(['info']); import gymnasium; "
              "gymnasium.make('CartPole-v0').close(); print('made')")
    done = subprocess.run([sys.executable, "-W", "default", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert done.returncode == 0 and "made" in done.stdout, done.stderr
    assert "out of date" not in done.stderr, done.stderr


# ---- dependencies ---------------------------------------------------------------------------


def test_info_prints_versions_and_devices(capsys):
    code, out, _ = main(["info"], capsys)
    assert code == 0, out
    for name in ("hcjax", "jax", "jaxlib", "flax", "optax", "chex", "brax", "gymnax", "gymnasium", "mujoco"):
        assert any(line.split()[0] == name and line.split()[1][0].isdigit() for line in out.splitlines()), name
    assert "devices" in out and "cpu" in out


def test_installed_dependencies_have_the_apis_this_code_uses():
    assert deps.check_apis() == []


def test_an_unsupported_api_is_reported_naming_the_package(monkeypatch):
    def old_optax():
        raise AttributeError("module 'optax' has no attribute 'inject_hyperparams'")

    monkeypatch.setitem(deps.PROBES, "optax", old_optax)
    problems = deps.check_apis()
    assert len(problems) == 1 and problems[0].startswith(f"optax {deps.versions()['optax']}: unsupported API")
    assert "inject_hyperparams" in problems[0]


# seeds <= MAX_RUNS
@pytest.mark.parametrize("flag, value", [("--seeds", "1000000"), ("--iterations", "1000000000000")])
def test_a_study_too_large_for_memory_is_refused_before_any_work(flag, value, tmp_path, capsys):
    t0 = time.perf_counter()
    code, _, err = main(["run", "--preset", "smoke", flag, value, "--out", str(tmp_path)], capsys)
    assert code == 2 and "exceeds the memory limit of 8 GiB" in err and "--memory-limit-gib" in err
    assert "MemoryError" not in err and time.perf_counter() - t0 < 60
    assert not (tmp_path / "units").exists()


# ---- checkpoints inside a unit -------------------------------------------------------------------

# on tests/tiny_env.py's walker: the point is the checkpoint, not CartPole (no gymnax in the subprocesses)
CHECKPOINTED = tiny_study(["hypercontroller"], seeds=2, iterations=10, eval_every=2, eval_steps=16, envs=(),
                              env_factories=(WALK,))


@pytest.mark.slow
def test_a_unit_killed_at_a_random_segment_resumes_bit_identically(tmp_path, capsys):
    """Five segments of 2 iterations; SIGKILL once the checkpoint holds segment k (k drawn
    at random), rerun: the unit equals an uninterrupted run's bit for bit, and its
    checkpoint is gone. The rerun and then the uninterrupted reference run in this process
    (`cli.main`): the killed run's programs, from the persistent cache, then kept."""
    import random

    study = tmp_path / "study.toml"
    study.write_text(CHECKPOINTED)

    k = random.Random().randint(1, 4)
    killed = hcjax(["run", "--config", study, "--out", tmp_path / "k", "--no-plot", "--no-progress"],
                   start_new_session=True)  # it compiles, and puts its programs in the persistent cache
    store = R.StudyDir(tmp_path / "k")
    ckpt = store.checkpoint_path("walk", "hypercontroller")
    wait_for_checkpoint([killed], ckpt, 2 * k)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate()
    with np.load(ckpt) as z:
        done = int(z["record/done"])
    # 10: killed after the last segment's checkpoint, before the unit's file (a valid resume point)
    assert 2 * k <= done <= 10, (k, done)
    assert not store.unit_path("walk", "hypercontroller").exists()
    code, _, log = main(["run", "--config", str(study), "--out", str(tmp_path / "k"), "--no-plot", "--no-progress"],
                        capsys)
    assert code == 0, log
    assert f"resume walk / hypercontroller from its checkpoint after iteration {done}" in log
    assert cli.main(["run", "--config", str(study), "--out", str(tmp_path / "ref"), "--no-plot", "--no-progress"]) == 0
    a = R.StudyDir(tmp_path / "ref").units()[0]
    b = store.units()[0]
    for name in R.SEED_METRICS + ("eval_reward", "eval_iteration"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{name} (killed after {done})")
    assert not ckpt.exists() and not ckpt.parent.exists()  # the empty checkpoint directory goes too


@pytest.mark.slow
def test_replay_of_a_factory_study_in_a_fresh_process(mini_study, tmp_path):
    """`hcjax replay` of a unit of your own environment in a new process, where nothing is
    built: it says it imports the factory the manifest recorded, calls it, and replaying the
    unit on its own seed gives the same run; it shows its progress as `hcjax run` does and ends
    with the summary table of the source unit beside the replay."""
    out = finish(hcjax(["replay", mini_study, "--unit", "walk__fixed", "--seeds", "0", "--out", tmp_path / "again"]))
    assert "importing and calling its factory tests.tiny_env:make_walk" in out
    said = ["hcjax replay: loading jax", "hcjax replay: walk__fixed's 1 schedule(s) of 2 iterations on 1 new seed(s)",
            "replay walk__fixed: 0/2 it", "compiling the training segment", "replay walk__fixed: 2/2 it",
            "replayed walk__fixed on seeds [0]", "The source unit (its own seeds) and the replay (the new seeds)",
            "| walk (your own, factory tests.tiny_env:make_walk) |"]
    at = [out.find(w) for w in said]
    assert -1 not in at and at == sorted(at), out  # progress as `hcjax run` shows it, then the summary table
    source = R.load_unit(R.StudyDir(mini_study).unit_path("walk", "fixed"))
    replayed = R.load_unit(R.StudyDir(tmp_path / "again").unit_path("walk", "replay_fixed"))
    np.testing.assert_allclose(replayed.eval_reward, source.eval_reward, rtol=1e-5)  # its own seed: the same run
