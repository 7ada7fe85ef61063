"""Issue 50, reliability round 5, the checks that need little or no training: counts refused
before anything is allocated, strange and inconsistent unit files, a half-finished or all-NaN
verdict said as such, the sweep's references, a tool's --out, a tuner's arguments swapped, a
sweep's replay, and the small ones. Own environments: tests/test_reliability_round5_envs.py;
processes: tests/test_reliability_round5_processes.py; issue 54: ..._leftovers.py."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import tracemalloc
import warnings
from pathlib import Path

import jax
import pytest

import experiments
import hcjax
from experiments import cli
from experiments.benchmarks import bench_guard
from experiments.reporting import verdict as V
from experiments.reporting import verdict_text
from experiments.reporting.views import ALL
from experiments.study import engine, unfinished
from experiments.study.devices import MAX_RUNS
from experiments.study.store import StudyDir
from hcjax.population import interval
from tests import verdict_units as U
from tests.cli_runs import WALK_PAIR, study_of, tiny_study

ROOT = Path(__file__).resolve().parents[1]
WALK = "w=tests.tiny_env:make_walk"  # a tiny own environment: no gymnax import
TINY = dict(num_envs=2, hidden_sizes=[8], update_epochs=1, num_minibatches=2, batch_size=8, eval_steps=8)


def walk_study(**fields) -> experiments.Study:
    return experiments.Study(env_factories=[WALK], **{**dict(methods=["fixed"], seeds=2, iterations=2, eval_every=1,
                                                              ppo=TINY), **fields})


# ---- 1. counts that allocated before any check ---------------------------------------------------

@pytest.mark.parametrize("fields, words", [
    (dict(test_seeds=10**9), f"test_seeds must be at most {MAX_RUNS}"),
    (dict(test_seeds=2**31), f"test_seeds must be at most {MAX_RUNS}"),
    (dict(seeds=10**9), f"seeds must be at most {MAX_RUNS}"),
    (dict(methods=["fixed", "sweep"], tuner={"sweep": {"configurations": 10**9}}),
     f"tuner.sweep.repeats x configurations x seeds (1 x 1000000000 x 2: the sweep's runs, one program) must be at "
     f"most {MAX_RUNS}"),
], ids=["test_seeds", "test_seeds_2_31", "seeds", "sweep"])
def test_a_count_is_refused_naming_its_bound_before_anything_is_allocated(fields, words):
    """Issue 50: test_seeds = 10**9 built every id first (killed by the kernel at 21.6 GB), and the
    sweep drew every configuration before the memory check. Now at most MAX_RUNS runs a unit,
    refused before an id or a configuration is made: well under 8 MiB allocated."""
    walk_study().plan()  # the factory imported, the environment built: not this test's allocations
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as refused:
            walk_study(**fields).check()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert words in str(refused.value), refused.value
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB allocated before the refusal"


def test_a_study_file_with_a_billion_test_seeds_is_exit_2_naming_the_bound(tmp_path, capsys):
    config = tmp_path / "study.toml"
    config.write_text(f'env_factories = ["{WALK}"]\nmethods = ["fixed"]\nseeds = 2\niterations = 2\n'
                      f"test_seeds = 1000000000\n")
    assert cli.main(["run", "--config", str(config), "--out", str(tmp_path / "out")]) == 2
    assert f"test_seeds must be at most {MAX_RUNS} (2**20)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- 4. and 12. strange unit files: a FIFO, a link ------------------------------------------------

def saved(directory: Path, units=None, manifest: dict | None = None) -> StudyDir:
    """A study directory holding `units` (default: tests/verdict_units.py's fabricated study)."""
    store = StudyDir(directory)
    for u in U.study(0) if units is None else units:
        store.save_unit(u)
    if manifest is not None:
        store.manifest_path.write_text(json.dumps(manifest))
    return store


def finishes(work, fifo: Path, seconds: float = 60.0):
    """work()'s result, failing if it has not returned after `seconds` (then the FIFO is opened for
    writing and closed, which releases a reader blocked on it, so that nothing is left hanging)."""
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=work()), daemon=True)
    thread.start()
    thread.join(seconds)
    blocked = thread.is_alive()
    if blocked:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(seconds)
    assert not blocked, f"blocked on the FIFO {fifo}"
    return box.get("result")


