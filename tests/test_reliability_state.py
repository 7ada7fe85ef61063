"""Issue 24, classes 5, 7 and 8: quarantine never replaces a file; a HostTuner state
saved over another space, other options or with indices out of range is refused naming
what differs; smaller edges of categoricals, `fixed`, `--space` and the manifest. Issue
41: a HostTuner pickled by an older hcjax, a crafted `.npz` state read only after its
sizes are checked, deeply nested state JSON."""
from __future__ import annotations

import datetime
import errno
import importlib.metadata
import pickle
import re
import subprocess
import tracemalloc
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents.ppo import PPOConfig, make_learner
from agents.ppo.config import check_batch_options
from experiments import cli
from experiments.study import files, provenance
from experiments.study import store as R


class FrozenClock(datetime.datetime):
    """datetime.datetime whose now() is one fixed second: every move happens 'in the same second'."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 2, 3, 4, 5, tzinfo=tz)


@pytest.fixture
def same_second(monkeypatch):
    monkeypatch.setattr(R, "datetime", types.SimpleNamespace(datetime=FrozenClock, UTC=datetime.UTC))


def test_quarantine_keeps_a_unit_a_checkpoint_and_an_earlier_file_of_the_same_name(tmp_path, same_second):
    """The issue's reproduction: a corrupt unit and a corrupt checkpoint of one unit moved
    aside in the same second got the same name, the second replacing the first (and any
    earlier file of that name), while both log lines said 'moved to'."""
    store = R.StudyDir(tmp_path)
    unit, checkpoint = store.unit_path("A", "fixed"), store.checkpoint_path("A", "fixed")
    said = []
    contents = {}
    for round_ in range(2):  # the second round finds the first round's files in units/corrupt/
        for path, what in ((unit, b"unit"), (checkpoint, b"checkpoint")):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"not a zip: " + what + bytes([round_]))
        assert store.finished("A", "fixed", "key", log=said.append) is False
        assert store.load_checkpoint("A", "fixed", log=said.append) is None
        assert not unit.exists() and not checkpoint.exists()
        contents[round_] = {what + bytes([round_]) for what in (b"unit", b"checkpoint")}
    moved = sorted((tmp_path / "units" / "corrupt").iterdir())
    assert {p.read_bytes()[len(b"not a zip: "):] for p in moved} == contents[0] | contents[1]
    assert len(moved) == 4 and all(p.name.startswith(unit.name + ".") for p in moved)
    assert {p.name.split(".")[2] for p in moved} == {"unit", "checkpoint"}
    for line, source in zip(said, (unit, checkpoint) * 2):
        target = next(p for p in moved if f"moved {source} to {p}," in line)
        assert target.name.split(".")[2] == ("unit" if source == unit else "checkpoint")


def test_move_no_replace_without_hard_links_still_never_replaces(tmp_path, monkeypatch):
    """Where the filesystem has no hard links the target is reserved exclusively instead."""
    def no_links(source, target):
        raise PermissionError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(files.os, "link", no_links)
    source, taken, free = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    source.write_text("new")
    taken.write_text("earlier")
    with pytest.raises(FileExistsError):
        files.move_no_replace(source, taken)
    assert taken.read_text() == "earlier" and source.read_text() == "new"
    files.move_no_replace(source, free)
    assert free.read_text() == "new" and not source.exists()


# ---- class 8: smaller edges ----------------------------------------------------------------

WORDS = hcjax.Space([hcjax.Hyperparameter("lr", 1e-4, 1e-1, scale="log"),
                     hcjax.Hyperparameter.choice("opt", ["adam", "sgd"])])


def test_as_dict_clips_a_string_categoricals_index_like_a_numeric_ones():
    """The issue: a numeric categorical's index was clipped, a string one's was not (7 for 2 options)."""
    for raw, index in ((7.0, 1), (-3.0, 0), (0.6, 1)):
        values = jnp.array([1e-3, raw])
        assert int(WORDS.as_dict(values)["opt"]) == index
        assert WORDS.names_to_values(values)["opt"] == WORDS.hyperparameters[1].options[index]


def test_names_to_values_with_nan_names_the_hyperparameter():
    with pytest.raises(ValueError, match="'opt'.*NaN"):
        WORDS.names_to_values(np.array([1e-3, np.nan]))
    assert np.isnan(WORDS.names_to_values(np.array([np.nan, 1.0]))["lr"])  # a number stays a number


def test_fixed_refuses_a_fractional_option_index():
    with pytest.raises(ValueError, match=r"fixed.values\[1\] \('opt'\) is categorical.*whole number in \[0, 1\]"):
        hcjax.make_tuner("fixed", WORDS, values=[1e-3, 0.5])
    assert hcjax.make_tuner("fixed", WORDS, values=[1e-3, 1.0]).name == "fixed"


@pytest.mark.parametrize("text", ["lr=1e-4:1e-2:default=1e-3:default=2e-3", "lr=1e-4:1e-2:log:log",
                                  "opt=adam,sgd:default=adam:default=sgd"])
def test_space_flag_given_twice_is_refused(text):
    with pytest.raises(ValueError, match=r"given twice"):
        cli.parse_hyperparameter(text)


@pytest.mark.parametrize("options, steps", [([1, 2, 3], [1, 1, 1]), ([8, 12, 16], [1, 2, 2])])
def test_batch_sizes_of_one_rollout_length_are_refused(options, steps):
    """The issue: options 1, 2, 3 with 8 environments all collect one step of 8 frames,
    while `hparams` recorded three configurations."""
    space = hcjax.Space([hcjax.Hyperparameter.choice("batch_size", options)])
    with pytest.raises(ValueError, match=re.escape(f"batch_size options {options} give rollouts of {steps} steps")):
        make_learner(PPOConfig(num_envs=8), "CartPole-v1", hcjax.make_tuner("random", space))
    check_batch_options(PPOConfig(num_envs=8), hcjax.Space([hcjax.Hyperparameter.choice("batch_size", [8, 16, 17])]))


def test_cli_refuses_a_flag_twice_and_collapsing_batch_sizes_before_any_work(tmp_path, capsys):
    for space, said in (("batch_size=1,2,3", "rollouts of [1, 1, 1] steps with num_envs=8"),
                        ("gamma=0.9,0.99:default=0.9:default=0.99", "default given twice")):
        code = cli.main(["run", "--preset", "smoke", "--seeds", "1", "--iterations", "2", "--no-plot", "--no-progress",
                         "--methods", "fixed", "--out", str(tmp_path / "out"), "--space", space])
        assert code == 2 and said in capsys.readouterr().err and not (tmp_path / "out").exists()


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_manifest_git_is_hcjaxs_own_checkout_only(tmp_path):
    """The issue: with hcjax installed into a project's .venv, the manifest recorded the
    project's commit (and ran `git status` there)."""
    package = tmp_path / ".venv" / "lib" / "site-packages" / "hcjax"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "someproject"\n')
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-f", ".")
    git(tmp_path, "commit", "-qm", "a project tracking its venv")
    installed = provenance.git_commit(package)
    assert installed["commit"] is None and installed["dirty"] is None
    assert installed["version"] == importlib.metadata.version("hcjax")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "hcjax"\n')  # now hcjax's own checkout
    git(tmp_path, "commit", "-qam", "hcjax itself")
    assert provenance.git_commit(package)["commit"] == git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "rm", "-rq", "--cached", ".venv")  # hcjax's checkout, but this package is not tracked
    assert provenance.git_commit(package)["commit"] is None
    assert provenance.git_commit()["commit"] == git(Path(hcjax.__file__).parent, "rev-parse", "HEAD")  # this checkout


