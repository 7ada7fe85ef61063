"""Issue 17, classes 1, 4 and 5: nothing a unit or a planted link says writes outside a
study directory; a user's mistake about paths, files in the way or a missing optional
dependency is exit 2 before any work; malformed but readable units and checkpoints are
named, quarantined (run) or skipped (plot), with sizes bounded before decompressing.

Every `hcjax run` here has its training replaced by a failure (`no_training`): the
checks under test come before it."""
from __future__ import annotations

import copy
import errno
import io
import os
import tempfile
import zipfile
from pathlib import Path

import gymnasium
import jax
import numpy as np
import pytest

from experiments import cli
from experiments.benchmarks import bench as bench_scripts
from experiments.reporting import plots
from experiments.study import engine, files, validate
from experiments.study import store as R
from experiments.study.checkpoints import Checkpoint, Record
from tests.test_plots import unit as synthetic_unit

MINI = ["run", "--preset", "smoke", "--seeds", "1", "--iterations", "2", "--no-plot", "--no-progress",
        "--methods", "fixed"]


def main(args, capsys):
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_training(monkeypatch):
    def trained(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(engine, "run_units", trained)


def two_units(out: Path) -> list[R.UnitResult]:
    """A study of env A, methods fixed and random (3 seeds, 20 iterations, 2 evaluations)."""
    rng = np.random.default_rng(1)
    units = [synthetic_unit("A", m, 3, rng) for m in ("fixed", "random")]
    for u in units:
        R.StudyDir(out).save_unit(u)
    return units


def population_unit(method: str) -> R.UnitResult:
    u = synthetic_unit("A", "pbt", 4, np.random.default_rng(2))
    u.meta.update(method=method, hparam_names=["a", "b", "c", "d"])
    u.lineage_iteration = np.array([5, 10], np.int32)
    u.lineage_parent = np.array([[0, 1], [0, 1], [2, 2], [3, 0]], np.int32)
    u.lineage_objective = np.zeros((4, 2), np.float32)
    return u


def tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# ---- class 1: writes outside the study directory -----------------------------------------------


@pytest.mark.slow
def test_a_units_method_cannot_make_plot_write_outside_the_study(tmp_path, capsys):
    """The issue's reproduction: a unit copied in with meta.method "pbt/../../../x"."""
    study = tmp_path / "a" / "b" / "study"
    two_units(study)
    copied = R.StudyDir(study).unit_path("A", "pbt")
    files.atomic_write_bytes(copied, R.unit_bytes(population_unit("pbt/../../../x")))
    before = tree(tmp_path) - tree(study)
    code, out, err = main(["plot", study], capsys)
    assert code == 0, err
    assert tree(tmp_path) - tree(study) == before  # nothing written outside
    assert not list(tmp_path.rglob("x.png"))
    figures = sorted(p.name for p in (study / "figures").glob("lineage_*"))
    assert len(figures) == 1 and "/" not in figures[0] and figures[0].endswith("_.._.._.._x.png"), figures
    assert f"{copied} holds the unit A / pbt/../../../x" in err  # named, not silent


@pytest.mark.parametrize("text, name", [("pbt/../../x", "pbt_.._.._x"), ("..", "_"), ("", "_"), (".", "_"),
                                        ("a b\\c", "a_b_c")])
def test_safe_names_are_one_file_name(text, name):
    assert files.safe_name(text) == name


def test_the_write_probe_does_not_follow_a_planted_link(tmp_path):
    """The issue's reproduction: the --out probe followed a link planted in the directory and truncated its target."""
    out = tmp_path / "study"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (out / f".write-test-{os.getpid()}").symlink_to(victim)
    R.StudyDir(out).check_writable()
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("entry", ["units", "checkpoints", "figures", "tables", "tensorboard", "units/corrupt",
                                   "run.log", ".lock", "manifest.json"])
def test_a_run_refuses_a_study_whose_entries_are_links(entry, tmp_path, capsys, no_training):
    out, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim"
    victim.write_text("precious")
    (out / entry).parent.mkdir(parents=True)
    (out / entry).symlink_to(victim if R.LAYOUT[entry] is False else elsewhere)
    code, _, err = main(MINI + ["--out", out], capsys)
    assert code == 2, err
    assert f"{out / entry} is a symbolic link" in err and "training started" not in err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim"] and victim.read_text() == "precious"


def test_a_link_under_tensorboard_is_refused(tmp_path, capsys, no_training):
    out, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / "CartPole-v1__fixed").symlink_to(elsewhere)
    code, _, err = main(MINI + ["--out", out, "--tensorboard"], capsys)
    assert code == 2 and f"{out / 'tensorboard' / 'CartPole-v1__fixed'} is a symbolic link" in err
    assert not list(elsewhere.iterdir())


