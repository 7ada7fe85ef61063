"""Where the running hcjax comes from, for the manifest and benchmark reports: its own
git commit when it runs from a checkout of hcjax, else its installed version."""
from __future__ import annotations

import os
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import hcjax


def git_commit(package: str | os.PathLike | None = None) -> dict[str, Any]:
    """{'commit': sha or None, 'dirty': bool or None, 'version': installed version or None}
    of hcjax. The commit only when `package` (default: hcjax's package directory) is tracked
    in a git checkout of hcjax itself, whose root's pyproject.toml names the project "hcjax"
    (never the enclosing repository of a project whose .venv holds an installed hcjax);
    dirty: tracked files differ from the commit (untracked files, e.g. a study's own
    output inside the checkout, do not count)."""
    package = Path(package or Path(hcjax.__file__).parent).resolve()
    try:
        version = metadata.version("hcjax")
    except metadata.PackageNotFoundError:
        version = None
    out = {"commit": None, "dirty": None, "version": version}

    def git(*args, cwd=package) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)

    try:
        root = Path(git("rev-parse", "--show-toplevel").stdout.strip() or package)
        tracked = git("ls-files", "--error-unmatch", "--", ".").returncode == 0
        if not (tracked and _names_hcjax(root / "pyproject.toml")):
            return out
        sha = git("rev-parse", "HEAD", cwd=root).stdout.strip() or None
        status = git("status", "--porcelain", "--untracked-files=no", cwd=root).stdout
        return {**out, "commit": sha, "dirty": bool(status.strip()) if sha else None}
    except (OSError, subprocess.SubprocessError):
        return out


def _names_hcjax(pyproject: Path) -> bool:
    """`pyproject` is readable and its [project] name is "hcjax"."""
    try:
        return tomllib.loads(pyproject.read_text()).get("project", {}).get("name") == "hcjax"
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