@pytest.mark.slow  # hcjax plot draws every figure (matplotlib): about 8 CPU s
def test_a_fifo_named_like_a_unit_is_skipped_with_a_warning_by_every_reader(tmp_path, capsys):
    """Issue 50: a FIFO named like a unit made hcjax verdict, plot, run and experiments.load block
    forever (numpy opened it and waited for a writer). Now it is skipped, with a warning naming it."""
    store = saved(tmp_path / "study")
    fifo = store.units_dir / "A__extra.npz"
    os.mkfifo(fifo)
    frames = finishes(lambda: experiments.load(store.path), fifo)
    assert sorted(set(frames.iterations["method"])) == sorted({u.meta["method"] for u in U.study(0)})
    assert finishes(lambda: cli.main(["verdict", str(store.path)]), fifo) == 0
    assert finishes(lambda: cli.main(["plot", str(store.path)]), fifo) == 0
    err = capsys.readouterr().err
    assert err.count(f"warning: {fifo}: unreadable unit file (ValueError: it is a FIFO, not a regular file") == 3, err


@pytest.mark.slow  # trains the walker for 2 iterations (a shared configuration: its programs from the cache)
def test_a_run_moves_a_fifo_named_like_its_unit_aside_and_computes_the_unit(tmp_path):
    out = tmp_path / "run"
    fifo = StudyDir(out).unit_path("w", "fixed")
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    lines = []
    study = study_of(tiny_study(**dict(WALK_PAIR, methods=["fixed"], env_factories=[WALK]), iterations=2))
    result = finishes(lambda: study.run(out, progress=False, plot=False, log=lines.append), fifo, 240)
    assert result.units == [("w", "fixed")] and fifo.is_file()
    assert any("it is a FIFO" in line and "the unit will be recomputed" in line for line in lines), lines


def test_a_unit_file_that_is_a_link_out_of_the_study_is_read_with_a_warning_naming_it(tmp_path, capsys):
    """Issue 50: reads followed links without a word (writes never do): a unit linked from another
    study could flip a verdict."""
    other = saved(tmp_path / "other")
    mine = saved(tmp_path / "mine", [u for u in U.study(0) if u.meta["method"] != "fixed@test" or u.meta["env"] != "A"])
    link = mine.unit_path("A", "fixed@test")
    link.symlink_to(other.unit_path("A", "fixed@test"))
    warnings = []
    assert len(mine.units(warn=warnings.append)) == len(U.study(0))
    assert warnings == [f"{link} is a symbolic link to {other.unit_path('A', 'fixed@test')} (outside the study "
                        f"directory): the unit is read from there, though hcjax never writes a unit through a link; "
                        f"replace the link with the file itself if it belongs to this study, or remove it"]
    assert cli.main(["verdict", str(mine.path)]) == 0
    assert f"warning: {link} is a symbolic link to" in capsys.readouterr().err


# ---- 5. a unit's meta checked when read --------------------------------------------------------

def _sweep_without_entry(u):
    u.meta.pop("sweep")


def _no_configurations(u):
    u.meta["sweep"]["configurations"] = []


def _seconds_as_text(u):
    u.meta["run_seconds"] = "fast"