@pytest.mark.parametrize("entry", ["figures", "tables", "report.md"])
def test_plot_refuses_links_in_the_study(entry, tmp_path, capsys):
    out, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    two_units(out)
    elsewhere.mkdir()
    victim = elsewhere / "victim"
    victim.write_text("precious")
    (out / entry).symlink_to(victim if entry == "report.md" else elsewhere)
    code, _, err = main(["plot", out], capsys)
    assert code == 2 and f"{out / entry} is a symbolic link" in err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim"] and victim.read_text() == "precious"


def test_export_refuses_a_planted_export_link(tmp_path, capsys):
    out, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    two_units(out)
    elsewhere.mkdir()
    (out / "export").symlink_to(elsewhere)
    code, _, err = main(["export", out], capsys)
    assert code == 2 and f"{out / 'export'} is a symbolic link" in err
    assert not list(elsewhere.iterdir())


def test_atomic_writes_refuse_a_linked_parent_inside_the_study(tmp_path):
    out, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "units").symlink_to(elsewhere)
    with pytest.raises(files.PlantedLink, match="units is a symbolic link"):
        R.StudyDir(out).save_unit(synthetic_unit("A", "fixed", 2, np.random.default_rng(0)))
    with pytest.raises(ValueError, match="outside the study directory"):
        files.atomic_write_text(out / ".." / "x", "no", root=out)
    assert not list(elsewhere.iterdir()) and not (tmp_path / "x").exists()


def test_the_log_is_not_appended_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "run.log").symlink_to(victim)
    with pytest.raises(OSError):
        R.StudyDir(tmp_path / "study").log("a line")
    assert victim.read_text() == "precious"


def test_a_study_directory_that_is_itself_a_link_is_fine(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "study").symlink_to(tmp_path / "real")
    two_units(tmp_path / "study")
    assert len(plots.plot(tmp_path / "study", reps=20)) > 5
    assert (tmp_path / "real" / "report.md").exists()


# ---- class 4: user mistakes reported as our failures -----------------------------------------------


@pytest.mark.parametrize("entry, kind", [("units", "file"), ("checkpoints", "file"), ("units/corrupt", "file"),
                                         ("figures", "file"), ("run.log", "directory"), (".lock", "directory")])
def test_a_file_in_the_way_is_a_usage_error_before_training(entry, kind, tmp_path, capsys, no_training):
    out = tmp_path / "study"
    (out / entry).parent.mkdir(parents=True)
    if kind == "file":
        (out / entry).write_text("in the way")
    else:
        (out / entry).mkdir()
    code, _, err = main(MINI + ["--out", out], capsys)
    assert code == 2, err
    assert f"{out / entry} is a {kind}" in err and "move it aside" in err and "training started" not in err


