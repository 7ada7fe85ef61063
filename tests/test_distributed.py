"""A study on two JAX processes (jax.distributed over gloo on this CPU, one device each):
the agent axis is sharded across both, the numbers equal one process's, process 0 alone
writes, and killing one process mid-unit then restarting both resumes from the
checkpoint."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from experiments.study import store as R
from tests.cli_runs import cartpole_study, finish, hcjax, wait_for_checkpoint

# end-to-end on purpose: real `hcjax` processes joined by jax.distributed, killed and restarted
pytestmark = pytest.mark.slow

STUDY = cartpole_study(["hypercontroller"], seeds=3, iterations=8, eval_every=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(study: Path, out: Path, process: int | None = None, port: int | None = None) -> subprocess.Popen:
    """`hcjax run --config study --out out` on one CPU device, alone or as process `process` of two."""
    args = ["run", "--config", study, "--out", out, "--no-plot", "--no-progress"]
    if process is not None:
        args += ["--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                 "--process-id", process]
    return hcjax(args, start_new_session=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process, and two processes, on the same study."""
    tmp = tmp_path_factory.mktemp("dist")
    study = tmp / "study.toml"
    study.write_text(STUDY)
    port = free_port()
    pair = [start(study, tmp / "two", i, port) for i in (0, 1)]
    alone = start(study, tmp / "one")
    logs = [finish(p, 300) for p in pair]
    finish(alone, 300)
    return tmp, study, logs


def test_two_processes_give_the_numbers_of_one(runs):
    tmp, _, _ = runs
    two, one = R.StudyDir(tmp / "two").units()[0], R.StudyDir(tmp / "one").units()[0]
    assert two.meta["n_devices"] == 2 and two.meta["n_agents"] == 4  # 3 seeds padded to 4, 2 per process
    assert one.meta["n_devices"] == 1 and one.meta["n_agents"] == 3
    for name in R.SEED_METRICS + ("eval_reward",):
        np.testing.assert_allclose(getattr(two, name), getattr(one, name), rtol=1e-6, atol=1e-6, err_msg=name)


def test_only_process_zero_writes(runs):
    tmp, _, (log0, log1) = runs
    store = R.StudyDir(tmp / "two")
    manifest = json.loads(store.manifest_path.read_text())
    assert len(manifest["runs"]) == 1 and manifest["devices"]["process_count"] == 2
    assert store.log_path.read_text().count("done CartPole-v1 / hypercontroller") == 1
    assert [p.name for p in store.units_dir.iterdir()] == ["CartPole-v1__hypercontroller.npz"]
    assert "Median final evaluation" in log0 and "Median final evaluation" not in log1


def test_killing_one_process_then_restarting_both_resumes(runs):
    tmp, study, _ = runs
    out = tmp / "killed"
    store = R.StudyDir(out)
    ckpt = store.checkpoint_path("CartPole-v1", "hypercontroller")
    port = free_port()
    pair = [start(study, out, i, port) for i in (0, 1)]
    wait_for_checkpoint(pair, ckpt, 4)
    os.killpg(pair[1].pid, signal.SIGKILL)
    try:  # process 0 fails or waits for its peer: either way it is stopped before the restart
        pair[0].communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(pair[0].pid, signal.SIGKILL)
        pair[0].communicate()
    assert ckpt.exists() and not store.unit_path("CartPole-v1", "hypercontroller").exists()
    port = free_port()
    logs = [finish(p, 300) for p in [start(study, out, i, port) for i in (0, 1)]]
    assert "resume CartPole-v1 / hypercontroller from its checkpoint after iteration" in logs[0]
    resumed, one = store.units()[0], R.StudyDir(tmp / "one").units()[0]
    for name in R.SEED_METRICS + ("eval_reward",):
        np.testing.assert_allclose(getattr(resumed, name), getattr(one, name), rtol=1e-6, atol=1e-6, err_msg=name)
    assert not ckpt.exists()
