"""The creep guard (tests/compile_budget.py): a test file that lowers more XLA programs than its
budget fails the run with its name and count; the count does not depend on the files run
before it in the same process; jax's own eager programs are not counted; the budget is
rewritten only on purpose, for whole files."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import compile_budget
from tests.cli_runs import ROOT

CONFTEST = """
from pathlib import Path
from tests import compile_budget
compile_budget.BUDGET = Path(__file__).with_name("compile_budget.json")
def pytest_addoption(parser):
    compile_budget.add_option(parser)
def pytest_configure(config):
    compile_budget.register(config)
"""
# both files call one jitted function: without the guard's fresh caches at each file's start, the
# second file would find its program compiled and lower nothing
SHARED = "import jax\nplus_one = jax.jit(lambda x: x + 1)\n"
FILE = """
import os
import jax
from shared import plus_one
def test_it():
    assert int(plus_one(1)) == 2
    assert float(jax.numpy.clip(2.0, 0.0, 1.0)) == 1.0  # jax's own programs, run eagerly: not counted
    if os.environ.get("EXTRA") == "{name}":  # a new program, on purpose
        assert int(jax.jit(lambda x: x * 3)(2)) == 6
def test_other():
    assert int(plus_one(2)) == 3 and os.environ.get("FAIL") != "{name}"
"""


def pytest_run(folder, *args, extra: str = "", fail: str = "") -> subprocess.CompletedProcess:
    """pytest in `folder` without the installed plugins (faster to start); test_`extra`.py
    compiles a program more, test_`fail`.py fails."""
    env = dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{ROOT}", EXTRA=extra, FAIL=fail,
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_check_names_each_file_over_its_budget_or_without_one():
    counts = {"tests/test_a.py": {"lowered": 5, "names": [["jit(f)", 3]]},
              "tests/test_b.py": {"lowered": 4, "names": []}, "tests/test_c.py": {"lowered": 1, "names": []}}
    lines = compile_budget.check(counts, {"tests/test_a.py": 4, "tests/test_b.py": 4})
    assert len(lines) == 2
    assert "tests/test_a.py lowered 5 XLA programs (budget 4); most lowered: jit(f) x3" in lines[0]
    assert "tests/test_c.py lowered 1 XLA programs (no budget)" in lines[1]
    assert "--compile-budget=update" in lines[0]
    assert compile_budget.check(counts, {"tests/test_a.py": 5, "tests/test_b.py": 9, "tests/test_c.py": 1}) == []


@pytest.mark.slow
def test_a_file_compiling_a_new_program_fails_the_run_and_the_budget_changes_only_on_purpose(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "shared.py").write_text(SHARED)
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(FILE.format(name=name))
    (tmp_path / "compile_budget.json").write_text(json.dumps({compile_budget.table_name(): {"test_gone.py": 1}}))

    partial = pytest_run(tmp_path, "--compile-budget=update", "--deselect", "test_b.py::test_other", fail="a")
    assert partial.returncode == 1, partial.stdout + partial.stderr
    assert "recorded 0 files" in partial.stdout
    assert "not recorded (a test deselected or failed): test_a.py, test_b.py" in partial.stdout
    recorded = json.loads((tmp_path / "compile_budget.json").read_text())[compile_budget.table_name()]
    assert recorded == {}  # test_gone.py no longer exists: dropped

    update = pytest_run(tmp_path, "--compile-budget=update")
    assert update.returncode == 0, update.stdout + update.stderr
    budget = json.loads((tmp_path / "compile_budget.json").read_text())[compile_budget.table_name()]
    assert budget == {"test_a.py": 1, "test_b.py": 1}  # plus_one in each file; not clip and its conversions

    more = pytest_run(tmp_path, extra="b")  # test_b.py compiles one program more
    assert more.returncode == 1, more.stdout + more.stderr
    assert f"compile budget exceeded: test_b.py lowered {budget['test_b.py'] + 1} XLA programs " \
           f"(budget {budget['test_b.py']})" in more.stdout
    assert "test_a.py lowered" not in more.stdout and "1 over" in more.stdout and "4 passed" in more.stdout
    assert json.loads((tmp_path / "compile_budget.json").read_text())[compile_budget.table_name()] == budget
