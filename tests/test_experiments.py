"""experiments/: configuration errors, presets, kill-and-resume, device sharding, plots.

The runs are real (gymnax CartPole-v1, the smoke preset's 2x32 networks, 10 iterations),
in a subprocess through the `hcjax` command (`python -m experiments`) where a kill or
four devices need one, otherwise through `cli.main` in this process.
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import time

import numpy as np
import pytest

from experiments import cli, deps
from experiments.benchmarks import bench, bench_compile, bench_guard, bench_ppo
from experiments.study import methods, presets
from experiments.study import store as R
from experiments.study.checks import check
from hcjax import available, populations
from tests.cli_runs import finish, hcjax, wait_for_file

TINY = ["--preset", "smoke", "--envs", "CartPole-v1", "--iterations", "10", "--no-progress"]


# ---- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, words", [
    (dict(preset="nope"), ["preset", "smoke", "cpu", "paper"]),
    (dict(envs=["MountainCar-v9"]), ["environment", "MountainCar-v9", "gymnax/MountainCar-v0"]),
    (dict(methods=["hypercontroller", "bayesopt"]), ["method", "bayesopt", "gp_ucb", "pb2", "hyperband"]),
    (dict(seeds=0), ["seeds", ">= 1"]),
    (dict(seeds=-3), ["seeds", ">= 1"]),
    (dict(iterations=0), ["iterations", ">= 1"]),
    (dict(envs=[]), ["env", "empty"]),
    (dict(methods=["random", "random"]), ["method", "duplicates"]),
])
def test_bad_configuration_raises_value_error_naming_field(kwargs, words):
    with pytest.raises(ValueError) as e:
        presets.resolve(kwargs.pop("preset", "smoke"), **kwargs)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("argv, words", [
    (["run", "--preset", "huge"], ["preset", "smoke, cpu, paper"]),
    (["run", "--envs", "BipedalWalker-v9"], ["environment", "BipedalWalker-v9", "gymnasium/BipedalWalker-v3"]),
    (["run", "--methods", "hc"], ["method", "hypercontroller"]),
    (["run", "--seeds", "0"], ["seeds", ">= 1"]),
])
def test_cli_rejects_bad_configuration_before_compiling(argv, words, capsys, tmp_path):
    t0 = time.perf_counter()
    assert cli.main(argv + ["--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err
    assert not (tmp_path / "x").exists()
    assert time.perf_counter() - t0 < 30.0  # validation only: a compile alone takes longer


@pytest.mark.slow
def test_presets_are_sized_as_documented():
    smoke = presets.resolve("smoke")
    assert len(smoke.envs) == 1 and smoke.envs[0].path in ("gymnax", "brax")
    assert len(smoke.preset.methods) == 3 and "hypercontroller" in smoke.preset.methods
    assert smoke.preset.seeds == 2 and smoke.preset.iterations <= 50
    batch = {h["name"]: h for h in smoke.preset.space}["batch_size"]
    assert max(smoke.preset.ppo["hidden_sizes"]) <= 64 and batch["high"] <= 1024
    assert smoke.preset.iterations % smoke.preset.eval_every == 0  # one compiled segment length

    cpu = presets.resolve("cpu")
    assert set(cpu.preset.methods) == set(presets.METHODS) and len(cpu.preset.methods) == 7
    assert [e.label for e in cpu.envs] == list(presets.PAPER_ENVS)
    assert cpu.preset.seeds >= 3 and cpu.preset.reductions
    walker = {e.label: e for e in cpu.envs}["BipedalWalker-v3"]
    assert walker.path == "gymnasium" and walker.why

    paper = presets.resolve("paper")
    p = paper.preset
    batch = {h["name"]: h for h in p.space}["batch_size"]
    assert (p.seeds, p.iterations, p.eval_every, p.tune_every) == (10, 1000, 10, 5)
    assert (batch["low"], batch["high"]) == (1000, 6000) and p.space == presets.paper_space()
    assert p.ppo["hidden_sizes"] == (256, 256, 256) and p.ppo["update_epochs"] == 10
    assert set(p.methods) == set(presets.METHODS)
    assert all(e.path == "gymnasium" for e in paper.envs)
    verdict = presets.resolve("verdict")
    v = verdict.preset
    assert (v.seeds, len(verdict.test_ids), tuple(v.tuner["sweep"].values())) == (10, 10, (32, 3, 0))
    assert set(v.methods) == set(presets.PAPER_METHODS) | {"fixed", "sweep"} and len(v.poor_defaults) == 2
    assert [e.path for e in verdict.envs] == ["gymnax"] * 4 and v.fuse_methods
    for plan in (smoke, cpu, paper, verdict):  # every unit's PPOConfig and tuner builds (nothing compiled)
        check(plan)


# ---- real runs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resumed_study(tmp_path_factory):
    """Run two units, SIGKILL the run as soon as the first unit is on disk, run it again
    (the second run in this process, `cli.main`: an interpreter less).

    Returns (study dir, first unit's bytes before the kill, output of the second run).
    """
    out = tmp_path_factory.mktemp("study")
    args = ["run", *TINY, "--methods", "fixed", "hypercontroller", "--seeds", "2", "--out", str(out)]
    store = R.StudyDir(out)
    first = store.unit_path("CartPole-v1", "fixed")
    second = store.unit_path("CartPole-v1", "hypercontroller")
    proc = hcjax(args, start_new_session=True)
    wait_for_file(proc, first)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert not second.exists()  # the unit in flight is lost, nothing else
    assert not list(store.units_dir.glob(".*.tmp"))  # no half-written file left visible
    before = first.read_bytes()
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        assert cli.main(args) == 0, output.getvalue()
    return out, before, output.getvalue()


@pytest.mark.slow
def test_kill_then_resume_skips_finished_unit(resumed_study):
    out, before, log = resumed_study
    assert "skip CartPole-v1 / fixed" in log
    assert "done CartPole-v1 / hypercontroller" in log and "done CartPole-v1 / fixed" not in log
    store = R.StudyDir(out)
    assert store.unit_path("CartPole-v1", "fixed").read_bytes() == before
    units = {u.meta["method"]: u for u in store.units()}
    assert set(units) == {"fixed", "hypercontroller"}
    for u in units.values():
        assert u.train_reward.shape == (2, 10) and u.hparams.shape == (2, 10, 4)
        assert u.eval_iteration.tolist() == [10] and u.eval_reward.shape == (2, 1)
        assert u.tuner_time.shape == (10,) and np.all(u.tuner_time >= 0) and u.tuner_time.sum() > 0
        assert np.all(u.frames >= 128) and np.all(u.frames <= 512 + 8)
        assert np.all(np.isfinite(u.eval_reward))
    # the same seeds for every method: identical first-iteration hyperparameters are not
    # required, but the fixed tuner must report the PPO defaults
    np.testing.assert_allclose(units["fixed"].hparams[:, :, 1], 0.2)
    manifest = store.read_manifest()
    assert manifest["git"]["commit"] and manifest["packages"]["jax"] and manifest["devices"]["devices"]
    assert len(manifest["runs"]) == 2
    assert manifest["config"]["name"] == "smoke"


@pytest.mark.slow
def test_plots_and_tables_from_real_run(resumed_study, capsys):
    out, _, log = resumed_study
    assert "| CartPole-v1 (gymnax) |" in log  # the results table was printed, the env named as it ran
    for name in ("fig1_tuning_time", "fig1_iterations", "fig2_final"):
        png = out / "figures" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    success = (out / "tables" / "success.md").read_text()
    assert "| Env | HC | Fixed |" in success and "| CartPole-v1 (gymnax) | 2/2 | 2/2 |" in success
    table = (out / "tables" / "results.md").read_text()
    assert "(1)" in table and "(2)" in table
    assert "fig2_final.png" in (out / "report.md").read_text()
    capsys.readouterr()
    assert cli.main(["plot", str(out)]) == 0  # `hcjax plot DIR` on its own (in this process: no interpreter to start)
    assert "CartPole-v1" in capsys.readouterr().out


@pytest.mark.slow
def test_four_host_devices_give_the_same_numbers_as_one(resumed_study, tmp_path):
    """The hypercontroller unit again on 4 host devices (2 seeds padded to 4 agents) equals
    the resumed_study's, run on one device (seed i of every method uses PRNGKey(i), whatever
    the other methods of the study): one new run instead of two."""
    args = ["run", *TINY, "--methods", "hypercontroller", "--seeds", "2", "--no-plot", "--out", str(tmp_path / "dev4")]
    finish(hcjax(args, devices=4))
    four = R.StudyDir(tmp_path / "dev4").units()[0]
    one = {u.meta["method"]: u for u in R.StudyDir(resumed_study[0]).units()}["hypercontroller"]
    assert four.meta["n_devices"] == 4 and four.meta["n_agents"] == 4  # 2 seeds padded to 4
    assert one.meta["n_devices"] == 1 and one.meta["n_agents"] == 2
    for name in R.SEED_METRICS + ("eval_reward",):
        np.testing.assert_allclose(getattr(four, name), getattr(one, name), rtol=1e-6, atol=1e-6, err_msg=name)


def test_bench_report_names_device_and_tolerates_missing_scripts(tmp_path):
    report = bench.run(tmp_path, scripts=("bench_not_written_yet",))
    assert report["benchmarks"]["bench_not_written_yet"]["status"] == "missing"
    text = (tmp_path / "report.md").read_text()
    assert "Device: **cpu" in text and "bench_not_written_yet: missing" in text
    assert deps.devices()["devices"] == report["device"]["devices"]


def test_scaling_scan_stops_at_the_time_budget_and_at_out_of_memory(monkeypatch):
    # The scan's stopping rules, with the timing replaced by a model: one iteration of n
    # agents takes 0.5 + 0.01 n seconds; n >= `oom` agents do not fit the device.
    oom = [10**9]
    timed = []

    def fake(env, cfg, n, tuners, iters, rounds):
        if n >= oom[0]:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate")
        timed.append(n)
        sec = (0.5 + 0.01 * n) * iters
        return [{"agents": n, "iterations": iters, "frames": 1000 * n * iters, "seconds": sec,
                 "fps": 1000 * n * iters / sec, "fps_per_agent": 1000 * iters / sec, "compile_s": 1.0}]

    monkeypatch.setattr(bench_ppo, "_time_count", fake)
    measured = [dict(fake(None, None, 4, None, 2, 1)[0], tuner="hypercontroller")]
    timed.clear()
    rows, why = bench_ppo.bench_scaling(None, (1, 16, 64, 256, 1024), budget_s=3.0, measured=measured)
    # 64 agents take 1.14 s; 256 are predicted at 1.14 * 4 = 4.6 s > 3 s: not run.
    assert [r["agents"] for r in rows] == [1, 4, 16, 64] and timed == [1, 16, 64]
    assert "before 256" in why
    assert rows[1]["seconds_per_iteration"] == pytest.approx(0.54)  # the measured row, 2 iterations
    oom[0] = 64
    rows, why = bench_ppo.bench_scaling(None, (1, 16, 64, 256), budget_s=100.0)
    assert [r["agents"] for r in rows] == [1, 16] and "out of device memory at 64" in why
    oom[0] = 10**9
    monkeypatch.setattr(bench_ppo, "_time_count", lambda *a: (_ for _ in ()).throw(ValueError("bad")))
    with pytest.raises(ValueError):
        bench_ppo.bench_scaling(None, (1,), budget_s=1.0)


def test_compile_benchmark_summarises_interleaved_rounds_against_the_per_array_optimizer():
    def sample(config, optimizer, compile_s, step_s):
        return dict(config=config, optimizer=optimizer, compile_cpu_s=compile_s, step_s=step_s, fusions=7)

    samples = [sample("tiny fixed", "per array", c, 0.002) for c in (8.0, 6.0, 7.0)]
    samples += [sample("tiny fixed", "flat", c, s) for c, s in ((5.0, 0.001), (4.0, 0.003), (6.0, 0.002))]
    per_array, flat = bench_compile.summarise(samples)
    assert per_array["compile_cpu_s"] == 7.0 and per_array["compile_ratio"] == 1.0 and per_array["rounds"] == 3
    assert flat["compile_cpu_s"] == 5.0 and flat["compile_ratio"] == pytest.approx(5 / 7)
    assert flat["compile_range"] == "4.00-6.00" and flat["step_ms"] == pytest.approx(2.0)
    assert flat["step_range_ms"] == "1.0-3.0"
    assert "bench_compile" in bench.SCRIPTS


def test_the_speed_guard_fails_below_its_bound_in_any_row(monkeypatch, tmp_path):
    """bench_guard passes when every row's median ratio reaches --min-ratio and fails
    (report passed False: exit status 1 as a script) when one row falls below it; it
    refuses to measure the suite's unoptimised programs."""
    ratios = {("Pendulum-v1", 1): 0.8, ("Pendulum-v1", 4): 0.8, ("CartPole-v1", 1): 0.8, ("CartPole-v1", 4): 0.55}
    monkeypatch.setattr(bench_guard, "measure", lambda env, n, iters, rounds, tuner, **ppo: dict(
        env=env, agents=n, ratio=ratios[env, n]))
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
    out = str(tmp_path / "guard.json")
    assert bench_guard.main(["--quick", "--out", out])["passed"]
    report = bench_guard.main(["--out", out])
    assert not report["passed"] and [r["verdict"] for r in report["rows"]] == ["ok", "ok", "ok", "FAILED"]
    assert bench_guard.main(["--out", out, "--min-ratio", "0.5"])["passed"]
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    with pytest.raises(SystemExit):
        bench_guard.main(["--quick", "--out", out])
    assert "bench_guard" in bench.SCRIPTS


def test_the_methods_table_covers_exactly_the_registries():
    """One row per registered tuner and population method, flagged as which it is, and the
    study's own methods (the sweep), which no registry holds."""
    assert {m.name for m in methods.TABLE if not m.study} == set(available()) | set(populations())
    assert methods.STUDY_METHODS == ("sweep",) and not set(methods.STUDY_METHODS) & set(available())
    assert {m.name for m in methods.TABLE if m.population} == set(populations())
    assert len(methods.TABLE) == len(methods.BY_NAME)  # no name twice
    assert set(presets.METHODS) == set(available()) and methods.ALL_METHODS == presets.ALL_METHODS
