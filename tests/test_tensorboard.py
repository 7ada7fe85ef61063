"""`hcjax run --tensorboard`: live scalars per unit, seed and method, read back from the event files;
no write through a link; a fault warns and stops live logging without failing the unit."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from experiments import cli
from experiments.study import tensorboard
from experiments.study.checkpoints import Record
from experiments.study.store import load_units, unit_name
from hcjax.space import Hyperparameter, Space
from tests.test_schedule_replay import FUSED_STUDY

SPACE = Space([Hyperparameter("lr", 1e-4, 1e-2, scale="log")])


def values(scalars: dict, tag: str) -> tuple[np.ndarray, np.ndarray]:
    steps, vals = zip(*scalars[tag])
    return np.asarray(steps), np.asarray(vals, np.float32)


@pytest.mark.slow
def test_a_study_writes_every_seeds_scalars_and_each_methods_summary_while_it_runs(tmp_path, capsys):
    study = tmp_path / "study.toml"
    study.write_text(FUSED_STUDY)  # both methods in one program: agent rows m * seeds + i
    out = tmp_path / "out"
    assert cli.main(["run", "--config", str(study), "--out", str(out), "--tensorboard", "--no-plot",
                     "--no-progress"]) == 0
    units = load_units(out)
    assert {u.meta["method"] for u in units} == {"fixed", "random"}
    for u in units:
        unit = out / "tensorboard" / unit_name(u.meta["env"], u.meta["method"])
        for s, seed in enumerate(u.seeds):
            scalars = tensorboard.read_scalars(unit / f"seed_{seed}")
            for tag, name in tensorboard.PER_ITERATION.items():
                steps, got = values(scalars, tag)
                np.testing.assert_array_equal(steps, np.arange(1, 7))
                np.testing.assert_array_equal(got, getattr(u, name)[s])
            for j, h in enumerate(u.meta["hparam_names"]):
                np.testing.assert_array_equal(values(scalars, f"hyperparameters/{h}")[1], u.hparams[s, :, j])
            steps, got = values(scalars, "eval/reward")
            np.testing.assert_array_equal(steps, u.eval_iteration)
            np.testing.assert_array_equal(got, u.eval_reward[s])
            assert not any(tag.startswith("hparams/") for tag in scalars)  # the HParams dashboard's prefix
            session = tensorboard.read_summaries(unit / f"seed_{seed}")["_hparams_/session_start_info"]
            content = session[0][1].metadata.plugin_data.content
            assert u.meta["method"].encode() in content and b"batch_size" in content
        over = tensorboard.read_scalars(unit / tensorboard.OVER_SEEDS)
        returns = u.episode_return.astype(np.float64)
        steps, iqm = values(over, "over_seeds/episode_return/iqm")
        np.testing.assert_array_equal(steps, np.arange(1, 7))
        np.testing.assert_allclose(iqm, np.nanmean(returns, axis=0), rtol=1e-6)  # 2 seeds: nothing trimmed;
        # NaN: a seed with no finished episode yet, left out
        np.testing.assert_allclose(values(over, "over_seeds/eval_reward/q75")[1],
                                   np.percentile(u.eval_reward, 75, axis=0), rtol=1e-6)
        summaries = tensorboard.read_summaries(unit / tensorboard.OVER_SEEDS)
        assert "custom_scalars__config__" in summaries and "_hparams_/experiment" in summaries


def test_a_resumed_record_writes_only_new_iterations(tmp_path):
    scalars = tensorboard.UnitGroupScalars(tmp_path, "Env", ["fixed"], seeds=1, space=SPACE, iterations=5)
    record = Record()

    def segment(length, first):
        metrics = {name: np.arange(first, first + length, dtype=np.float32)[None] for name in
                   tensorboard.PER_ITERATION.values()}
        metrics["hparams"] = np.full((1, length, 1), 0.5, np.float32)
        record.add(length, metrics, np.asarray([float(first)]), 0.0)

    segment(2, 0)
    scalars(record)  # the loop starts from a resumed record of 2 iterations: nothing written
    segment(3, 2)
    scalars(record)
    got = tensorboard.read_scalars(tmp_path / "Env__fixed" / "seed_0")
    assert got["train/reward_per_step"] == [(3, 2.0), (4, 3.0), (5, 4.0)]
    assert got["eval/reward"] == [(5, 2.0)]
    assert got["hyperparameters/lr"] == [(3, 0.5), (4, 0.5), (5, 0.5)]


def test_a_damaged_event_file_is_named(tmp_path):
    scalars = tensorboard.UnitGroupScalars(tmp_path, "Env", ["fixed"], seeds=1, space=SPACE, iterations=5)
    record = Record()
    scalars(record)
    record.add(1, {name: np.zeros((1, 1), np.float32) for name in tensorboard.PER_ITERATION.values()}
               | {"hparams": np.zeros((1, 1, 1), np.float32)}, None, 0.0)
    scalars(record)
    path = next(Path(tmp_path, "Env__fixed", "seed_0").glob("events.*"))
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad record"):
        tensorboard.read_scalars(path.parent)


def add_segment(record: Record, length: int, rows: int = 1, reward: bool = True) -> None:
    """`length` iterations of `rows` agents whose metrics are the iteration numbers."""
    its = np.arange(record.done, record.done + length, dtype=np.float32)
    metrics = {name: np.tile(its, (rows, 1)) + np.arange(rows)[:, None] for name in
               tensorboard.PER_ITERATION.values()}
    metrics["hparams"] = np.full((rows, length, 1), 1e-3, np.float32)
    record.add(length, metrics, np.arange(rows, dtype=np.float32) if reward else None, 0.0)


def started(logdir: Path, warned: list, seeds: int = 1, methods=("fixed",)) -> tuple:
    logdir.parent.mkdir(parents=True, exist_ok=True)  # the study directory
    scalars = tensorboard.UnitGroupScalars(logdir, "Env", list(methods), seeds=seeds, space=SPACE, iterations=9,
                                           warn=warned.append)
    record = Record()
    scalars(record)
    return scalars, record


def test_a_link_planted_before_the_run_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    logdir = tmp_path / "study" / "tensorboard"
    (logdir / "Env__fixed").mkdir(parents=True)
    (logdir / "Env__fixed" / "seed_0").symlink_to(outside)
    warned = []
    scalars, record = started(logdir, warned)
    add_segment(record, 2)
    scalars(record)
    assert list(outside.iterdir()) == []
    assert len(warned) == 1 and f"{logdir / 'Env__fixed' / 'seed_0'} is a symbolic link" in warned[0]


@pytest.mark.parametrize("planted", ["file", "directory"])
def test_a_link_planted_during_the_run_is_not_followed(tmp_path, planted):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"keep")
    logdir = tmp_path / "study" / "tensorboard"
    warned = []
    scalars, record = started(logdir, warned)
    add_segment(record, 2)
    scalars(record)
    run = logdir / "Env__fixed" / "seed_0"
    if planted == "file":  # the event file replaced by a link to a file outside
        event_file = next(run.glob("events.*"))
        event_file.unlink()
        event_file.symlink_to(outside / "victim")
    else:  # the run directory replaced by a link to a directory outside, holding a file of the same name
        event_file = next(run.glob("events.*"))
        (outside / event_file.name).write_bytes(b"keep")
        run.rename(tmp_path / "moved")
        run.symlink_to(outside)
    add_segment(record, 2)
    scalars(record)
    assert (outside / "victim").read_bytes() == b"keep"
    assert all(p.read_bytes() == b"keep" for p in outside.iterdir())
    assert len(warned) == 1 and "symbolic link" in warned[0] and str(run) in warned[0]


def test_a_file_in_the_way_is_found_before_work_and_stops_logging_without_failing(tmp_path):
    logdir = tmp_path / "tensorboard"
    (logdir / "Env__fixed").mkdir(parents=True)
    (logdir / "Env__fixed" / "seed_0").write_text("in the way")
    warned = []
    scalars, record = started(logdir, warned)
    assert len(warned) == 1 and f"{logdir / 'Env__fixed' / 'seed_0'} is in the way" in warned[0]
    add_segment(record, 2)
    scalars(record)  # no exception, no second warning
    assert len(warned) == 1 and (logdir / "Env__fixed" / "seed_0").read_text() == "in the way"


def test_a_full_disk_warns_once_naming_the_file_and_stops_logging(tmp_path, monkeypatch):
    warned = []
    scalars, record = started(tmp_path / "tensorboard", warned)
    calls = []

    def full(self, events):
        calls.append(self.path)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))

    monkeypatch.setattr(tensorboard.EventFile, "append", full)
    for _ in range(3):
        add_segment(record, 1)
        scalars(record)
    assert len(calls) == 1 and len(warned) == 1
    assert str(calls[0]) in warned[0] and "No space left on device" in warned[0]


def test_a_rerun_after_a_kill_between_scalars_and_checkpoint_leaves_no_gap_and_no_repeat(tmp_path):
    logdir = tmp_path / "tensorboard"
    scalars, record = started(logdir, [])
    add_segment(record, 3)
    scalars(record)
    checkpointed = Record()  # the checkpoint of the first segment
    add_segment(checkpointed, 3)
    add_segment(record, 3)
    scalars(record)  # the second segment's scalars; killed before its checkpoint
    again = tensorboard.UnitGroupScalars(logdir, "Env", ["fixed"], seeds=1, space=SPACE, iterations=9)
    again(checkpointed)  # the rerun resumes from the checkpoint and trains the second segment again
    add_segment(checkpointed, 3)
    again(checkpointed)
    add_segment(checkpointed, 3)
    again(checkpointed)
    got = tensorboard.read_scalars(logdir / "Env__fixed" / "seed_0")
    assert [step for step, _ in got["train/episode_return"]] == list(range(1, 10))
    assert [step for step, _ in got["eval/reward"]] == [3, 6, 9]
    over = tensorboard.read_scalars(logdir / "Env__fixed" / tensorboard.OVER_SEEDS)
    assert [step for step, _ in over["over_seeds/episode_return/mean"]] == list(range(1, 10))


def test_the_populations_copies_are_scalars_and_text(tmp_path):
    scalars, record = started(tmp_path / "tensorboard", [], seeds=3, methods=("pbt",))
    add_segment(record, 2, rows=3)
    record.lineage.append((2, np.array([0, 0, 2]), np.zeros(3)))  # seed 1 took seed 0's network
    scalars(record)
    runs = tmp_path / "tensorboard" / "Env__pbt"
    assert [tensorboard.read_scalars(runs / f"seed_{i}")["population/parent"] for i in range(3)] == \
        [[(2, 0.0)], [(2, 0.0)], [(2, 2.0)]]
    (step, text), = tensorboard.read_summaries(runs / tensorboard.OVER_SEEDS)["population/copies/text_summary"]
    assert step == 2 and text.tensor.string_val == [b"iteration 2: seed_1 took seed_0's network"]


def test_over_seeds_matches_a_slow_reference():
    x = np.array([[1.0, np.nan], [2.0, 5.0], [3.0, 6.0], [10.0, np.nan], [4.0, 7.0]])
    got = tensorboard.over_seeds(x)
    np.testing.assert_allclose(got["iqm"], [np.mean([2.0, 3.0, 4.0]), 6.0])  # 5 values: 1 dropped each end
    np.testing.assert_allclose(got["mean"], [4.0, 6.0])
    np.testing.assert_allclose(got["q25"], [2.0, 5.5])
    assert np.isnan(tensorboard.over_seeds(np.full((2, 1), np.nan))["mean"][0])


def test_the_layout_check_refuses_a_link_at_every_depth_under_tensorboard(tmp_path):
    from experiments.study.files import PlantedLink
    from experiments.study.store import StudyDir

    run = tmp_path / "tensorboard" / "Env__fixed" / "seed_0"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host.2").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PlantedLink, match="events.out.tfevents.1.host.2 is a symbolic link"):
        StudyDir(tmp_path).check_layout()


@pytest.mark.slow
def test_a_run_with_a_file_in_the_way_under_tensorboard_warns_before_training_and_finishes(tmp_path, capsys):
    out = tmp_path / "out"
    blocked = out / "tensorboard" / "CartPole-v1__fixed" / "seed_0"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("in the way")
    study = tmp_path / "study.toml"
    study.write_text(FUSED_STUDY)  # the study of the first test: its programs, kept in this process
    code = cli.main(["run", "--config", str(study), "--no-plot", "--no-progress", "--out", str(out), "--tensorboard"])
    err = capsys.readouterr().err
    assert code == 0 and [u.meta["method"] for u in load_units(out)] == ["fixed", "random"]
    warning = f"live TensorBoard logging stopped for CartPole-v1 / fixed+random: {blocked} is in the way"
    assert err.count("live TensorBoard logging stopped") == 1 and warning in err
    assert err.index(warning) < err.index("done CartPole-v1 / fixed")  # found before training
