"""The `hcjax` console script: the whole command (experiments.cli) when the studies extra
is installed; in a core install (`pip install hcjax`) only `hcjax info`, and every other
command exits with status 2 and the extra to install (a missing extra is the user's
install to complete, as a missing environment dependency is)."""
from __future__ import annotations

import sys

from hcjax.extras import install_hint, missing_extra

try:
    from experiments import cli
except ImportError as err:
    if missing_extra(err, "the hcjax command") is None:  # not a missing optional package: a broken install or our bug
        raise
    cli, MISSING = None, err.name.split(".")[0]

from experiments import deps  # noqa: E402  (after the optional import above)


def core_main(argv: list[str]) -> int:
    """`hcjax` without the studies extra: `info` prints the versions, the devices and the
    missing extras (exit 0); anything else names the extra to install (exit 2)."""
    if argv == ["info"]:
        return deps.info()
    print(f"hcjax: the command needs the 'studies' extra ({MISSING} is not installed): {install_hint('studies')}; "
          "without it only `hcjax info` runs", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    if cli is not None:
        return cli.main(argv)
    return core_main(sys.argv[1:] if argv is None else list(argv))
