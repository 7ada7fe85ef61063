"""The `hcjax` console script: the whole command (experiments.cli) when the studies extra
is installed; in a core install (`pip install hcjax`) only `hcjax info`, and every other
command exits with status 2 and the extra to install (a missing extra is the user's
install to complete, as a missing environment dependency is).

Its first line comes before anything heavy is imported (jax, the environment libraries:
seconds on a busy CPU): `hcjax COMMAND: loading ...` on stderr, so that stdout stays the
command's own (`hcjax presets --toml NAME > study.toml`)."""
from __future__ import annotations

import functools
import importlib
import sys
import time

STARTED = time.monotonic()  # about when the process began: `hcjax run`'s estimate counts the seconds since

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
    """(experiments.cli, None), or (None, the missing package) in a core install: imported on
    first use, after the first line (importlib, as `experiments` loads its public names), and
    once (a second import after a failed one would fail elsewhere, half of it imported)."""
    extras = importlib.import_module("hcjax.extras")  # hcjax imports jax
    try:
        return importlib.import_module("experiments.cli"), None
    except ImportError as err:
        if extras.missing_extra(err, "the hcjax command") is None:  # a broken install or our bug: not a missing extra
            raise
        return None, err.name.split(".")[0]


def core_main(argv: list[str], missing: str) -> int:
    """`hcjax` without the studies extra: `info` prints the versions, the devices and the
    missing extras (exit 0); anything else names the extra to install (exit 2)."""
    if argv == ["info"]:
        return importlib.import_module("experiments.deps").info()
    hint = importlib.import_module("hcjax.extras").install_hint("studies")
    print(f"hcjax: the command needs the 'studies' extra ({missing} is not installed): {hint}; "
          "without it only `hcjax info` runs", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """The command of `argv` (None: this process's arguments, and it began at STARTED)."""
    started = STARTED if argv is None else time.monotonic()
    argv = sys.argv[1:] if argv is None else list(argv)
    line = first_line(argv)
    if line is not None:
        print(line, file=sys.stderr, flush=True)
    cli, missing = _cli()
    if cli is not None:
        return cli.main(argv, started=started)
    return core_main(argv, missing)
