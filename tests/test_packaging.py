"""The lean core install (issue 27): the extras table agrees with pyproject.toml, the version
has one source, and a part whose extra is missing says which extra to install. Missing
packages are simulated in a fresh interpreter by `sys.modules[name] = None` (Python then
raises ModuleNotFoundError on import), so nothing is uninstalled."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import hcjax
from agents import envs
from experiments import deps
from hcjax.extras import PROVIDED_BY, missing_extra

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Extra packages that no code here imports: pulled in for another package (six for gymnax
# 1.0.1, mujoco-mjx for brax), or only the bound of an indirect dependency (chex).
NOT_IMPORTED = {"six", "mujoco-mjx"}
LIBRARIES = ("craftax", "jumanji", "navix", "xminigrid", "pgx")  # the optional JAX environment libraries


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)


def extra_packages(extra: str) -> set[str]:
    """The distribution names an extra installs, its hcjax[...] references followed."""
    names = set()
    for requirement in PYPROJECT["optional-dependencies"][extra]:
        nested = re.fullmatch(r"hcjax\[([a-z,]+)\]", requirement)
        if nested:
            names |= {n for e in nested.group(1).split(",") for n in extra_packages(e)}
        else:
            names.add(requirement_name(requirement))
    return names


def run_python(code: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (this checkout first on the path) where importing
    any of `blocked` fails as if it were not installed."""
    prelude = f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_import_hcjax_imports_no_optional_package():
    optional = set(PROVIDED_BY) - {"filelock"}  # jax itself imports filelock when it is installed
    result = run_python(f"""
        import hcjax
        space = hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-4, 1e-2, scale="log")])
        hcjax.make_tuner("hypercontroller", space, d=4, s=1)
        print(sorted({{m.split(".")[0] for m in sys.modules}} & {optional!r}))
        """, blocked=())
    assert result.returncode == 0 and result.stdout.strip() == "[]", (result.stdout, result.stderr)


def test_the_install_page_lists_every_extra():
    listed = re.findall(r"^\| `([a-z]+)` \|", (ROOT / "docs" / "install.md").read_text(), flags=re.MULTILINE)
    assert sorted(listed) == sorted(PYPROJECT["optional-dependencies"])


def test_base_dependencies_are_jax_and_numpy():
    assert {requirement_name(r) for r in PYPROJECT["dependencies"]} == {"jax", "jaxlib", "numpy"}


def test_extras_table_matches_pyproject():
    for module, extra in PROVIDED_BY.items():
        assert module in extra_packages(extra), f"hcjax.extras says {extra} installs {module}; pyproject does not"
    for extra in ("agents", "brax", "gymnasium", "studies", "export", *LIBRARIES):
        unlisted = extra_packages(extra) - set(PROVIDED_BY) - NOT_IMPORTED
        assert not unlisted, f"{extra} installs {unlisted}, missing from hcjax.extras.PROVIDED_BY"
    assert extra_packages("studies") >= extra_packages("agents")
    assert extra_packages("export") == extra_packages("studies") | {"pyarrow"}
    assert extra_packages("all") == extra_packages("export") | extra_packages("brax") | extra_packages("gymnasium")
    tools = {"pytest", "pytest-xdist", "pytest-timeout", "ruff", "build", "twine"}
    assert extra_packages("dev") >= extra_packages("all") | tools | set(LIBRARIES)  # the tests run every library
    for extra in LIBRARIES:  # each library its own extra, tested on Python 3.12 (marker)
        assert PYPROJECT["optional-dependencies"][extra] == [f"{extra}>={envs.MIN_VERSIONS[extra]}; "
                                                             f"python_version >= '3.12'"]
    assert extra_packages("tensorboard") == extra_packages("studies") >= {"tensorboard", "tensorboardX"}


# The third-party packages that PureJaxRL's own .py files import (github.com/luchris429/purejaxrl at
# 31756b1: ppo*.py, dpo_continuous_action.py, dqn.py, wrappers.py, experimental/s5), read from their sources.
PUREJAXRL_IMPORTS = {"brax", "chex", "distrax", "flashbax", "flax", "gymnax", "jax", "navix", "numpy", "optax", "wandb"}


def test_the_guides_purejaxrl_install_line_covers_what_its_files_import():
    guide = (ROOT / "docs" / "own-training-loop.md").read_text()
    (extras, packages), = re.findall(r'^pip install "hcjax\[([a-z,]+)\]"((?: [a-z0-9-]+)*)  # PureJaxRL', guide, re.M)
    installed = {requirement_name(r) for r in PYPROJECT["dependencies"]} | set(packages.split())
    installed |= {name for extra in extras.split(",") for name in extra_packages(extra)}
    assert PUREJAXRL_IMPORTS <= installed, PUREJAXRL_IMPORTS - installed
    assert "brax" in extra_packages("brax") and "brax" not in extra_packages("agents")  # brax: its own extra