# ---- class 7: state that means something else --------------------------------------------

def saved_state(name="hypercontroller", space=WORDS, asks=True, **options):
    """A HostTuner after three (ask and) tell rounds, and its state_dict()."""
    tuner = hcjax.HostTuner(name, space, seed=3, **options)
    for _ in range(3):
        if asks:
            tuner.ask()
        tuner.tell(1.0)
    return tuner, tuner.state_dict()


@pytest.mark.parametrize("other, differs", [
    ([hcjax.Hyperparameter("lr", 1e-4, 1e-1, scale="log"), hcjax.Hyperparameter.choice("opt", ["adam", "rmsprop"])],
     "hyperparameter 1 ('opt') options ['adam', 'sgd'] saved, ['adam', 'rmsprop'] here"),
    ([hcjax.Hyperparameter("lr", 1e-5, 1e-1, scale="log"), hcjax.Hyperparameter.choice("opt", ["adam", "sgd"])],
     "hyperparameter 0 ('lr') low 0.0001 saved, 1e-05 here"),
    ([hcjax.Hyperparameter("lr", 1e-4, 1e-1), hcjax.Hyperparameter.choice("opt", ["adam", "sgd"])],
     "hyperparameter 0 ('lr') scale 'log' saved, 'linear' here"),
    ([hcjax.Hyperparameter("rate", 1e-4, 1e-1, scale="log"), hcjax.Hyperparameter.choice("opt", ["adam", "sgd"])],
     "hyperparameter 0 ('rate') name 'lr' saved, 'rate' here"),
    ([hcjax.Hyperparameter("lr", 1e-4, 1e-1, scale="log"), hcjax.Hyperparameter("opt", 0, 1, integer=True)],
     "hyperparameter 1 ('opt') options ['adam', 'sgd'] saved, None here"),
])
def test_a_state_of_another_space_is_refused_naming_the_difference(other, differs):
    """The issue: a state saved over other names, bounds or options loaded (same shapes),
    so its arm indices silently meant other values."""
    _, state = saved_state(d=4)
    with pytest.raises(ValueError, match=re.escape(f"'space' differs from this tuner's: {differs}")):
        hcjax.HostTuner("hypercontroller", hcjax.Space(other), d=4).load_state_dict(state)