@pytest.mark.parametrize("kind", ["file", "uncreatable", "unwritable"])
def test_bench_out_that_cannot_be_written_is_a_usage_error_before_any_benchmark(kind, tmp_path, capsys,
                                                                                  monkeypatch):
    def ran(*args, **kwargs):
        raise AssertionError("a benchmark ran")

    monkeypatch.setattr(bench_scripts, "run", ran)
    out = {"file": tmp_path / "f", "uncreatable": Path("/proc/hcjax-bench"), "unwritable": Path("/proc/1")}[kind]
    if kind == "file":
        out.write_text("not a directory")
    code, _, err = main(["bench", "--out", out, "--only", "bench_controller"], capsys)
    assert code == 2, err
    assert f"--out {out}" in err
    said = {"file": "is an existing file", "uncreatable": "cannot be created", "unwritable": "is not writable"}
    assert said[kind] in err


def read_only(monkeypatch):
    """Make every new file fail as on a read-only file system."""
    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)


@pytest.mark.parametrize("command", ["plot", "export"])
def test_plot_and_export_on_a_read_only_file_system_are_usage_errors(command, tmp_path, capsys, monkeypatch):
    out = tmp_path / "study"
    two_units(out)
    (out / "export").mkdir()
    read_only(monkeypatch)
    code, _, err = main([command, out], capsys)
    assert code == 2, err
    assert os.strerror(errno.EROFS) in err and str(out) in err
    assert "Traceback" not in err and "failed" not in err


@pytest.fixture
def missing_dependency():
    """A gymnasium environment whose optional dependency is missing (as gymnasium reports it)."""
    def make(**kwargs):
        raise gymnasium.error.DependencyNotInstalled('hcjaxdep is not installed, run `pip install "hcjaxdep"`')

    gymnasium.register("HcjaxMissingDep-v0", entry_point=make)
    yield "gymnasium/HcjaxMissingDep-v0"
    del gymnasium.registry["HcjaxMissingDep-v0"]


def test_an_environment_with_a_missing_dependency_is_a_usage_error(missing_dependency, tmp_path, capsys, no_training):
    code, _, err = main(["run", "--envs", missing_dependency, "--methods", "fixed", "--seeds", "1", "--iterations",
                         "1", "--no-progress", "--out", tmp_path / "study"], capsys)
    assert code == 2, err
    assert f"environment {missing_dependency}" in err and "hcjaxdep is not installed" in err
    assert not (tmp_path / "study").exists()


def test_an_environment_whose_module_cannot_be_imported_is_a_usage_error(tmp_path, capsys, no_training):
    def make(**kwargs):
        raise ImportError("The mujoco v2 and v3 based environments have been moved to gymnasium-robotics")

    gymnasium.register("HcjaxImportError-v0", entry_point=make)
    try:
        code, _, err = main(["run", "--envs", "gymnasium/HcjaxImportError-v0", "--methods", "fixed", "--seeds", "1",
                             "--iterations", "1", "--no-progress", "--out", tmp_path / "study"], capsys)
    finally:
        del gymnasium.registry["HcjaxImportError-v0"]
    assert code == 2 and "moved to gymnasium-robotics" in err and "HcjaxImportError-v0" in err


# ---- class 5: malformed but readable files -------------------------------------------------------


BAD_UNITS = {
    "eval_iteration beyond T": lambda u: setattr(u, "eval_iteration", np.array([10, 25], np.int32)),
    "eval_iteration zero": lambda u: setattr(u, "eval_iteration", np.array([0, 20], np.int32)),
    "eval_iteration decreasing": lambda u: setattr(u, "eval_iteration", np.array([20, 10], np.int32)),
    "train_reward short": lambda u: setattr(u, "train_reward", u.train_reward[:, :15]),
    "objective of other seeds": lambda u: setattr(u, "objective", u.objective[:2]),
    "eval_reward wrong": lambda u: setattr(u, "eval_reward", u.eval_reward[:, :1]),
    "hparams flat": lambda u: setattr(u, "hparams", u.hparams[:, :, 0]),
    "tuner_time short": lambda u: setattr(u, "tuner_time", u.tuner_time[:3]),
    "more evaluations than iterations": lambda u: (setattr(u, "eval_iteration", np.arange(1, 22, dtype=np.int32)),
                                                   setattr(u, "eval_reward", np.zeros((3, 21), np.float32))),
    "hparam names": lambda u: u.meta.update(hparam_names=["a"]),
}