@pytest.mark.parametrize("method, spoil, field", [
    ("sweep", _sweep_without_entry, "its meta's sweep is None"),
    ("sweep", _no_configurations, "its meta's sweep.configurations is []"),
    ("sweep", _seconds_as_text, "its meta's run_seconds is 'fast'"),
    ("fixed@test", lambda u: u.meta.update(config={"seeds": 200}), "its seeds [100, 101, 102"),
], ids=["no-sweep-entry", "no-configurations", "run-seconds", "test-seeds-are-tuning-seeds"])
def test_an_inconsistent_meta_is_skipped_with_a_warning_naming_the_file_and_field(method, spoil, field, tmp_path,
                                                                                   capsys):
    """Issue 50: a sweep unit without its `sweep` entry made hcjax verdict exit 1 (KeyError); empty
    configurations, a run_seconds that is not a number and a test unit on tuning seeds were accepted."""
    units = U.study(0)
    (bad,) = [u for u in units if u.meta["env"] == "A" and u.meta["method"] == method]
    spoil(bad)
    store = saved(tmp_path, units)
    warnings = []
    kept = store.units(warn=warnings.append)
    assert len(kept) == len(units) - 1
    (warning,) = warnings
    assert warning.startswith(f"{store.unit_path('A', method)}: inconsistent unit file (") and field in warning
    assert cli.main(["verdict", str(tmp_path)]) == 0
    assert field in capsys.readouterr().err


# ---- 6. and 7. a half-finished verdict, an all-NaN default --------------------------------------

MANIFEST = {"format": 1, "config": {"env_choices": [{"label": "A"}, {"label": "B"}], "seeds": 5, "test_seeds": 6,
                                    "methods": ["hypercontroller", "random", "fixed", "sweep"],
                                    "poor_defaults": {"lr_x10": {"learning_rate": 0.01}}},
            "argv": ["/venv/bin/hcjax", "run", "--config", "verdict.toml", "--out", "runs/v"]}


def test_the_fabricated_study_is_whole_by_its_manifest(tmp_path, capsys):
    store = saved(tmp_path, manifest=MANIFEST)
    assert sorted(unfinished.expected(MANIFEST)) == sorted((u.meta["env"], u.meta["method"]) for u in U.study(0))
    assert cli.main(["verdict", str(store.path)]) == 0 and "P(> default)" in capsys.readouterr().out


@pytest.mark.parametrize("gone", [["A / random@test"], ["A / hypercontroller@test", "B / sweep@test"]])
def test_a_verdict_with_a_test_unit_missing_names_it_and_says_the_same_command_resumes(gone, tmp_path, capsys):
    """Issue 50: with an @test unit missing, hcjax verdict exited 0 and the comparisons with it
    vanished without a word."""
    store = saved(tmp_path, [u for u in U.study(0) if f"{u.meta['env']} / {u.meta['method']}" not in gone],
                  manifest=MANIFEST)
    assert cli.main(["verdict", str(store.path)]) == 2
    err = capsys.readouterr().err
    assert f"{store.path} holds an unfinished study: {len(gone)} of its 24 units are missing ({', '.join(gone)})" in err
    assert "the same command resumes it: hcjax run --config verdict.toml --out runs/v" in err
    with pytest.raises(unfinished.Unfinished, match="units are missing"):
        experiments.verdict(store.path)


def test_a_study_killed_before_its_test_phase_says_so_not_that_it_has_no_test_seeds(tmp_path, capsys):
    """Issue 50: it said "this study has no test seeds" although the manifest has them."""
    store = saved(tmp_path, [u for u in U.study(0) if u.meta["phase"] == "tuning"], manifest=MANIFEST)
    assert cli.main(["verdict", str(store.path)]) == 2
    err = capsys.readouterr().err
    assert "14 of its 24 units are missing (A / hypercontroller@test, A / random@test" in err and "and 8 more" in err
    assert "no test seeds" not in err and "the same command resumes it" in err


