"""The house style, checked: no module over 500 lines, no function over 120 (issue 16).

Pure `ast`, no JAX: cheap enough to run first in CI.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hcjax", "agents", "experiments")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 120


def modules() -> list[Path]:
    """Every .py file of the three packages, sorted."""
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def long_functions(path: Path, limit: int) -> list[tuple[str, int]]:
    """(qualified name, length in lines) of every function in `path` longer than `limit`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}."
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > limit:
                        found.append((name[:-1], length))
            visit(child, name)

    visit(tree, "")
    return found


def test_the_packages_have_modules():
    assert len(modules()) > 30


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_functions_are_short(path: Path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)}: {lines} lines > {MAX_MODULE_LINES}"
    assert long_functions(path, MAX_FUNCTION_LINES) == []


def test_long_functions_finds_a_long_nested_function(tmp_path):
    body = "\n".join(f"            x{i} = {i}" for i in range(130))
    src = tmp_path / "m.py"
    src.write_text(f"class A:\n    def f(self):\n        def g():\n{body}\n        return g\n")
    assert dict(long_functions(src, MAX_FUNCTION_LINES)) == {"A.f": 133, "A.f.g": 131}
    assert long_functions(src, 133) == []


def test_the_costliest_first_order_names_existing_test_files_once():
    """tests/conftest.py's COSTLIEST_FIRST orders xdist's files: a renamed or deleted file must
    not linger there (its cost would silently go back to the end of the run)."""
    from tests.conftest import COSTLIEST_FIRST

    assert len(set(COSTLIEST_FIRST)) == len(COSTLIEST_FIRST)
    missing = [name for name in COSTLIEST_FIRST if not (ROOT / "tests" / name).is_file()]
    assert not missing, f"COSTLIEST_FIRST names files that do not exist: {missing}"


def test_no_merge_conflict_markers_are_left():
    """No text file of the project keeps a merge's conflict markers (a merge once committed
    docs/development.md with both sides and the markers between them)."""
    texts = [p for d in ("docs", "tests", *PACKAGES, "studies", "examples") for p in (ROOT / d).rglob("*")
             if p.suffix in {".md", ".py", ".toml", ".json"} and p.is_file()]
    texts += [ROOT / "README.md", ROOT / "pyproject.toml"]
    marked = [f"{p.relative_to(ROOT)}:{i}" for p in texts for i, line in enumerate(p.read_text().splitlines(), 1)
              if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "======="]
    assert not marked, marked