def test_version_has_one_source(monkeypatch):
    monkeypatch.setattr(hcjax, "__version__", "9.8.7")
    assert deps.versions()["hcjax"] == "9.8.7"  # hcjax info prints the version of the code it runs
    monkeypatch.undo()
    assert "version" not in PYPROJECT and "version" in PYPROJECT["dynamic"]
    dynamic = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]
    assert dynamic["version"] == {"attr": "hcjax.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", hcjax.__version__)


def test_missing_extra_names_the_extra_of_an_optional_package_only():
    named = missing_extra(ModuleNotFoundError("No module named 'brax.envs'", name="brax.envs"), "a Brax task")
    assert isinstance(named, ImportError) and 'pip install "hcjax[brax]"' in str(named) and named.name == "brax"
    assert missing_extra(ModuleNotFoundError("No module named 'nothing'", name="nothing"), "x") is None
    assert missing_extra(ImportError("cannot import name 'x' from 'flax'", name="flax"), "x") is None  # a bad API


def test_core_install_runs_the_command_info_only():
    """Without the agents and studies extras: `hcjax info` prints versions and the missing
    extras (exit 0); `hcjax run` exits 2 naming the extra; importing agents or the figures
    raises an ImportError that names its extra."""
    result = run_python("""
        from experiments import entry
        print("info status", entry.main(["info"]))
        print("run status", entry.main(["run", "--preset", "smoke"]))
        try:
            import agents
        except ImportError as e:
            print("agents:", e)
        """, blocked=tuple(PROVIDED_BY))
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "info status 0" in out and f"hcjax        {hcjax.__version__}" in out
    assert 'extra agents missing flax, optax, chex, gymnax: pip install "hcjax[agents]"' in out
    assert "run status 2" in out
    assert "hcjax: the command needs the 'studies' extra (flax is not installed): " \
           'pip install "hcjax[studies]"; without it only `hcjax info` runs' in result.stderr
    assert 'agents: the agents package (PPO) needs the \'agents\' extra (flax is not installed): ' \
           'pip install "hcjax[agents]"' in out


def test_plots_without_matplotlib_name_the_studies_extra():
    result = run_python("""
        from experiments.reporting import plots
        try:
            plots._matplotlib()
        except ImportError as e:
            print(e)
        """, blocked=("matplotlib",))
    assert 'figures (experiments.reporting.plots) needs the \'studies\' extra (matplotlib is not installed): ' \
           'pip install "hcjax[studies]"' in result.stdout, result.stderr


@pytest.mark.parametrize("blocked", [("brax", "mujoco", "Box2D")])  # gymnax itself needs gymnasium
@pytest.mark.slow
def test_command_without_brax_resolves_the_smoke_preset(blocked):
    """The studies extra alone (no brax, no box2d or MuJoCo) passes the smoke preset's checks;
    a Brax task names the brax extra."""
    result = run_python("""
        from experiments.study import api, presets
        plan = presets.resolve("smoke")
        api.check_environments(plan)
        print("envs", [e.make for e in plan.envs])
        from agents.envs import backend, table
        try:
            backend.import_module("brax.envs", table.BY_NAME["brax"])
        except ImportError as e:
            print(e)
        """, blocked=blocked)
    assert result.returncode == 0 and "envs ['CartPole-v1']" in result.stdout, result.stderr
    assert 'the brax backend cannot be imported' in result.stdout and 'pip install "hcjax[brax]"' in result.stdout


HANG = """
import threading
def test_hangs():
    threading.Event().wait()  # never set: as a deadlocked XLA:CPU call waits
"""


@pytest.mark.slow
def test_a_hanging_test_fails_the_run_once_with_its_stacks(pytestconfig, tmp_path):
    """pyproject.toml's guard against hangs is on in this session (the README's command reads
    it): a test that never returns fails the run, with every thread's stack, once (its worker
    is not replaced to run it again), and the other worker's tests still pass (here after 1 and 2 s
    instead of 590 and 600)."""
    assert pytestconfig.pluginmanager.hasplugin("timeout")
    assert (pytestconfig.getini("faulthandler_timeout"), pytestconfig.getini("timeout"),
            pytestconfig.getini("timeout_method")) == (590.0, "600", "thread")
    assert pytestconfig.option.maxworkerrestart == "0"  # tests/conftest.py, as --max-worker-restart=0
    (tmp_path / "test_hang.py").write_text(HANG)
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    assert True\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                             "loadfile", "--max-worker-restart=0", "-o", "faulthandler_timeout=1", "-o", "timeout=2",
                             "-o", "timeout_method=thread"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "1 failed, 1 passed" in out, out[-2000:]
    assert "Timeout (0:00:01)!" in out and 'test_hang.py", line 4 in test_hangs' in out  # the stack, on the terminal
    assert "crashed while running 'test_hang.py::test_hangs'" in out


