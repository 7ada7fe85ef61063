"""Issue 41, reliability round 4, the checks that need no training: seed ids that fit what
stores and derives them, the evaluation in the memory check, arguments of the core helpers
named, states and pickles from elsewhere, disk errors naming their file, factories that
exit or raise, study attributes changed after `plan()`, all-NaN evaluations called that.

The tests of the other probe classes live beside what they exercise: own environments
(tests/test_study_api.py), processes (tests/test_distributed.py), the lean install
(tests/test_packaging.py), an edited schedule (tests/test_schedule_replay.py)."""
from __future__ import annotations

import pytest

import experiments
from experiments import cli
from experiments.study.devices import MAX_SEED_ID
from experiments.study.store import StudyDir

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
