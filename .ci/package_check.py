"""Helpers of .ci/run's package check (standard library only: runs in any virtualenv).

    python .ci/package_check.py wheel DIST/hcjax-*.whl   # asserts it holds only hcjax/, agents/, experiments/ (no .pyc)
    python .ci/package_check.py core                     # asserts no optional package is installed
    python .ci/package_check.py readme-example > x.py    # the README's "8 agents" example
"""
import importlib.util
import re
import sys
import zipfile
from pathlib import Path

PACKAGES = ("hcjax", "agents", "experiments")
# What a core install (`pip install hcjax`, no extras) must not bring.
OPTIONAL = ("flax", "optax", "gymnax", "brax", "mujoco", "gymnasium", "matplotlib", "tensorboardX", "pandas")
README = Path(__file__).resolve().parents[1] / "README.md"


def check_wheel(path: str) -> None:
    names = zipfile.ZipFile(path).namelist()
    cached = [n for n in names if "__pycache__/" in n or n.endswith(".pyc")]
    if cached:  # the suite writes .pyc files into the tree while the package is built
        sys.exit(f"{path} holds byte-compiled files: {cached[:3]}")
    tops = {name.split("/")[0] for name in names}
    extra = sorted(t for t in tops if t not in PACKAGES and not t.endswith(".dist-info"))
    if extra:
        sys.exit(f"{path} holds {extra}: only {', '.join(PACKAGES)} belong in the wheel")
    print(f"{Path(path).name} holds: {', '.join(sorted(tops))}")


def check_core() -> None:
    present = [m for m in OPTIONAL if importlib.util.find_spec(m) is not None]
    if present:
        sys.exit(f"the core install has optional packages: {present}")
    print(f"core install: none of {', '.join(OPTIONAL)} is installed")


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (block,) = [b for b in blocks if "def toy_objective" in b]
    return block


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "wheel":
        check_wheel(sys.argv[2])
    elif command == "core":
        check_core()
    elif command == "readme-example":
        print(readme_example())
    else:
        sys.exit(f"usage: {__doc__}")
