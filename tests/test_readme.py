"""The Python examples of README.md and docs/*.md run as written, and the README's quick start matches CI
(its test command is a line of .ci/run; the README stays short and links the development notes)."""
import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# One marker per example: the text that names its one ```python block in README.md or docs/.
EIGHT_AGENTS = "def toy_objective"  # README.md; also run on the installed wheel by .ci/package_check.py
OWN_LOOP = "def train_step(w, tuner_state"  # docs/own-training-loop.md
PPO = 'objective="return_change"'  # docs/ppo-and-environments.md
CUSTOM_ENV = "class PointToTarget"  # docs/ppo-and-environments.md
HOST_TUNER = "HostTuner("  # docs/ppo-and-environments.md
POPULATION = 'make_population("pbt"'  # docs/populations.md
EXPORT = "export.write("  # docs/studies.md
OWN_LOOP_PPO = "class ActorCritic(nn.Module)"  # docs/own-training-loop.md, run by tests/test_own_loop_example.py
CATEGORICAL = 'Hyperparameter.choice("optimizer"'  # docs/tuners.md
LR_SCHEDULE = "optax.linear_schedule("  # docs/own-training-loop.md, run by tests/test_own_loop_checks.py
OWN_STUDY = "class Thermostat"  # docs/own-environment.md, run by tests/test_study_api.py
DISTRIBUTED_STUDY = 'jax.distributed.initialize("host0:12345"'  # docs/studies.md, run by tests/test_distributed.py
CRAFTAX_BY_NAME = '"classic-object": env}'  # docs/environment-libraries.md, run by tests/test_env_libraries.py
JUMANJI_BY_NAME = 'envs=["jumanji/Snake-v1"]'  # docs/environment-libraries.md, run by tests/test_env_libraries.py
LEVERS_ADAPTER = "def legal(state)"  # docs/environment-libraries.md, run by tests/test_env_libraries.py
OWN_OBJECTS = '"2048": pgx.make("2048")'  # docs/environment-libraries.md, run by tests/test_env_libraries.py
XLAND_RULESET = "def make_hold_ball()"  # docs/environment-libraries.md, run by tests/test_env_libraries.py
VERDICT = "verdict = experiments.verdict(study)"  # docs/studies.md, run by tests/test_protocol.py
MARKERS = (VERDICT, CRAFTAX_BY_NAME, JUMANJI_BY_NAME, LEVERS_ADAPTER, OWN_OBJECTS, XLAND_RULESET, EIGHT_AGENTS,
           OWN_LOOP, PPO, CUSTOM_ENV, HOST_TUNER, POPULATION, EXPORT, OWN_LOOP_PPO, CATEGORICAL, LR_SCHEDULE,
           OWN_STUDY, DISTRIBUTED_STUDY)


def python_blocks() -> list[tuple[str, str]]:
    """Every ```python block of README.md and docs/*.md, as (document name, code)."""
    return [(path.relative_to(ROOT).as_posix(), block) for path in DOCUMENTS
            for block in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)]


def python_block(marker: str) -> str:
    """The one ```python block, in README.md or docs/*.md, containing `marker`."""
    blocks = [block for _, block in python_blocks() if marker in block]
    assert len(blocks) == 1, f"README and docs have {len(blocks)} python blocks with {marker!r}"
    return blocks[0]


def run_block(marker: str) -> dict:
    namespace = {}
    exec(compile(python_block(marker), f"README/docs example ({marker})", "exec"), namespace)  # noqa: S102
    return namespace


def test_every_python_example_is_run_by_a_test():
    for name, block in python_blocks():
        found = [marker for marker in MARKERS if marker in block]
        assert len(found) == 1, f"a python block of {name} has markers {found}:\n{block[:200]}"


def test_readme_example_runs():
    values = np.asarray(run_block(EIGHT_AGENTS)["values"])
    assert values.shape == (8, 300, 2)
    # by the end the agents mostly play the learning rate with the best objective (1e-3,
    # one of the 10 arms); random search would play it 10% of the time
    at_best = np.isclose(values[:, -100:, 0], 1e-3, rtol=1e-3).mean(axis=1)
    assert at_best.mean() > 0.7 and np.all(at_best > 0.3), at_best


