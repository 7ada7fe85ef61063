"""The `hcjax` console script: the whole command (experiments.cli) when the studies extra
is installed; in a core install (`pip install hcjax`) only `hcjax info`, and every other
command exits with status 2 and the extra to install (a missing extra is the user's
install to complete, as a missing environment dependency is).

Its first line comes before anything heavy is imported (jax, the environment libraries:
seconds on a busy CPU): `hcjax COMMAND: loading ...` on stderr, so that stdout stays the
command's own (`hcjax presets --toml NAME > study.toml`)."""
from __future__ import annotations

import functools
import sys

# The commands of experiments.cli (its COMMANDS; tests/test_study_cli.py checks they agree):
# those that print the first line here. `hcjax`, `hcjax --help` and a misspelt command are
# argparse's to answer, at once.
COMMANDS = ("run", "plot", "verdict", "export", "replay", "bench", "presets", "info")


def first_line(argv: list[str]) -> str | None:
    """The line a command prints before its imports, or None (help, or no command)."""
    if not argv or argv[0] not in COMMANDS or {"-h", "--help"} & set(argv):
        return None
    return f"hcjax {argv[0]}: loading jax and the libraries ..."


@functools.cache
def _cli():
    """(experiments.cli, None), or (None, the missing package) in a core install; imported
    once (a second import after a failed one would fail elsewhere, half of it imported)."""
    from hcjax.extras import missing_extra

    try:
        from experiments import cli
    except ImportError as err:
        if missing_extra(err, "the hcjax command") is None:  # a broken install or our bug: not a missing extra
            raise
        return None, err.name.split(".")[0]
    return cli, None


def core_main(argv: list[str], missing: str) -> int:
    """`hcjax` without the studies extra: `info` prints the versions, the devices and the
    missing extras (exit 0); anything else names the extra to install (exit 2)."""
    from experiments import deps
    from hcjax.extras import install_hint

    if argv == ["info"]:
        return deps.info()
    print(f"hcjax: the command needs the 'studies' extra ({missing} is not installed): {install_hint('studies')}; "
          "without it only `hcjax info` runs", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    line = first_line(argv)
    if line is not None:
        print(line, file=sys.stderr, flush=True)
    cli, missing = _cli()
    if cli is not None:
        return cli.main(argv)
    return core_main(argv, missing)
