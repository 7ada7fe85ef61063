"""Craftax by name (craftax/Craftax-Classic-Symbolic-v1) and as craftax's own object (gymnax's
interface without gymnax's base class) through `Study`, in one tiny study: the block of
docs/environment-libraries.md as written (skipped, saying why, where craftax is not installed);
the estimate charging the probe's measured cost. Its own file: craftax compiles for tens of
seconds, and a file runs on one worker (--dist loadfile), so the other libraries' studies run
beside it."""
from __future__ import annotations

import time

import pytest

from agents import envs
from experiments.study import build, estimate
from tests.test_env_libraries import check_ran, library, run_page_block
from tests.test_readme import CRAFTAX_BY_NAME


@pytest.fixture(scope="module")
def craftax_study(tmp_path_factory):
    """Craftax-Classic-Symbolic by name and as craftax's own object, in one study: the page's
    block, as written (craftax compiles for tens of seconds: one fixture)."""
    library("craftax")
    t0 = time.perf_counter()
    namespace = run_page_block(CRAFTAX_BY_NAME, tmp_path_factory.mktemp("c"))
    return namespace["result"], namespace["study"], time.perf_counter() - t0


@pytest.mark.slow
def test_craftax_by_name_and_as_its_own_object(craftax_study):
    result, _, _ = craftax_study
    check_ran(result, "craftax/Craftax-Classic-Symbolic-v1", "craftax")
    check_ran(result, "classic-object", "craftax")  # gymnax's interface, no gymnax base class
    made = envs.make(envs.make("craftax/Craftax-Classic-Symbolic-v1"))
    assert (made.obs_size, made.action_size, made.max_episode_steps, made.backend) == (1345, 17, 10000, "craftax")


@pytest.mark.slow
def test_the_craftax_estimate_charges_its_measured_cost(craftax_study):
    result, study, _ = craftax_study
    plan = study.plan()
    probes = [build.probe(plan, env) for env in plan.envs]
    assert all(p.compile_cpu_seconds > 0 and p.step_cpu_seconds > 0 for p in probes)
    for env, found in zip(plan.envs, probes):  # its compilation, in each of its programs, is charged
        assert estimate.group_parts(plan, env, ["fixed"])["serial"] > estimate.ENV_COMPILE * found.compile_cpu_seconds
    assert result.estimate.spent > 0 and result.estimate.seconds > result.estimate.spent