@pytest.mark.slow
def test_plot_skips_inconsistent_units_naming_each_and_draws_the_rest(tmp_path, capsys):
    """Every inconsistency of BAD_UNITS in one study (each spoils its own copy of two_units'
    second unit, under its own environment label E<i>): one `plot` names and skips each of
    them and draws the good unit (one plot for all: its figures cost about 1.4 CPU s)."""
    out = tmp_path / "study"
    rng = np.random.default_rng(1)
    good, second = synthetic_unit("A", "fixed", 3, rng), synthetic_unit("A", "random", 3, rng)  # two_units(out)'s
    store = R.StudyDir(out)
    store.save_unit(good)
    paths = {}
    for i, (what, spoil) in enumerate(BAD_UNITS.items()):
        bad = copy.deepcopy(second)
        bad.meta["env"] = f"E{i}"
        spoil(bad)
        paths[what] = store.save_unit(bad)
    code, stdout, err = main(["plot", out], capsys)
    assert code == 0, err
    for what, path in paths.items():
        said = [line for line in err.splitlines() if f"{path}: inconsistent unit file" in line]
        assert len(said) == 1 and "skipped" in said[0], (what, err)
        with pytest.raises(R.CorruptFile, match="inconsistent unit file"):
            R.load_unit(path)
    assert (out / "figures" / "fig1_tuning_time.png").exists()
    drawn = R.StudyDir(out).units(warn=lambda msg: None)  # the rest is drawn
    assert [u.meta["method"] for u in drawn] == [good.meta["method"]]
    assert "| A |" in (out / "tables" / "results.md").read_text()


@pytest.mark.parametrize("what", ["lineage parent", "lineage shape", "lineage iteration"])
def test_an_inconsistent_lineage_is_refused(what, tmp_path):
    u = population_unit("pbt")
    if what == "lineage parent":
        u.lineage_parent[0, 0] = 7
    elif what == "lineage shape":
        u.lineage_objective = np.zeros((4, 3), np.float32)
    else:
        u.lineage_iteration = np.array([5, 99], np.int32)
    path = R.StudyDir(tmp_path).save_unit(u)
    with pytest.raises(R.CorruptFile, match="inconsistent unit file.*lineage"):
        R.load_unit(path)
    R.StudyDir(tmp_path).save_unit(population_unit("pbt"))
    assert R.load_unit(path).lineage_parent.shape == (4, 2)  # the consistent one loads


def test_a_run_quarantines_an_inconsistent_unit_naming_it(tmp_path):
    store = R.StudyDir(tmp_path)
    u = synthetic_unit("A", "fixed", 2, np.random.default_rng(0))
    u.meta["config_key"] = "k"
    u.eval_iteration = np.array([10, 99], np.int32)
    path = store.save_unit(u)
    said = []
    assert store.finished("A", "fixed", "k", log=said.append) is False
    moved = list((tmp_path / "units" / "corrupt").glob(f"{R.unit_name('A', 'fixed')}.npz.*"))
    assert len(moved) == 1 and not path.exists()
    assert f"{path}: inconsistent unit file (eval_iteration" in said[0] and str(moved[0]) in said[0]


def test_a_huge_array_is_refused_before_it_is_decompressed(tmp_path, monkeypatch):
    """The issue's reproduction: a small unit file holding a huge compressed array (here
    eval_reward of 80 MB zeros, under 100 kB on disk) is refused from its header alone."""
    u = synthetic_unit("A", "fixed", 2, np.random.default_rng(0))
    u.eval_reward = np.zeros((2, 10_000_000), np.float32)
    path = R.StudyDir(tmp_path).unit_path("A", "fixed")
    files.atomic_write_bytes(path, R.unit_bytes(u))
    assert path.stat().st_size < 1_000_000

    def loaded(*args, **kwargs):
        raise AssertionError("np.load was called")

    monkeypatch.setattr(R.np, "load", loaded)
    with pytest.raises(R.CorruptFile, match="eval_reward has shape"):
        R.load_unit(path)