def test_the_report_writes_no_verdict_for_an_unfinished_study_and_says_why(tmp_path, monkeypatch):
    from experiments.reporting import plots

    store = saved(tmp_path, [u for u in U.study(0) if u.meta["method"] != "fixed@test"], manifest=MANIFEST)
    monkeypatch.setattr(plots, "FIGURES", {})  # the tables only: no matplotlib figure drawn
    paths = plots.plot(store.path, reps=20)
    assert "verdict_json" not in paths and "verdict_figure" not in paths
    assert paths["verdict"].read_text().startswith(f"Not written: {store.path} holds an unfinished study: 2 of its "
                                                   f"24 units are missing (A / fixed@test, B / fixed@test)")


def test_a_default_whose_evaluations_are_all_nan_is_named_not_no_shared_environment():
    """Issue 50: the verdict said "no shared environment"."""
    units = U.study(0)
    for u in units:
        if u.meta["method"] == "fixed@test":
            u.eval_reward[:, -1] = float("nan")
    result = V.verdict(units, reps=20)
    rows = {(r["env"], r["method"], r["comparison"]): r for r in result.rows if r["phase"] == "test"}
    for scope, where in ((ALL, "A, B"), ("A", "A")):
        row = rows[(scope, "hypercontroller", verdict_text.BEATS_DEFAULT)]
        assert row["status"] == "evaluations all NaN"
        assert row["note"] == f"the default's evaluations are all NaN (fixed@test on {where})"
    assert "evaluations all NaN against the default (the default's evaluations are all NaN (fixed@test on A, B))" \
        in result.sentences["hypercontroller"]
    assert "no shared environment" not in result.markdown


# ---- 8. a sweep needs the default beside it ------------------------------------------------------

@pytest.mark.parametrize("methods", [["hypercontroller", "sweep"], ["sweep"]])
def test_a_sweep_with_test_seeds_but_no_fixed_is_refused_naming_fixed(methods):
    """Issue 50: accepted, and the verdict had no default to compare the incumbent with."""
    with pytest.raises(ValueError, match=r"methods: the sweep's incumbent is compared with the study's default .* "
                                         r"add 'fixed' to methods"):
        walk_study(methods=methods, test_seeds=2).plan()
    walk_study(methods=["sweep"]).plan()  # without test seeds there is no verdict to make


# ---- 10. bench_guard's --out --------------------------------------------------------------------

def test_bench_guard_refuses_a_folder_as_out_before_measuring(tmp_path, monkeypatch, capsys):
    """Issue 50: it measured for two minutes, then died with IsADirectoryError, the JSON lost."""
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")  # the guard's own check passes
    monkeypatch.setattr(bench_guard, "measure", lambda *a: pytest.fail("measured before checking --out"))
    with pytest.raises(SystemExit) as stopped:
        bench_guard.main(["--quick", "--out", str(tmp_path)])
    assert stopped.value.code == 2
    assert f"--out {tmp_path} is a folder; give the name of a JSON file" in capsys.readouterr().err


# ---- 11. a tuner's state and key swapped ---------------------------------------------------------

@pytest.mark.parametrize("method", ["hypercontroller", "fixed"])
def test_tuner_step_with_key_and_state_swapped_is_a_type_error_naming_state(method):
    """Issue 50: AttributeError: 'ArrayImpl' object has no attribute 'history', from deep inside."""
    tuner = hcjax.make_tuner(method, hcjax.ppo_space((8, 16)))
    key = jax.random.PRNGKey(0)
    state = jax.jit(tuner.init)(key)  # one program, not the op-by-op init's hundred
    with pytest.raises(TypeError, match=rf"{method}.step\(state, key, objective, decide\): state must be this "
                                        r"tuner's state .* got an array of shape \(2,\): were the state and the key "
                                        r"swapped\?"):
        tuner.step(key, state, 1.0, True)
    jax.eval_shape(lambda s, k: tuner.step(s, k, 1.0, True), state, key)  # the right order still traces


# ---- 13. the sweep's replay -----------------------------------------------------------------------

