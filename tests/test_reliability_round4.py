"""Issue 41, reliability round 4, the checks that need no training: seed ids that fit what
stores and derives them, the evaluation in the memory check, arguments of the core helpers
named, states and pickles from elsewhere, disk errors naming their file, factories that
exit or raise, study attributes changed after `plan()`, all-NaN evaluations called that.

The tests of the other probe classes live beside what they exercise: own environments
(tests/test_study_api.py), processes (tests/test_distributed.py), the lean install
(tests/test_packaging.py), an edited schedule (tests/test_schedule_replay.py)."""
from __future__ import annotations

import errno
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import experiments
from agents.ppo import PPOConfig
from experiments import cli
from experiments.study import checks, processes
from experiments.study.devices import MAX_SEED_ID
from experiments.study.store import StudyDir

ROOT = Path(__file__).resolve().parents[1]
WALK = "w=tests.tiny_env:make_walk"  # a tiny own environment: no gymnax import


# ---- seed ids: int32 in a unit, PRNGKey(id) ------------------------------------------------------

@pytest.mark.parametrize("ids", [[2**32, 1], [2**31], [1, -1]])
def test_replay_refuses_seed_ids_outside_int32_naming_the_bound(ids, tmp_path):
    """2**32 would be stored as 0 (the "new" seed bit-identical to seed 0), 2**31 as negative:
    refused before the source unit is even read."""
    with pytest.raises(ValueError, match=rf"seeds.*\[0, {MAX_SEED_ID}\]"):
        experiments.replay(tmp_path / "nowhere", "walk__fixed", ids)