def test_a_unit_over_the_size_limit_is_refused_before_it_is_decompressed(tmp_path, monkeypatch):
    u = synthetic_unit("A", "fixed", 2, np.random.default_rng(0), iterations=100_000, evals=1)
    path = tmp_path / "unit.npz"
    path.write_bytes(R.unit_bytes(u))
    assert R.load_unit(path).train_reward.shape == (2, 100_000)
    monkeypatch.setattr(validate, "MAX_UNIT_BYTES", 2**20)
    monkeypatch.setattr(R.np, "load", lambda *a, **k: pytest.fail("np.load was called"))
    with pytest.raises(R.CorruptFile, match="more than the limit of"):
        R.load_unit(path)


def test_a_member_declaring_more_than_it_holds_is_refused(tmp_path):
    good = io.BytesIO(R.unit_bytes(synthetic_unit("A", "fixed", 2, np.random.default_rng(0))))
    path = tmp_path / "unit.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "train_reward.npy":
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                              "shape": (2, 10**11)})
                data = header.getvalue() + b"\0" * 64  # the header (magic included), 64 bytes of data
            dst.writestr(info, data)
    with pytest.raises(R.CorruptFile, match="declares shape"):
        R.load_unit(path)


def test_a_unit_named_after_another_is_named_in_a_warning(tmp_path, capsys):
    """The issue's reproduction: a unit copied from another method's file name."""
    out = tmp_path / "study"
    two_units(out)
    store = R.StudyDir(out)
    units = store.units_dir
    store.unit_path("A", "pbt").write_bytes(store.unit_path("A", "fixed").read_bytes())  # holds A / fixed
    store.unit_path("A", "random").rename(units / "copied.npz")  # the only A / random, misnamed
    said = []
    loaded = R.StudyDir(out).units(warn=said.append)
    assert sorted(u.meta["method"] for u in loaded) == ["fixed", "random"]
    assert any(f"{store.unit_path('A', 'pbt')} holds the unit A / fixed, whose file is "
               f"{store.unit_path('A', 'fixed').name}" in s and "skipped" in s
               for s in said), said
    assert any(f"{units / 'copied.npz'} holds the unit A / random, whose file is "
               f"{store.unit_path('A', 'random').name}: rename it" in s
               for s in said), said


# ---- checkpoints ----------------------------------------------------------------------------------------


LIKE = {"w": jax.ShapeDtypeStruct((2, 3), np.float32)}


def checkpoint_arrays(record: Record, key: str = "k") -> dict:
    arrays = {"state/00000": np.ones((2, 3), np.float32), "config_key": np.asarray(key)}
    arrays.update({f"record/{k}": v for k, v in record.arrays().items()})
    return arrays