@pytest.mark.parametrize("name, field, options", [
    ("hyperband", "order", dict(budget=30)), ("hyperband", "slot", dict(budget=30)),
    ("hyperband", "pos", dict(budget=30)), ("gp_ucb", "ptr", dict(buffer=8, candidates=8, fit_points=8))])
def test_indices_out_of_range_are_refused_naming_the_array(name, field, options):
    """The issue: indices of 10**6 loaded and were clamped by the gathers."""
    # gp_ucb's ring buffer pointer moves on tells: no ask (the GP's costly compilation) needed
    tuner, state = saved_state(name, asks=name != "gp_ucb", **options)
    bad = dict(state)
    bad[f"state.{field}"] = np.full_like(state[f"state.{field}"], 10 ** 6)
    with pytest.raises(ValueError, match=rf"'state.{field}' holds indices up to 1000000, out of this tuner's range"):
        tuner.load_state_dict(bad)
    limit = dict(tuner.tuner.index_bounds)[field]
    assert hash(tuner.tuner) == hash(tuner.tuner)  # the bounds are tuples: a Tuner stays hashable
    bad[f"state.{field}"] = np.full_like(state[f"state.{field}"], limit - 1)  # the largest index in range loads
    tuner.load_state_dict(bad)


def test_a_state_saved_before_the_space_was_stored_loads_with_a_warning():
    tuner, state = saved_state(d=4)
    old = {k: v for k, v in state.items() if k not in ("space", "options")}
    fresh = hcjax.HostTuner("hypercontroller", WORDS, d=4)
    with pytest.warns(UserWarning, match="saved without its space and options .* save it again"):
        fresh.load_state_dict(old)
    assert [fresh.ask() for _ in range(3)] == [tuner.ask() for _ in range(3)]


def test_a_host_tuner_pickled_on_a_missing_platform_unpickles_on_the_cpu():
    """The issue: pickled with device="gpu", a HostTuner could not be unpickled on a
    CPU-only machine although its state is NumPy. The platform is faked in the pickle."""
    missing = next(p for p in ("gpu", "tpu") if not platform_present(p))
    tuner, _ = saved_state(d=4)
    blob = pickle.dumps(tuner)
    cpu = b"\x8c\x03cpu"  # the pickled platform: SHORT_BINUNICODE of 3 bytes
    assert blob.count(cpu) == 1
    blob = blob.replace(cpu, b"\x8c\x03" + missing.encode())
    with pytest.warns(UserWarning, match=f"pickled on a '{missing}' device, which this machine lacks: it runs on "
                                         f"the CPU"):
        copy = pickle.loads(blob)
    assert copy.device.platform == "cpu"
    assert [copy.ask() for _ in range(3)] == [tuner.ask() for _ in range(3)]