def public_modules() -> list[str]:
    """Every module of agents and experiments a user may import (no `_private` part, no __main__)."""
    names = []
    for package in ("agents", "experiments"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            if not any(p.startswith("_") for p in parts):
                names.append(".".join(parts))
    return names


IMPORT_EACH = """
import json
out = {}
for name in MODULES:
    try:
        __import__(name)
        out[name] = "ok"
    except ImportError as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


@pytest.mark.parametrize("package", sorted(PROVIDED_BY))
@pytest.mark.slow
def test_every_public_module_without_an_optional_package_imports_or_names_its_extra(package):
    """Issue 41: `from experiments import Study`, `experiments.load`, the reporting modules and
    `experiments.cli` failed with a bare "No module named 'gymnasium'" / 'filelock' where
    docs/install.md promises an ImportError naming the extra. Each optional package blocked in
    turn, every public module of agents and experiments is imported in one fresh interpreter:
    it imports, or its ImportError names an extra and the command that installs it."""
    modules = public_modules()
    assert "experiments.study.api" in modules and "agents.ppo.learner" in modules
    result = run_python(f"MODULES = {modules!r}\n" + IMPORT_EACH, blocked=(package,))
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    bare = {m: why for m, why in outcome.items() if why != "ok" and not re.search(r'pip install "hcjax\[\w+\]"', why)}
    assert not bare, f"blocking {package}: {bare}"
    lean = [m for m in ("experiments", "experiments.deps", "experiments.entry") if outcome[m] != "ok"]
    assert not lean, f"{lean} must import without {package} (a core install's `hcjax info`)"


NAMES_WITHOUT_BRAX = """
    import contextlib, io, json
    from experiments import entry
    said = {}
    for args in (["presets"], ["run", "--envs", "CartPol-v1"], ["run", "--envs", "Craftax-Classic-Symbolic-v1"],
                 ["run", "--envs", "Snake-v2"], ["run", "--envs", "tests.tiny_env:make_walk"],
                 ["run", "--envs", "halfcheetah"], ["run", "--preset", "cpu"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = entry.main(args + (["--out", "unused"] if args[0] == "run" else []))
        said[" ".join(args)] = [code, out.getvalue(), err.getvalue()]
    print(json.dumps(said))
    """


@pytest.mark.slow
def test_names_on_the_readmes_install_answer_with_names_not_a_brax_traceback():
    """The README's install (the studies extra: no brax, no box2d or MuJoCo): a name not found
    is exit 2 with the closest names of every installed library, a library's name without its
    prefix gives it, a factory in --envs says where it goes, a name of brax names the brax extra,
    and `hcjax presets` lists every preset (a brax task marked with its extra)."""
    result = run_python(NAMES_WITHOUT_BRAX, blocked=("brax", "mujoco", "Box2D"))
    assert result.returncode == 0, result.stderr
    said = json.loads(result.stdout.splitlines()[-1])
    code, out, err = said["presets"]
    assert code == 0 and "Traceback" not in err, err
    assert 'HalfCheetah-v4 -> halfcheetah (brax, not installed: pip install "hcjax[brax]")' in out
    assert "verdict: " in out and "CartPole-v1 -> CartPole-v1 (gymnax)" in out
    for args, words in {"run --envs CartPol-v1": ["unknown environment 'CartPol-v1'", "closest: gymnax/CartPole-v1",
                                                   "gymnasium/CartPole-v1"],
                        "run --envs Craftax-Classic-Symbolic-v1": ["craftax/Craftax-Classic-Symbolic-v1",
                                                                   "answer only to their prefix"],
                        "run --envs Snake-v2": ["jumanji/Snake-v1"],
                        "run --envs tests.tiny_env:make_walk": ["looks like a factory", "--env-factory"],
                        "run --envs halfcheetah": ["an environment of brax", 'pip install "hcjax[brax]"'],
                        "run --preset cpu": ["halfcheetah", 'pip install "hcjax[brax]"']}.items():
        code, _, err = said[args]
        assert code == 2 and "Traceback" not in err and "failed" not in err, (args, err)
        for w in words:
            assert w in err, (args, w, err)