@pytest.mark.slow
def test_own_loop_pattern_example_runs(capsys):
    # 16 agents, each tuning its learning rate inside a jitted, vmapped step of a Python loop.
    namespace = run_block(OWN_LOOP)
    w, lr = np.asarray(namespace["w"]), np.asarray(namespace["lr"])
    assert w.shape == (16, 4) and lr.shape == (16, 1)
    assert np.all((lr >= 1e-3 * (1 - 1e-6)) & (lr <= 0.5 * (1 + 1e-6)))
    # every agent reaches the least-squares fit: at lr = 1e-3 alone 100 steps leave the loss
    # far above it, so the tuners moved to larger learning rates
    x, y = np.asarray(namespace["x"], np.float64), np.asarray(namespace["y"], np.float64)
    best = np.mean((x @ np.linalg.lstsq(x, y, rcond=None)[0] - y) ** 2)
    losses = np.mean((x @ w.T.astype(np.float64) - y[:, None]) ** 2, axis=0)
    assert np.all(losses < best + 1e-3), (losses, best)
    assert len(np.unique(lr)) > 1  # each agent chose on its own
    assert abs(float(capsys.readouterr().out) - best) < 1e-3


@pytest.mark.slow
def test_ppo_example_runs():
    # 4 vmapped PPO agents on CartPole with a HyperController each.
    namespace = run_block(PPO)
    hp = np.asarray(namespace["metrics"]["hparams"])
    assert hp.shape == (4, 30, 4) and np.all(np.isfinite(hp))
    assert np.all((hp[..., 3] >= 128) & (hp[..., 3] <= 512))
    frames = np.asarray(namespace["metrics"]["frames"])
    assert np.all(frames >= hp[..., 3]) and np.all(frames < hp[..., 3] + 8)  # up to one step of all envs
    assert len({tuple(a) for a in hp[:, -1]}) > 1  # each agent chose on its own


@pytest.mark.slow
def test_custom_environment_example_learns(capsys):
    namespace = run_block(CUSTOM_ENV)
    env, ret = namespace["env"], np.asarray(namespace["metrics"]["episode_return"])
    assert env.backend == "gymnax" and (env.obs_size, env.action_size, env.max_episode_steps) == (2, 1, 20)
    assert np.isnan(ret[0]) or ret[0] < -40  # the untrained point wanders
    assert ret[-1] > -30 and np.all(np.isfinite(ret[1:])), ret  # it learned to reach the target
    assert "episode return" in capsys.readouterr().out


def test_host_tuner_example_runs(capsys):
    namespace = run_block(HOST_TUNER)
    assert capsys.readouterr().out.strip() == "True"
    hp = namespace["hp"]
    assert list(hp) == ["learning_rate", "batch_size"]
    assert type(hp["learning_rate"]) is float and type(hp["batch_size"]) is int
    assert namespace["tuner"].n_asks == namespace["resumed"].n_asks == 301


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[dev\]" && (python -m pytest[^\n`]*)', readme).group(1).strip()
    assert command in [line.strip() for line in ci.splitlines()]  # run once per Python, in a loop


def test_readme_is_short_and_links_the_development_notes():
    """A README read in five minutes (issue 42): the details live in docs/, the timings of the
    suite and CI in docs/development.md, which the README links."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "docs/development.md" in re.findall(r"\]\(([^)#\s]+)", readme)  # tests/test_docs.py: it resolves


@pytest.mark.slow
def test_population_example_runs(capsys):
    namespace = run_block(POPULATION)
    losses = np.asarray(namespace["losses"])
    assert losses.shape == (30, 32)
    assert np.median(losses[-1]) < 0.01 * np.median(losses[0])  # the population found a working learning rate
    assert capsys.readouterr().out.splitlines()[0] == "(30, 32)"


def test_export_example_runs(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example reads the committed population study by its relative path
    namespace = run_block(EXPORT)
    results, lineage = namespace["results"], namespace["lineage"]
    assert len(lineage) == len(results.lineage) == sum(u.lineage_parent.size for u in results.units) > 0
    assert list(lineage.columns) == ["study", "env", "method", "seed", "iteration", "parent", "objective"]
    assert set(lineage["method"]) == {"pbt", "pb2_population", "hypercontroller_shared"}
    assert namespace["final"]["hp_batch_size"].dtype == np.int64


def test_categorical_example_runs():
    namespace = run_block(CATEGORICAL)
    values, natural = np.asarray(namespace["values"]), np.asarray(namespace["natural"])
    assert values[1] in (0, 1, 2) and values[2] in (0, 1, 2)
    assert natural[2] == (32, 64, 128)[int(values[2])] and natural[1] == values[1]