def platform_present(platform):
    try:
        return bool(jax.devices(platform))
    except RuntimeError:
        return False


OLD_PICKLE = Path(__file__).parent / "data" / "host_tuner_766c196.pkl"


def test_a_host_tuner_pickled_by_an_older_hcjax_loads_and_continues_as_it_would_have():
    """Issue 41: a HostTuner pickled by hcjax at commit 766c196 (before categoricals, whose
    Space had no `is_categorical`) failed with AttributeError 'is_categorical'. It was
    hypercontroller(d=4) over learning_rate (log) and batch_size (integer), seed 3, after 4
    asks and 3 tells; there, the next ask was the one below (run with that commit's code)."""
    with pytest.warns(UserWarning, match="saved without its space and options"):
        tuner = pickle.loads(OLD_PICKLE.read_bytes())
    assert (tuner.n_asks, tuner.n_tells) == (4, 3) and tuner.space.is_categorical.tolist() == [False, False]
    assert tuner.ask() == {"learning_rate": 0.002154434798285365, "batch_size": 48}


def test_a_host_tuner_pickle_of_an_unknown_format_says_it_comes_from_another_version():
    tuner, _ = saved_state(d=4)
    pickled = tuner.__getstate__()
    with pytest.raises(ValueError, match=r"HostTuner: this pickle was written by another version of hcjax"):
        hcjax.HostTuner.__new__(hcjax.HostTuner).__setstate__(dict(pickled, format=99))
    with pytest.raises(ValueError, match=r"HostTuner: this pickle was written by another version of hcjax"):
        hcjax.HostTuner.__new__(hcjax.HostTuner).__setstate__({"name": "hypercontroller"})


def test_a_crafted_npz_state_is_refused_from_its_header_before_its_array_is_read(tmp_path):
    """Issue 41: 1 MB of compressed zeros posing as a state array cost its full size (2 GiB
    in the probe) before the shape was compared; here 64 MiB, and the load must stay far
    below that."""
    tuner, state = saved_state(d=4)
    crafted = dict(state, **{"state.models": np.zeros(2**24, np.float32)})  # 64 MiB, ~64 KB compressed
    np.savez_compressed(tmp_path / "state.npz", **crafted)
    assert (tmp_path / "state.npz").stat().st_size < 2**20
    with np.load(tmp_path / "state.npz") as z:
        tracemalloc.start()
        try:
            with pytest.raises(ValueError, match=r"'state.models' must have shape .* got shape \(16777216,\)"):
                tuner.load_state_dict(z)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB allocated before the refusal"
    np.savez_compressed(tmp_path / "name.npz", **dict(state, tuner=np.asarray("x" * 2**22)))  # a 16 MiB string
    with np.load(tmp_path / "name.npz") as z:
        with pytest.raises(ValueError, match=r"'tuner' must be a text of at most"):
            tuner.load_state_dict(z)
    np.savez(tmp_path / "fine.npz", **state)
    with np.load(tmp_path / "fine.npz") as z:
        fresh = hcjax.HostTuner("hypercontroller", WORDS, seed=3, d=4)
        fresh.load_state_dict(z)  # a genuine state still loads from its file
    assert fresh.ask() == tuner.ask()


def test_deeply_nested_state_json_is_refused_naming_the_entry():
    """Issue 41: 'space' or 'options' nested 100000 deep raised RecursionError."""
    tuner, state = saved_state(d=4)
    for field in ("space", "options"):
        deep = dict(state, **{field: np.asarray("[" * 100000 + "]" * 100000)})
        with pytest.raises(ValueError, match=rf"'{field}' must be JSON text"):
            tuner.load_state_dict(deep)