def test_hcjax_replay_refuses_a_seed_id_of_2_to_the_32_with_exit_2(tmp_path, capsys):
    assert cli.main(["replay", str(tmp_path / "nowhere"), "--unit", "walk__fixed", "--seeds", str(2**32), "1",
                     "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"[0, {MAX_SEED_ID}]" in err and "int32" in err


def test_a_study_with_more_seeds_than_seed_ids_is_refused_naming_the_bound():
    """seeds = n runs the ids 0 .. n-1: beyond MAX_SEED_ID + 1 the last ones would wrap."""
    study = experiments.Study(env_factories=[WALK], methods=["fixed"], seeds=MAX_SEED_ID + 2, iterations=1)
    with pytest.raises(ValueError, match=rf"seeds.*{MAX_SEED_ID + 1}"):
        study.plan()


def test_hcjax_run_refuses_2_to_the_32_seeds_naming_the_bound_with_exit_2(tmp_path, capsys):
    assert cli.main(["run", "--env-factory", WALK, "--methods", "fixed", "--iterations", "1", "--seeds",
                     str(2**32), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"seeds must be at most {MAX_SEED_ID + 1}" in err and not (tmp_path / "out").exists()


# ---- state and manifests from elsewhere ----------------------------------------------------------

def test_a_manifest_nested_past_the_recursion_limit_is_corrupt_naming_the_file(tmp_path):
    """Like a HostTuner state's JSON (tests/test_reliability_state.py): RecursionError was our failure."""
    store = StudyDir(tmp_path)
    store.manifest_path.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ValueError, match=rf"{store.manifest_path} is corrupt \(RecursionError"):
        store.read_manifest()


# ---- disk errors name the file -------------------------------------------------------------------

FILE_SIZE_LIMIT = """
import resource, sys
from pathlib import Path
from experiments.study.files import append_text, atomic_write_bytes
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
out = Path(sys.argv[1])
for name, write in [("unit.npz", lambda p: atomic_write_bytes(p, bytes(10000), root=out)),
                    ("run.log", lambda p: append_text(p, "x" * 10000))]:
    try:
        write(out / name)
        print(name, "written")
    except OSError as e:
        print(name, type(e).__name__, e.errno, e.filename, "|", e)
"""


def test_a_write_past_the_file_size_limit_names_the_file(tmp_path):
    """Issue 41: a full disk (ENOSPC) or a file-size limit (EFBIG, here: RLIMIT_FSIZE of 4 KiB in
    a subprocess) was reported without the file's name. Python ignores SIGXFSZ, so the write fails
    with EFBIG as it would on a full disk with ENOSPC: the same path through the code."""
    result = subprocess.run([sys.executable, "-c", FILE_SIZE_LIMIT, str(tmp_path)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    lines = result.stdout.splitlines()
    assert len(lines) == 2, (result.stdout, result.stderr)
    for line, name in zip(lines, ("unit.npz", "run.log")):
        assert line.startswith(f"{name} OSError {errno.EFBIG} {tmp_path / name} |"), line
        assert f"File too large: '{tmp_path / name}'" in line
    assert [p.name for p in tmp_path.iterdir()] == ["run.log"]  # no temporary file left behind


# ---- a factory's exit or exception is the user's code --------------------------------------------

def exiting_factory():
    sys.exit(0)


def raising_factory():
    raise RuntimeError("no licence server")


@pytest.mark.parametrize("factory, words", [("exiting_factory", "SystemExit: 0"),
                                            ("raising_factory", "RuntimeError: no licence server")])
def test_a_factory_that_exits_or_raises_is_the_users_mistake_naming_the_reference(factory, words, tmp_path, capsys):
    """Issue 41: sys.exit(0) in a factory made `hcjax run` exit 0 with no output and nothing run;
    an exception was exit 1 'hcjax: failed' (our failure) without the reference."""
    ref = f"x=tests.test_reliability_round4:{factory}"
    assert cli.main(["run", "--env-factory", ref, "--methods", "fixed", "--iterations", "1", "--seeds", "1",
                     "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"env_factories: {ref!r}: calling the factory raised {words}" in err and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=f"envs: mine: calling the factory raised {words}"):
        experiments.Study(envs={"mine": globals()[factory]}, methods=["fixed"], seeds=1, iterations=1).plan()


def test_a_factory_module_that_raises_on_import_is_named(tmp_path, monkeypatch):
    (tmp_path / "broken_envs.py").write_text("raise SystemExit('no display')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"env_factories: 'broken_envs:make' cannot be imported \(SystemExit: no disp"):
        experiments.Study(env_factories=["broken_envs:make"], methods=["fixed"], seeds=1, iterations=1).plan()


# ---- a Study's attributes changed after plan() ---------------------------------------------------

def test_attributes_changed_after_plan_take_effect():
    """Issue 41: `study.seeds` or `study.methods` changed after `plan()` were silently ignored
    (the first plan was kept): now the next plan, check or run uses them, changed in place too."""
    study = experiments.Study(env_factories=[WALK], methods=["fixed"], seeds=1, iterations=2, eval_every=1)
    first = study.plan()
    assert study.plan() is first  # nothing changed: the same plan
    study.seeds, study.methods = 3, ["fixed", "random"]
    assert (study.plan().preset.seeds, study.plan().preset.methods) == (3, ("fixed", "random"))
    study.methods.append("hypercontroller")
    study.changes["eval_every"] = 2
    planned = study.plan()
    assert planned.preset.methods == ("fixed", "random", "hypercontroller") and planned.preset.eval_every == 2
    study.seeds = 0
    with pytest.raises(ValueError, match="seeds must be a positive integer"):
        study.check()


# ---- the memory check counts the evaluation ------------------------------------------------------

TINY_PPO = dict(num_envs=4, hidden_sizes=[8], update_epochs=1, num_minibatches=2, eval_steps=10**9)


def test_the_memory_check_counts_the_evaluations_episodes_and_names_eval_episodes():
    """Issue 41: the check ignored the evaluation. eval_steps = 10**9 holds nothing per step
    (tests/test_evaluation.py) and passes; 4 agents x 10**8 episodes at once cannot."""
    fine = experiments.Study(env_factories=[WALK], methods=["fixed"], seeds=4, iterations=2, ppo=TINY_PPO)
    fine.check()
    huge = experiments.Study(env_factories=[WALK], methods=["fixed"], seeds=4, iterations=2,
                             ppo=dict(TINY_PPO, eval_episodes=10**8))
    with pytest.raises(ValueError, match=r"unit w / fixed: estimated .* GiB .*evaluation.*eval_episodes = 100000000"):
        huge.check()
    plan = fine.plan()
    one, four = (checks.evaluation_bytes(PPOConfig(**dict(TINY_PPO, eval_episodes=k)), plan.envs[0]) for k in (1, 4))
    assert four == 4 * one > 0
    assert checks.evaluation_bytes(PPOConfig(**dict(TINY_PPO, eval_steps=10)), plan.envs[0]) == one


# ---- processes of a distributed run compare what they built (the processes: tests/test_distributed.py) ----

def test_what_the_processes_compare_names_the_process_the_label_and_what_differs():
    plan = experiments.Study(env_factories=[WALK], methods=["fixed", "random"], seeds=2, iterations=2).plan()
    same = processes.identity(plan)
    other = experiments.Study(env_factories=[WALK], methods=["fixed", "random"], seeds=3, iterations=2,
                              tuner={"random": {"low_discrepancy": True}}).plan()
    assert processes.differences([{"ok": True, "identity": same}] * 3) == []
    moved = dict(same, envs={"w": "factory:tests.tiny_env:make_walk#000000000000"})
    found = processes.differences([{"ok": True, "identity": x} for x in (same, same, moved, processes.identity(other))])
    assert found[0] == (f"process 2 of 4: environment 'w' is factory:tests.tiny_env:make_walk#000000000000 there, "
                        f"{plan.envs[0].make} on process 0")
    assert found[1].startswith("process 3 of 4: seeds is 3 there, 2 on process 0") and len(found) == 2
    options = experiments.Study(env_factories=[WALK], methods=["fixed", "random"], seeds=2, iterations=2,
                                tuner={"random": {"low_discrepancy": True}}).plan()
    (unit,) = processes.differences([{"ok": True, "identity": same},
                                     {"ok": True, "identity": processes.identity(options)}])
    assert unit.startswith("process 1 of 2: unit w / random has configuration key ") and "(its method or" in unit
    refused = processes.differences([{"ok": True, "identity": same}, {"ok": False, "message": "seeds must be ..."}])
    assert refused == ["process 1 of 2 refused the study: seeds must be ..."]


def test_a_preset_field_set_as_an_attribute_takes_effect_and_an_unknown_one_is_refused():
    """`study.eval_every = 2` was a new attribute nobody read; a misspelt one likewise."""
    study = experiments.Study(env_factories=[WALK], methods=["fixed"], seeds=1, iterations=4, eval_every=1)
    assert study.plan().preset.eval_every == 1
    study.eval_every = 2
    assert study.eval_every == 2 and study.plan().preset.eval_every == 2
    with pytest.raises(AttributeError, match=r"Study has no field 'evaluate_every'.*eval_every"):
        study.evaluate_every = 3


class FakeService:
    """The coordination service's key-value store as the watchdog uses it, in this process."""

    def __init__(self):
        self.store, self.down = {}, False

    def key_value_set(self, key, value, allow_overwrite=False):
        if self.down:
            raise RuntimeError("UNAVAILABLE: Socket closed")
        self.store[key] = value

    def key_value_try_get(self, key):
        if self.down:
            raise RuntimeError("UNAVAILABLE: Socket closed")
        if key not in self.store:
            raise RuntimeError(f"NOT_FOUND: Config key {key} not found.")
        return self.store[key]


class Left(Exception):
    pass


@pytest.mark.parametrize("peer, reason", [
    ("silent", "process 1 of 2 has not answered for 0.3 s"), ("stopped", "process 1 of 2 stopped (its run failed)"),
    ("finished", None), ("service gone", "the coordination service on process 0 cannot be reached")])
def test_the_watchdog_stops_for_a_silent_or_stopped_peer_and_not_for_a_finished_one(peer, reason, monkeypatch):
    """The protocol of `processes.watchdog` with a fake store (the processes themselves:
    tests/test_distributed.py): a peer that finished (process 0 may plot long after) is no
    longer watched."""
    service, left = FakeService(), []
    monkeypatch.setattr(processes, "_client", lambda: service)
    monkeypatch.setattr(processes.jax, "process_index", lambda: 0)
    monkeypatch.setattr(processes.jax, "process_count", lambda: 2)
    monkeypatch.setattr(processes, "POLL_SECONDS", 0.02)
    monkeypatch.setattr(processes, "LOST_SECONDS", 0.3)

    def leave(why, status=1):
        left.append(why)
        raise Left

    monkeypatch.setattr(processes, "leave", leave)
    service.store["hcjax/alive/1"] = "1"
    if peer == "stopped":
        service.store["hcjax/stopped/1"] = "its run failed"
    if peer == "finished":
        service.store["hcjax/finished/1"] = "1"
    if peer == "service gone":
        service.down = True
    stop = threading.Event()
    timer = threading.Timer(1.5, stop.set)
    timer.start()
    try:
        processes._watch(stop)
    except Left:
        pass
    finally:
        timer.cancel()
    if reason is None:
        assert left == []
    else:
        assert len(left) == 1 and left[0].startswith(reason), left
    assert int(service.store.get("hcjax/alive/0", "0")) >= (0 if peer == "service gone" else 1)  # it beat meanwhile
