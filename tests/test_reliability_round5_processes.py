"""Issue 50, reliability round 5, under `hcjax run --distributed` (two processes of the tiny
walker, jax.distributed over gloo on this CPU): a frozen process 0 reads, on process 1, as a
coordination service that cannot be reached, and a count refused before any work is refused on
every process."""
from __future__ import annotations

import os
import signal
import time

import pytest

from experiments.benchmarks.bench_population_distributed import communicate_all, free_port
from experiments.study import processes
from experiments.study.devices import MAX_RUNS
from experiments.study.store import StudyDir
from tests.cli_runs import WALK, hcjax, tiny_study, wait_for_file

pytestmark = pytest.mark.slow  # real processes joined by jax.distributed

LONG = tiny_study(["fixed"], seeds=2, iterations=400, eval_every=20, eval_steps=8, envs=(), env_factories=(WALK,))


def pair(study, out, extra=()):
    """Processes 0 and 1 of `hcjax run --distributed` on `study`, one CPU device each."""
    port = free_port()
    base = ["run", "--config", study, "--out", out, "--no-plot", "--no-progress", "--distributed",
            "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id"]
    return [hcjax(base + [str(k), *extra], devices=1, start_new_session=True) for k in (0, 1)]


def test_a_frozen_process_zero_reads_as_a_service_that_cannot_be_reached(tmp_path):
    """Issue 50: process 0 stopped by SIGSTOP mid-work left process 1 blocked in a key-value call
    of its watchdog until JAX's heartbeat timeout aborted it (SIGABRT, 86 s, no message of ours).
    The calls now have a timeout (processes.ANSWER_SECONDS): process 1 stops by itself with
    exit 1, saying the service cannot be reached and how to resume."""
    study = tmp_path / "study.toml"
    study.write_text(LONG)
    procs = pair(study, tmp_path / "out")
    try:
        wait_for_file(procs[0], StudyDir(tmp_path / "out").checkpoint_path("walk", "fixed"), 300)  # the work runs
        os.killpg(procs[0].pid, signal.SIGSTOP)
        frozen = time.monotonic()
        (out,) = communicate_all([procs[1]], timeout=processes.ANSWER_SECONDS + 45)
        seconds = time.monotonic() - frozen
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
    assert procs[1].returncode == 1, out  # not SIGABRT (-6)
    assert seconds < processes.ANSWER_SECONDS + 45, out
    assert "process 1 of 2 stops: the coordination service on process 0 cannot be reached (no answer within" in out
    assert "Run the same command on every process again to resume" in out


def test_a_count_past_the_bound_is_refused_on_every_process_before_any_work(tmp_path):
    study = tmp_path / "study.toml"
    study.write_text(tiny_study(["fixed"], seeds=2, iterations=2, eval_every=1, envs=(), env_factories=(WALK,))
                     .replace("seeds = 2\n", "seeds = 2\ntest_seeds = 1000000000\n", 1))
    logs = communicate_all(pair(study, tmp_path / "out"), timeout=240)
    for log in logs:
        assert f"test_seeds must be at most {MAX_RUNS}" in log, log
    assert not (tmp_path / "out" / "units").exists()
