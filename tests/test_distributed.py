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
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from experiments import results as R

ROOT = Path(__file__).resolve().parent.parent
STUDY = """
envs = ["CartPole-v1"]
methods = ["hypercontroller"]
seeds = 3
iterations = 8
eval_every = 2
tune_every = 2
fast_compile = true

[ppo]
num_envs = 4
hidden_sizes = [16]
update_epochs = 1
num_minibatches = 2
objective = "return_change"
eval_steps = 100

[[space]]
name = "learning_rate"
low = 1e-4
high = 1e-2
scale = "log"

[[space]]
name = "batch_size"
low = 16
high = 64
integer = true
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(study: Path, out: Path, process: int | None = None, port: int | None = None) -> subprocess.Popen:
    """`hcjax run --config study --out out`, alone or as process `process` of two."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)  # one CPU device per process
    args = [sys.executable, "-m", "experiments", "run", "--config", str(study), "--out", str(out), "--no-plot",
            "--no-progress"]
    if process is not None:
        args += ["--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                 "--process-id", str(process)]
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(*procs, timeout=300) -> list[str]:
    logs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, out
        logs.append(out)
    return logs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process, and two processes, on the same study."""
    tmp = tmp_path_factory.mktemp("dist")
    study = tmp / "study.toml"
    study.write_text(STUDY)
    port = free_port()
    pair = [start(study, tmp / "two", i, port) for i in (0, 1)]
    alone = start(study, tmp / "one")
    logs = finish(*pair)
    finish(alone)
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
    deadline = time.time() + 300
    while True:
        assert all(p.poll() is None for p in pair), [p.communicate()[0] for p in pair]
        assert time.time() < deadline, "no checkpoint in time"
        try:
            with np.load(ckpt) as z:
                if int(z["record/done"]) >= 4:
                    break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    os.killpg(pair[1].pid, signal.SIGKILL)
    try:  # process 0 fails or waits for its peer: either way it is stopped before the restart
        pair[0].communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(pair[0].pid, signal.SIGKILL)
        pair[0].communicate()
    assert ckpt.exists() and not store.unit_path("CartPole-v1", "hypercontroller").exists()
    port = free_port()
    logs = finish(*[start(study, out, i, port) for i in (0, 1)])
    assert "resume CartPole-v1 / hypercontroller from its checkpoint after iteration" in logs[0]
    resumed, one = store.units()[0], R.StudyDir(tmp / "one").units()[0]
    for name in R.SEED_METRICS + ("eval_reward",):
        np.testing.assert_allclose(getattr(resumed, name), getattr(one, name), rtol=1e-6, atol=1e-6, err_msg=name)
    assert not ckpt.exists()
