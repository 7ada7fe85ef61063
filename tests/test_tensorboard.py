"""`hcjax run --tensorboard`: live scalars per unit and seed, read back from the event files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments import cli
from experiments.study import tensorboard
from experiments.study.checkpoints import Record
from experiments.study.store import load_units, unit_name
from tests.cli_runs import cartpole_study


def values(scalars: dict, tag: str) -> tuple[np.ndarray, np.ndarray]:
    steps, vals = zip(*scalars[tag])
    return np.asarray(steps), np.asarray(vals, np.float32)


@pytest.mark.slow
def test_a_study_writes_every_seeds_scalars_while_it_runs(tmp_path, capsys):
    study = tmp_path / "study.toml"
    fused = "fuse_methods = true\n" + cartpole_study(["hypercontroller", "random"], seeds=2, iterations=6, eval_every=3)
    study.write_text(fused)  # both methods in one program: agent rows m * seeds + i
    out = tmp_path / "out"
    assert cli.main(["run", "--config", str(study), "--out", str(out), "--tensorboard", "--no-plot",
                     "--no-progress"]) == 0
    units = load_units(out)
    assert {u.meta["method"] for u in units} == {"hypercontroller", "random"}
    for u in units:
        for s, seed in enumerate(u.seeds):
            run = out / "tensorboard" / unit_name(u.meta["env"], u.meta["method"]) / f"seed_{seed}"
            scalars = tensorboard.read_scalars(run)
            for tag, name in tensorboard.PER_ITERATION.items():
                steps, got = values(scalars, tag)
                np.testing.assert_array_equal(steps, np.arange(1, 7))
                np.testing.assert_array_equal(got, getattr(u, name)[s])
            for j, h in enumerate(u.meta["hparam_names"]):
                np.testing.assert_array_equal(values(scalars, f"hparams/{h}")[1], u.hparams[s, :, j])
            steps, got = values(scalars, "eval/reward")
            np.testing.assert_array_equal(steps, u.eval_iteration)
            np.testing.assert_array_equal(got, u.eval_reward[s])


def test_a_resumed_record_writes_only_new_iterations(tmp_path):
    scalars = tensorboard.UnitGroupScalars(tmp_path, "Env", ["fixed"], seeds=1, hparam_names=["lr"])
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
    assert got["train/reward"] == [(3, 2.0), (4, 3.0), (5, 4.0)]
    assert got["eval/reward"] == [(5, 2.0)]
    assert got["hparams/lr"] == [(3, 0.5), (4, 0.5), (5, 0.5)]


def test_a_damaged_event_file_is_named(tmp_path):
    scalars = tensorboard.UnitGroupScalars(tmp_path, "Env", ["fixed"], seeds=1, hparam_names=[])
    record = Record()
    scalars(record)
    record.add(1, {name: np.zeros((1, 1), np.float32) for name in tensorboard.PER_ITERATION.values()}
               | {"hparams": np.zeros((1, 1, 0), np.float32)}, None, 0.0)
    scalars(record)
    path = next(Path(tmp_path, "Env__fixed", "seed_0").glob("events.*"))
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad record"):
        tensorboard.read_scalars(path.parent)
