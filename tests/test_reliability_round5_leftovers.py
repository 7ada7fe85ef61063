"""Issue 54, the leftovers of reliability round 4: the evaluation's memory does not grow with
eval_steps (XLA's memory analysis of the compiled evaluation, nothing run), the memory check
counts what the compiled evaluation holds, and the diff counts README.md and the own-loop guide
quote are those of the two example files."""
from __future__ import annotations

import difflib
import re
from pathlib import Path

import jax
import pytest

import experiments
import hcjax
from agents import ppo
from experiments.study import checks
from tests.tiny_env import make_walk

ROOT = Path(__file__).resolve().parents[1]
WALK = "w=tests.tiny_env:make_walk"
TINY = dict(num_envs=2, batch_size=8, num_minibatches=2, update_epochs=1, hidden_sizes=(8,))


def compiled_evaluation(**fields):
    """XLA's memory analysis of one agent's compiled evaluation on the walker (whose step draws
    from its key, so every step's key is used: a scanned step counter cannot be optimised away)."""
    learner = ppo.make_learner(ppo.PPOConfig(**TINY, **fields), make_walk(),
                               hcjax.make_tuner("fixed", hcjax.ppo_space((8, 16))))
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(learner.init, key)
    return jax.jit(learner.evaluate).lower(state, key).compile().memory_analysis()


def sizes(analysis) -> tuple[int, int, int]:
    return analysis.temp_size_in_bytes, analysis.argument_size_in_bytes, analysis.output_size_in_bytes


@pytest.mark.parametrize("policy", ["greedy", "sampled"])
def test_the_compiled_evaluation_holds_the_same_memory_at_eval_steps_a_thousand_times_apart(policy):
    """Issue 54: `episode_return` scanned over jnp.arange(eval_steps), an int32 per step (4 GB of
    temporaries at eval_steps = 10**9 as soon as the environment's step uses its key; the
    drift environment of tests/test_evaluation.py ignores its key, so the range was dead code
    there). The step counter is now in the scan's carry."""
    short = compiled_evaluation(eval_steps=1000, eval_episodes=2, eval_policy=policy)
    long = compiled_evaluation(eval_steps=1000 * 1000, eval_episodes=2, eval_policy=policy)
    assert sizes(long) == sizes(short)
    assert short.temp_size_in_bytes < 2**16


def test_the_memory_check_counts_at_least_what_the_compiled_evaluation_holds_and_refuses_past_the_limit():
    """checks.evaluation_bytes (what the memory check adds per agent for its evaluation) bounds
    XLA's temporaries of the compiled evaluation at eval_steps = 10**6 (before the fix they held
    4 bytes per step, which the check did not count), and a study whose evaluations alone pass
    the memory limit is refused naming eval_episodes."""
    plan = experiments.Study(env_factories=[WALK], methods=["fixed"], seeds=1, iterations=1).plan()
    for episodes in (256, 1024):
        fields = dict(eval_steps=10**6, eval_episodes=episodes)
        held = compiled_evaluation(**fields).temp_size_in_bytes
        assert checks.evaluation_bytes(ppo.PPOConfig(**TINY, **fields), plan.envs[0]) >= held
    agents = 4
    study = experiments.Study(env_factories=[WALK], methods=["fixed"], seeds=agents, iterations=2,
                              ppo=dict(TINY, eval_steps=10**6, eval_episodes=1024))
    limit = 0.9 * agents * compiled_evaluation(eval_steps=10**6, eval_episodes=1024).temp_size_in_bytes / 2**30
    with pytest.raises(ValueError, match=r"unit w / fixed: estimated .* the evaluation, eval_episodes = 1024 "):
        study.check(memory_limit_gib=limit)


# ---- the diff count of the own-loop guide ------------------------------------------------------

def diff_counts(base: str, other: str) -> tuple[int, int]:
    """(lines added, lines removed) from examples/`base` to examples/`other` (difflib)."""
    a = (ROOT / "examples" / base).read_text().splitlines()
    b = (ROOT / "examples" / other).read_text().splitlines()
    body = [line for line in difflib.unified_diff(a, b, lineterm="", n=0) if not line.startswith(("---", "+++", "@@"))]
    return sum(line.startswith("+") for line in body), sum(line.startswith("-") for line in body)


def stated(path: Path) -> tuple[int, int]:
    """The first "N lines added and M removed" of a document (its PPO example's)."""
    found = re.search(r"(\d+)\s+lines\s+added\s+and\s+(\d+)\s+removed", path.read_text())
    assert found, f"{path.name} states no diff count"
    return int(found[1]), int(found[2])


@pytest.mark.parametrize("document", ["README.md", "docs/own-training-loop.md"])
def test_the_ppo_diff_count_quoted_is_the_example_files_diff(document):
    """Issue 54: README.md said 16 lines added and 6 removed while the files differ by 22 and 9."""
    assert stated(ROOT / document) == diff_counts("ppo_cartpole.py", "ppo_cartpole_tuned.py")
