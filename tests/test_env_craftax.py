"""Craftax by name (craftax/Craftax-Classic-Symbolic-v1) and as craftax's own object (gymnax's
interface without gymnax's base class) through `Study`, in one tiny study: the block of
docs/environment-libraries.md as written (skipped, saying why, where craftax is not installed);
the estimate charging the probe's measured cost. Its own file: craftax compiles for tens of
seconds, and a file runs on one worker (--dist loadfile), so the other libraries' studies run
beside it."""
from __future__ import annotations

import time

import pytest

import experiments
from agents import envs
from experiments.study import build
from tests.test_env_libraries import SPACE, TINY_PPO, check_ran, library, run_page_block
from tests.test_readme import CRAFTAX_BY_NAME


@pytest.fixture(scope="module")
def craftax_study(tmp_path_factory):
    """Craftax-Classic-Symbolic by name and as craftax's own object, in one study: the page's
    block, as written (craftax compiles for tens of seconds: one fixture)."""
    library("craftax")
    t0 = time.perf_counter()
    result = run_page_block(CRAFTAX_BY_NAME, tmp_path_factory.mktemp("c"))["result"]
    return result, None, time.perf_counter() - t0


@pytest.mark.slow
def test_craftax_by_name_and_as_its_own_object(craftax_study):
    result, lines, _ = craftax_study
    check_ran(result, "craftax/Craftax-Classic-Symbolic-v1", "craftax")
    check_ran(result, "classic-object", "craftax")  # gymnax's interface, no gymnax base class
    made = envs.make(envs.make("craftax/Craftax-Classic-Symbolic-v1"))
    assert (made.obs_size, made.action_size, made.max_episode_steps, made.backend) == (1345, 17, 10000, "craftax")


@pytest.mark.slow
def test_the_craftax_estimate_charges_its_measured_cost(craftax_study):
    result, _, seconds = craftax_study
    probes = [build.probe(result_plan, env) for result_plan in [_plan_of(result)] for env in result_plan.envs]
    assert all(p.compile_seconds > 0 and p.step_seconds > 0 for p in probes)
    assert result.estimate.seconds > 2 * sum(p.compile_seconds for p in probes) / result.estimate.speed * 0.99


def _plan_of(result):
    """The plan of a finished tiny study (its environments are built in this process already)."""
    from craftax.craftax_classic.envs.craftax_symbolic_env import CraftaxClassicSymbolicEnv

    name = "craftax/Craftax-Classic-Symbolic-v1"
    return experiments.Study(envs={name: name, "classic-object": CraftaxClassicSymbolicEnv()}, methods=["fixed"],
                             seeds=1, iterations=2, eval_every=2, fast_compile=True, space=SPACE,
                             ppo=TINY_PPO).plan()


