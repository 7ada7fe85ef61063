"""A study directory's missing units: those its manifest says the study runs (every environment
x every unit method of `protocol.unit_methods`: the study's methods, poor defaults, and with test
seeds their test units and replays) that are not among the units read from it. A verdict with
units missing would leave their comparisons out without a word, so `hcjax verdict`,
`experiments.verdict(DIR)` and the report's verdict refuse a study with any (`check`), naming
them and saying that running the study again resumes it."""
from __future__ import annotations

import shlex
from pathlib import Path

from experiments.study import protocol
from experiments.study.store import StudyDir, UnitResult

LISTED = 6  # missing units named in the message (the others counted)


class Unfinished(ValueError):
    """The study directory lacks units its manifest says the study runs."""


def testing(manifest: dict | None) -> bool:
    """Whether the manifest's study has test seeds (a count > 0 or a non-empty list of ids)."""
    return bool(((manifest or {}).get("config") or {}).get("test_seeds"))


def expected(manifest: dict | None) -> list[tuple[str, str]]:
    """(env label, method) of every unit the manifest's study runs; [] without a manifest."""
    config = (manifest or {}).get("config") or {}
    envs = [e.get("label") for e in config.get("env_choices") or [] if isinstance(e, dict)]
    methods, poor = config.get("methods") or [], config.get("poor_defaults") or {}
    if not (isinstance(methods, list) and isinstance(poor, dict)):
        return []
    units = protocol.unit_methods([m for m in methods if isinstance(m, str)], poor, testing(manifest))
    return [(env, m) for env in envs if isinstance(env, str) for m in units]


def missing(store: StudyDir, units: list[UnitResult]) -> list[tuple[str, str]]:
    """The units of `expected(store's manifest)` that are not among `units` (read from `store`)."""
    there = {(u.meta["env"], u.meta["method"]) for u in units}
    return [unit for unit in expected(store.read_manifest()) if unit not in there]


def resume_command(manifest: dict | None) -> str:
    """How the study was last run, to say that the same command resumes it."""
    argv = [str(a) for a in (manifest or {}).get("argv") or []]
    if len(argv) > 1 and argv[1] == "run" and Path(argv[0]).name in ("hcjax", "__main__.py"):
        return "the same command resumes it: hcjax " + shlex.join(argv[1:])
    return "the same command resumes it" + (f" (its last run: {shlex.join(argv)})" if argv else "")


def check(store: StudyDir, units: list[UnitResult], what: str = "its verdict") -> None:
    """Unfinished naming the missing units of `store` (see the module docstring), if any."""
    gone = missing(store, units)
    if gone:
        names = ", ".join(f"{env} / {method}" for env, method in gone[:LISTED])
        more = f" and {len(gone) - LISTED} more" if len(gone) > LISTED else ""
        total = len(expected(store.read_manifest()))
        raise Unfinished(f"{store.path} holds an unfinished study: {len(gone)} of its {total} units are missing "
                         f"({names}{more}), and {what} would leave their comparisons out. Run the study again on "
                         f"this directory: {resume_command(store.read_manifest())} (finished units are kept)")
