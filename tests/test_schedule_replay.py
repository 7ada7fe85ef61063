"""Schedule replay: a `fixed` unit replayed on its own seeds is the same unit, array for
array; a tuner's schedules replayed on new seeds are its values, iteration by iteration."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

import experiments
import hcjax
from experiments import cli
from experiments.study.store import StudyDir, load_units
from hcjax.tuners.schedule import schedule
from tests.cli_runs import tiny_study

ARRAYS = ("train_reward", "objective", "hparams", "frames", "rejected", "episode_return", "eval_iteration",
          "eval_reward")


# fixed and random in one program (a fused unit equals the method run alone: tests/test_studyfile.py);
# tests/test_tensorboard.py runs the same study, so that one process compiles it once
FUSED_STUDY = "fuse_methods = true\n" + tiny_study(["fixed", "random"], seeds=2, iterations=6, eval_every=3)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "study"
    config = out.parent / "study.toml"
    config.write_text(FUSED_STUDY)
    assert cli.main(["run", "--config", str(config), "--out", str(out), "--no-plot", "--no-progress"]) == 0
    return out, {u.meta["method"]: u for u in load_units(out)}


@pytest.mark.slow
def test_replaying_a_fixed_unit_on_its_seeds_gives_the_fixed_unit(study):
    out, units = study
    replayed = experiments.replay(out, "CartPole-v1__fixed", [0, 1])
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(replayed, name), getattr(units["fixed"], name), err_msg=name)


@pytest.mark.slow
def test_a_replayed_schedule_is_the_source_units_iteration_by_iteration(study, tmp_path, capsys):
    out, units = study
    source = units["random"].hparams
    assert np.any(source[:, 0] != source[:, -1])  # the random tuner changed its values during the run
    assert cli.main(["replay", str(out), "--unit", "CartPole-v1__random", "--seeds", "7", "8", "9",
                     "--out", str(tmp_path / "r")]) == 0
    (replayed,) = load_units(tmp_path / "r")
    assert replayed.meta["method"] == "replay_random" and replayed.seeds.tolist() == [7, 8, 9]
    for j in range(3):  # new seed j replays source row j mod 2
        np.testing.assert_array_equal(replayed.hparams[j], source[j % 2])
    assert not np.array_equal(replayed.episode_return[0], units["random"].episode_return[0])  # new seeds, new runs
    frames = experiments.load(tmp_path / "r")
    assert set(frames.iterations["method"]) == {"replay_random"}


@pytest.mark.slow
def test_unknown_units_and_bad_seeds_are_refused(study, tmp_path, capsys):
    out, _ = study
    assert cli.main(["replay", str(out), "--unit", "CartPole-v1__pbt", "--seeds", "1", "--out",
                     str(tmp_path / "r")]) == 2
    assert "CartPole-v1__fixed, CartPole-v1__random" in capsys.readouterr().err
    assert cli.main(["replay", str(out), "--unit", "CartPole-v1__fixed", "--seeds", "1", "--out", str(out)]) == 2
    assert "is the source study directory" in capsys.readouterr().err
    with pytest.raises(ValueError, match="seeds"):
        experiments.replay(out, "CartPole-v1__fixed", [1, 1])


@pytest.mark.slow
def test_an_edited_schedule_outside_the_space_is_refused_naming_the_value(study, tmp_path):
    """Issue 41: a unit file whose schedule was edited beyond the space's bounds replayed with
    the values clipped, silently. Refused before anything is built: the values replayed must
    be those the unit ran."""
    out, units = study
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    unit = units["random"]
    hparams = unit.hparams.copy()
    hparams[1, 4, 1] = 1000.0  # batch_size, in [16, 64]
    StudyDir(edited).save_unit(dataclasses.replace(unit, hparams=hparams))
    with pytest.raises(ValueError, match=r"CartPole-v1__random's schedule lies outside the space: batch_size = "
                                         r"1000 at seed row 1, iteration 4 \(the space allows whole numbers in "
                                         r"\[16, 64\]\)"):
        experiments.replay(edited, "CartPole-v1__random", [0, 1])
    hparams[1, 4, 1] = 20.5  # inside the bounds, but batch_size is an integer
    StudyDir(edited).save_unit(dataclasses.replace(unit, hparams=hparams))
    with pytest.raises(ValueError, match=r"batch_size = 20.5 at seed row 1, iteration 4 \(the space allows whole"):
        experiments.replay(edited, "CartPole-v1__random", [0, 1])


def test_the_schedule_tuner_asks_row_after_row():
    space = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2),
                         hcjax.Hyperparameter("batch_size", 16, 64, integer=True)])
    table = np.stack([np.stack([np.linspace(1e-4, 1e-3, 3), [16, 32, 48]], -1),
                      np.stack([np.linspace(2e-3, 3e-3, 3), [64, 60, 50]], -1)])
    tuner = schedule(space, table)
    state = tuner.init(None).replace(which=1)
    got = []
    for _ in range(4):
        state, values = tuner.ask(state, None)
        got.append(np.asarray(values))
        np.testing.assert_array_equal(tuner.values(state), values)
    np.testing.assert_allclose(got, np.concatenate([table[1], table[1, -1:]]).astype(np.float32), rtol=1e-7)
    with pytest.raises(ValueError, match="shape"):
        schedule(space, table[..., :1])