def record(iterations: int = 10, every: int = 2, agents: int = 2) -> Record:
    rec = Record()
    rng = np.random.default_rng(0)
    for _ in range(iterations // every):
        metrics = {"train_reward": rng.normal(size=(agents, every)), "hparams": rng.uniform(size=(agents, every, 3))}
        rec.add(every, metrics, rng.normal(size=agents), 0.1)
    return rec


TRUNCATIONS = {
    "metrics shorter than done": lambda a: a.update({k: a[k][:, :5] for k in a if k.startswith("record/metric/")}),
    "one metric shorter": lambda a: a.update({"record/metric/hparams": a["record/metric/hparams"][:, :5]}),
    "evaluations cut": lambda a: a.update({"record/eval_reward": a["record/eval_reward"][:, :2]}),
    "done beyond the evaluations": lambda a: a.update({"record/eval_iteration": np.array([2, 4, 6, 8, 12], np.int32)}),
    "no metrics": lambda a: [a.pop(k) for k in list(a) if k.startswith("record/metric/")],
}


@pytest.mark.parametrize("what", list(TRUNCATIONS))
def test_a_truncated_checkpoint_is_quarantined_and_the_unit_restarts(what, tmp_path):
    """The issue's reproduction: a checkpoint whose records were truncated resumed silently
    and wrote a unit 5 iterations short. (End to end, on the checkpoint of a real run:
    tests/test_reliability_study.py, where that file's population run is compiled anyway.)"""
    store = R.StudyDir(tmp_path)
    arrays = checkpoint_arrays(record())
    TRUNCATIONS[what](arrays)
    path = store.save_checkpoint("A", "fixed", arrays)
    said = []
    assert Checkpoint(store, "A", "fixed", "k", said.append).load(LIKE) is None
    moved = list((tmp_path / "units" / "corrupt").glob(f"{R.unit_name('A', 'fixed')}.npz.*"))
    assert len(moved) == 1 and not path.exists()
    assert f"{path}: inconsistent checkpoint" in said[0] and str(moved[0]) in said[0] and "starts over" in said[0]


def test_a_consistent_checkpoint_still_resumes(tmp_path):
    store = R.StudyDir(tmp_path)
    store.save_checkpoint("A", "fixed", checkpoint_arrays(record()))
    leaves, rec = Checkpoint(store, "A", "fixed", "k", print).load(LIKE)
    assert rec.done == 10 and rec.metrics()["train_reward"].shape == (2, 10) and rec.eval_its == [2, 4, 6, 8, 10]
    store.save_checkpoint("A", "fixed", checkpoint_arrays(Record()))  # nothing done yet
    assert Checkpoint(store, "A", "fixed", "k", print).load(LIKE)[1].done == 0


def test_removing_a_checkpoint_clears_the_temp_files_of_a_write_killed_midway(tmp_path):
    """SIGKILL inside `atomic_write_bytes` leaves its temp file beside the checkpoint (a rare
    kill point of test_study_cli's kill-and-resume test, which then found the checkpoint
    directory still there): the unit's end removes it with the checkpoint; another unit's
    checkpoint and its temp files stay."""
    store = R.StudyDir(tmp_path)
    path = store.save_checkpoint("A", "fixed", checkpoint_arrays(record()))
    other = store.save_checkpoint("B", "fixed", checkpoint_arrays(record()))
    stale = path.parent / f".{path.name}.k1ll3d.tmp"
    stale.write_bytes(b"half a checkpoint")
    others_stale = path.parent / f".{other.name}.x.tmp"
    others_stale.write_bytes(b"")
    store.remove_checkpoint("A", "fixed")
    assert not path.exists() and not stale.exists() and other.exists() and others_stale.exists()
    store.remove_checkpoint("B", "fixed")
    assert not path.parent.exists()
    unit = store.unit_path("A", "fixed")  # a unit's write killed midway: cleared by the next one
    unit.parent.mkdir(parents=True)
    (unit.parent / f".{unit.name}.k1ll3d.tmp").write_bytes(b"half a unit")
    store.save_unit(synthetic_unit("A", "fixed", 2, np.random.default_rng(0)))
    assert unit.exists() and not list(unit.parent.glob(".*.tmp"))


def test_a_checkpoint_over_its_size_bound_is_quarantined_before_decompressing(tmp_path, monkeypatch):
    store = R.StudyDir(tmp_path)
    path = store.save_checkpoint("A", "fixed", checkpoint_arrays(record(iterations=20_000)))
    monkeypatch.setattr(validate, "MAX_RECORD_BYTES", 2**16)
    said = []
    assert Checkpoint(store, "A", "fixed", "k", said.append).load(LIKE) is None
    assert f"{path}: unreadable checkpoint" in said[0] and "more than the limit" in said[0]


def test_docs_describe_the_link_rule_and_the_validation():
    text = (Path(__file__).resolve().parent.parent / "docs" / "studies.md").read_text()
    section = text[text.index("## What happens when things go wrong"):text.index("## Checkpoints, resume")]
    for phrase in ("symbolic link", "inconsistent", "units/corrupt/", "2 GiB", "missing"):
        assert phrase in section, phrase