def test_replaying_the_sweep_unit_is_refused_naming_its_incumbents_unit(tmp_path, capsys):
    """Issue 50: it replayed the sweep's first configuration on every seed, silently."""
    store = saved(tmp_path / "study")
    with pytest.raises(ValueError, match=r"unit: A__sweep is the sweep, 4 static configurations x their tuning "
                                         r"seeds, not one schedule: .* Replay its incumbent, the unit A__sweep_test "
                                         r"\(sweep@test"):
        experiments.replay(store.path, "A__sweep", [0, 1])
    assert cli.main(["replay", str(store.path), "--unit", "A__sweep", "--seeds", "0", "1", "--out",
                     str(tmp_path / "out")]) == 2
    assert "A__sweep_test" in capsys.readouterr().err


# ---- 14. the small ones --------------------------------------------------------------------------

def test_a_sweep_option_given_as_a_string_is_told_to_be_a_table():
    """Issue 50: tuner.sweep = "big" said "unknown option(s) ['b', 'g', 'i']"."""
    with pytest.raises(ValueError, match=r"tuner.sweep must be a table of options .* got 'big'"):
        walk_study(methods=["fixed", "sweep"], tuner={"sweep": "big"}).plan()


class _Stop(Exception):
    pass


def test_one_test_seed_is_warned_of_before_any_work(tmp_path, monkeypatch):
    """Issue 50: test_seeds = 1 was accepted silently; every comparison came out 'not testable'."""
    def no_work(*args, **kwargs):
        raise _Stop

    monkeypatch.setattr(engine, "run", no_work)
    lines = []
    with pytest.raises(_Stop):
        walk_study(test_seeds=1).run(tmp_path / "out", progress=False, plot=False, log=lines.append)
    assert "warning: test_seeds gives one test seed: every comparison of the verdict on the test seeds will be " \
           "'not testable' (one run cannot vary); give at least 2 (a count, or a list of seed ids)" in lines
    lines.clear()
    with pytest.raises(_Stop):
        walk_study(test_seeds=2).run(tmp_path / "out2", progress=False, plot=False, log=lines.append)
    assert not any(line.startswith("warning:") for line in lines), lines


def slow_interval(updates: int, ready: int):
    """interval's choice by a plain scan of every k in 1..updates: ready, the nearest divisor (the
    smaller on a tie), or None where it lies beyond [ready / 2, 2 ready] (refused)."""
    divisors = [k for k in range(1, updates + 1) if updates % k == 0]
    if ready in divisors:
        return ready
    below, above = max(k for k in divisors if k < ready), min(k for k in divisors if k > ready)
    chosen = below if ready - below <= above - ready else above
    return chosen if ready / 2 <= chosen <= 2 * ready else None


def test_interval_matches_a_plain_scan_of_every_divisor():
    """The divisors are now found up to the square root: the same choices as the plain scan, on
    random counts (squares among them, whose root is its own pair)."""
    rng = random.Random(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hcjax.population.IntervalWarning)
        for updates in [rng.randint(1, 5000) for _ in range(300)] + [1, 2, 49, 900, 9409]:
            ready = rng.randint(1, updates)
            want = slow_interval(updates, ready)
            if want is None:
                with pytest.raises(ValueError, match="interval: ready="):
                    interval(updates, ready)
            else:
                assert interval(updates, ready) == want, (updates, ready)


def test_interval_of_a_large_prime_count_finishes_within_a_cpu_limit():
    """Issue 50: interval(10**8 + 7, 10) took 24 s (every k up to 10**8 tried); divisors up to the
    square root take 10**4 trials. Here 10**12 + 39 (prime) under a 20 s CPU limit: 10**6 trials
    (about 0.1 s), where the old scan would take days."""
    code = ("import resource, warnings\nresource.setrlimit(resource.RLIMIT_CPU, (20, 20))\n"
            "from hcjax.population import interval\n"
            "try:\n    interval(10**12 + 39, 10)\nexcept ValueError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "its nearest divisors are 1 and 1000000000039" in done.stdout
